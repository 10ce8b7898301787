/* Scenarios run by tests/c_programs.rs against the fake libcudart.so.12. Each prints
 * "PASS <scenario>" on success and exits non-zero with a message on the first failed check. */
#include "cuda_subset.h"
#include "ncclsim_cuda.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"
#include "core_api.h"

static int props(void) {
    int n = -1, v = 0;
    OK(cudaGetDeviceCount(&n));
    printf("count %d\n", n);
    for (int d = 0; d < n; d++) {
        device_prop_t p;
        char bus[32];
        OK(cudaGetDeviceProperties_v2(&p, d));
        OK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
        printf("device %d %s sm %d.%d mem %zu bus %s\n", d, PROP_NAME(&p), PROP_INT(&p, 360),
               PROP_INT(&p, 364), PROP_SIZE(&p, 288), bus);
        CHECK(PROP_INT(&p, 584) == (int)strtol(bus + 5, NULL, 16)); /* pciBusID */
        OK(cudaDeviceGetAttribute(&v, 75, d));
        CHECK(v == PROP_INT(&p, 360));
        OK(cudaDeviceGetAttribute(&v, 16, d));
        CHECK(v == PROP_INT(&p, 388) && v > 0);
        int back = -1;
        OK(cudaDeviceGetByPCIBusId(&back, bus));
        CHECK(back == d);
    }
    CHECK(cudaSetDevice(n) == 101);
    CHECK(cudaPeekAtLastError() == 101);
    CHECK(cudaGetLastError() == 101);
    CHECK(cudaGetLastError() == 0);
    CHECK(strcmp(cudaGetErrorName(2), "cudaErrorMemoryAllocation") == 0);
    OK(cudaDriverGetVersion(&v));
    CHECK(v >= 12000);
    if (n > 1) {
        OK(cudaSetDevice(n - 1));
        OK(cudaGetDevice(&v));
        CHECK(v == n - 1);
    }
    return 0;
}

static int memory(void) {
    enum { N = 1 << 20 };
    unsigned char *host, *back = malloc(N);
    unsigned char *d1, *d2;
    size_t free0, free1, total;
    OK(cudaMallocHost((void **)&host, N));
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7);
    OK(cudaMemGetInfo(&free0, &total));
    OK(cudaMalloc((void **)&d1, N));
    OK(cudaMalloc((void **)&d2, N));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 2 * (size_t)N);
    OK(cudaMemcpy(d1, host, N, H2D));
    OK(cudaMemset(d1 + 100, 0xab, 50));
    OK(cudaMemcpy(d2, d1, N, D2D));
    OK(cudaMemcpy(back, d2, N, D2H));
    for (int i = 0; i < N; i++)
        CHECK(back[i] == ((i >= 100 && i < 150) ? 0xab : (unsigned char)(i * 7)));
    /* 2D: 4 rows of 16 bytes from pitch 64 to pitch 32. */
    OK(cudaMemcpy2D(d2, 32, host, 64, 16, 4, DEFAULT_KIND));
    OK(cudaMemcpy(back, d2, 128, D2H));
    for (int r = 0; r < 4; r++) CHECK(memcmp(back + r * 32, host + r * 64, 16) == 0);
    OK(cudaMemcpyPeer(d1, 0, d2, 0, 64));
    pointer_attributes_t a;
    OK(cudaPointerGetAttributes(&a, d1 + 10));
    CHECK(a.type == 2 && a.device == 0 && a.devicePointer == d1 + 10);
    OK(cudaPointerGetAttributes(&a, host));
    CHECK(a.type == 1);
    /* Out of bounds and unknown pointers are errors, not crashes. */
    CHECK(cudaMemcpy(d1 + N - 8, host, 16, H2D) == 1);
    CHECK(cudaMemset(back, 0, 16) == 1);
    CHECK(cudaMemcpy(d1, host, 16, 9) == 21);
    OK(cudaFree(d1));
    OK(cudaFree(d2));
    CHECK(cudaFree(d1) == 1);
    OK(cudaFree(NULL));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    OK(cudaFreeHost(host));
    free(back);
    return 0;
}

