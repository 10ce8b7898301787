/* A workload for monitors: allocates MIB + STEP * ordinal MiB on each visible GPU, then keeps
 * every GPU busy with back-to-back memsets until the file DONE exists (at most 60 s). READY is
 * created once the memory is allocated and work has run on every GPU.
 *
 * usage: gpu_load MIB STEP READY DONE
 * The CUDA runtime calls are declared here (no CUDA header needed). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int cudaError_t;
extern cudaError_t cudaGetDeviceCount(int *count);
extern cudaError_t cudaSetDevice(int device);
extern cudaError_t cudaMalloc(void **ptr, size_t size);
extern cudaError_t cudaFree(void *ptr);
extern cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, void *stream);
extern cudaError_t cudaDeviceSynchronize(void);

#define CHECK(call)                                                      \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != 0) {                                                   \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, e_); \
            exit(1);                                                     \
        }                                                                \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: gpu_load MIB STEP READY DONE\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10), step = strtoul(argv[2], NULL, 10);
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    void *buf[64] = {0};
    if (n > 64) n = 64;
    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMalloc(&buf[d], (mib + step * (size_t)d) << 20));
    }
    time_t start = time(NULL);
    for (int round = 0; time(NULL) - start < 60; round++) {
        for (int d = 0; d < n; d++) {
            CHECK(cudaSetDevice(d));
            for (int k = 0; k < 8; k++) CHECK(cudaMemsetAsync(buf[d], k, 1 << 16, NULL));
            CHECK(cudaDeviceSynchronize());
        }
        if (round == 0) {
            FILE *f = fopen(argv[3], "w");
            if (!f) { perror(argv[3]); return 1; }
            fclose(f);
        }
        if (access(argv[4], F_OK) == 0) break;
        usleep(2000);
    }
    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaFree(buf[d]));
    }
    return 0;
}
