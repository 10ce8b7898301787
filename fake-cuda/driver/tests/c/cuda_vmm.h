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

#include "cuda_vmm_decls.h"

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
