/* Fabric handles between simulated nodes of one NVLink domain, from C: linked against
 * libcuda.so.1 and libcudart.so.12 by their real names, run with NCCLSIM_TOPO set to the GB200
 * tray. Scenarios (argv[1]):
 *   export    on node 0 (NCCLSIM_NODE): creates an allocation with CU_MEM_HANDLE_TYPE_FABRIC,
 *             fills it, exports its 64-byte fabric handle, and starts this program as
 *             "import <hex handle> <pipe fd>" on node 1 (same rack) and on node 18 (the next
 *             rack); the handle travels as text, no descriptor is passed.
 *   import    maps the allocation, checks the exporter's data and writes its own (same rack),
 *             or checks the import is refused with CUDA_ERROR_NOT_PERMITTED (other rack). */
#define _GNU_SOURCE
#include "cuda_vmm.h"
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#define SIZE (4 * MiB)

/* Runs "import <hex> <pipe>" as node `node`; returns the pid and the pipe's read end. */
static pid_t start_importer(const char *self, const char *hex, int node, int *from) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        char n[16], w[16];
        snprintf(n, sizeof n, "%d", node);
        snprintf(w, sizeof w, "%d", p[1]);
        setenv("NCCLSIM_NODE", n, 1);
        execl(self, self, "import", hex, w, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *from = p[0];
    return pid;
}

static void export_(const char *self) {
    CUmemAllocationProp fab = prop_on(2, FABRIC);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, SIZE, &fab, 0));
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.requestedHandleTypes == FABRIC && got.location.id == 2);
    /* Asked for fabric handles only: no descriptor. */
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0) != 0);
    CUdeviceptr va = map_rw(h, SIZE, 2);
    static unsigned char host[SIZE], back[SIZE];
    for (size_t i = 0; i < SIZE; i++) host[i] = (unsigned char)(i * 13 + 1);
    OK(cudaMemcpy((void *)va, host, SIZE, H2D));

    CUmemFabricHandle fh, again;
    OK(cuMemExportToShareableHandle(&fh, h, FABRIC, 0));
    OK(cuMemExportToShareableHandle(&again, h, FABRIC, 0));
    CHECK(memcmp(&fh, &again, sizeof fh) == 0);
    /* The exporter itself can import its handle. */
    CUmemGenericAllocationHandle self_h;
    OK(cuMemImportFromShareableHandle(&self_h, &fh, FABRIC));
    OK(cuMemRelease(self_h));
    /* An allocation without the fabric type has no fabric handle. */
    CUmemAllocationProp plain = prop_on(2, POSIX_FD);
    CUmemGenericAllocationHandle hp;
    OK(cuMemCreate(&hp, 2 * MiB, &plain, 0));
    CHECK(cuMemExportToShareableHandle(&again, hp, FABRIC, 0) != 0);
    OK(cuMemRelease(hp));
    /* Bytes that are not a handle are refused. */
    memset(&again, 0x5a, sizeof again);
    CHECK(cuMemImportFromShareableHandle(&hp, &again, FABRIC) != 0);
    CHECK(cuMemImportFromShareableHandle(&hp, NULL, FABRIC) != 0);

    char hex[129];
    to_hex(&fh, hex);
    int same, other;
    pid_t a = start_importer(self, hex, 1, &same);
    pid_t b = start_importer(self, hex, 18, &other);
    char byte = 0;
    CHECK(read(same, &byte, 1) == 1 && byte == 'w');
    CHECK(read(other, &byte, 1) == 1 && byte == 'r');
    finish(a);
    finish(b);
    OK(cudaMemcpy(back, (void *)va, SIZE, D2H));
    for (size_t i = 0; i < 16; i++) CHECK(back[i] == 0xc3);
    for (size_t i = 16; i < SIZE; i++) CHECK(back[i] == host[i]);
    OK(cuMemUnmap(va, SIZE));
    OK(cuMemAddressFree(va, SIZE));
    OK(cuMemRelease(h));
    /* Released: the handle no longer reaches anything. */
    CHECK(cuMemImportFromShareableHandle(&hp, &fh, FABRIC) != 0);
    printf("PASS export\n");
}

static void import_(const char *hex, int to) {
    CUmemFabricHandle fh;
    from_hex(hex, &fh);
    CUmemGenericAllocationHandle h;
    int rc = cuMemImportFromShareableHandle(&h, &fh, FABRIC);
    if (rc == NOT_PERMITTED) {
        /* Another rack's NVLink domain. */
        CHECK(write(to, "r", 1) == 1);
        printf("PASS refused\n");
        return;
    }
    OK(rc);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.requestedHandleTypes == FABRIC && got.location.id == 2);
    CUdeviceptr va = map_rw(h, SIZE, 2);
    static unsigned char back[SIZE];
    OK(cudaMemcpy(back, (void *)va, SIZE, D2H));
    for (size_t i = 0; i < SIZE; i++) CHECK(back[i] == (unsigned char)(i * 13 + 1));
    OK(cudaMemset((void *)va, 0xc3, 16));
    OK(cuMemUnmap(va, SIZE));
    OK(cuMemAddressFree(va, SIZE));
    OK(cuMemRelease(h));
    CHECK(write(to, "w", 1) == 1);
    printf("PASS import\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && strcmp(argv[1], "export") == 0) {
        export_(argv[0]);
    } else if (argc >= 4 && strcmp(argv[1], "import") == 0) {
        import_(argv[2], atoi(argv[3]));
    } else {
        fprintf(stderr, "usage: %s export\n", argv[0]);
        return 2;
    }
    return 0;
}
