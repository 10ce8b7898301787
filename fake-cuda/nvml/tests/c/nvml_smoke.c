/* Scenarios run by tests/nvml.rs against the fake libnvidia-ml.so.1 (and libcudart.so.12, to
 * show both views agree). Declarations follow NVIDIA's documented signatures. Each scenario
 * prints "PASS <scenario>" on success and exits non-zero on the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void *nvmlDevice_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int);
int nvmlSystemGetCudaDriverVersion_v2(int *);
int nvmlDeviceGetCount_v2(unsigned *);
int nvmlDeviceGetHandleByIndex_v2(unsigned, nvmlDevice_t *);
int nvmlDeviceGetHandleByPciBusId_v2(const char *, nvmlDevice_t *);
int nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
int nvmlDeviceGetIndex(nvmlDevice_t, unsigned *);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int *, int *);
int nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned, int *);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned, nvmlPciInfo_t *);
int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t, unsigned, int *);
int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t, int *);
int nvmlDeviceGetP2PStatus(nvmlDevice_t, nvmlDevice_t, int, int *);
int nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned *, void *);
int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t, void *);
int nvmlDeviceGetGpuFabricInfo(nvmlDevice_t, void *);

/* GPU fabric information as NVML's reference describes it: the legacy structure, and version 2
 * (a version word in front, the health mask at the end; the state is one byte). */
typedef struct {
    unsigned char clusterUuid[16];
    int status;
    unsigned cliqueId;
    unsigned char state;
} fabric_v1;
typedef struct {
    unsigned version;
    unsigned char clusterUuid[16];
    int status;
    unsigned cliqueId;
    unsigned char state;
    unsigned healthMask;
} fabric_v2;
#define FABRIC_V2 ((unsigned)sizeof(fabric_v2) | 2u << 24)

/* From libcudart.so.12. */
int cudaGetDeviceCount(int *);
int cudaDeviceGetPCIBusId(char *, int, int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);

static const char *error_name(int code) { return nvmlErrorString(code); }
#include "ncclsim_check.h"

static int devices(void) {
    unsigned n = 0, idx = 99;
    nvmlDevice_t d0, d, d1, d2;
    char name[64], uuid[80], small[4];
    int v = 0, major = 0, minor = 0;
    CHECK(nvmlDeviceGetCount_v2(&n) == 1); /* before nvmlInit: NVML_ERROR_UNINITIALIZED */
    OK(nvmlInit_v2());
    OK(nvmlSystemGetCudaDriverVersion_v2(&v));
    CHECK(v >= 12000);
    OK(nvmlDeviceGetCount_v2(&n));
    printf("count %u\n", n);
    OK(nvmlDeviceGetHandleByIndex_v2(0, &d0));
    CHECK(nvmlDeviceGetHandleByIndex_v2(n, &d) == 2);
    for (unsigned i = 0; i < n; i++) {
        nvmlPciInfo_t pci;
        OK(nvmlDeviceGetHandleByIndex_v2(i, &d));
        OK(nvmlDeviceGetIndex(d, &idx));
        CHECK(idx == i);
        OK(nvmlDeviceGetName(d, name, sizeof name));
        OK(nvmlDeviceGetUUID(d, uuid, sizeof uuid));
        OK(nvmlDeviceGetPciInfo_v3(d, &pci));
        OK(nvmlDeviceGetCudaComputeCapability(d, &major, &minor));
        printf("nvml %u %s %s %s %08x sm %d.%d\n", i, name, pci.busId, pci.busIdLegacy,
               pci.pciDeviceId, major, minor);
        CHECK(strncmp(uuid, "GPU-", 4) == 0 && strlen(uuid) == 40);
        OK(nvmlDeviceGetHandleByUUID(uuid, &d1));
        CHECK(d1 == d);
        OK(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &d1));
        CHECK(d1 == d);
        OK(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy + 5, &d1)); /* "bb:dd.f" */
        CHECK(d1 == d);
    }
    CHECK(nvmlDeviceGetName(d0, small, sizeof small) == 7); /* NVML_ERROR_INSUFFICIENT_SIZE */
    CHECK(nvmlDeviceGetHandleByPciBusId_v2("0000:ff:00.0", &d1) == 6); /* NOT_FOUND */
    CHECK(nvmlDeviceGetHandleByUUID("GPU-nope", &d1) == 6);
    CHECK(nvmlDeviceGetIndex((nvmlDevice_t)(uintptr_t)12345, &idx) == 2);

    /* The CUDA view agrees: every CUDA device is an NVML device with the same bus id. */
    int cuda_n = 0;
    OK(cudaGetDeviceCount(&cuda_n));
    for (int c = 0; c < cuda_n; c++) {
        char bus[32];
        OK(cudaDeviceGetPCIBusId(bus, sizeof bus, c));
        OK(nvmlDeviceGetHandleByPciBusId_v2(bus, &d1));
        OK(nvmlDeviceGetIndex(d1, &idx));
        printf("cuda %d = nvml %u\n", c, idx);
    }

    /* Memory allocated through CUDA shows as used. */
    nvmlMemory_t m0, m1;
    void *p;
    OK(cudaDeviceGetPCIBusId(name, sizeof name, 0));
    OK(nvmlDeviceGetHandleByPciBusId_v2(name, &d1));
    OK(nvmlDeviceGetMemoryInfo(d1, &m0));
    OK(cudaMalloc(&p, 1 << 30));
    OK(nvmlDeviceGetMemoryInfo(d1, &m1));
    CHECK(m1.used - m0.used == 1 << 30 && m1.total == m0.total && m1.free + m1.used == m1.total);
    OK(cudaFree(p));

    unsigned procs = 7;
    OK(nvmlDeviceGetComputeRunningProcesses(d0, &procs, NULL));
    CHECK(procs == 0);
    CHECK(nvmlDeviceGetGpuFabricInfoV(d0, NULL) == 3); /* NOT_SUPPORTED */
    OK(nvmlDeviceGetHandleByIndex_v2(1, &d1));
    OK(nvmlDeviceGetHandleByIndex_v2(2, &d2));
    int level;
    OK(nvmlDeviceGetTopologyCommonAncestor(d0, d0, &level));
    printf("ancestor 0-0 %d\n", level);
    OK(nvmlDeviceGetTopologyCommonAncestor(d0, d1, &level));
    printf("ancestor 0-1 %d\n", level);
    OK(nvmlDeviceGetTopologyCommonAncestor(d0, d2, &level));
    printf("ancestor 0-2 %d\n", level);
    int p2p = -1;
    OK(nvmlDeviceGetP2PStatus(d0, d2, 2, &p2p)); /* NVML_P2P_CAPS_INDEX_NVLINK */
    printf("p2p nvlink 0-2 %d\n", p2p);
    OK(nvmlShutdown());
    CHECK(nvmlDeviceGetCount_v2(&n) == 1);
    printf("PASS devices\n");
    return 0;
}

