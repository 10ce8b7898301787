/* Multicast objects (NVLS) from C: linked against libcuda.so.1 and libcudart.so.12 by their
 * real names. Scenarios (argv[1]):
 *   local        one process, four GPUs on NVSwitches: granularity, the object's and the
 *                bindings' misuse refused with CUDA's error codes, devices 0 and 1 bound
 *                (by handle and by address), a store through the multicast mapping read back
 *                from each device with cudaMemcpy, unbinding, a descriptor export/import, and
 *                no memory file left open afterwards;
 *   unsupported  A100s (no multicast): the attribute is 0 and the calls are refused;
 *   team         on node 0 of a rack of GB200 trays (NCCLSIM_NODE): creates an object with a
 *                fabric handle for two devices, starts this program as "member <hex> <in>
 *                <out>" on node 1 (same rack) and on node 18 (the next rack); node 1 joins,
 *                binds its memory and sees node 0's store through the object, node 0 sees
 *                node 1's; node 18's import is refused with CUDA_ERROR_NOT_PERMITTED. */
#define _GNU_SOURCE
#include "cuda_vmm.h"
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

/* CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED. */
enum { MULTICAST_SUPPORTED = 132 };
#define SIZE (4 * MiB)

static unsigned char host[SIZE], back[SIZE];

/* Descriptors of this process naming cuMem* allocations or multicast objects. */
static int vmm_files(void) {
    return memory_files("/memfd:ncclsim-vmm-") + memory_files("/memfd:ncclsim-mcast-");
}

static void fill(unsigned mul, unsigned add) {
    for (size_t i = 0; i < SIZE; i++) host[i] = (unsigned char)(i * mul + add);
}

static void read_back(CUdeviceptr src) { OK(cudaMemcpy(back, (void *)src, SIZE, D2H)); }

static void check_prop_misuse(const CUmulticastObjectProp *good) {
    CUmemGenericAllocationHandle mc;
    CUmulticastObjectProp p = *good;
    p.size = 3 * MiB; /* not a multiple of the granularity */
    CHECK(cuMulticastCreate(&mc, &p) == INVALID_VALUE);
    p = *good;
    p.numDevices = 0;
    CHECK(cuMulticastCreate(&mc, &p) == INVALID_VALUE);
    p = *good;
    p.flags = 1;
    CHECK(cuMulticastCreate(&mc, &p) == INVALID_VALUE);
    p = *good;
    p.handleTypes = 2; /* Win32 handles */
    CHECK(cuMulticastCreate(&mc, &p) == INVALID_VALUE);
    CHECK(cuMulticastCreate(&mc, NULL) == INVALID_VALUE);
    size_t g;
    CHECK(cuMulticastGetGranularity(&g, good, 2) == INVALID_VALUE);
}

