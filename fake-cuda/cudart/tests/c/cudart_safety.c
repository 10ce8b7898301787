/* Memory-safety and fidelity scenarios run by tests/safety.rs against the fake libcudart.so.12,
 * one per process (so a crash fails its test instead of the test runner). Each prints
 * "PASS <scenario>" on success and exits non-zero with a message on the first failed check. */
#include "cuda_subset.h"
#include "ncclsim_cuda.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"

static void hex_out(const ipc_handle_t *h) {
    for (int i = 0; i < 64; i++) printf("%02x", h->bytes[i]);
    printf("\n");
    fflush(stdout);
}

static int hex_in(const char *s, ipc_handle_t *h) {
    if (strlen(s) != 128) return -1;
    for (int i = 0; i < 64; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        h->bytes[i] = (unsigned char)v;
    }
    return 0;
}

static void wait_line(void) {
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL);
}

static void count_callback(cudaStream_t s, cudaError_t status, void *n) {
    (void)s;
    CHECK(status == 0);
    *(int *)n += 1;
}

/* A stream callback captured into a graph runs on every replay, and its graph outlives the
 * capture's stream. */
static int captured_callback(void) {
    cudaStream_t s;
    void *graph, *exec, *exec2;
    int calls = 0;
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaStreamAddCallback(s, count_callback, &calls, 0)); /* runs now, not captured */
    CHECK(calls == 1);
    OK(cudaStreamBeginCapture(s, 0));
    OK(cudaStreamAddCallback(s, count_callback, &calls, 0));
    OK(cudaStreamEndCapture(s, &graph));
    CHECK(calls == 1);
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphInstantiate(&exec2, graph, 0));
    OK(cudaGraphDestroy(graph)); /* the executable graphs keep the callback */
    for (int i = 0; i < 3; i++) OK(cudaGraphLaunch(exec, s));
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphLaunch(exec2, s));
    OK(cudaStreamSynchronize(s));
    CHECK(calls == 5);
    OK(cudaGraphExecDestroy(exec2));
    OK(cudaStreamDestroy(s));
    return 0;
}

enum { IPC_BYTES = 8 << 20 };

/* Every byte of device buffer `d` is `v`. */
static int all_bytes(const void *d, unsigned char v) {
    unsigned char *h = malloc(IPC_BYTES);
    OK(cudaMemcpy(h, d, IPC_BYTES, DEFAULT_KIND));
    int ok = 1;
    for (int i = 0; i < IPC_BYTES; i++)
        if (h[i] != v) {
            fprintf(stderr, "byte %d is %#x, expected %#x\n", i, h[i], v);
            ok = 0;
            break;
        }
    free(h);
    return ok;
}

/* Owner: export an 8 MiB buffer, free it while another process has it open, allocate again;
 * the new allocation must not be the importer's old mapping. */
static int ipc_reuse_owner(void) {
    void *d1, *d2, *d3;
    ipc_handle_t h;
    OK(cudaMalloc(&d1, IPC_BYTES));
    OK(cudaMemset(d1, 0x11, IPC_BYTES));
    OK(cudaIpcGetMemHandle(&h, d1));
    hex_out(&h);
    wait_line(); /* the importer has it open */
    OK(cudaFree(d1));
    OK(cudaMalloc(&d2, IPC_BYTES));
    OK(cudaMemset(d2, 0x22, IPC_BYTES));
    printf("reallocated\n");
    fflush(stdout);
    wait_line(); /* the importer wrote through its stale mapping and closed it */
    CHECK(all_bytes(d2, 0x22));
    /* Once no importer holds it, the old range is reused. */
    OK(cudaFree(d2));
    OK(cudaMalloc(&d3, IPC_BYTES));
    CHECK(d3 == d1);
    OK(cudaFree(d3));
    return 0;
}

