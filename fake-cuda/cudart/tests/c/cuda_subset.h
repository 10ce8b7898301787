/* The part of the CUDA 12 runtime API the ncclsim C tests call, declared from NVIDIA's
 * documented signatures. Only sizes and order of struct members that the tests read matter. */
#ifndef NCCLSIM_CUDA_SUBSET_H
#define NCCLSIM_CUDA_SUBSET_H
#include <stddef.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct { unsigned char bytes[64]; } ipc_handle_t;

/* struct cudaDeviceProp is 1032 bytes in CUDA 12; the tests read fields at fixed offsets. */
typedef struct { unsigned char raw[1032]; } device_prop_t;
#define PROP_NAME(p) ((const char *)(p)->raw)
#define PROP_INT(p, off) (*(const int *)((p)->raw + (off)))
#define PROP_SIZE(p, off) (*(const size_t *)((p)->raw + (off)))

typedef struct { int type; int device; void *devicePointer; void *hostPointer; } pointer_attributes_t;

cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceProperties_v2(device_prop_t *, int);
cudaError_t cudaDeviceGetAttribute(int *, int, int);
cudaError_t cudaDeviceGetPCIBusId(char *, int, int);
cudaError_t cudaDeviceGetByPCIBusId(int *, const char *);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t);
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaDriverGetVersion(int *);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
cudaError_t cudaPointerGetAttributes(pointer_attributes_t *, const void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaLaunchHostFunc(cudaStream_t, void (*)(void *), void *);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaIpcGetMemHandle(ipc_handle_t *, void *);
cudaError_t cudaIpcOpenMemHandle(void **, ipc_handle_t, unsigned);
cudaError_t cudaIpcCloseMemHandle(void *);
cudaError_t cudaIpcGetEventHandle(ipc_handle_t *, cudaEvent_t);
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *, ipc_handle_t);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *, unsigned);
cudaError_t cudaStreamAddCallback(cudaStream_t, void (*)(cudaStream_t, cudaError_t, void *),
                                  void *, unsigned);
void **__cudaRegisterFatBinary(void *);
void __cudaRegisterFatBinaryEnd(void **);
void __cudaUnregisterFatBinary(void **);
void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *,
                            dim3 *, dim3 *, int *);
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, void *);
cudaError_t __cudaPopCallConfiguration(dim3 *, dim3 *, size_t *, void *);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);

cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, void **);
cudaError_t cudaStreamIsCapturing(cudaStream_t, int *);
cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t, int *, unsigned long long *, void **,
                                        const void **, size_t *);
cudaError_t cudaGraphGetNodes(void *, void **, size_t *);
cudaError_t cudaGraphDebugDotPrint(void *, const char *, unsigned);
cudaError_t cudaGraphInstantiate(void **, void *, unsigned long long);
cudaError_t cudaGraphLaunch(void *, cudaStream_t);
cudaError_t cudaGraphExecDestroy(void *);
/* cudaGraphExecUpdateResultInfo: the result (cudaGraphExecUpdateResult), the graph's node that
 * refused the update, the executable graph's node it would have replaced. */
typedef struct {
    int result;
    void *error_node;
    void *error_from_node;
} graph_update_info_t;
cudaError_t cudaGraphExecUpdate(void *, void *, graph_update_info_t *);
cudaError_t cudaGraphDestroy(void *);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaDeviceGraphMemTrim(int);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, int);
cudaError_t cudaMemsetAsync_ptsz(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t, int);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t, void **);
cudaError_t cudaGraphLaunch_ptsz(void *, cudaStream_t);

/* Driver API (libcuda.so.1). */
int cuInit(unsigned);
int cuDeviceGetCount(int *);
int cuDeviceGetName(char *, int, int);
int cuDevicePrimaryCtxGetState(int, unsigned *, int *);
int cuPointerGetAttribute(void *, int, unsigned long long);
int cuMemFree_v2(unsigned long long);
int cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
int cuGetErrorName(int, const char **);
int cuModuleLoad(void **, const char *);
int cuStreamCreate(void **, unsigned);
int cuStreamSynchronize(void *);
int cuStreamQuery(void *);
int cuStreamDestroy_v2(void *);
int cuEventCreate(void **, unsigned);
int cuEventRecord(void *, void *);
int cuEventElapsedTime(float *, void *, void *);
int cuEventDestroy_v2(void *);
int cuMemsetD8_v2(unsigned long long, unsigned char, size_t);
int cuMemcpyHtoD_v2(unsigned long long, const void *, size_t);
int cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
int cuIpcGetMemHandle(ipc_handle_t *, unsigned long long);
int cuIpcOpenMemHandle_v2(unsigned long long *, ipc_handle_t, unsigned);
int cuIpcCloseMemHandle(unsigned long long);
cudaError_t cudaGetDriverEntryPoint(const char *, void **, unsigned long long, int *);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, unsigned long long,
                                             int *);

enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT_KIND = 4 };
#endif