static void local(void) {
    for (int d = 0; d < 4; d++) {
        int v = -1;
        OK(cuDeviceGetAttribute(&v, MULTICAST_SUPPORTED, d));
        CHECK(v == 1);
    }
    CUmulticastObjectProp prop = {2, SIZE, POSIX_FD, 0};
    size_t gmin = 0, grec = 0;
    OK(cuMulticastGetGranularity(&gmin, &prop, 0));
    OK(cuMulticastGetGranularity(&grec, &prop, 1));
    CHECK(gmin == 2 * MiB && grec >= gmin && grec % gmin == 0);
    check_prop_misuse(&prop);
    int files = vmm_files();

    CUmemGenericAllocationHandle mc, a0, a1;
    OK(cuMulticastCreate(&mc, &prop));
    CUmemAllocationProp p0 = prop_on(0, 0), p1 = prop_on(1, 0);
    OK(cuMemCreate(&a0, SIZE, &p0, 0));
    OK(cuMemCreate(&a1, 2 * SIZE, &p1, 0));
    /* Device 1's allocation is mapped and filled before it is bound. */
    CUdeviceptr v1 = map_rw(a1, 2 * SIZE, 1);
    OK(cudaMemset((void *)v1, 0x11, 2 * SIZE));
    /* Memory of a device outside the team. */
    CHECK(cuMulticastBindMem(mc, 0, a0, 0, SIZE, 0) == INVALID_VALUE);
    OK(cuMulticastAddDevice(mc, 0));
    CHECK(cuMulticastAddDevice(mc, 0) == INVALID_VALUE); /* twice */
    CHECK(cuMulticastAddDevice(mc, 9) == INVALID_DEVICE); /* no such device */
    OK(cuMulticastAddDevice(mc, 1));
    CHECK(cuMulticastBindMem(mc, 0, a0, 0, SIZE, 1) == INVALID_VALUE);          /* flags */
    CHECK(cuMulticastBindMem(mc, 0, a0, 0, 3 * MiB, 0) == INVALID_VALUE);       /* size */
    CHECK(cuMulticastBindMem(mc, MiB, a0, 0, 2 * MiB, 0) == INVALID_VALUE);     /* mcOffset */
    CHECK(cuMulticastBindMem(mc, 2 * MiB, a1, 0, SIZE, 0) == INVALID_VALUE);    /* past object */
    CHECK(cuMulticastBindMem(mc, 0, a0, 2 * MiB, SIZE, 0) == INVALID_VALUE);    /* past memory */
    CHECK(cuMulticastBindMem(mc, 0, mc, 0, SIZE, 0) == INVALID_VALUE);          /* not memory */
    OK(cuMulticastBindMem(mc, 0, a0, 0, SIZE, 0));
    CHECK(cuMulticastBindMem(mc, 0, a0, 0, SIZE, 0) == INVALID_VALUE); /* bound already */
    /* Device 1 by address: the second half of its allocation. */
    CHECK(cuMulticastBindAddr(mc, 0, v1 + MiB, SIZE, 0) == INVALID_VALUE);
    OK(cuMulticastBindAddr(mc, 0, v1 + SIZE, SIZE, 0));
    /* Memory is bound: the team is complete, no device joins any more. */
    CHECK(cuMulticastAddDevice(mc, 2) == INVALID_VALUE);

    CUdeviceptr v0 = map_rw(a0, SIZE, 0), vm = map_rw(mc, SIZE, 0);
    fill(11, 7);
    OK(cudaMemcpy((void *)vm, host, SIZE, H2D));
    read_back(v0);
    CHECK(memcmp(back, host, SIZE) == 0);
    read_back(v1 + SIZE);
    CHECK(memcmp(back, host, SIZE) == 0);
    read_back(v1); /* the unbound half kept its bytes */
    for (size_t i = 0; i < SIZE; i++) CHECK(back[i] == 0x11);
    OK(cudaMemcpy(back, (void *)(vm + 3 * MiB), 64, D2H)); /* a load through the object */
    CHECK(memcmp(back, host + 3 * MiB, 64) == 0);

    /* Unbinding device 0 (whole bindings only): it keeps what was written, and later stores
     * through the object reach device 1 only. */
    CHECK(cuMulticastUnbind(mc, 0, 0, MiB) == INVALID_VALUE);
    OK(cuMulticastUnbind(mc, 0, 0, SIZE));
    OK(cudaMemset((void *)vm, 0x42, SIZE));
    read_back(v0);
    CHECK(memcmp(back, host, SIZE) == 0);
    read_back(v1 + SIZE);
    CHECK(back[0] == 0x42 && back[SIZE - 1] == 0x42);

    /* The object as a descriptor, imported back: the same memory. */
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, mc, POSIX_FD, 0));
    CUmemGenericAllocationHandle mc2;
    OK(cuMemImportFromShareableHandle(&mc2, (void *)(intptr_t)fd, POSIX_FD));
    close(fd);
    CUdeviceptr vm2 = map_rw(mc2, SIZE, 1);
    OK(cudaMemcpy(back, (void *)(vm2 + 100), 1, D2H));
    CHECK(back[0] == 0x42);
    unmap(vm2, SIZE);
    OK(cuMemRelease(mc2));

    unmap(vm, SIZE);
    unmap(v0, SIZE);
    unmap(v1, 2 * SIZE);
    OK(cuMemRelease(mc)); /* still bound to device 1: lives until a1 goes */
    OK(cuMemRelease(a0));
    OK(cuMemRelease(a1));
    CHECK(vmm_files() == files);
    printf("PASS local\n");
}

static void unsupported(void) {
    int v = -1;
    OK(cuDeviceGetAttribute(&v, MULTICAST_SUPPORTED, 0));
    CHECK(v == 0);
    CUmulticastObjectProp prop = {2, SIZE, 0, 0};
    CUmemGenericAllocationHandle mc;
    size_t g;
    CHECK(cuMulticastCreate(&mc, &prop) == NOT_SUPPORTED);
    CHECK(cuMulticastGetGranularity(&g, &prop, 0) == NOT_SUPPORTED);
    printf("PASS unsupported\n");
}

static void say(int fd, char b) { CHECK(write(fd, &b, 1) == 1); }

static void expect(int fd, char want) {
    char b = 0;
    CHECK(read(fd, &b, 1) == 1 && b == want);
}

