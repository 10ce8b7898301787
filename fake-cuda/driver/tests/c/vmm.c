/* The driver's virtual memory management API over the fake CUDA core, from C: linked against
 * libcuda.so.1 and libcudart.so.12 by their real names. Scenarios (argv[1]):
 *   local     create/reserve/map/access/copy/fill/unmap/free, granularity, address ranges,
 *             out of memory, stale and unmapped pointers, torch's driver table lookups;
 *   share     exports an allocation as a file descriptor, starts this program again as
 *             "import <socket fd>", passes the descriptor over a UNIX socket (SCM_RIGHTS), and
 *             checks both processes see each other's writes and nothing else is reachable. */
#define _GNU_SOURCE
#include "cuda_vmm.h"
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

/* The driver table torch 2.15 requires (c10/cuda/driver_api.h; the names in libc10_cuda.so),
 * looked up as torch does, at CUDA 12.0. */
static const char *TORCH_TABLE[] = {
    "cuDeviceGet", "cuDeviceGetAttribute", "cuMemAddressReserve", "cuMemRelease", "cuMemMap",
    "cuMemAddressFree", "cuMemSetAccess", "cuMemUnmap", "cuMemCreate",
    "cuMemGetAllocationGranularity", "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle", "cuMemsetD32Async", "cuStreamWriteValue32",
    "cuGetErrorString", "cuMemGetAddressRange", "cuMemRetainAllocationHandle",
    "cuMemGetAllocationPropertiesFromHandle",
};