static int ipc_reuse_importer(const char *hex) {
    ipc_handle_t h;
    void *p;
    CHECK(hex_in(hex, &h) == 0);
    OK(cudaIpcOpenMemHandle(&p, h, 1));
    CHECK(all_bytes(p, 0x11));
    printf("opened\n");
    fflush(stdout);
    wait_line(); /* the owner freed and allocated again */
    CHECK(all_bytes(p, 0x11)); /* still the old allocation, not the owner's new one */
    OK(cudaMemset(p, 0x33, IPC_BYTES));
    OK(cudaIpcCloseMemHandle(p));
    /* The handle names a freed allocation now. */
    CHECK(cudaIpcOpenMemHandle(&p, h, 1) != 0);
    return 0;
}

/* Owner of an IPC event: print its handle, destroy the event on request. */
static int ipc_event_owner(void) {
    cudaEvent_t e, same;
    ipc_handle_t h;
    OK(cudaEventCreateWithFlags(&e, 2 | 4)); /* disable timing | interprocess */
    OK(cudaIpcGetEventHandle(&h, e));
    OK(cudaIpcOpenEventHandle(&same, h)); /* in the owner: the event itself */
    CHECK(same == e);
    hex_out(&h);
    wait_line();
    OK(cudaEventDestroy(e));
    CHECK(cudaIpcOpenEventHandle(&same, h) == 1);
    printf("destroyed\n");
    fflush(stdout);
    wait_line();
    return 0;
}

/* The handle's own checksum (FNV-1a of bytes 0..59, at 60), so that forgeries get past it. */
static void reseal(ipc_handle_t *h) {
    unsigned sum = 0x811c9dc5u;
    for (int i = 0; i < 60; i++) sum = (sum ^ h->bytes[i]) * 0x01000193u;
    memcpy(h->bytes + 60, &sum, 4);
}

static int ipc_event_importer(const char *hex) {
    ipc_handle_t h, bad;
    cudaEvent_t e;
    CHECK(hex_in(hex, &h) == 0);
    OK(cudaIpcOpenEventHandle(&e, h));
    OK(cudaEventSynchronize(e));
    OK(cudaEventDestroy(e));
    /* A well-formed handle naming pid 1 and an arbitrary event. */
    bad = h;
    unsigned one = 1;
    memcpy(bad.bytes + 8, &one, 4);
    reseal(&bad);
    CHECK(cudaIpcOpenEventHandle(&e, bad) == 1);
    /* The owner's pid with another event, another slot, another serial. */
    for (int field = 16; field <= 36; field += 4) {
        bad = h;
        bad.bytes[field] ^= 0x10;
        reseal(&bad);
        if (cudaIpcOpenEventHandle(&e, bad) != 1) {
            fprintf(stderr, "FAIL forged event handle (byte %d changed) was accepted\n", field);
            return 1;
        }
    }
    for (int i = 0; i < 64; i++) {
        bad = h;
        bad.bytes[i] ^= 0x41;
        CHECK(cudaIpcOpenEventHandle(&e, bad) == 1);
    }
    memset(&bad, 0, sizeof bad);
    CHECK(cudaIpcOpenEventHandle(&e, bad) == 1);
    printf("checked\n");
    fflush(stdout);
    wait_line(); /* the owner destroyed the event: the handle is stale */
    CHECK(cudaIpcOpenEventHandle(&e, h) == 1);
    return 0;
}

/* Copies with cudaMemcpyDefault (and memsets) through `stale`, device memory the core took
 * back, are errors and do not touch it. */
static int stale_copies_fail(unsigned char *stale) {
    unsigned char host[64] = {0};
    CHECK(cudaMemcpy(host, stale, 16, DEFAULT_KIND) == 1);
    CHECK(cudaMemcpy(stale, host, 16, DEFAULT_KIND) == 1);
    CHECK(cudaMemcpy(host, stale + 4096, 16, DEFAULT_KIND) == 1);
    CHECK(cudaMemcpy(stale, host, 16, H2D) == 1);
    CHECK(cudaMemset(stale, 0, 16) == 1);
    CHECK(cudaGetLastError() == 1);
    return 0;
}