/* Runs "member <hex> <in> <out>" as node `node`; gives its pid and the pipes' ends. */
static pid_t start_member(const char *self, const char *hex, int node, int *to, int *from) {
    int down[2], up[2];
    CHECK(pipe(down) == 0 && pipe(up) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        char n[16], r[16], w[16];
        snprintf(n, sizeof n, "%d", node);
        snprintf(r, sizeof r, "%d", down[0]);
        snprintf(w, sizeof w, "%d", up[1]);
        setenv("NCCLSIM_NODE", n, 1);
        execl(self, self, "member", hex, r, w, (char *)NULL);
        _exit(127);
    }
    close(down[0]);
    close(up[1]);
    *to = down[1];
    *from = up[0];
    return pid;
}

static void team(const char *self) {
    CUmulticastObjectProp prop = {2, SIZE, FABRIC, 0};
    CUmemGenericAllocationHandle mc, mem;
    OK(cuMulticastCreate(&mc, &prop));
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, mc, POSIX_FD, 0) != 0); /* fabric only */
    CUmemFabricHandle fh;
    OK(cuMemExportToShareableHandle(&fh, mc, FABRIC, 0));
    char hex[129];
    to_hex(&fh, hex);
    OK(cuMulticastAddDevice(mc, 1));
    int to_a, from_a, to_b, from_b;
    pid_t a = start_member(self, hex, 1, &to_a, &from_a);
    pid_t b = start_member(self, hex, 18, &to_b, &from_b);
    expect(from_b, 'r');
    finish(b);
    CUmemAllocationProp p = prop_on(1, 0);
    OK(cuMemCreate(&mem, SIZE, &p, 0));
    /* Waits until node 1's device joined. */
    OK(cuMulticastBindMem(mc, 0, mem, 0, SIZE, 0));
    CUdeviceptr v = map_rw(mem, SIZE, 1), vm = map_rw(mc, SIZE, 1);
    expect(from_a, 'b'); /* node 1 bound its memory */
    fill(11, 7);
    OK(cudaMemcpy((void *)vm, host, SIZE, H2D));
    read_back(v);
    CHECK(memcmp(back, host, SIZE) == 0);
    say(to_a, 'g');
    expect(from_a, 'w'); /* node 1 saw it in its memory and stored its own */
    fill(5, 3);
    read_back(v);
    CHECK(memcmp(back, host, SIZE) == 0);
    say(to_a, 'q');
    finish(a);
    unmap(vm, SIZE);
    unmap(v, SIZE);
    OK(cuMemRelease(mc));
    OK(cuMemRelease(mem));
    printf("PASS team\n");
}

static void member(const char *hex, int from, int to) {
    CUmemFabricHandle fh;
    from_hex(hex, &fh);
    CUmemGenericAllocationHandle mc, mem;
    int rc = cuMemImportFromShareableHandle(&mc, &fh, FABRIC);
    if (rc == NOT_PERMITTED) {
        /* Another rack's NVLink domain. */
        say(to, 'r');
        printf("PASS refused\n");
        return;
    }
    OK(rc);
    OK(cuMulticastAddDevice(mc, 3));
    CUmemAllocationProp p = prop_on(3, 0);
    OK(cuMemCreate(&mem, SIZE, &p, 0));
    OK(cuMulticastBindMem(mc, 0, mem, 0, SIZE, 0));
    CUdeviceptr v = map_rw(mem, SIZE, 3), vm = map_rw(mc, SIZE, 3);
    say(to, 'b');
    expect(from, 'g');
    fill(11, 7);
    read_back(v);
    CHECK(memcmp(back, host, SIZE) == 0);
    fill(5, 3);
    OK(cudaMemcpy((void *)vm, host, SIZE, H2D));
    say(to, 'w');
    expect(from, 'q');
    unmap(vm, SIZE);
    unmap(v, SIZE);
    OK(cuMemRelease(mem));
    OK(cuMemRelease(mc));
    printf("PASS member\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && strcmp(argv[1], "local") == 0) {
        local();
    } else if (argc >= 2 && strcmp(argv[1], "unsupported") == 0) {
        unsupported();
    } else if (argc >= 2 && strcmp(argv[1], "team") == 0) {
        team(argv[0]);
    } else if (argc >= 5 && strcmp(argv[1], "member") == 0) {
        member(argv[2], atoi(argv[3]), atoi(argv[4]));
    } else {
        fprintf(stderr, "usage: %s local|unsupported|team\n", argv[0]);
        return 2;
    }
    return 0;
}