static int nvlinks(void) {
    nvmlDevice_t d;
    int active, kind, links = 0;
    OK(nvmlInit_v2());
    OK(nvmlDeviceGetHandleByIndex_v2(0, &d));
    for (unsigned l = 0; nvmlDeviceGetNvLinkState(d, l, &active) == 0; l++) {
        nvmlPciInfo_t pci;
        CHECK(active == 1);
        OK(nvmlDeviceGetNvLinkRemotePciInfo_v2(d, l, &pci));
        OK(nvmlDeviceGetNvLinkRemoteDeviceType(d, l, &kind));
        printf("link %u -> %s type %d\n", l, pci.busId, kind);
        links++;
    }
    printf("links %d\n", links);
    CHECK(nvmlDeviceGetNvLinkState(d, links, &active) == 2); /* INVALID_ARGUMENT */
    OK(nvmlShutdown());
    printf("PASS nvlinks\n");
    return 0;
}

/* Every device's fabric information through both calls: "fabric <i> none" without one, else
 * the UUID in hex, clique id, state, status and health mask. */
static int fabric(void) {
    unsigned n = 0;
    OK(nvmlInit_v2());
    OK(nvmlDeviceGetCount_v2(&n));
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        OK(nvmlDeviceGetHandleByIndex_v2(i, &d));
        fabric_v2 v2;
        fabric_v1 v1;
        memset(&v2, 0, sizeof v2);
        v2.version = FABRIC_V2;
        int rc = nvmlDeviceGetGpuFabricInfoV(d, &v2);
        int rc1 = nvmlDeviceGetGpuFabricInfo(d, &v1);
        CHECK(rc == rc1);
        if (rc == 3) { /* NVML_ERROR_NOT_SUPPORTED */
            printf("fabric %u none\n", i);
            continue;
        }
        OK(rc);
        CHECK(v2.version == FABRIC_V2);
        CHECK(memcmp(v1.clusterUuid, v2.clusterUuid, 16) == 0);
        CHECK(v1.cliqueId == v2.cliqueId && v1.state == v2.state && v1.status == v2.status);
        printf("fabric %u uuid ", i);
        for (int b = 0; b < 16; b++) printf("%02x", v2.clusterUuid[b]);
        printf(" clique 0x%x state %u status %d health 0x%x\n", v2.cliqueId, v2.state,
               v2.status, v2.healthMask);
        /* A structure version NVML does not know: NVML_ERROR_ARGUMENT_VERSION_MISMATCH. */
        v2.version = (unsigned)sizeof(fabric_v2) | 7u << 24;
        CHECK(nvmlDeviceGetGpuFabricInfoV(d, &v2) == 25);
    }
    OK(nvmlShutdown());
    printf("PASS fabric\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "devices")) return devices();
    if (!strcmp(mode, "nvlinks")) return nvlinks();
    if (!strcmp(mode, "fabric")) return fabric();
    fprintf(stderr, "unknown scenario %s\n", mode);
    return 2;
}