static void local(void) {
    size_t gran = 0, gran_rec = 0;
    CUmemAllocationProp prop = prop_on(0, 0);
    OK(cuMemGetAllocationGranularity(&gran, &prop, 0));
    OK(cuMemGetAllocationGranularity(&gran_rec, &prop, 1));
    CHECK(gran == 2 * MiB && gran_rec == 2 * MiB);
    int vmm = 0, posix = 0;
    OK(cuDeviceGetAttribute(&vmm, 102, 0));
    OK(cuDeviceGetAttribute(&posix, 103, 0));
    CHECK(vmm == 1 && posix == 1);

    for (size_t i = 0; i < sizeof TORCH_TABLE / sizeof *TORCH_TABLE; i++) {
        void *fn = NULL;
        int status = -1;
        OK(cudaGetDriverEntryPointByVersion(TORCH_TABLE[i], &fn, 12000, 0, &status));
        CHECK(fn != NULL && status == 0);
    }

    size_t free0, total;
    OK(cudaMemGetInfo(&free0, &total));
    CUmemGenericAllocationHandle h, h2;
    CHECK(cuMemCreate(&h, 3 * MiB, &prop, 0) != 0); /* not a multiple of the granularity */
    OK(cuMemCreate(&h, 8 * MiB, &prop, 0));
    size_t free1;
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 8 * MiB);

    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 32 * MiB, 0, 0, 0));
    CHECK(va % (2 * MiB) == 0);
    OK(cuMemMap(va, 4 * MiB, 0, h, 0));
    OK(cuMemMap(va + 4 * MiB, 4 * MiB, 4 * MiB, h, 0));
    CHECK(cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0) != 0); /* overlaps */
    CHECK(cuMemMap(va + 30 * MiB, 4 * MiB, 0, h, 0) != 0); /* runs out of the reservation */

    /* Mapped but not yet accessible: an error, not a fault. */
    static unsigned char host[8 << 20], back[8 << 20];
    memset(host, 0x5a, sizeof host);
    CHECK(cudaMemcpy((void *)va, host, 64, H2D) != 0);
    cudaGetLastError();
    CUmemAccessDesc rw = access_for(0, READWRITE);
    OK(cuMemSetAccess(va, 8 * MiB, &rw, 1));
    unsigned long long flags = 0;
    CUmemLocation dev0 = {1, 0}, dev1 = {1, 1};
    OK(cuMemGetAccess(&flags, &dev0, va + 100));
    CHECK(flags == READWRITE);
    OK(cuMemGetAccess(&flags, &dev1, va + 100));
    CHECK(flags == 0);

    /* Copies across the two mappings, like cudaMalloc'd memory. */
    OK(cudaMemcpy((void *)(va + 1 * MiB), host, 6 * MiB, H2D));
    OK(cudaMemcpy(back, (void *)(va + 1 * MiB), 6 * MiB, D2H));
    CHECK(memcmp(back, host, 6 * MiB) == 0);
    void *dbuf;
    OK(cudaMalloc(&dbuf, 1 * MiB));
    OK(cudaMemcpy(dbuf, (void *)(va + 1 * MiB), 1 * MiB, D2D));
    OK(cudaMemset((void *)va, 0x11, 16));
    OK(cuMemsetD32Async(va + 16, 0xdeadbeef, 2, NULL));
    OK(cuMemsetD16_v2(va + 24, 0x1234, 1));
    OK(cuStreamWriteValue32(NULL, va + 28, 0x01020304, 0));
    OK(cuStreamWriteValue64(NULL, va + 32, 0x1122334455667788ULL, 0));
    OK(cudaStreamSynchronize(NULL));
    OK(cudaMemcpy(back, (void *)va, 40, D2H));
    CHECK(back[0] == 0x11 && back[15] == 0x11);
    CHECK(*(uint32_t *)(back + 16) == 0xdeadbeef && *(uint32_t *)(back + 20) == 0xdeadbeef);
    CHECK(*(uint16_t *)(back + 24) == 0x1234);
    CHECK(*(uint32_t *)(back + 28) == 0x01020304);
    CHECK(*(uint64_t *)(back + 32) == 0x1122334455667788ULL);
    CHECK(cuMemsetD32Async(va + 2, 1, 1, NULL) != 0); /* misaligned */

    /* The core knows mapped memory as device memory of device 0. */
    pointer_attributes_t attr;
    OK(cudaPointerGetAttributes(&attr, (void *)(va + 5 * MiB)));
    CHECK(attr.type == 2 && attr.device == 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    OK(cuMemGetAddressRange_v2(&base, &size, va + 5 * MiB));
    CHECK(base == va + 4 * MiB && size == 4 * MiB);
    OK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)dbuf + 4000));
    CHECK(base == (CUdeviceptr)dbuf && size == 1 * MiB);
    CHECK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)host) != 0);

    /* Handles: retain, properties, release while mapped. */
    OK(cuMemRetainAllocationHandle(&h2, (void *)(va + 5 * MiB)));
    CHECK(h2 == h);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.type == 1 && got.location.type == 1 && got.location.id == 0);
    OK(cuMemRelease(h2));
    OK(cuMemRelease(h));
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h) != 0);
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 8 * MiB + 1 * MiB); /* still mapped: still allocated */
    int fd = -1;
    OK(cuMemCreate(&h2, 2 * MiB, &prop, 0));
    CHECK(cuMemExportToShareableHandle(&fd, h2, POSIX_FD, 0) != 0); /* not exportable */
    OK(cuMemRelease(h2));

    /* Read-only access refuses writes. */
    CUmemAccessDesc ro = access_for(0, READ);
    OK(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &ro, 1));
    OK(cudaMemcpy(back, (void *)(va + 4 * MiB), 64, D2H));
    CHECK(cudaMemcpy((void *)(va + 4 * MiB), host, 64, H2D) != 0);
    cudaGetLastError();

    /* Unmapping gives the memory back; the addresses are unreachable, not a fault. */
    CHECK(cuMemAddressFree(va, 32 * MiB) != 0); /* mappings left */
    CHECK(cuMemUnmap(va, 2 * MiB) != 0);        /* cuts a mapping */
    OK(cuMemUnmap(va, 8 * MiB));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 1 * MiB);
    CHECK(cudaMemcpy(back, (void *)va, 64, D2H) != 0);
    cudaGetLastError();
    CHECK(cudaMemcpy((void *)(va + 8 * MiB), host, 64, DEFAULT_KIND) != 0);
    cudaGetLastError();
    OK(cuMemAddressFree(va, 32 * MiB));
    CHECK(cudaMemcpy(back, (void *)va, 64, D2H) != 0);
    cudaGetLastError();
    CHECK(cuMemUnmap(va, 8 * MiB) != 0);

    /* Out of memory: allocations and cudaMalloc share the 40 GiB device. */
    CHECK(total == 40 * GiB);
    CHECK(cuMemCreate(&h, 41 * GiB, &prop, 0) == OUT_OF_MEMORY);
    OK(cuMemCreate(&h, 39 * GiB, &prop, 0));
    void *big;
    CHECK(cudaMalloc(&big, 1 * GiB) != 0);
    cudaGetLastError();
    OK(cuMemRelease(h));
    OK(cudaMalloc(&big, 1 * GiB));
    OK(cudaFree(big));
    OK(cudaFree(dbuf));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    printf("PASS local\n");
}

static void send_fd(int sock, int fd) {
    char byte = 'f';
    struct iovec iov = {&byte, 1};
    char ctrl[CMSG_SPACE(sizeof(int))];
    memset(ctrl, 0, sizeof ctrl);
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    CHECK(sendmsg(sock, &msg, 0) == 1);
}