static int oom(void) {
    /* The bundled DGX A100 has the 40 GB board (PCI id 0x20b0). */
    size_t GiB = (size_t)1 << 30, free_, total;
    void *a, *b, *c;
    OK(cudaMemGetInfo(&free_, &total));
    CHECK(total == 40 * GiB);
    OK(cudaMalloc(&a, 30 * GiB));
    CHECK(cudaMalloc(&b, 15 * GiB) == 2);
    CHECK(cudaGetLastError() == 2);
    OK(cudaMalloc(&c, 10 * GiB));
    OK(cudaMemGetInfo(&free_, &total));
    CHECK(free_ == 0);
    CHECK(cudaMalloc(&b, 1) == 2);
    OK(cudaFree(a));
    OK(cudaMalloc(&b, 15 * GiB));
    /* Another device has its own 40 GiB. */
    OK(cudaSetDevice(1));
    OK(cudaMalloc(&a, 35 * GiB));
    return 0;
}

/* Run with NCCLSIM_HOST_MEMORY=64M: allocating commits no host memory; writes commit theirs
 * first and fail with cudaErrorMemoryAllocation when the host cannot back them. */
static int host_memory(void) {
    static char buf[48 << 20];
    void *d;
    OK(cudaMalloc(&d, (size_t)256 << 20));
    OK(cudaMemset(d, 1, (size_t)32 << 20));
    CHECK(cudaMemset(d, 2, (size_t)256 << 20) == 2);
    CHECK(cudaGetLastError() == 2);
    CHECK(cudaMemcpy((char *)d + (128 << 20), buf, sizeof buf, H2D) == 2);
    /* Pages already committed are written again freely. */
    OK(cudaMemcpy(d, buf, (size_t)16 << 20, H2D));
    OK(cudaMemcpy(buf, (char *)d + (16 << 20), 16, D2H));
    CHECK(buf[0] == 1 && buf[15] == 1);
    OK(cudaFree(d));
    return 0;
}

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

static int maps_contain(const char *needle) {
    char line[512];
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, needle)) found = 1;
    if (f) fclose(f);
    return found;
}

/* Exporter: allocate and fill, print the handle, wait for a line on stdin, then check that
 * the importer's writes arrived. */
static int ipc_export(void) {
    enum { N = 3 * 4096 };
    int *d;
    int host[N / 4];
    OK(cudaSetDevice(2));
    OK(cudaMalloc((void **)&d, N));
    for (int i = 0; i < N / 4; i++) host[i] = i * 3 + 1;
    OK(cudaMemcpy(d, host, N, H2D));
    ipc_handle_t h;
    OK(cudaIpcGetMemHandle(&h, d + 5)); /* any address inside the allocation */
    hex_out(&h);
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL);
    OK(cudaMemcpy(host, d, N, D2H));
    CHECK(host[0] == -42 && host[N / 4 - 1] == -43 && host[1] == 4);
    OK(cudaFree(d));
    return 0;
}

static int ipc_import(const char *hex) {
    ipc_handle_t h;
    int *p;
    CHECK(hex_in(hex, &h) == 0);
    OK(cudaIpcOpenMemHandle((void **)&p, h, 1));
    char needle[64];
    unsigned owner = h.bytes[8] | h.bytes[9] << 8 | h.bytes[10] << 16 | (unsigned)h.bytes[11] << 24;
    snprintf(needle, sizeof needle, "ncclsim-arena-%u-", owner);
    CHECK(maps_contain(needle));
    int host[3 * 1024];
    OK(cudaMemcpy(host, p, sizeof host, DEFAULT_KIND));
    for (int i = 0; i < 3 * 1024; i++) CHECK(host[i] == i * 3 + 1);
    pointer_attributes_t a;
    OK(cudaPointerGetAttributes(&a, p));
    CHECK(a.type == 2 && a.device == 2);
    int v = -42, w = -43;
    OK(cudaMemcpy(p, &v, 4, H2D));
    OK(cudaMemcpy(p + 3 * 1024 - 1, &w, 4, H2D));
    /* The mapping covers exactly the allocation. */
    CHECK(cudaMemcpy(p + 3 * 1024 - 1, &w, 8, H2D) == 1);
    OK(cudaIpcCloseMemHandle(p));
    CHECK(!maps_contain(needle));
    CHECK(cudaIpcCloseMemHandle(p) != 0);
    return 0;
}

