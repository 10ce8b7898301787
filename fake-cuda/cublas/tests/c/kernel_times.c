/* Stream time of GEMMs and raw kernels under a kernel-time table (NCCLSIM_KERNEL_TIMES): on one
 * stream, a raw kernel `hold` (which puts the stream ahead of the host, so the work below runs
 * back to back), three cublasSgemm_v2, one cublasDgemm_v2 and two launches of the raw kernel
 * vecAdd, with an event between each; prints each piece of work's event-timed duration in ns.
 * The kernels are registered as an nvcc-built program registers them; their stubs do nothing. */
#include "cuda_subset.h"
#include <stdio.h>

typedef int cublasStatus_t;
typedef void *cublasHandle_t;
cublasStatus_t cublasCreate_v2(cublasHandle_t *);
cublasStatus_t cublasDestroy_v2(cublasHandle_t);
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t);
const char *cublasGetStatusName(cublasStatus_t);
cublasStatus_t cublasSgemm_v2(cublasHandle_t, int, int, int, int, int, const float *,
                              const float *, int, const float *, int, const float *, float *,
                              int);
cublasStatus_t cublasDgemm_v2(cublasHandle_t, int, int, int, int, int, const double *,
                              const double *, int, const double *, int, const double *,
                              double *, int);

static const char *error_name(int code) { return cublasGetStatusName(code); }
#include "ncclsim_check.h"

enum { S = 256 };

static void hold_stub(void) {}
static void vec_add_stub(void) {}

int main(void) {
    static char fatbin[16];
    void **module = __cudaRegisterFatBinary(fatbin);
    __cudaRegisterFunction(module, (const char *)hold_stub, (char *)"_Z4holdv", "_Z4holdv", -1,
                           NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(module, (const char *)vec_add_stub, (char *)"_Z6vecAddPfS_S_i",
                           "_Z6vecAddPfS_S_i", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(module);

    float *fa, *fc;
    double *da, *dc;
    cudaStream_t s;
    OK(cudaMalloc((void **)&fa, S * S * sizeof(float)));
    OK(cudaMalloc((void **)&fc, S * S * sizeof(float)));
    OK(cudaMalloc((void **)&da, S * S * sizeof(double)));
    OK(cudaMalloc((void **)&dc, S * S * sizeof(double)));
    OK(cudaMemset(fa, 0, S * S * sizeof(float)));
    OK(cudaMemset(da, 0, S * S * sizeof(double)));
    OK(cudaStreamCreateWithFlags(&s, 1));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    OK(cublasSetStream_v2(h, s));

    enum { WORK = 7 };
    const char *names[WORK] = {"hold", "sgemm", "sgemm", "sgemm", "dgemm", "vecAdd", "vecAdd"};
    cudaEvent_t e[WORK + 1];
    for (int i = 0; i <= WORK; i++) OK(cudaEventCreate(&e[i]));
    const float f1 = 1, f0 = 0;
    const double d1 = 1, d0 = 0;
    dim3 grid = {S, 1, 1}, block = {S, 1, 1};
    OK(cudaEventRecord(e[0], s));
    for (int i = 0; i < WORK; i++) {
        if (names[i][0] == 'h')
            OK(cudaLaunchKernel((const void *)hold_stub, grid, block, NULL, 0, s));
        else if (names[i][0] == 's')
            OK(cublasSgemm_v2(h, 0, 0, S, S, S, &f1, fa, S, fa, S, &f0, fc, S));
        else if (names[i][0] == 'd')
            OK(cublasDgemm_v2(h, 0, 0, S, S, S, &d1, da, S, da, S, &d0, dc, S));
        else
            OK(cudaLaunchKernel((const void *)vec_add_stub, grid, block, NULL, 0, s));
        OK(cudaEventRecord(e[i + 1], s));
    }
    OK(cudaStreamSynchronize(s));
    for (int i = 0; i < WORK; i++) {
        float ms;
        OK(cudaEventElapsedTime(&ms, e[i], e[i + 1]));
        printf("%s %.0f\n", names[i], (double)ms * 1e6);
    }
    OK(cublasDestroy_v2(h));
    __cudaUnregisterFatBinary(module);
    printf("PASS\n");
    return 0;
}
