/* One rank of a host AllReduce benchmark over ncclsim's libnccl.so.2 (float sum, out of
 * place). Usage: nccl_allreduce RANK NRANKS IDFILE BYTES ITERS. Rank 0 prints the mean seconds
 * per AllReduce over ITERS after one warm-up, measured between two barriers (a 1-element
 * AllReduce). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaMemset(void *, int, size_t);
int cudaStreamSynchronize(void *);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define OK(x) do { int e_ = (x); if (e_) { fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

int main(int argc, char **argv) {
    if (argc < 6) return 2;
    int r = atoi(argv[1]), n = atoi(argv[2]);
    size_t bytes = (size_t)atoll(argv[4]);
    long iters = atol(argv[5]);
    OK(cudaSetDevice(r % 8));
    ncclUniqueId id;
    if (r == 0) {
        OK(ncclGetUniqueId(&id));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[3]);
        FILE *f = fopen(tmp, "wb");
        fwrite(&id, sizeof id, 1, f);
        fclose(f);
        rename(tmp, argv[3]);
    } else {
        for (;;) {
            FILE *f = fopen(argv[3], "rb");
            if (f && fread(&id, sizeof id, 1, f) == 1) { fclose(f); break; }
            if (f) fclose(f);
            usleep(5000);
        }
    }
    ncclComm_t comm;
    OK(ncclCommInitRank(&comm, n, id, r));
    size_t count = bytes / 4 ? bytes / 4 : 1;
    void *s, *d, *b;
    OK(cudaMalloc(&s, count * 4));
    OK(cudaMalloc(&d, count * 4));
    OK(cudaMalloc(&b, 4));
    OK(cudaMemset(s, 0, count * 4));
    OK(cudaMemset(d, 0, count * 4));
    OK(ncclAllReduce(s, d, count, ncclFloat, ncclSum, comm, NULL));
    OK(ncclAllReduce(b, b, 1, ncclFloat, ncclSum, comm, NULL));
    double t0 = now();
    for (long i = 0; i < iters; i++) OK(ncclAllReduce(s, d, count, ncclFloat, ncclSum, comm, NULL));
    OK(ncclAllReduce(b, b, 1, ncclFloat, ncclSum, comm, NULL));
    double t = (now() - t0) / iters;
    if (r == 0) printf("%.9f\n", t);
    OK(ncclCommDestroy(comm));
    return 0;
}