static int stale_after_reset(void) {
    unsigned char *d;
    OK(cudaMalloc((void **)&d, 1 << 20));
    OK(cudaMemset(d, 7, 1 << 20));
    OK(cudaDeviceReset());
    CHECK(stale_copies_fail(d) == 0);
    /* The device works again, at other addresses. */
    unsigned char *e;
    OK(cudaMalloc((void **)&e, 1 << 20));
    OK(cudaMemset(e, 7, 1 << 20));
    CHECK(cudaMemcpy(e, d, 16, DEFAULT_KIND) == 1);
    OK(cudaFree(e));
    return 0;
}

/* Owner that exports one buffer and frees it when told. */
static int ipc_hold(void) {
    void *d;
    ipc_handle_t h;
    OK(cudaMalloc(&d, 1 << 20));
    OK(cudaIpcGetMemHandle(&h, d));
    hex_out(&h);
    wait_line();
    OK(cudaFree(d));
    return 0;
}

static int stale_after_close(const char *hex) {
    ipc_handle_t h;
    unsigned char *p;
    CHECK(hex_in(hex, &h) == 0);
    OK(cudaIpcOpenMemHandle((void **)&p, h, 1));
    OK(cudaMemset(p, 3, 1 << 20));
    OK(cudaIpcCloseMemHandle(p));
    CHECK(stale_copies_fail(p) == 0);
    return 0;
}

/* cudaMemcpyPeer checks its device arguments and that each pointer lives on its device. */
static int memcpy_peer(void) {
    enum { N = 1 << 16 };
    unsigned char *a, *b, *host = malloc(N);
    OK(cudaSetDevice(0));
    OK(cudaMalloc((void **)&a, N));
    OK(cudaMemset(a, 0x5c, N));
    OK(cudaSetDevice(1));
    OK(cudaMalloc((void **)&b, N));
    OK(cudaMemcpyPeer(b, 1, a, 0, N));
    OK(cudaMemcpy(host, b, N, D2H));
    CHECK(host[0] == 0x5c && host[N - 1] == 0x5c);
    CHECK(cudaMemcpyPeer(b, 7, a, 9, N) == 101);
    CHECK(cudaMemcpyPeer(b, 1, a, 9, N) == 101);
    CHECK(cudaMemcpyPeer(b, 8, a, 0, N) == 101);
    CHECK(cudaMemcpyPeer(b, -1, a, 0, N) == 101);
    CHECK(cudaMemcpyPeer(b, 2, a, 0, N) == 1); /* b is on device 1 */
    CHECK(cudaMemcpyPeer(b, 1, a, 1, N) == 1); /* a is on device 0 */
    CHECK(cudaMemcpyPeer(b, 1, host, 0, N) == 1); /* not device memory */
    CHECK(cudaMemcpyPeerAsync(b, 1, a, 9, N, NULL) == 101);
    CHECK(cudaMemcpyPeerAsync(b, 0, a, 0, N, NULL) == 1);
    OK(cudaMemcpyPeerAsync(a, 0, b, 1, N, NULL));
    OK(cudaFree(a));
    OK(cudaFree(b));
    free(host);
    return 0;
}

/* A copy between two GPUs is priced by the NVLink path between them (12 NVLinks through
 * NVSwitches at 20 GB/s each on the bundled DGX A100: 240 GB/s), not by device memory. */