/* Any change to a handle, or garbage, is rejected without mapping anything. */
/* The same through the driver API: cuIpcOpenMemHandle_v2 and driver copies. */
static int ipc_import_driver(const char *hex) {
    ipc_handle_t h;
    unsigned long long p = 0;
    int host[3 * 1024];
    CHECK(hex_in(hex, &h) == 0);
    OK(cuIpcOpenMemHandle_v2(&p, h, 1));
    OK(cuMemcpyDtoH_v2(host, p, sizeof host));
    for (int i = 1; i < 3 * 1024 - 1; i++) CHECK(host[i] == i * 3 + 1);
    int v = -42, w = -43;
    OK(cuMemcpyHtoD_v2(p, &v, 4));
    OK(cuMemcpyHtoD_v2(p + sizeof host - 4, &w, 4));
    OK(cuIpcCloseMemHandle(p));
    CHECK(cuIpcCloseMemHandle(p) != 0);
    h.bytes[40] ^= 0x55;
    CHECK(cuIpcOpenMemHandle_v2(&p, h, 1) == 400); /* CUDA_ERROR_INVALID_HANDLE */
    return 0;
}

static int ipc_forged(const char *hex) {
    ipc_handle_t h, bad;
    void *p = NULL;
    CHECK(hex_in(hex, &h) == 0);
    for (int i = 0; i < 64; i++) {
        bad = h;
        bad.bytes[i] ^= 0x41;
        cudaError_t e = cudaIpcOpenMemHandle(&p, bad, 1);
        if (e == 0) {
            fprintf(stderr, "FAIL forged handle (byte %d changed) was accepted\n", i);
            return 1;
        }
    }
    memset(&bad, 0, sizeof bad);
    CHECK(cudaIpcOpenMemHandle(&p, bad, 1) == 400);
    memset(&bad, 0xff, sizeof bad);
    CHECK(cudaIpcOpenMemHandle(&p, bad, 1) == 400);
    printf("rejected\n");
    return 0;
}

/* Prints the error code of opening a handle (used for stale handles of dead owners). */
static int ipc_try(const char *hex) {
    ipc_handle_t h;
    void *p;
    CHECK(hex_in(hex, &h) == 0);
    printf("open -> %d\n", cudaIpcOpenMemHandle(&p, h, 1));
    return 0;
}

static void host_fn(void *flag) { *(int *)flag += 1; }

