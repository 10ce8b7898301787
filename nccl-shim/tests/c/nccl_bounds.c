/* Buffer bounds of ncclsim's libnccl.so.2: one-rank communicators on devices 0 and 1, and
 * AllReduces whose receive buffer fits its allocation exactly, overruns it by one element
 * inside the allocation granule, runs into the next cudaMalloc, lies on the other device,
 * spans mappings the driver's cuMem* API made (in one reserved range, and into the next one),
 * or lies in another process's allocation opened with cudaIpcOpenMemHandle (that process is
 * this program run as "nccl_bounds export": it allocates 100 floats, prints the handle in hex
 * and holds the allocation until its standard input closes).
 *
 * Each outcome is a line "result case=NAME code=C msg=TEXT"; the test checks the codes and
 * messages. Preconditions the cases rely on (consecutive allocations are adjacent, a
 * reservation can be placed right after another) are CHECKed, so the cases test what they
 * claim. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaStreamCreate(void **);
typedef struct { unsigned char reserved[64]; } cudaIpcMemHandle_t;
int cudaIpcGetMemHandle(cudaIpcMemHandle_t *, void *);
int cudaIpcOpenMemHandle(void **, cudaIpcMemHandle_t, unsigned int);
int cudaIpcCloseMemHandle(void *);

#include "cuda_vmm_decls.h"

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"

#define GRANULE ((size_t)2 << 20)

static void result(const char *name, int code, const char *msg) {
    printf("result case=%s code=%d msg=%s\n", name, code, msg ? msg : "");
    fflush(stdout);
}

static ncclComm_t comm;
static void *stream;

#define TRY(name, send, recv, count)                                                           \
    do {                                                                                       \
        ncclResult_t rc_ = ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream); \
        result(name, rc_, rc_ == ncclSuccess ? "" : ncclGetLastError(NULL));                   \
    } while (0)

/* `n` granules of device 0 mapped read-write at `at`, one allocation per granule. */
static void map_granules(CUdeviceptr at, int n) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = 1;
    p.location.type = 1;
    p.location.id = 0;
    for (int i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        OK(cuMemCreate(&h, GRANULE, &p, 0));
        OK(cuMemMap(at + i * GRANULE, GRANULE, 0, h, 0));
    }
    CUmemAccessDesc a = {{1, 0}, 3};
    OK(cuMemSetAccess(at, n * GRANULE, &a, 1));
}

/* "export" mode: 100 floats of device 0 exported; the handle goes to stdout in hex. */
static int export_allocation(void) {
    OK(cudaSetDevice(0));
    float *p;
    OK(cudaMalloc((void **)&p, 100 * sizeof(float)));
    cudaIpcMemHandle_t h;
    OK(cudaIpcGetMemHandle(&h, p));
    for (int i = 0; i < 64; i++) printf("%02x", h.reserved[i]);
    printf("\n");
    fflush(stdout);
    char line[16];
    while (fgets(line, sizeof line, stdin)) {}
    OK(cudaFree(p));
    return 0;
}

/* Starts this program in export mode; returns its pid, the handle it printed, and the pipe
 * that holds it (closing it ends the exporter). */
static pid_t start_exporter(cudaIpcMemHandle_t *h, int *hold) {
    int to[2], from[2];
    CHECK(pipe(to) == 0 && pipe(from) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]);
        close(from[0]);
        execl("/proc/self/exe", "nccl_bounds", "export", (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    FILE *f = fdopen(from[0], "r");
    CHECK(f);
    char hex[160];
    CHECK(fgets(hex, sizeof hex, f) && strlen(hex) >= 128);
    for (int i = 0; i < 64; i++) {
        unsigned v;
        CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
        h->reserved[i] = (unsigned char)v;
    }
    fclose(f);
    *hold = to[1];
    return pid;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "export") == 0) return export_allocation();
    int dev0 = 0;
    OK(cudaSetDevice(0));
    OK(cudaStreamCreate(&stream));
    OK(ncclCommInitAll(&comm, 1, &dev0));
    /* The send buffer of every case, larger than any of them. */
    float *x;
    OK(cudaMalloc((void **)&x, 3 * GRANULE));

    /* An allocation of 100 floats: the core rounds it up to one 4 KiB page. */
    float *small;
    OK(cudaMalloc((void **)&small, 100 * sizeof(float)));
    TRY("exact", x, small, 100);
    TRY("slack", x, small, 101);
    TRY("send_slack", small, x, 101);

    /* Two pages allocated one after the other lie side by side. */
    float *a, *b, h[1024];
    OK(cudaMalloc((void **)&a, 4096));
    OK(cudaMalloc((void **)&b, 4096));
    CHECK((char *)b == (char *)a + 4096);
    for (int i = 0; i < 1024; i++) h[i] = 7.0f;
    OK(cudaMemcpy(b, h, sizeof h, 1));
    TRY("next", x, a, 2048);
    OK(cudaMemcpy(h, b, sizeof h, 2));
    int changed = 0;
    for (int i = 0; i < 1024; i++) changed += h[i] != 7.0f;
    result("next_intact", changed, "floats of the next allocation changed");

    /* A buffer of device 1 given to device 0's communicator. */
    float *other;
    OK(cudaSetDevice(1));
    OK(cudaMalloc((void **)&other, 4096));
    OK(cudaSetDevice(0));
    TRY("other_device", x, other, 16);

    /* Expandable segments: two mappings side by side in one reserved range form one buffer. */
    CUdeviceptr r;
    OK(cuMemAddressReserve(&r, 2 * GRANULE, GRANULE, 0, 0));
    map_granules(r, 2);
    size_t two = 2 * GRANULE / sizeof(float);
    TRY("vmm_chain", x, (float *)r, two);
    /* A second reserved range right after the first is another buffer. */
    CUdeviceptr next;
    OK(cuMemAddressReserve(&next, GRANULE, GRANULE, r + 2 * GRANULE, 0));
    CHECK(next == r + 2 * GRANULE);
    map_granules(next, 1);
    TRY("vmm_next_range", x, (float *)r, two + 16);
    TRY("vmm_tail", x, (float *)(r + GRANULE), GRANULE / sizeof(float) + 1);

    /* Another process's 100 floats, opened through IPC: mapped as a whole 4 KiB page, but the
     * buffer ends where the exporter's allocation does. */
    cudaIpcMemHandle_t ih;
    int hold;
    pid_t exporter = start_exporter(&ih, &hold);
    float *imported;
    OK(cudaIpcOpenMemHandle((void **)&imported, ih, 1));
    TRY("ipc_exact", x, imported, 100);
    TRY("ipc_slack", x, imported, 101);
    TRY("ipc_send_slack", imported, x, 101);
    TRY("ipc_inside", x, imported + 50, 51);
    OK(cudaIpcCloseMemHandle(imported));
    close(hold);
    int status;
    CHECK(waitpid(exporter, &status, 0) == exporter && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The test gives this process's device memory 64 MiB of host memory
     * (NCCLSIM_HOST_MEMORY): a receive buffer is committed before the collective writes it,
     * so 128 MiB is refused (not the OOM killer) and 8 MiB of the same buffer passes. */
    float *big;
    OK(cudaMalloc((void **)&big, (size_t)256 << 20));
    TRY("host_memory", big, big, ((size_t)128 << 20) / sizeof(float));
    TRY("host_memory_fits", big, big, ((size_t)8 << 20) / sizeof(float));
    return 0;
}