static int recv_fd(int sock) {
    char byte;
    struct iovec iov = {&byte, 1};
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    CHECK(recvmsg(sock, &msg, 0) == 1);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    CHECK(c != NULL && c->cmsg_type == SCM_RIGHTS);
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static void wait_byte(int sock, char want) {
    char b = 0;
    CHECK(read(sock, &b, 1) == 1 && b == want);
}

static void say(int sock, char b) { CHECK(write(sock, &b, 1) == 1); }

static void share(const char *self) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(fcntl(sv[0], F_SETFD, FD_CLOEXEC) == 0);
    /* A secret the importer must never reach: a private allocation and cudaMalloc memory. */
    CUmemAllocationProp priv = prop_on(1, 0), pub = prop_on(1, POSIX_FD);
    CUmemGenericAllocationHandle hs, h;
    OK(cuMemCreate(&hs, 2 * MiB, &priv, 0));
    CUdeviceptr secret = map_rw(hs, 2 * MiB, 1);
    OK(cudaMemset((void *)secret, 0x77, 2 * MiB));

    OK(cuMemCreate(&h, 4 * MiB, &pub, 0));
    CUdeviceptr va = map_rw(h, 4 * MiB, 1);
    static unsigned char host[4 << 20], back[4 << 20];
    for (size_t i = 0; i < sizeof host; i++) host[i] = (unsigned char)(i * 7);
    OK(cudaMemcpy((void *)va, host, sizeof host, H2D));
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0));
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && (size_t)st.st_size <= 4 * MiB + 4096);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", sv[1]);
        execl(self, self, "import", arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    send_fd(sv[0], fd);
    close(fd);
    wait_byte(sv[0], 'w'); /* the importer read our data and wrote its own */
    OK(cudaMemcpy(back, (void *)va, 16, D2H));
    for (int i = 0; i < 16; i++) CHECK(back[i] == 0xa5);
    OK(cudaMemcpy(back, (void *)secret, 16, D2H));
    CHECK(back[0] == 0x77 && back[15] == 0x77);
    /* The owner releases and unmaps while the importer still maps: its memory stays valid. */
    OK(cuMemUnmap(va, 4 * MiB));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 4 * MiB));
    say(sv[0], 'r');
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("PASS share\n");
}

static void import(int sock) {
    /* Nothing of the owner's memory came with the process: only what it sends. */
    CHECK(memory_files("/memfd:ncclsim") == 0);
    int fd = recv_fd(sock);
    CHECK(memory_files("/memfd:ncclsim") == 1);
    CUmemGenericAllocationHandle h, bad;
    OK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, POSIX_FD));
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.location.id == 1);
    /* Only the exported allocation: nothing past its end can be mapped. */
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(cuMemMap(va, 6 * MiB, 0, h, 0) != 0);
    CHECK(cuMemMap(va, 2 * MiB, 4 * MiB, h, 0) != 0);
    OK(cuMemMap(va, 4 * MiB, 0, h, 0));
    CUmemAccessDesc rw = access_for(1, READWRITE);
    OK(cuMemSetAccess(va, 4 * MiB, &rw, 1));
    static unsigned char back[4 << 20];
    OK(cudaMemcpy(back, (void *)va, sizeof back, D2H));
    for (size_t i = 0; i < sizeof back; i++) CHECK(back[i] == (unsigned char)(i * 7));
    OK(cudaMemset((void *)va, 0xa5, 16));
    /* Descriptors that are not exported allocations are refused. */
    int maps = open("/proc/self/maps", O_RDONLY);
    CHECK(cuMemImportFromShareableHandle(&bad, (void *)(intptr_t)maps, POSIX_FD) != 0);
    CHECK(cuMemImportFromShareableHandle(&bad, (void *)(intptr_t)-1, POSIX_FD) != 0);
    CHECK(cuMemImportFromShareableHandle(&bad, (void *)(intptr_t)9999, POSIX_FD) != 0);
    close(maps);
    close(fd); /* the handle keeps the memory */
    say(sock, 'w');
    wait_byte(sock, 'r');
    /* The owner let go; this process's mapping still holds the memory. */
    OK(cudaMemcpy(back, (void *)va, 16, D2H));
    for (int i = 0; i < 16; i++) CHECK(back[i] == 0xa5);
    OK(cuMemUnmap(va, 4 * MiB));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 8 * MiB));
    CHECK(cudaMemcpy(back, (void *)va, 16, D2H) != 0);
    printf("PASS import\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && strcmp(argv[1], "local") == 0) {
        local();
    } else if (argc >= 2 && strcmp(argv[1], "share") == 0) {
        share(argv[0]);
    } else if (argc >= 3 && strcmp(argv[1], "import") == 0) {
        import(atoi(argv[2]));
    } else {
        fprintf(stderr, "usage: %s local | share\n", argv[0]);
        return 2;
    }
    return 0;
}