static int streams(void) {
    enum { N = 24000000 }; /* 24 MB over a 24 GB/s host link: 1 ms + 2 us latency */
    cudaStream_t s1, s2;
    cudaEvent_t e0, e1, e2;
    void *d, *h = malloc(N);
    memset(h, 1, N);
    OK(cudaMalloc(&d, N));
    OK(cudaStreamCreateWithFlags(&s1, 1));
    OK(cudaStreamCreateWithFlags(&s2, 1));
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    OK(cudaEventCreate(&e2));
    OK(cudaEventRecord(e0, s1));
    OK(cudaMemcpyAsync(d, h, N, H2D, s1));
    OK(cudaMemcpyAsync(d, h, N, H2D, s1));
    OK(cudaEventRecord(e1, s1));
    int flag = 0;
    OK(cudaLaunchHostFunc(s1, host_fn, &flag));
    OK(cudaStreamWaitEvent(s2, e1, 0));
    OK(cudaMemsetAsync(d, 0, 16, s2));
    OK(cudaEventRecord(e2, s2));
    OK(cudaStreamSynchronize(s1));
    OK(cudaStreamSynchronize(s2));
    CHECK(flag == 1);
    float ms01, ms02, ms10;
    OK(cudaEventElapsedTime(&ms01, e0, e1));
    OK(cudaEventElapsedTime(&ms02, e0, e2));
    OK(cudaEventElapsedTime(&ms10, e1, e0));
    printf("elapsed %.6f %.6f %.6f\n", ms01, ms02, ms10);
    CHECK(ms01 > 2.003 && ms01 < 2.005);
    CHECK(ms02 > ms01);
    CHECK(ms10 == -ms01);
    cudaEvent_t never;
    OK(cudaEventCreate(&never));
    CHECK(cudaEventElapsedTime(&ms01, e0, never) == 400);
    OK(cudaStreamQuery(s1));
    OK(cudaStreamDestroy(s2));
    CHECK(cudaStreamQuery(s2) == 400);
    OK(cudaEventDestroy(e2));
    OK(cudaFree(d));
    free(h);
    return 0;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void count_fn(void *n) { *(int *)n += 1; }

/* With NCCLSIM_PACE=1, completion waits for the wall clock to reach virtual time. Work with a
 * predicted duration comes through the core's enqueue entry, as the NCCL shim will use it. */
static int pace(void) {
    cudaStream_t s;
    cudaEvent_t e0, e1;
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    const struct ncclsim_core_api_v1 *api = core_api();
    int ran = 0;
    double t0 = now_ms();
    OK(cudaEventRecord(e0, s));
    CHECK(api->enqueue((uint64_t)(uintptr_t)s, 20000000, count_fn, &ran) == 0); /* 20 ms */
    OK(cudaEventRecord(e1, s));
    CHECK(ran == 1);
    CHECK(cudaStreamQuery(s) == 600);
    CHECK(cudaGetLastError() == 0); /* not-ready is not an error */
    OK(cudaStreamSynchronize(s));
    double waited = now_ms() - t0;
    float ms;
    OK(cudaEventElapsedTime(&ms, e0, e1));
    printf("waited %.3f ms, elapsed %.3f ms\n", waited, ms);
    CHECK(waited >= 19.0);
    /* Paced work starts no earlier than the wall clock at its submission, so the 20 ms run from the
     * enqueue, which a loaded host makes late by however long it took to get there: the
     * elapsed time is 20 ms plus that, and never more than the host waited. */
    CHECK(ms > 19.99 && ms <= waited + 0.01);
    OK(cudaStreamQuery(s));
    return 0;
}

/* What nvcc-generated code does around a <<<...>>> launch. */
static void fake_kernel_stub(void) {}

static int kernels(void) {
    static char fatbin[16];
    void **h = __cudaRegisterFatBinary(fatbin);
    CHECK(h != NULL);
    __cudaRegisterFunction(h, (const char *)fake_kernel_stub, (char *)"_Z4fillPfi", "_Z4fillPfi", -1,
                           NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);
    dim3 grid = {4, 1, 1}, block = {256, 1, 1}, g2, b2;
    size_t shmem;
    cudaStream_t stream;
    CHECK(__cudaPushCallConfiguration(grid, block, 0, NULL) == 0);
    OK(__cudaPopCallConfiguration(&g2, &b2, &shmem, &stream));
    CHECK(g2.x == 4 && b2.x == 256 && stream == NULL);
    cudaError_t e = cudaLaunchKernel((const void *)fake_kernel_stub, g2, b2, NULL, shmem, stream);
    printf("launch -> %d\n", e);
    dim3 too_big = {2048, 1, 1};
    CHECK(cudaLaunchKernel((const void *)fake_kernel_stub, g2, too_big, NULL, 0, NULL) == 9);
    __cudaUnregisterFatBinary(h);
    return 0;
}

/* Stream capture records work instead of running it; launching the graph replays it. */
/* Captures on `s`: a copy of N bytes into `into` (host to device, or device to host when
 * `d2h`), a memset of 10 bytes at `at`, the kernel, the host function counting into `calls`. */
static int capture_four(cudaStream_t s, unsigned char *into, unsigned char *host, int d2h, int at,
                        int *calls, void **graph) {
    enum { N = 4096 }; /* as `graphs` */
    dim3 one = {1, 1, 1};
    OK(cudaStreamBeginCapture(s, 0));
    if (d2h)
        OK(cudaMemcpyAsync(host, into, N, D2H, s));
    else
        OK(cudaMemcpyAsync(into, host, N, H2D, s));
    OK(cudaMemsetAsync(into + at, 0x5a, 10, s));
    OK(cudaLaunchKernel((const void *)fake_kernel_stub, one, one, NULL, 0, s));
    OK(cudaLaunchHostFunc(s, count_fn, calls));
    OK(cudaStreamEndCapture(s, graph));
    return 0;
}

/* cudaGraphExecUpdate on `exec` (a copy of `host` into `d`, a memset, a kernel, a host function):
 * a graph of the same shape over another buffer replaces its work; graphs of another node count,
 * another node type or another copy direction are refused as CUDA refuses them and leave it as
 * it was. */
static int graph_update(void *exec, cudaStream_t s, unsigned char *host, unsigned char *d) {
    enum { N = 4096 }; /* as `graphs` */
    unsigned char back[N], *d2;
    void *same = NULL, *shorter = NULL, *retyped = NULL, *reversed = NULL;
    int calls = 0;
    graph_update_info_t info;
    OK(cudaMalloc((void **)&d2, N));
    OK(cudaMemset(d2, 0, N));
    CHECK(capture_four(s, d2, host, 0, 200, &calls, &same) == 0);
    memset(&info, 0xff, sizeof info);
    OK(cudaGraphExecUpdate(exec, same, &info));
    CHECK(info.result == 0 && info.error_node == NULL);
    OK(cudaMemset(d, 0, N));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(back, d2, N, D2H));
    for (int i = 0; i < N; i++) CHECK(back[i] == (i >= 200 && i < 210 ? 0x5a : host[i]));
    OK(cudaMemcpy(back, d, N, D2H));
    CHECK(back[0] == 0 && back[N - 1] == 0); /* the first graph's buffer is not written again */
    CHECK(calls == 1);                       /* the new graph's host function and data */
    /* Another node count: cudaGraphExecUpdateErrorTopologyChanged. */
    OK(cudaStreamBeginCapture(s, 0));
    OK(cudaMemsetAsync(d, 0x33, N, s));
    OK(cudaStreamEndCapture(s, &shorter));
    CHECK(cudaGraphExecUpdate(exec, shorter, &info) == 910);
    CHECK(info.result == 2 && info.error_node == NULL);
    CHECK(strcmp(cudaGetErrorName(910), "cudaErrorGraphExecUpdateFailure") == 0);
    /* Another type at the first node: cudaGraphExecUpdateErrorNodeTypeChanged, naming it. */
    dim3 one = {1, 1, 1};
    OK(cudaStreamBeginCapture(s, 0));
    OK(cudaMemsetAsync(d, 0x33, N, s));
    OK(cudaMemsetAsync(d, 0x44, 10, s));
    OK(cudaLaunchKernel((const void *)fake_kernel_stub, one, one, NULL, 0, s));
    OK(cudaLaunchHostFunc(s, count_fn, &calls));
    OK(cudaStreamEndCapture(s, &retyped));
    void *nodes[4];
    size_t count = 4;
    OK(cudaGraphGetNodes(retyped, nodes, &count));
    CHECK(cudaGraphExecUpdate(exec, retyped, &info) == 910);
    CHECK(info.result == 3 && info.error_node == nodes[0]);
    /* The copy turned around: cudaGraphExecUpdateErrorParametersChanged. */
    unsigned char out[N];
    CHECK(capture_four(s, d2, out, 1, 0, &calls, &reversed) == 0);
    CHECK(cudaGraphExecUpdate(exec, reversed, &info) == 910);
    CHECK(info.result == 5);
    CHECK(cudaGraphExecUpdate(exec, same, NULL) == 1);
    /* Refused updates left the executable graph as `same` made it. */
    OK(cudaMemset(d2, 0, N));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(back, d2, N, D2H));
    CHECK(back[0] == host[0] && back[200] == 0x5a && calls == 2);
    OK(cudaGraphDestroy(same));
    OK(cudaGraphDestroy(shorter));
    OK(cudaGraphDestroy(retyped));
    OK(cudaGraphDestroy(reversed));
    OK(cudaFree(d2));
    return 0;
}

