/* One rank of a job started by an MPI launcher or srun, set up the way nccl-tests sets up its
 * MPI build (src/common.cu of nccl-tests: getHostName cuts gethostname at the first dot,
 * getHostHash hashes it with /proc/sys/kernel/random/boot_id, ranks exchange the hashes and a
 * rank's GPU is its index among the ranks of the same host; rank 0's ncclGetUniqueId is
 * broadcast).
 *
 *   built with -DUSE_MPI: rank, size, host hashes and the unique id through MPI.
 *   without: rank and size from SLURM_PROCID / SLURM_NTASKS, the GPU from SLURM_LOCALID, and
 *            the unique id from ncclGetUniqueId on every rank with NCCL_COMM_ID set (no MPI).
 *
 * Runs one float AllReduce (sum) of COUNT elements and compares every element with the sum
 * computed here. Prints "ok rank R host H gpu G shm S" on success, S being the number of ranks
 * the runtime moves data to through shared memory (ncclTeamLsa: the ranks of its machine). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nccl.h"
#ifdef USE_MPI
#include <mpi.h>
#endif

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);

/* NCCL's team of ranks (nccl_device.h of NCCL 2.28+: ranks, this rank's index, stride). */
typedef struct {
    int nRanks, rank, stride;
} team_t;
team_t ncclTeamLsa(ncclComm_t comm);

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"

#define COUNT 4096

static void host_name(char *out, size_t len) {
    CHECK(gethostname(out, len) == 0);
    for (size_t i = 0; i < len && out[i]; i++)
        if (out[i] == '.') out[i] = 0;
}

#ifdef USE_MPI
/* djb2 over the host name followed by the boot id, as nccl-tests' getHostHash does. */
static uint64_t host_hash(const char *name) {
    char text[1024];
    snprintf(text, sizeof text, "%s", name);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        size_t off = strlen(text);
        if (fgets(text + off, (int)(sizeof text - off), f) == NULL) text[off] = 0;
        fclose(f);
    }
    uint64_t h = 5381;
    for (const char *c = text; *c; c++) h = ((h << 5) + h) ^ (uint64_t)(unsigned char)*c;
    return h;
}
#endif

static int env_int(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "FAIL %s is not set\n", name);
        exit(1);
    }
    return atoi(v);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    int rank, size, gpu;
    char host[256];
    host_name(host, sizeof host);
    ncclUniqueId id;
#ifdef USE_MPI
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *hashes = calloc((size_t)size, sizeof *hashes);
    CHECK(hashes != NULL);
    hashes[rank] = host_hash(host);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes, sizeof(uint64_t), MPI_BYTE,
                  MPI_COMM_WORLD);
    gpu = 0;
    for (int p = 0; p < rank; p++)
        if (hashes[p] == hashes[rank]) gpu++;
    free(hashes);
    if (rank == 0) OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
    rank = env_int("SLURM_PROCID");
    size = env_int("SLURM_NTASKS");
    gpu = env_int("SLURM_LOCALID");
    OK(ncclGetUniqueId(&id));
#endif
    OK(cudaSetDevice(gpu));
    ncclComm_t comm;
    OK(ncclCommInitRank(&comm, size, id, rank));
    void *stream;
    OK(cudaStreamCreate(&stream));
    float *h = malloc(COUNT * sizeof *h);
    CHECK(h != NULL);
    for (int i = 0; i < COUNT; i++) h[i] = (float)((rank + 1) * (i % 7 + 1));
    void *d;
    OK(cudaMalloc(&d, COUNT * sizeof *h));
    OK(cudaMemcpy(d, h, COUNT * sizeof *h, 1));
    OK(ncclAllReduce(d, d, COUNT, ncclFloat, ncclSum, comm, stream));
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemcpy(h, d, COUNT * sizeof *h, 2));
    float ranks_sum = (float)size * (float)(size + 1) / 2.0f;
    for (int i = 0; i < COUNT; i++) {
        float want = ranks_sum * (float)(i % 7 + 1);
        if (h[i] != want) {
            fprintf(stderr, "FAIL rank %d element %d: %g, want %g\n", rank, i, h[i], want);
            exit(1);
        }
    }
    int shm = ncclTeamLsa(comm).nRanks;
    OK(ncclCommDestroy(comm));
    OK(cudaFree(d));
    free(h);
    printf("ok rank %d host %s gpu %d shm %d\n", rank, host, gpu, shm);
    fflush(stdout);
#ifdef USE_MPI
    MPI_Finalize();
#endif
    return 0;
}