static int peer_copy_time(void) {
    enum { N = 24000000 }; /* 0.1 ms at 240 GB/s, + 2 us latency */
    void *a, *b, *c;
    cudaStream_t s;
    cudaEvent_t e0, e1, e2;
    float peer_ms, local_ms;
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&a, N));
    OK(cudaMalloc(&c, N));
    OK(cudaSetDevice(5));
    OK(cudaMalloc(&b, N));
    OK(cudaSetDevice(0));
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    OK(cudaEventCreate(&e2));
    OK(cudaEventRecord(e0, s));
    OK(cudaMemcpyPeerAsync(b, 5, a, 0, N, s));
    OK(cudaEventRecord(e1, s));
    OK(cudaMemcpyAsync(c, a, N, D2D, s));
    OK(cudaEventRecord(e2, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaEventElapsedTime(&peer_ms, e0, e1));
    OK(cudaEventElapsedTime(&local_ms, e1, e2));
    printf("peer %.4f ms, local %.4f ms\n", peer_ms, local_ms);
    CHECK(peer_ms > 0.1019 && peer_ms < 0.1021);
    /* Within one GPU: read and write at 1555 GB/s, half of it each. */
    CHECK(local_ms > 0.0328 && local_ms < 0.0329);
    return 0;
}

/* An unusable environment (e.g. NCCLSIM_NODE=abc) means no devices: every call says so. */
static int no_device(void) {
    int n = -1;
    void *p;
    size_t free_, total;
    CHECK(cudaGetDeviceCount(&n) == 100);
    CHECK(cudaMalloc(&p, 16) == 100);
    CHECK(cudaMemGetInfo(&free_, &total) == 100);
    CHECK(cudaGetLastError() == 100);
    return 0;
}

/* Distinct files named libncclsim_cuda.so mapped into this process. */
static int cores_mapped(void) {
    char line[1024], seen[4][512];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path || !strstr(path, "/libncclsim_cuda.so")) continue;
        path[strcspn(path, "\n")] = 0;
        int known = 0;
        for (int i = 0; i < n; i++) known |= !strcmp(seen[i], path);
        if (!known && n < 4) snprintf(seen[n++], sizeof seen[0], "%s", path);
    }
    if (f) fclose(f);
    return n;
}

/* libcudart.so.12 and libcuda.so.1 sit in two directories, each with its own copy of
 * libncclsim_cuda.so: they still share one core. */
static int two_directories(void) {
    void *d;
    unsigned type = 0;
    OK(cudaMalloc(&d, 4096));
    OK(cuInit(0));
    OK(cuPointerGetAttribute(&type, 2, (unsigned long long)(uintptr_t)d));
    CHECK(type == 2);
    OK(cuMemFree_v2((unsigned long long)(uintptr_t)d));
    CHECK(cudaFree(d) == 1);
    CHECK(cores_mapped() == 1);
    return 0;
}

/* A program that loads a second copy of the core by path gets a core that refuses to work. */
static int second_core(const char *path) {
    void *d;
    OK(cudaMalloc(&d, 4096));
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    CHECK(cores_mapped() == 2);
    const struct ncclsim_core_api_v1 *(*get)(void) =
        (const struct ncclsim_core_api_v1 *(*)(void))dlsym(lib, "ncclsim_cuda_core_v1");
    CHECK(get != NULL);
    int n = -1;
    CHECK(get()->device_count(&n) != 0);
    OK(cudaFree(d)); /* the first core is unaffected */
    return 0;
}

static void *per_thread_work(void *d) {
    OK(cudaSetDevice(1));
    OK(cudaMemsetAsync_ptsz(d, 1, 64, NULL));
    OK(cudaStreamSynchronize_ptsz(NULL));
    return NULL;
}

/* 2000 short-lived threads, each with its per-thread default stream and current device: what
 * the core keeps for them goes with them (the report counts the streams left). */
static int many_threads(void) {
    void *d;
    OK(cudaSetDevice(1));
    OK(cudaMalloc(&d, 64));
    for (int i = 0; i < 2000; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, per_thread_work, d) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    OK(cudaMemset(d, 0, 64)); /* the legacy stream still orders after all of it */
    OK(cudaFree(d));
    return 0;
}