static int graphs(const char *dot_path) {
    enum { N = 4096 };
    static unsigned char host[N], back[N];
    static char fatbin[16];
    void **h = __cudaRegisterFatBinary(fatbin);
    __cudaRegisterFunction(h, (const char *)fake_kernel_stub, (char *)"_Z4stepv", "_Z4stepv", -1,
                           NULL, NULL, NULL, NULL, NULL);
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 13);
    unsigned char *d;
    cudaStream_t s, s2;
    void *graph = NULL, *graph2 = NULL, *exec = NULL;
    int status = -1, calls = 0;
    unsigned long long id = 0;
    size_t nodes = 0;
    OK(cudaMalloc((void **)&d, N));
    OK(cudaMemset(d, 0, N));
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaStreamCreateWithFlags(&s2, 1));
    CHECK(cudaStreamBeginCapture(NULL, 0) == 900); /* the legacy stream cannot capture */
    OK(cudaStreamBeginCapture(s, 0));
    OK(cudaStreamIsCapturing(s, &status));
    CHECK(status == 1);
    OK(cudaStreamGetCaptureInfo_v2(s, &status, &id, &graph, NULL, &nodes));
    CHECK(status == 1 && id != 0 && graph != NULL);
    OK(cudaMemcpyAsync(d, host, N, H2D, s));
    OK(cudaMemsetAsync(d + 100, 0xee, 10, s));
    dim3 one = {1, 1, 1};
    OK(cudaLaunchKernel((const void *)fake_kernel_stub, one, one, NULL, 0, s));
    OK(cudaLaunchHostFunc(s, count_fn, &calls));
    CHECK(cudaStreamSynchronize(s) == 900);
    CHECK(cudaMemcpyAsync(d, host, 2 * N, H2D, s) == 1); /* bad ranges are still refused */
    OK(cudaStreamEndCapture(s, &graph2));
    CHECK(graph2 == graph);
    OK(cudaStreamIsCapturing(s, &status));
    CHECK(status == 0);
    /* Nothing ran during the capture. */
    OK(cudaMemcpy(back, d, N, D2H));
    CHECK(back[0] == 0 && back[N - 1] == 0 && calls == 0);
    OK(cudaGraphGetNodes(graph, NULL, &nodes));
    printf("nodes %zu\n", nodes);
    CHECK(nodes == 4);
    OK(cudaGraphDebugDotPrint(graph, dot_path, 0));
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(back, d, N, D2H));
    for (int i = 0; i < N; i++) CHECK(back[i] == (i >= 100 && i < 110 ? 0xee : host[i]));
    printf("host calls %d\n", calls);
    CHECK(calls == 2);
    CHECK(graph_update(exec, s, host, d) == 0);
    OK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphLaunch(exec, s) == 400);
    OK(cudaGraphDestroy(graph));

    /* Fork/join: a second stream joins the capture by waiting on an event recorded in it. */
    cudaEvent_t fork, join;
    OK(cudaEventCreate(&fork));
    OK(cudaEventCreate(&join));
    OK(cudaStreamBeginCapture(s, 2));
    OK(cudaEventRecord(fork, s));
    OK(cudaStreamWaitEvent(s2, fork, 0));
    OK(cudaStreamIsCapturing(s2, &status));
    CHECK(status == 1);
    OK(cudaMemsetAsync(d, 0x11, 1, s2));
    OK(cudaEventRecord(join, s2));
    OK(cudaStreamWaitEvent(s, join, 0));
    OK(cudaMemsetAsync(d + 1, 0x22, 1, s));
    OK(cudaStreamEndCapture(s, &graph));
    OK(cudaStreamIsCapturing(s2, &status));
    CHECK(status == 0);
    OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECK(nodes == 2);
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphLaunch(exec, s2));
    OK(cudaStreamSynchronize(s2));
    OK(cudaMemcpy(back, d, 2, D2H));
    CHECK(back[0] == 0x11 && back[1] == 0x22);
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(graph));
    OK(cudaFree(d));
    __cudaUnregisterFatBinary(h);
    return 0;
}

