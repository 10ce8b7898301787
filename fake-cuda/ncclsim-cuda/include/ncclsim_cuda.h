/* C view of the fake CUDA core's vtable (Rust: fake_cuda_abi::CoreApiV1, generated from the
 * entry list of fake_cuda_abi::core_api!).
 *
 * libncclsim_cuda.so exports `const struct ncclsim_core_api_v1 *ncclsim_cuda_core_v1(void)`.
 * Entries return 0 on success or a core status code; `size` lets a caller check that this
 * header matches the library (api->size == sizeof(struct ncclsim_core_api_v1)) and `version`
 * that it is the version this header describes (NCCLSIM_CORE_ABI_VERSION). Arguments and
 * outputs named after a Rust type (CDeviceInfo, ...) are that type's C layout in the crate
 * fake_cuda_abi. */
#ifndef NCCLSIM_CUDA_H
#define NCCLSIM_CUDA_H
#include <stddef.h>
#include <stdint.h>

typedef void (*ncclsim_work_fn)(void *data);
/* Work that starts when others are ready: gets the stream it runs on and the virtual time the
 * stream reached it (ns); returns its start (at least ready_ns), or UINT64_MAX when it failed. */
typedef uint64_t (*ncclsim_meet_fn)(void *data, uint64_t stream, uint64_t ready_ns);

/* Generated from fake_cuda_abi::core_api! (fake_cuda_abi::describe::c_header_block); UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated rewrites it. */
#define NCCLSIM_CORE_ABI_VERSION 2

struct ncclsim_kernel_cost {
    double flops;
    double bytes;
    int32_t unit;
    int32_t precision;
    uint64_t batch;
    uint64_t m;
    uint64_t n;
    uint64_t k;
    uint32_t attention;
    uint32_t flags;
};

struct ncclsim_maybe_time {
    uint32_t present;
    uint32_t reserved;
    uint64_t ns;
};

struct ncclsim_launch_times {
    uint32_t placed;
    uint32_t in_range;
    uint64_t range;
    uint64_t start_ns;
    uint64_t duration_ns;
};

