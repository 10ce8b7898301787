/* C view of the fake CUDA core's vtable (Rust: fake_cuda_abi::CoreApiV1, generated from the
 * entry list of fake_cuda_abi::core_api!).
 *
 * libncclsim_cuda.so exports `const struct ncclsim_core_api_v1 *ncclsim_cuda_core_v1(void)`.
 * Entries return 0 on success or a core status code; `size` lets a caller check that this
 * header matches the library (api->size == sizeof(struct ncclsim_core_api_v1)). Entries are
 * only ever appended. */
#ifndef NCCLSIM_CUDA_H
#define NCCLSIM_CUDA_H
#include <stddef.h>
#include <stdint.h>

typedef void (*ncclsim_work_fn)(void *data);
/* Work that starts when others are ready: gets the stream it runs on and the virtual time the
 * stream reached it (ns); returns its start (at least ready_ns), or UINT64_MAX when it failed. */
typedef uint64_t (*ncclsim_meet_fn)(void *data, uint64_t stream, uint64_t ready_ns);
typedef int (*ncclsim_fn)(); /* entries this header does not spell out */

struct ncclsim_core_api_v1 {
    size_t size;
    uint32_t version;
    size_t (*last_error_message)(char *buf, size_t len);
    ncclsim_fn device_count, device_info, get_device, set_device;
    ncclsim_fn malloc, free, mem_info, host_alloc, host_free, host_register, host_unregister;
    ncclsim_fn pointer_info, memcpy, memcpy_2d, memset;
    ncclsim_fn stream_create, stream_destroy, stream_info, stream_query, stream_synchronize;
    ncclsim_fn stream_wait_event;
    int (*stream_clock)(uint64_t stream, uint64_t *out);
    int (*enqueue)(uint64_t stream, uint64_t duration_ns, ncclsim_work_fn work, void *data);
    ncclsim_fn device_synchronize;
    ncclsim_fn event_create, event_destroy, event_record, event_query, event_synchronize;
    ncclsim_fn event_elapsed_ms;
    ncclsim_fn ipc_get_mem_handle, ipc_open_mem_handle, ipc_close_mem_handle;
    ncclsim_fn ipc_get_event_handle, ipc_open_event_handle;
    ncclsim_fn register_function, launch_kernel;
    ncclsim_fn physical_device_count, physical_device_info, physical_device_topology;
    ncclsim_fn topology_common_ancestor;
    ncclsim_fn begin_capture, end_capture, capture_info, graph_create, graph_destroy;
    ncclsim_fn graph_node_count, graph_write_dot, graph_instantiate, graph_exec_destroy;
    ncclsim_fn graph_launch, device_reset;
    ncclsim_fn pointer_arena; /* (uintptr_t ptr, struct { uint32_t owner_pid, arena_id, key; int32_t device; uint64_t file_len, offset, alloc_offset, alloc_size, secret; } *out) */
    /* Like enqueue, but the core owns `data`: release(data) runs once when no work (and no
     * captured graph) needs it any more. */
    int (*enqueue_owned)(uint64_t stream, uint64_t duration_ns, ncclsim_work_fn work, void *data,
                         ncclsim_work_fn release);
    /* Gives the pages of a visible device's freed memory back; writes the bytes trimmed. */
    int (*trim_device)(int ordinal, uint64_t *trimmed);
    /* The driver's virtual memory management API (cuMem*): allocation handles, reservations,
     * mappings, access (CUmemAccess_flags), POSIX-descriptor export/import. */
    int (*mem_create)(int ordinal, uint64_t size, uint32_t handle_types, uint64_t *handle);
    int (*mem_release)(uint64_t handle);
    int (*mem_address_reserve)(size_t size, size_t alignment, uintptr_t hint, uintptr_t *out);
    int (*mem_address_free)(uintptr_t ptr, size_t size);
    int (*mem_map)(uintptr_t ptr, size_t size, uint64_t offset, uint64_t handle);
    int (*mem_unmap)(uintptr_t ptr, size_t size);
    int (*mem_set_access)(uintptr_t ptr, size_t size, int ordinal, uint32_t flags);
    int (*mem_get_access)(uintptr_t ptr, int ordinal, uint32_t *flags);
    int (*mem_export)(uint64_t handle, int *fd);
    int (*mem_import)(int fd, uint64_t *handle);
    int (*mem_retain)(uintptr_t ptr, uint64_t *handle);
    ncclsim_fn mem_handle_info; /* (uint64_t handle, struct { int32_t device; uint32_t handle_types; uint64_t size; } *out) */
    /* Stream-ordered fill of `count` elements of `elem_size` (1, 2, 4, 8) bytes. */
    int (*memset_pattern)(uintptr_t dst, uint64_t pattern, uint32_t elem_size, size_t count,
                          uint64_t stream);
    /* The stream the host work running on this thread was submitted to (for a graph replay,
     * the launch stream); fails outside host work. */
    int (*host_stream)(uint64_t *out);
    /* Bytes allocated now and at most so far on a visible device. */
    int (*memory_stats)(int ordinal, uint64_t *current, uint64_t *peak);
    /* cudaProfilerStart (op 1), cudaProfilerStop (0), query (-1): ranges started, one open. */
    int (*profiler)(int op, uint64_t *ranges, int *active);
    /* Adds or replaces a named JSON section of the NCCLSIM_REPORT report; write_now writes
     * the file at once. */
    int (*report_section)(const char *name, const char *json, int write_now);
    /* The device buffer ptr points into, as the program made it: kind 0 none, 1 a cudaMalloc
     * allocation (end = start + the size asked for), 2 an IPC mapping, 3 the run of one
     * device's mappings in one cuMemAddressReserve range. */
    ncclsim_fn buffer_extent; /* (uintptr_t ptr, struct { int32_t kind; int32_t device; uintptr_t base; uintptr_t end; } *out) */
    /* Virtual time on a physical device, ns: the summed durations of the work scheduled on
     * its streams and when all of it completes. */
    int (*physical_device_busy)(int index, uint64_t *busy, uint64_t *clock);
    /* The compute model's time for `flops` on vector (unit 0) or tensor (unit 1) units in
     * `precision` (0 f64, 1 f32, 2 tf32, 3 f16, 4 bf16, 5 f8) and `bytes` of memory traffic, on
     * `stream`'s device, ns; nothing is scheduled. */
    int (*price_compute)(uint64_t stream, double flops, double bytes, int unit, int precision,
                         uint64_t *ns);
    /* The time of one launch of `name` that the caller schedules itself (cuBLAS GEMMs): the
     * measured time NCCLSIM_KERNEL_TIMES gives this launch of `name`, else the compute model's
     * (a matrix product of known shape, `batch` products of m x k by k x n, priced by tiles
     * and waves; zeros for other kernels), ns. Counts the launch in the kernel-time table's
     * matching. */
    int (*price_launch)(uint64_t stream, double flops, double bytes, int unit, int precision,
                        uint64_t batch, uint64_t m, uint64_t n, uint64_t k, const char *name,
                        uint64_t *ns);
    /* The host waited until virtual time clock_ns (ns since the core started): later work
     * starts no earlier, and the virtual host clock reads at least it. */
    int (*host_wait)(uint64_t clock_ns);
    /* Offers a copy of descriptor fd to other processes through this process's descriptor
     * broker until fd_withdraw(key): a process of this user presenting key and secret to
     * fd_fetch receives it (SCM_RIGHTS). */
    int (*fd_offer)(int32_t fd, uint32_t *key, uint64_t *secret);
    int (*fd_withdraw)(uint32_t key);
    /* Fetches offer key of process owner_pid with its secret: a new descriptor the caller
     * owns. Fails, never hangs, if the owner is gone, refuses or stalls. */
    int (*fd_fetch)(uint32_t owner_pid, uint32_t key, uint64_t secret, int32_t *fd);
    /* Commits len bytes of device memory at ptr against the host's memory before the caller
     * writes it directly (collectives into their receive buffers): OutOfMemory when the host
     * cannot back it. Memory outside the core's arenas and cuMemMap ranges is left alone. */
    int (*commit_memory)(size_t ptr, size_t len);
    /* cuMulticastCreate: an object for num_devices devices of size bytes each. */
    int (*mcast_create)(uint32_t num_devices, uint64_t size, uint32_t handle_types,
                        uint64_t *handle);
    /* cuMulticastAddDevice. */
    int (*mcast_add_device)(uint64_t handle, int ordinal);
    /* cuMulticastBindMem and cuMulticastBindAddr: wait (bounded) for the whole team. */
    int (*mcast_bind_mem)(uint64_t handle, uint64_t mc_offset, uint64_t mem, uint64_t mem_offset,
                          uint64_t size);
    int (*mcast_bind_addr)(uint64_t handle, uint64_t mc_offset, uintptr_t ptr, uint64_t size);
    /* cuMulticastUnbind. */
    int (*mcast_unbind)(uint64_t handle, int ordinal, uint64_t mc_offset, uint64_t size);
    /* Like enqueue_owned, for work that starts when others are ready (a collective): the stream
     * waits until the start work returns, then duration_ns more; writes the end (virtual ns),
     * 0 when nothing ran now (capturing, or work failed). */
    int (*enqueue_meeting)(uint64_t stream, uint64_t duration_ns, ncclsim_meet_fn work,
                           void *data, ncclsim_work_fn release, uint64_t *end_ns);
    /* buffer_extent, and when [ptr, ptr + commit_len) lies inside that buffer, that range
     * committed as commit_memory does, in one call. */
    ncclsim_fn buffer_extent_commit; /* (uintptr_t ptr, size_t commit_len, struct { int32_t kind; int32_t device; uintptr_t base; uintptr_t end; } *out) */
    ncclsim_fn physical_device_fabric; /* (int32_t index, struct { uint64_t cluster_uuid[2]; uint32_t clique_id, state, health_mask, reserved; } *out) */
    ncclsim_fn physical_device_board; /* (int32_t index, struct { uint32_t tdp_watts, reserved; } *out) */
};

const struct ncclsim_core_api_v1 *ncclsim_cuda_core_v1(void);

/* Commits len bytes of device memory at ptr against the host's memory before the caller
 * touches them directly (ncclsim's Python compute layer); on failure copies the message into
 * msg (msg_len bytes, NUL-terminated; msg may be NULL) and returns non-zero (3, out of memory,
 * when the host cannot back them). */
int ncclsim_commit_memory(size_t ptr, size_t len, char *msg, size_t msg_len);

/* Compute priced by the compute model: `flops` on vector (unit 0) or tensor (unit 1) units in
 * `precision` (0 f64, 1 f32, 2 tf32, 3 f16, 4 bf16, 5 f8) and `bytes` of memory traffic occupy
 * `stream` of the current device for their modelled time and count one launch of `name`;
 * writes the virtual start and duration (ns) and the open cudaProfilerStart range's index (-1
 * outside one). Returns 0 or a core status code. */
int ncclsim_compute_launch(uint64_t stream, double flops, double bytes, int unit, int precision,
                           const char *name, uint64_t *out_start_ns, uint64_t *out_ns,
                           int64_t *out_range);
#endif