/* The per-thread default stream entry points (--default-stream per-thread builds). */
static int per_thread_stream(void) {
    unsigned char host[256], back[256];
    unsigned char *d;
    void *graph, *exec;
    size_t nodes = 0;
    for (int i = 0; i < 256; i++) host[i] = (unsigned char)i;
    OK(cudaMalloc((void **)&d, 256));
    OK(cudaMemcpy_ptds(d, host, 256, H2D));
    OK(cudaMemsetAsync_ptsz(d, 0x7f, 8, NULL));
    OK(cudaStreamSynchronize_ptsz(NULL));
    OK(cudaMemcpy_ptds(back, d, 256, D2H));
    CHECK(back[0] == 0x7f && back[7] == 0x7f && back[8] == 8 && back[255] == 255);
    /* Unlike the legacy stream, the per-thread default stream can capture. */
    OK(cudaStreamBeginCapture_ptsz(NULL, 2));
    OK(cudaMemsetAsync_ptsz(d, 0x01, 256, NULL));
    OK(cudaStreamEndCapture_ptsz(NULL, &graph));
    OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECK(nodes == 1);
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphLaunch_ptsz(exec, NULL));
    OK(cudaMemcpy_ptds(back, d, 256, D2H));
    CHECK(back[0] == 1 && back[255] == 1);
    OK(cudaFree(d));
    return 0;
}

