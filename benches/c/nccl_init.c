/* Communicator creation time with ranks as processes: ncclCommInitRank of NRANKS processes
 * and ncclCommSplit of that world into TP=8 and DP=NRANKS/8 groups (two splits).
 * Usage: nccl_init RANK NRANKS IDFILE. Every rank polls for the id file (rank 0 writes it with
 * the start time once all ranks have announced themselves), so init is timed from a common
 * start to the slowest rank's end; rank 0 prints "init_s split_s". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaMemcpy(void *, const void *, size_t, int);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define OK(x) do { int e_ = (x); if (e_) { fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

struct start { ncclUniqueId id; double t0; };

static double slowest(ncclComm_t comm, double mine) {
    double *d;
    OK(cudaMalloc((void **)&d, sizeof(double)));
    OK(cudaMemcpy(d, &mine, sizeof mine, 1));
    OK(ncclAllReduce(d, d, 1, ncclDouble, ncclMax, comm, NULL));
    OK(cudaMemcpy(&mine, d, sizeof mine, 2));
    return mine;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int r = atoi(argv[1]), n = atoi(argv[2]);
    char path[4096];
    OK(cudaSetDevice(r % 8));
    struct start st;
    if (r == 0) {
        for (int q = 1; q < n; q++) {
            snprintf(path, sizeof path, "%s.ready%d", argv[3], q);
            while (access(path, F_OK) != 0) usleep(1000);
            unlink(path);
        }
        OK(ncclGetUniqueId(&st.id));
        st.t0 = now();
        snprintf(path, sizeof path, "%s.tmp", argv[3]);
        FILE *f = fopen(path, "wb");
        fwrite(&st, sizeof st, 1, f);
        fclose(f);
        rename(path, argv[3]);
    } else {
        snprintf(path, sizeof path, "%s.ready%d", argv[3], r);
        FILE *f = fopen(path, "w");
        fclose(f);
        for (;;) {
            f = fopen(argv[3], "rb");
            if (f && fread(&st, sizeof st, 1, f) == 1) { fclose(f); break; }
            if (f) fclose(f);
            usleep(200);
        }
    }
    ncclComm_t world, tp, dp;
    OK(ncclCommInitRank(&world, n, st.id, r));
    double init = slowest(world, now() - st.t0);
    double t1 = now();
    OK(ncclCommSplit(world, r / 8, r, &tp, NULL));
    OK(ncclCommSplit(world, r % 8, r, &dp, NULL));
    double split = slowest(world, now() - t1);
    if (r == 0) { printf("%.9f %.9f\n", init, split); unlink(argv[3]); }
    OK(ncclCommDestroy(dp));
    OK(ncclCommDestroy(tp));
    OK(ncclCommDestroy(world));
    return 0;
}
