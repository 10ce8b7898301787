/* A C program using cuBLAS and cuBLASLt as NVIDIA's documentation describes them, linked
 * against ncclsim's libcudart.so.12, libcublas.so.12 and libcublasLt.so.12 by their real names:
 * cublasSgemm on a stream, a cublasGemmEx with bfloat16 inputs, float32 output and float32
 * compute (beta 0.5 over the previous result), then a cublasLtMatmul with the RELU_BIAS epilogue
 * on a cuBLAS handle (as torch passes it), each checked against a loop in C. The cuBLAS declarations
 * below are written from the documented signatures and enumerator values. */
#include "cuda_subset.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>

typedef int cublasStatus_t;
typedef void *cublasHandle_t;
typedef void *cublasLtMatmulDesc_t;
typedef void *cublasLtMatrixLayout_t;
typedef void *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUDA_R_32F = 0, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };
enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
       CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8 };
enum { CUBLASLT_EPILOGUE_RELU_BIAS = 6 };

cublasStatus_t cublasCreate_v2(cublasHandle_t *);
cublasStatus_t cublasDestroy_v2(cublasHandle_t);
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t);
const char *cublasGetStatusName(cublasStatus_t);
cublasStatus_t cublasSgemm_v2(cublasHandle_t, int, int, int, int, int, const float *,
                              const float *, int, const float *, int, const float *, float *,
                              int);
cublasStatus_t cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void *, const void *,
                            int, int, const void *, int, int, const void *, void *, int, int,
                            int, int);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *, int, int);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, int, const void *, size_t);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *, int, uint64_t, uint64_t,
                                          int64_t);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(void *, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int,
                                              cublasLtMatmulHeuristicResult_t *, int *);
cublasStatus_t cublasLtMatmul(void *, cublasLtMatmulDesc_t, const void *, const void *,
                              cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t,
                              const void *, const void *, cublasLtMatrixLayout_t, void *,
                              cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *,
                              size_t, cudaStream_t);

static const char *error_name(int code) { return cublasGetStatusName(code); }
#include "ncclsim_check.h"

enum { M = 7, N = 5, K = 9 };

/* bfloat16: the upper half of a float32, rounded to nearest even. */
static uint16_t to_bf16(float f) {
    union { float f; uint32_t u; } v = { f };
    return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

int main(void) {
    float a[M * K], b[K * N], c[M * N], bias[M], want[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 11) / 4 - 1;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 13) / 8 - 0.75f;
    for (int i = 0; i < M; i++) bias[i] = (float)i - 3;

    float *da, *db, *dc, *dbias;
    cudaStream_t stream;
    OK(cudaMalloc((void **)&da, sizeof a));
    OK(cudaMalloc((void **)&db, sizeof b));
    OK(cudaMalloc((void **)&dc, sizeof c));
    OK(cudaMalloc((void **)&dbias, sizeof bias));
    OK(cudaStreamCreateWithFlags(&stream, 1));
    OK(cudaMemcpy(da, a, sizeof a, 1));
    OK(cudaMemcpy(db, b, sizeof b, 1));
    OK(cudaMemcpy(dbias, bias, sizeof bias, 1));

    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    OK(cublasSetStream_v2(h, stream));

    /* C = 2 A B (A is M x K, B is K x N, column-major). */
    const float two = 2, zero = 0, one = 1;
    OK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &two, da, M, db, K, &zero, dc, M));
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemcpy(c, dc, sizeof c, 2));
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float s = 0;
            for (int p = 0; p < K; p++) s += a[i + p * M] * b[p + j * K];
            want[i + j * M] = 2 * s;
            CHECK(fabsf(c[i + j * M] - want[i + j * M]) < 1e-4f);
        }
    printf("sgemm ok\n");

    /* C = A B (bfloat16 inputs) + 0.5 C, accumulated in float32. */
    uint16_t ah[M * K], bh[K * N];
    for (int i = 0; i < M * K; i++) ah[i] = to_bf16(a[i] * 1.01f);
    for (int i = 0; i < K * N; i++) bh[i] = to_bf16(b[i] * 0.99f);
    uint16_t *dah, *dbh;
    OK(cudaMalloc((void **)&dah, sizeof ah));
    OK(cudaMalloc((void **)&dbh, sizeof bh));
    OK(cudaMemcpy(dah, ah, sizeof ah, 1));
    OK(cudaMemcpy(dbh, bh, sizeof bh, 1));
    const float half_ = 0.5f;
    OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dah, CUDA_R_16BF, M, dbh,
                    CUDA_R_16BF, K, &half_, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemcpy(c, dc, sizeof c, 2));
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float s = 0;
            for (int p = 0; p < K; p++) s += from_bf16(ah[i + p * M]) * from_bf16(bh[p + j * K]);
            float w = s + 0.5f * want[i + j * M];
            CHECK(fabsf(c[i + j * M] - w) < 1e-4f * (1 + fabsf(w)));
        }
    printf("gemmex bf16 ok\n");
    OK(cudaFree(dah));
    OK(cudaFree(dbh));

    /* D = relu(A^T B + bias), A transposed: the M*K values of `a` read as a K x M matrix. */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    int trans = CUBLAS_OP_T, epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
    OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                      sizeof epilogue));
    OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
                                      sizeof dbias));
    OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, K, M, K));
    OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
    OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
    OK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    OK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &result, &found));
    CHECK(found == 1 && result.state == 0);
    OK(cublasLtMatmul(h, desc, &one, da, la, db, lb, &zero, dc, lc, dc, lc, &result.algo, NULL,
                      0, stream));
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemcpy(c, dc, sizeof c, 2));
    int negatives = 0;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float s = bias[i];
            for (int p = 0; p < K; p++) s += a[p + i * K] * b[p + j * K];
            negatives += s < 0;
            float w = s > 0 ? s : 0;
            CHECK(fabsf(c[i + j * M] - w) < 1e-4f);
        }
    CHECK(negatives > 0);
    printf("lt relu_bias ok (%d clamped)\n", negatives);

    OK(cublasLtMatmulPreferenceDestroy(pref));
    OK(cublasLtMatrixLayoutDestroy(la));
    OK(cublasLtMatrixLayoutDestroy(lb));
    OK(cublasLtMatrixLayoutDestroy(lc));
    OK(cublasLtMatmulDescDestroy(desc));
    OK(cublasDestroy_v2(h));
    OK(cudaStreamDestroy(stream));
    printf("PASS\n");
    return 0;
}