/* cudaDeviceReset frees every allocation of the current device. */
static int reset(void) {
    size_t free0, free1, total;
    void *a, *b;
    OK(cudaSetDevice(1));
    OK(cudaMemGetInfo(&free0, &total));
    OK(cudaMalloc(&a, 1 << 30));
    OK(cudaMalloc(&b, 1 << 20));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == (1 << 30) + (1 << 20));
    OK(cudaDeviceReset());
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    CHECK(cudaFree(a) == 1); /* gone */
    OK(cudaMalloc(&a, 4096)); /* the device is usable again */
    OK(cudaMemset(a, 1, 4096));
    OK(cudaFree(a));
    return 0;
}

/* libcuda.so.1 and libcudart.so.12 share one core: memory from one is known to the other. */
static int driver(void) {
    int n = 0, active = 0;
    unsigned flags;
    char name[64];
    void *d, *p = NULL;
    const char *text;
    OK(cuInit(0));
    OK(cuDeviceGetCount(&n));
    CHECK(n == 8);
    OK(cuDeviceGetName(name, sizeof name, 3));
    CHECK(strcmp(name, "NVIDIA A100-SXM4-40GB") == 0);
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);
    OK(cudaMalloc(&d, 4096));
    unsigned type = 0;
    OK(cuPointerGetAttribute(&type, 2, (unsigned long long)(uintptr_t)d));
    CHECK(type == 2);
    OK(cuMemFree_v2((unsigned long long)(uintptr_t)d));
    CHECK(cudaFree(d) == 1); /* already freed through the driver */
    int st = -1;
    OK(cuGetProcAddress_v2("cuDeviceGetCount", &p, 12000, 0, &st));
    CHECK(st == 0 && p == (void *)cuDeviceGetCount);
    CHECK(cuGetProcAddress_v2("cuNoSuchFunction", &p, 12000, 0, &st) == 500 && st == 1 && p == NULL);
    CHECK(cuModuleLoad(&p, "x.cubin") == 801);

    /* cudaGetDriverEntryPoint* hand out libcuda.so.1's functions, by the caller's ABI version. */
    OK(cudaGetDriverEntryPoint("cuDeviceGetCount", &p, 0, &st));
    CHECK(st == 0 && p == (void *)cuDeviceGetCount);
    OK(cudaGetDriverEntryPointByVersion("cuMemFree", &p, 12000, 0, &st));
    CHECK(st == 0 && p == (void *)cuMemFree_v2);
    OK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &p, 12000, 0, &st));
    CHECK(st == 1 && p == NULL);
    CHECK(cudaGetDriverEntryPoint("cuNoSuchFunction", &p, 0, NULL) == 500);

    /* Driver streams and events are the runtime's: use them interchangeably. */
    void *s = NULL, *e0 = NULL, *e1 = NULL;
    float ms = -1;
    OK(cuStreamCreate(&s, 1));
    OK(cuEventCreate(&e0, 0));
    OK(cuEventCreate(&e1, 0));
    OK(cudaMalloc(&d, 1 << 20));
    static char buf[1 << 20];
    OK(cuEventRecord(e0, s));
    OK(cudaMemcpyAsync(d, buf, sizeof buf, H2D, s));
    OK(cuEventRecord(e1, s));
    OK(cuStreamSynchronize(s));
    OK(cuEventElapsedTime(&ms, e0, e1));
    CHECK(ms > 0);
    OK(cuStreamQuery(s));
    OK(cuMemsetD8_v2((unsigned long long)(uintptr_t)d, 0x5a, 16));
    OK(cudaMemcpy(buf, d, 16, D2H));
    CHECK(buf[0] == 0x5a && buf[15] == 0x5a);
    unsigned long long opened = 0;
    ipc_handle_t h;
    OK(cuIpcGetMemHandle(&h, (unsigned long long)(uintptr_t)d));
    OK(cuIpcOpenMemHandle_v2(&opened, h, 1));
    CHECK(opened == (unsigned long long)(uintptr_t)d); /* own process: the original pointer */
    OK(cuIpcCloseMemHandle(opened));
    OK(cudaFree(d));
    OK(cuEventDestroy_v2(e0));
    OK(cuEventDestroy_v2(e1));
    OK(cuStreamDestroy_v2(s));
    CHECK(cuStreamQuery(s) == 400);
    OK(cuGetErrorName(801, &text));
    CHECK(strcmp(text, "CUDA_ERROR_NOT_SUPPORTED") == 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *s = argv[1];
    int rc = 2;
    if (!strcmp(s, "props")) rc = props();
    else if (!strcmp(s, "memory")) rc = memory();
    else if (!strcmp(s, "oom")) rc = oom();
    else if (!strcmp(s, "host-memory")) rc = host_memory();
    else if (!strcmp(s, "ipc-export")) rc = ipc_export();
    else if (!strcmp(s, "ipc-import") && argc > 2) rc = ipc_import(argv[2]);
    else if (!strcmp(s, "ipc-forged") && argc > 2) rc = ipc_forged(argv[2]);
    else if (!strcmp(s, "ipc-try") && argc > 2) rc = ipc_try(argv[2]);
    else if (!strcmp(s, "streams")) rc = streams();
    else if (!strcmp(s, "pace")) rc = pace();
    else if (!strcmp(s, "kernels")) rc = kernels();
    else if (!strcmp(s, "driver")) rc = driver();
    else if (!strcmp(s, "graphs")) rc = graphs(argv[2]);
    else if (!strcmp(s, "reset")) rc = reset();
    else if (!strcmp(s, "per-thread")) rc = per_thread_stream();
    else if (!strcmp(s, "ipc-import-driver")) rc = ipc_import_driver(argv[2]);
    if (rc == 0) printf("PASS %s\n", s);
    return rc;
}