struct ncclsim_core_api_v1 {
    size_t size;
    uint32_t version;
    size_t (*last_error_message)(char *buf, size_t len);
    /* Visible device count. */
    int (*device_count)(int32_t *count);
    /* Description of visible device `ordinal`. */
    int (*device_info)(int32_t ordinal, void *info /* CDeviceInfo */);
    /* The calling thread's current device. */
    int (*get_device)(int32_t *ordinal);
    /* Sets the calling thread's current device. */
    int (*set_device)(int32_t ordinal);
    /* Device allocation. */
    int (*malloc)(int32_t ordinal, uintptr_t size, uintptr_t *ptr);
    /* Device free. */
    int (*free)(uintptr_t ptr);
    /* Free and total bytes of a device. */
    int (*mem_info)(int32_t ordinal, uint64_t *free, uint64_t *total);
    /* Pinned host allocation. */
    int (*host_alloc)(uintptr_t size, uintptr_t *ptr);
    /* Pinned host free. */
    int (*host_free)(uintptr_t ptr);
    /* Registers user host memory. */
    int (*host_register)(uintptr_t ptr, uintptr_t size);
    /* Unregisters user host memory. */
    int (*host_unregister)(uintptr_t ptr);
    /* What a pointer points into. */
    int (*pointer_info)(uintptr_t ptr, void *info /* CPointerInfo */);
    /* Stream-ordered copy (`kind` is `cudaMemcpyKind`). */
    int (*memcpy)(uintptr_t dst, uintptr_t src, uintptr_t n, int32_t kind, uint64_t stream);
    /* Stream-ordered pitched copy. */
    int (*memcpy_2d)(uintptr_t dst, uintptr_t dpitch, uintptr_t src, uintptr_t spitch, uintptr_t width, uintptr_t height, int32_t kind, uint64_t stream);
    /* Stream-ordered byte fill. */
    int (*memset)(uintptr_t dst, int32_t value, uintptr_t n, uint64_t stream);
    /* Creates a stream on the current device. */
    int (*stream_create)(uint32_t flags, int32_t priority, uint64_t *stream);
    /* Destroys a stream. */
    int (*stream_destroy)(uint64_t stream);
    /* Stream properties. */
    int (*stream_info)(uint64_t stream, void *info /* CStreamInfo */);
    /* Succeeds if the stream's work is complete, fails with `NotReady` otherwise. */
    int (*stream_query)(uint64_t stream);
    /* Waits for a stream. */
    int (*stream_synchronize)(uint64_t stream);
    /* Makes a stream wait for an event. */
    int (*stream_wait_event)(uint64_t stream, uint64_t event);
    /* Virtual completion time of a stream's work (ns). */
    int (*stream_clock)(uint64_t stream, uint64_t *ns);
    /* Enqueues host work of a virtual duration; `work` (may be null) runs before
     * returning. */
    int (*enqueue)(uint64_t stream, uint64_t duration_ns, ncclsim_work_fn work, void *data);
    /* Waits for the current device. */
    int (*device_synchronize)(void);
    /* Creates an event. */
    int (*event_create)(uint32_t flags, uint64_t *event);
    /* Destroys an event. */
    int (*event_destroy)(uint64_t event);
    /* Records an event on a stream. */
    int (*event_record)(uint64_t event, uint64_t stream);
    /* Succeeds if the event completed, fails with `NotReady` otherwise. */
    int (*event_query)(uint64_t event);
    /* Waits for an event. */
    int (*event_synchronize)(uint64_t event);
    /* Virtual milliseconds between two events. */
    int (*event_elapsed_ms)(uint64_t start, uint64_t end, float *ms);
    /* IPC handle of the allocation containing `ptr`. */
    int (*ipc_get_mem_handle)(uintptr_t ptr, void *handle /* CHandle */);
    /* Maps an IPC memory handle. */
    int (*ipc_open_mem_handle)(const void *handle /* CHandle */, uintptr_t *ptr);
    /* Unmaps a pointer from `ipc_open_mem_handle`. */
    int (*ipc_close_mem_handle)(uintptr_t ptr);
    /* IPC handle of an event. */
    int (*ipc_get_event_handle)(uint64_t event, void *handle /* CHandle */);
    /* Opens an IPC event handle. */
    int (*ipc_open_event_handle)(const void *handle /* CHandle */, uint64_t *event);
    /* Registers a kernel's host stub and device name. */
    int (*register_function)(uintptr_t host_fun, const char *name);
    /* Counts a kernel launch. */
    int (*launch_kernel)(uintptr_t host_fun, uint64_t stream);
    /* Number of devices of the node, ignoring `CUDA_VISIBLE_DEVICES` (NVML's numbering). */
    int (*physical_device_count)(int32_t *count);
    /* Description of a physical device (`physical_index` is its own index). */
    int (*physical_device_info)(int32_t index, void *info /* CDeviceInfo */);
    /* PCI ids, NUMA node, NVLinks and PCI ancestors of a physical device. */
    int (*physical_device_topology)(int32_t index, void *topology /* CDeviceTopology */);
    /* NVML topology level (`nvmlGpuTopologyLevel_t`) between two physical devices. */
    int (*topology_common_ancestor)(int32_t a, int32_t b, uint32_t *level);
    /* Starts capturing a stream into a new graph. */
    int (*begin_capture)(uint64_t stream);
    /* Ends a capture; gives its graph. */
    int (*end_capture)(uint64_t stream, uint64_t *graph);
    /* Capture status (0 none, 1 active), capture id and graph of a stream. */
    int (*capture_info)(uint64_t stream, uint32_t *status, uint64_t *id, uint64_t *graph);
    /* Creates an empty graph. */
    int (*graph_create)(uint64_t *graph);
    /* Destroys a graph. */
    int (*graph_destroy)(uint64_t graph);
    /* Number of operations (nodes) in a graph. */
    int (*graph_node_count)(uint64_t graph, uintptr_t *count);
    /* Writes a Graphviz description of a graph to the file `path`. */
    int (*graph_write_dot)(uint64_t graph, const char *path);
    /* Instantiates a graph. */
    int (*graph_instantiate)(uint64_t graph, uint64_t *exec);
    /* Destroys an executable graph. */
    int (*graph_exec_destroy)(uint64_t exec);
    /* Replays an executable graph on a stream. */
    int (*graph_launch)(uint64_t exec, uint64_t stream);
    /* Frees every allocation of a visible device (`cudaDeviceReset`). */
    int (*device_reset)(int32_t ordinal);
    /* Where the device allocation containing `ptr` lives (this process's arenas only). */
    int (*pointer_arena)(uintptr_t ptr, void *location /* CArenaLocation */);
    /* Like `enqueue`, but the core owns `data` and calls `release(data)` exactly once
     * when no work needs it any more: after `work` ran, when the call fails, or — if
     * the stream was capturing — when the graph and its executable graphs are
     * destroyed. */
    int (*enqueue_owned)(uint64_t stream, uint64_t duration_ns, ncclsim_work_fn work, void *data, ncclsim_work_fn release);
    /* Gives the pages of a visible device's freed memory back to the system (freed
     * memory otherwise keeps them for reuse); gives the bytes trimmed. */
    int (*trim_device)(int32_t ordinal, uint64_t *trimmed);
    /* `cuMemCreate`: a physical allocation of `size` bytes on a visible device,
     * exportable as `handle_types`; gives its handle. */
    int (*mem_create)(int32_t ordinal, uint64_t size, uint32_t handle_types, uint64_t *handle);
    /* `cuMemRelease`. */
    int (*mem_release)(uint64_t handle);
    /* `cuMemAddressReserve`: gives the start of the reserved range. */
    int (*mem_address_reserve)(uintptr_t size, uintptr_t alignment, uintptr_t hint, uintptr_t *ptr);
    /* `cuMemAddressFree`. */
    int (*mem_address_free)(uintptr_t ptr, uintptr_t size);
    /* `cuMemMap`. */
    int (*mem_map)(uintptr_t ptr, uintptr_t size, uint64_t offset, uint64_t handle);
    /* `cuMemUnmap`. */
    int (*mem_unmap)(uintptr_t ptr, uintptr_t size);
    /* `cuMemSetAccess` for one device (`CUmemAccess_flags`). */
    int (*mem_set_access)(uintptr_t ptr, uintptr_t size, int32_t ordinal, uint32_t flags);
    /* `cuMemGetAccess` for one device. */
    int (*mem_get_access)(uintptr_t ptr, int32_t ordinal, uint32_t *flags);
    /* `cuMemExportToShareableHandle`: a POSIX file descriptor the caller owns. */
    int (*mem_export)(uint64_t handle, int32_t *fd);
    /* `cuMemImportFromShareableHandle` of a POSIX file descriptor (kept by the caller). */
    int (*mem_import)(int32_t fd, uint64_t *handle);
    /* `cuMemRetainAllocationHandle`. */
    int (*mem_retain)(uintptr_t ptr, uint64_t *handle);
    /* `cuMemGetAllocationPropertiesFromHandle`. */
    int (*mem_handle_info)(uint64_t handle, void *info /* CMemHandleInfo */);
    /* Stream-ordered fill of `count` elements of `elem_size` (1, 2, 4, 8) bytes with the
     * low bytes of `pattern` (`cuMemsetD16/D32`, `cuStreamWriteValue32/64`). */
    int (*memset_pattern)(uintptr_t dst, uint64_t pattern, uint32_t elem_size, uintptr_t count, uint64_t stream);
    /* The stream whose host work (an `enqueue`/`enqueue_owned` work function, also
     * when a graph replays it) is running on the calling thread, as that work was
     * submitted: for a replay, the stream the graph was launched on. Fails outside
     * host work. */
    int (*host_stream)(uint64_t *stream);
    /* Bytes allocated now and at most so far on a visible device. */
    int (*memory_stats)(int32_t ordinal, uint64_t *current, uint64_t *peak);
    /* The profiler range (`op`: `PROFILER_START`, `PROFILER_STOP`,
     * `PROFILER_QUERY`): gives how many ranges were started so far and whether one is
     * open (non-zero). */
    int (*profiler)(int32_t op, uint64_t *ranges, int32_t *active);
    /* Adds or replaces a named section (JSON text) of the end-of-run report
     * (`NCCLSIM_REPORT`); with `write_now` the report file is written at once. */
    int (*report_section)(const char *name, const char *json, int32_t write_now);
    /* The device buffer `ptr` points into, as the program made it (kind
     * `BUFFER_NONE` when it is not device memory of this process). */
    int (*buffer_extent)(uintptr_t ptr, void *extent /* CBufferExtent */);
    /* Virtual time on physical device `index`: the summed durations of the work
     * scheduled on its streams (`busy`) and when all of it completes (`clock`), ns. */
    int (*physical_device_busy)(int32_t index, uint64_t *busy, uint64_t *clock);
    /* The host waited until virtual time `clock_ns` (ns since the core started): later
     * work starts no earlier, and the virtual host clock reads at least it. */
    int (*host_wait)(uint64_t clock_ns);
    /* Offers a copy of descriptor `fd` (the caller keeps its own) to other processes
     * through this process's descriptor broker until `fd_withdraw(key)`: a process of
     * this user that presents `key` and `secret` to `fd_fetch` receives it. */
    int (*fd_offer)(int32_t fd, uint32_t *key, uint64_t *secret);
    /* Withdraws an offer of `fd_offer` (descriptors already passed stay valid). */
    int (*fd_withdraw)(uint32_t key);
    /* Fetches offer `key` from the descriptor broker of process `owner_pid` of this
     * host with its `secret`; gives a new descriptor the caller owns. Fails, never
     * hangs, if the owner is gone, refuses or stalls. */
    int (*fd_fetch)(uint32_t owner_pid, uint32_t key, uint64_t secret, int32_t *fd);
    /* Commits `[ptr, ptr + len)` of device memory against the host's memory before a
     * caller writes it directly (collectives into their receive buffers): fails with
     * `Status::OutOfMemory` when the host cannot back it. Memory outside the core's
     * allocation arenas is left as it is. */
    int (*commit_memory)(uintptr_t ptr, uintptr_t len);
    /* `cuMulticastCreate`: a multicast object for a team of `num_devices` devices and
     * `size` bytes per device, exportable as `handle_types`; gives its handle. */
    int (*mcast_create)(uint32_t num_devices, uint64_t size, uint32_t handle_types, uint64_t *handle);
    /* `cuMulticastAddDevice`. */
    int (*mcast_add_device)(uint64_t handle, int32_t ordinal);
    /* `cuMulticastBindMem` (waits, bounded, for the whole team to be added). */
    int (*mcast_bind_mem)(uint64_t handle, uint64_t mc_offset, uint64_t mem, uint64_t mem_offset, uint64_t size);
    /* `cuMulticastBindAddr` (waits, bounded, for the whole team to be added). */
    int (*mcast_bind_addr)(uint64_t handle, uint64_t mc_offset, uintptr_t ptr, uint64_t size);
    /* `cuMulticastUnbind`. */
    int (*mcast_unbind)(uint64_t handle, int32_t ordinal, uint64_t mc_offset, uint64_t size);
    /* Like `enqueue_owned`, for work that starts when others are ready (a collective):
     * the core calls `work(data, stream, ready)` with the time the stream reached it,
     * and the stream then waits until the start `work` returns and `duration_ns` more.
     * Gives the virtual time at which that ends, none when nothing ran now (the stream
     * was capturing, or `work` returned [`MEETING_FAILED`]). */
    int (*enqueue_meeting)(uint64_t stream, uint64_t duration_ns, uint32_t ctas, ncclsim_meet_fn work, void *data, ncclsim_work_fn release, struct ncclsim_maybe_time *end);
    /* `buffer_extent`, and when `[ptr, ptr + commit_len)` lies inside that buffer, that
     * range committed as `commit_memory` does, in one call (a collective checking the
     * receive buffer it is about to write). */
    int (*buffer_extent_commit)(uintptr_t ptr, uintptr_t commit_len, void *extent /* CBufferExtent */);
    /* The NVLink fabric spanning hosts that physical device `index` is part of: its
     * simulated node's NVLink domain as the core grouped the job's nodes from the
     * run environment (`NCCLSIM_NVL_DOMAIN`, else the hardware's); not supported
     * when the node is in none. */
    int (*physical_device_fabric)(int32_t index, void *fabric /* CFabricInfo */);
    /* The board facts of physical device `index` (its model's datasheet figures). */
    int (*physical_device_board)(int32_t index, void *board /* CBoardInfo */);
    /* Compute on `stream`, the one door for priced kernels (torch ops, cuBLAS and
     * cuBLASLt GEMMs): one launch of `name` costing `cost`, which occupies the stream
     * for the time `NCCLSIM_KERNEL_TIMES` measured for this launch of `name`, else the
     * compute model's time for `cost` on the stream's GPU, placed, counted and
     * captured as the core's other stream work. `work(data)`, when given, computes it
     * in stream order (now, or at each replay of a graph the stream captures into),
     * and `release(data)`, when given, frees `data` once nothing needs it; compute
     * without `work` (its caller computes the values) is refused while the stream
     * captures. `detail`, when not null, is a JSON object added to the launch's trace
     * event (`NCCLSIM_TRACE`). Gives where it was placed (`placed` 0 when it was
     * captured). */
    int (*launch_compute)(uint64_t stream, struct ncclsim_kernel_cost cost, const char *name, const char *detail, ncclsim_work_fn work, void *data, ncclsim_work_fn release, struct ncclsim_launch_times *times);
    /* `cudaUserObjectCreate`: an object whose creator holds `refs` references;
     * `destroy(ptr)` runs once no reference is left (the creator's or a graph's). */
    int (*user_object_create)(void *ptr, ncclsim_work_fn destroy, uint32_t refs, uint64_t *object);
    /* `cudaUserObjectRetain`: `count` more of the creator's references. */
    int (*user_object_retain)(uint64_t object, uint32_t count);
    /* `cudaUserObjectRelease`: `count` of the creator's references go. */
    int (*user_object_release)(uint64_t object, uint32_t count);
    /* `cudaGraphRetainUserObject`: `graph` (made, or being captured into) holds
     * `count` references to `object`; with `moved` 1 they are the creator's. */
    int (*graph_retain_user_object)(uint64_t graph, uint64_t object, uint32_t count, int32_t moved);
    /* `cudaGraphReleaseUserObject`: `count` of `graph`'s references to `object` go. */
    int (*graph_release_user_object)(uint64_t graph, uint64_t object, uint32_t count);
    /* Records a group of the job's ranks (a process group a framework made, its
     * members' job ranks in the group's order, `ranks[0..n]`) for the libraries of
     * this process that need a group's members by rank (a folded job's communicators).
     * A group recorded twice is kept once. */
    int (*job_group_add)(const uint64_t *ranks, uintptr_t n);
    /* The `index`-th group recorded (from 0): copies up to `cap` of its ranks to `out`
     * and gives its length, 0 when there is no such group. */
    int (*job_group_get)(uintptr_t index, uint64_t *out, uintptr_t cap, uintptr_t *len);
    /* The run environment's settings for code outside the Rust libraries (the Python
     * package), parsed by the one parser: the compute mode (`RUN_COMPUTE_*`), whether
     * ops take modelled time (`NCCLSIM_COMPUTE_TIME`), whether a trace directory is set
     * and whether the job is folded, each 0 or 1. Fails, naming the variable, when the
     * environment has a bad value. Needs no device. */
    int (*run_settings)(uint32_t *compute, uint32_t *priced, uint32_t *trace, uint32_t *folded);
    /* The run environment the core started with: the variables its parse read, as
     * `run_env::RunEnv::current_text` gives them (`NAME=VALUE`, each ended by a NUL
     * byte). Copies up to `cap` bytes of it to `out` and gives its whole length. The
     * process's other libraries parse this text instead of the environment, so each
     * sees the job as the core does (once per process, whatever the program set in
     * its environment since). Needs no device. */
    int (*run_environment)(uint8_t *out, uintptr_t cap, uintptr_t *len);
    /* A training step of the program ended where its framework marks steps (`by`:
     * `STEP_BY_OPTIMIZER`, `STEP_BY_PROFILER`), or with `STEP_QUERY` nothing ended:
     * gives the steps marked so far. Each mark is a `step_end` event of the compute
     * trace (`NCCLSIM_TRACE`), and the work traced after the k-th mark says `mark: k`. */
    int (*step_mark)(int32_t by, uint64_t *marks);
    /* `cudaGraphExecUpdate`: gives an executable graph the operations of `graph` when
     * their shapes match; `result` 0, or the `cudaGraphExecUpdateResult` that refused
     * it (the executable graph then unchanged) and `node`, the refused node's
     * position in `graph` from 1 (0 for none). */
    int (*graph_exec_update)(uint64_t exec, uint64_t graph, uint32_t *result, uintptr_t *node);
};
/* End of the generated part. */

const struct ncclsim_core_api_v1 *ncclsim_cuda_core_v1(void);

#endif
