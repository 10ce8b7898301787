/* Scenarios run by tests/c_programs.rs against the fake libcudart.so.13: the CUDA 13 struct
 * layouts, signatures and kernel entry points. Declarations are written from NVIDIA's
 * documented signatures; only sizes and offsets the tests read matter. Each scenario prints
 * "PASS <scenario>" on success and exits non-zero on the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaKernel_t;
typedef struct { unsigned x, y, z; } dim3;

/* struct cudaDeviceProp is 1008 bytes in CUDA 13, struct cudaPointerAttributes 88. */
#define PROP_BYTES 1008
#define ATTR_BYTES 88
#define GUARD 64

cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaGetDeviceProperties(void *, int);
cudaError_t cudaDeviceGetAttribute(int *, int, int);
cudaError_t cudaRuntimeGetVersion(int *);
const char *cudaGetErrorName(cudaError_t);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaPointerGetAttributes(void *, const void *);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, int *, unsigned long long *, void **,
                                     const void **, const void **, size_t *);
void **__cudaRegisterFatBinary(void *);
void __cudaRegisterFatBinaryEnd(void **);
void __cudaUnregisterFatBinary(void **);
void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *,
                            dim3 *, dim3 *, int *);
cudaError_t __cudaGetKernel(cudaKernel_t *, const void *);
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"

#define AT(buf, type, off) (*(const type *)((const unsigned char *)(buf) + (off)))

static int untouched(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xa5) return 0;
    return 1;
}

static int props(void) {
    int n = 0, v = 0;
    unsigned char buf[PROP_BYTES + GUARD];
    OK(cudaRuntimeGetVersion(&v));
    CHECK(v / 1000 == 13);
    OK(cudaGetDeviceCount(&n));
    for (int d = 0; d < n; d++) {
        memset(buf, 0xa5, sizeof buf);
        OK(cudaGetDeviceProperties(buf, d));
        CHECK(untouched(buf + PROP_BYTES, GUARD)); /* nothing written past 1008 bytes */
        printf("device %d %s sm %d.%d mem %zu sms %d bus %02x\n", d, (const char *)buf,
               AT(buf, int, 360), AT(buf, int, 364), AT(buf, size_t, 288), AT(buf, int, 384),
               AT(buf, int, 568));
        OK(cudaDeviceGetAttribute(&v, 16, d)); /* multiProcessorCount */
        CHECK(v == AT(buf, int, 384));
        OK(cudaDeviceGetAttribute(&v, 33, d)); /* pciBusID */
        CHECK(v == AT(buf, int, 568));
        OK(cudaDeviceGetAttribute(&v, 38, d)); /* l2CacheSize */
        CHECK(v == AT(buf, int, 596));
        CHECK(AT(buf, unsigned, 772) == (0x20b0u << 16 | 0x10de)); /* gpuPciDeviceID */
        CHECK(AT(buf, int, 768) >= 0);                             /* hostNumaId */
    }
    printf("PASS props\n");
    return 0;
}

static int pointers(void) {
    unsigned char buf[ATTR_BYTES + GUARD];
    void *d;
    OK(cudaMalloc(&d, 4096));
    memset(buf, 0xa5, sizeof buf);
    OK(cudaPointerGetAttributes(buf, (char *)d + 100));
    CHECK(untouched(buf + ATTR_BYTES, GUARD));
    CHECK(AT(buf, int, 0) == 2); /* cudaMemoryTypeDevice */
    CHECK(AT(buf, void *, 8) == (char *)d + 100);
    for (int off = 24; off < ATTR_BYTES; off += 8) CHECK(AT(buf, long, off) == 0);
    OK(cudaFree(d));

    cudaStream_t s;
    int status = -1;
    unsigned long long id = 7;
    size_t ndeps = 9;
    const void *deps = (void *)1, *edges = (void *)1;
    void *graph = (void *)1;
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaStreamGetCaptureInfo(s, &status, &id, &graph, &deps, &edges, &ndeps));
    CHECK(status == 0 && ndeps == 0 && edges == NULL && deps == NULL && graph == NULL);
    printf("PASS pointers\n");
    return 0;
}

static void fake_kernel_stub(void) {}

static int kernels(void) {
    static char fatbin[16];
    void **h = __cudaRegisterFatBinary(fatbin);
    __cudaRegisterFunction(h, (const char *)fake_kernel_stub, (char *)"_Z5scalePff",
                           "_Z5scalePff", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);
    /* What an nvcc 13 stub does for scale<<<2, 128>>>(...). */
    cudaKernel_t k = NULL;
    OK(__cudaGetKernel(&k, (const void *)fake_kernel_stub));
    CHECK(k != NULL);
    dim3 grid = {2, 1, 1}, block = {128, 1, 1};
    cudaError_t e = __cudaLaunchKernel(k, grid, block, NULL, 0, NULL);
    printf("launch -> %d\n", e);
    __cudaUnregisterFatBinary(h);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "props")) return props();
    if (!strcmp(mode, "pointers")) return pointers();
    if (!strcmp(mode, "kernels")) return kernels();
    fprintf(stderr, "unknown scenario %s\n", mode);
    return 2;
}
