/* Soak: one rank of a TP=8 x DP job running ITERS steps, each step a TP AllReduce, a TP
 * AllGather, a DP ReduceScatter and a grouped send/receive with both neighbours of the world
 * ring, then one more step on known inputs whose results are checked. The rank reports its
 * resident memory, descriptors and threads after steps 1, 10, 100 and ITERS.
 *
 * Usage: nccl_soak RANK NRANKS IDFILE ITERS
 * Prints: "soak rank R rss_kb S1 S10 S100 SLAST fds (4 samples) threads (4 samples) wall_s S" */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);

#define OK(x) do { int e_ = (x); if (e_) { fprintf(stderr, "%s:%d: %s -> %d %s\n", __FILE__, __LINE__, #x, e_, ncclGetLastError(NULL)); exit(1); } } while (0)
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f);
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    fclose(f);
    return kb;
}

struct sample { long rss; int fds, threads; };

static struct sample sample(void) {
    struct sample s = { rss_kb(), entries("/proc/self/fd"), entries("/proc/self/task") };
    return s;
}

static void read_id(const char *path, ncclUniqueId *id) {
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t n = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (n == 1) return;
        }
        usleep(1000);
    }
}

enum { AR = 1 << 16, AG = 1 << 14, RS = 1 << 16, P2P = 1 << 14 };

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int r = atoi(argv[1]), n = atoi(argv[2]), iters = atoi(argv[4]);
    CHECK(n % 8 == 0 && iters >= 100);
    OK(cudaSetDevice(r % 8));
    ncclUniqueId id;
    if (r == 0) {
        char tmp[4096];
        OK(ncclGetUniqueId(&id));
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[3]);
        FILE *f = fopen(tmp, "wb");
        CHECK(f && fwrite(&id, sizeof id, 1, f) == 1);
        fclose(f);
        CHECK(rename(tmp, argv[3]) == 0);
    } else {
        read_id(argv[3], &id);
    }
    ncclComm_t world, tp, dp;
    OK(ncclCommInitRank(&world, n, id, r));
    OK(ncclCommSplit(world, r / 8, r, &tp, NULL));
    OK(ncclCommSplit(world, r % 8, r, &dp, NULL));
    int dpn = n / 8;
    void *stream;
    OK(cudaStreamCreate(&stream));
    float *ar, *ag_in, *ag_out, *rs_in, *rs_out, *p_send, *p_next, *p_prev;
    OK(cudaMalloc((void **)&ar, AR * 4));
    OK(cudaMalloc((void **)&ag_in, AG * 4));
    OK(cudaMalloc((void **)&ag_out, (size_t)AG * 8 * 4));
    OK(cudaMalloc((void **)&rs_in, RS * 4));
    OK(cudaMalloc((void **)&rs_out, RS / dpn * 4));
    OK(cudaMalloc((void **)&p_send, P2P * 4));
    OK(cudaMalloc((void **)&p_next, P2P * 4));
    OK(cudaMalloc((void **)&p_prev, P2P * 4));
    size_t hbytes = (size_t)AG * 8 * 4 > RS * 4 ? (size_t)AG * 8 * 4 : RS * 4;
    float *h = malloc(hbytes);
    CHECK(h);
    memset(h, 0, hbytes);
    struct sample at[4];
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    double t0 = now();
    for (int it = 1; it <= iters + 1; it++) {
        if (it == iters + 1) {
            /* Known inputs for the checked step. */
            for (int i = 0; i < AR; i++) h[i] = (float)(r + 1);
            OK(cudaMemcpy(ar, h, AR * 4, 1));
            for (int i = 0; i < AG; i++) h[i] = (float)r;
            OK(cudaMemcpy(ag_in, h, AG * 4, 1));
            for (int i = 0; i < RS; i++) h[i] = 1.0f;
            OK(cudaMemcpy(rs_in, h, RS * 4, 1));
            for (int i = 0; i < P2P; i++) h[i] = (float)r;
            OK(cudaMemcpy(p_send, h, P2P * 4, 1));
        }
        OK(ncclAllReduce(ar, ar, AR, ncclFloat, ncclSum, tp, stream));
        OK(ncclAllGather(ag_in, ag_out, AG, ncclFloat, tp, stream));
        OK(ncclReduceScatter(rs_in, rs_out, RS / dpn, ncclFloat, ncclSum, dp, stream));
        OK(ncclGroupStart());
        OK(ncclSend(p_send, P2P, ncclFloat, next, world, stream));
        OK(ncclSend(p_send, P2P, ncclFloat, prev, world, stream));
        OK(ncclRecv(p_prev, P2P, ncclFloat, prev, world, stream));
        OK(ncclRecv(p_next, P2P, ncclFloat, next, world, stream));
        OK(ncclGroupEnd());
        OK(cudaStreamSynchronize(stream));
        if (it == 1) at[0] = sample();
        if (it == 10) at[1] = sample();
        if (it == 100) at[2] = sample();
        if (it == iters) at[3] = sample();
    }
    double wall = now() - t0;
    /* The checked step: TP sum of rank+1 over the TP group, gathered ranks, DP sums of ones,
     * neighbours' ranks. */
    int base = r / 8 * 8;
    float tp_sum = 0;
    for (int q = base; q < base + 8; q++) tp_sum += (float)(q + 1);
    OK(cudaMemcpy(h, ar, AR * 4, 2));
    for (int i = 0; i < AR; i++) CHECK(h[i] == tp_sum);
    OK(cudaMemcpy(h, ag_out, (size_t)AG * 8 * 4, 2));
    for (int i = 0; i < AG * 8; i++) CHECK(h[i] == (float)(base + i / AG));
    OK(cudaMemcpy(h, rs_out, RS / dpn * 4, 2));
    for (int i = 0; i < RS / dpn; i++) CHECK(h[i] == (float)dpn);
    OK(cudaMemcpy(h, p_next, P2P * 4, 2));
    for (int i = 0; i < P2P; i++) CHECK(h[i] == (float)next);
    OK(cudaMemcpy(h, p_prev, P2P * 4, 2));
    for (int i = 0; i < P2P; i++) CHECK(h[i] == (float)prev);
    printf("soak rank %d rss_kb %ld %ld %ld %ld fds %d %d %d %d threads %d %d %d %d wall_s %.3f\n", r,
           at[0].rss, at[1].rss, at[2].rss, at[3].rss, at[0].fds, at[1].fds, at[2].fds, at[3].fds,
           at[0].threads, at[1].threads, at[2].threads, at[3].threads, wall);
    OK(ncclCommDestroy(dp));
    OK(ncclCommDestroy(tp));
    OK(ncclCommDestroy(world));
    free(h);
    if (r == 0) unlink(argv[3]);
    return 0;
}
