/* The part of the CUDA driver API for virtual memory management, fabric handles and multicast
 * objects that the C test programs call, declared from NVIDIA's documented signatures (types
 * and prototypes only). */
#ifndef NCCLSIM_CUDA_VMM_DECLS_H
#define NCCLSIM_CUDA_VMM_DECLS_H
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage;
             unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;
typedef struct { unsigned char data[64]; } CUmemFabricHandle;
typedef struct {
    unsigned int numDevices;
    size_t size;
    unsigned long long handleTypes;
    unsigned long long flags;
} CUmulticastObjectProp;

int cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
int cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                unsigned long long);
int cuMemRelease(CUmemGenericAllocationHandle);
int cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
int cuMemAddressFree(CUdeviceptr, size_t);
int cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
int cuMemUnmap(CUdeviceptr, size_t);
int cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
int cuMemGetAccess(unsigned long long *, const CUmemLocation *, CUdeviceptr);
int cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle, int, unsigned long long);
int cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, int);
int cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
int cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *, CUmemGenericAllocationHandle);
int cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr);
int cuMemsetD32Async(CUdeviceptr, unsigned, size_t, void *);
int cuMemsetD16_v2(CUdeviceptr, unsigned short, size_t);
int cuStreamWriteValue32(void *, CUdeviceptr, unsigned, unsigned);
int cuStreamWriteValue64(void *, CUdeviceptr, unsigned long long, unsigned);
int cuDeviceGetAttribute(int *, int, int);
int cuMulticastCreate(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
int cuMulticastGetGranularity(size_t *, const CUmulticastObjectProp *, int);
int cuMulticastAddDevice(CUmemGenericAllocationHandle, int);
int cuMulticastBindMem(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                       size_t, size_t, unsigned long long);
int cuMulticastBindAddr(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                        unsigned long long);
int cuMulticastUnbind(CUmemGenericAllocationHandle, int, size_t, size_t);

#endif
