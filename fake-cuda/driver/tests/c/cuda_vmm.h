/* The prologue of the driver's C test programs: the runtime subset, the checks
 * (ncclsim_check.h, naming errors with cudaGetErrorName), and the part of the CUDA driver API
 * for virtual memory management, fabric handles and multicast objects, declared from NVIDIA's
 * documented signatures, with small helpers to create and map memory. */
#ifndef NCCLSIM_CUDA_VMM_H
#define NCCLSIM_CUDA_VMM_H
#include "cuda_subset.h"
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"

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

/* CUresult values, CUmemAllocationHandleType and CUmemAccess_flags bits. */
enum {
    INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, NOT_PERMITTED = 800,
    NOT_SUPPORTED = 801,
    POSIX_FD = 1, FABRIC = 8,
    READ = 1, READWRITE = 3,
};
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Pinned device memory on `device`, exportable as `handle_types`. */
static inline CUmemAllocationProp prop_on(int device, int handle_types) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = 1;
    p.requestedHandleTypes = handle_types;
    p.location.type = 1;
    p.location.id = device;
    return p;
}

static inline CUmemAccessDesc access_for(int device, int flags) {
    CUmemAccessDesc a = {{1, device}, flags};
    return a;
}

/* Maps `h` (size bytes from offset 0) read-write for `device` at a fresh reservation. */
static inline CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size, int device) {
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    OK(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc rw = access_for(device, READWRITE);
    OK(cuMemSetAccess(va, size, &rw, 1));
    return va;
}

/* Unmaps and frees what map_rw made. */
static inline void unmap(CUdeviceptr va, size_t size) {
    OK(cuMemUnmap(va, size));
    OK(cuMemAddressFree(va, size));
}

/* A fabric handle as 128 hex digits (out: 129 bytes) and back. */
static inline void to_hex(const CUmemFabricHandle *h, char *out) {
    for (int i = 0; i < 64; i++) sprintf(out + 2 * i, "%02x", h->data[i]);
}

static inline void from_hex(const char *s, CUmemFabricHandle *h) {
    CHECK(strlen(s) == 128);
    for (int i = 0; i < 64; i++) {
        unsigned v;
        CHECK(sscanf(s + 2 * i, "%2x", &v) == 1);
        h->data[i] = (unsigned char)v;
    }
}

/* Descriptors of this process whose target starts with `prefix` ("/memfd:ncclsim" names every
 * fake device memory file: arenas, allocations, multicast objects). */
static inline int memory_files(const char *prefix) {
    int n = 0;
    for (int fd = 0; fd < 1024; fd++) {
        char path[64], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        if (strncmp(target, prefix, strlen(prefix)) == 0) n++;
    }
    return n;
}

/* Waits for child `pid` and checks it exited with status 0. */
static inline void finish(pid_t pid) {
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
#endif