/* Bytes of [p, p + n) resident in memory (device memory is a host mapping of the arena). */
static size_t resident(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (n + page - 1) / page, count = 0;
    unsigned char *v = malloc(pages);
    CHECK(mincore((void *)p, n, v) == 0);
    for (size_t i = 0; i < pages; i++) count += v[i] & 1;
    free(v);
    return count * page;
}

/* A buffer freed and allocated again keeps its pages (no cold first touch), and memory info
 * still counts it as free; cudaDeviceGraphMemTrim gives the pages back. */
static int cached_pages(void) {
    enum { N = 64 << 20 };
    void *a, *b;
    size_t free0, free1, total;
    OK(cudaMemGetInfo(&free0, &total));
    OK(cudaMalloc(&a, N));
    OK(cudaMemset(a, 1, N));
    CHECK(resident(a, N) == N);
    OK(cudaFree(a));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    OK(cudaMalloc(&b, N));
    CHECK(b == a);
    CHECK(resident(b, N) == N);
    OK(cudaFree(b));
    OK(cudaDeviceGraphMemTrim(0));
    CHECK(resident(a, N) == 0);
    CHECK(cudaDeviceGraphMemTrim(99) == 101);
    return 0;
}

/* Owner whose importer is killed while it maps an exported buffer: once the importer is gone,
 * the freed range is reused. */
static int ipc_dead_importer_owner(void) {
    void *d1, *d2;
    ipc_handle_t h;
    OK(cudaMalloc(&d1, IPC_BYTES));
    OK(cudaIpcGetMemHandle(&h, d1));
    hex_out(&h);
    wait_line(); /* the importer had it open and was killed */
    OK(cudaFree(d1));
    OK(cudaMalloc(&d2, IPC_BYTES));
    CHECK(d2 == d1);
    OK(cudaFree(d2));
    return 0;
}

/* Opens a handle, says so, and waits to be killed. */
static int ipc_open_and_wait(const char *hex) {
    ipc_handle_t h;
    void *p;
    CHECK(hex_in(hex, &h) == 0);
    OK(cudaIpcOpenMemHandle(&p, h, 1));
    printf("opened\n");
    fflush(stdout);
    wait_line();
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *s = argv[1];
    int rc = 2;
    if (!strcmp(s, "captured-callback")) rc = captured_callback();
    else if (!strcmp(s, "ipc-reuse-owner")) rc = ipc_reuse_owner();
    else if (!strcmp(s, "ipc-event-owner")) rc = ipc_event_owner();
    else if (!strcmp(s, "stale-after-reset")) rc = stale_after_reset();
    else if (!strcmp(s, "ipc-hold")) rc = ipc_hold();
    else if (!strcmp(s, "ipc-dead-importer-owner")) rc = ipc_dead_importer_owner();
    else if (!strcmp(s, "ipc-open-and-wait") && argc > 2) rc = ipc_open_and_wait(argv[2]);
    else if (!strcmp(s, "memcpy-peer")) rc = memcpy_peer();
    else if (!strcmp(s, "no-device")) rc = no_device();
    else if (!strcmp(s, "many-threads")) rc = many_threads();
    else if (!strcmp(s, "cached-pages")) rc = cached_pages();
    else if (!strcmp(s, "two-directories")) rc = two_directories();
    else if (!strcmp(s, "second-core") && argc > 2) rc = second_core(argv[2]);
    else if (!strcmp(s, "peer-copy-time")) rc = peer_copy_time();
    else if (!strcmp(s, "stale-after-close") && argc > 2) rc = stale_after_close(argv[2]);
    else if (!strcmp(s, "ipc-event-importer") && argc > 2) rc = ipc_event_importer(argv[2]);
    else if (!strcmp(s, "ipc-reuse-importer") && argc > 2) rc = ipc_reuse_importer(argv[2]);
    if (rc == 0) printf("PASS %s\n", s);
    return rc;
}
