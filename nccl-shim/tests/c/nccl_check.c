/* Exercises ncclsim's libnccl.so.2 from C, linked by its real name next to libcudart.so.12.
 *
 *   nccl_check threads N            one process, ncclCommInitAll over N devices, grouped ops
 *   nccl_check rank R N IDFILE      one rank of N processes; rank 0 writes the unique id
 *   nccl_check tpdp R IDFILE        one rank of 16 (2 nodes x 8 GPUs): world, TP=8, DP=2
 *   nccl_check nonblocking R N IDFILE   non-blocking init polled to completion, then checks
 *   nccl_check envchange 1          the program sets NCCLSIM_NODE to a bad value after CUDA
 *                                   started; libnccl.so.2 still sees the job the core sees
 *
 * Every result is compared with a reference computed here in rank order; prints "ok ..." lines. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);
int cudaStreamBeginCapture(void *, int);
int cudaStreamEndCapture(void *, void **);
int cudaGraphInstantiate(void **, void *, unsigned long long);
int cudaGraphLaunch(void *, void *);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
int cudaEventCreate(void **);
int cudaEventRecord(void *, void *);
int cudaEventElapsedTime(float *, void *, void *);
int cudaProfilerStart(void);
int cudaProfilerStop(void);
const char *cudaGetErrorName(int);

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"
#include "unique_id_file.h"

#define H2D 1
#define D2H 2

static void *dalloc(size_t bytes) {
    void *p = NULL;
    OK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static void put(void *d, const void *h, size_t bytes) { OK(cudaMemcpy(d, h, bytes, H2D)); }
static void get(void *h, const void *d, size_t bytes) { OK(cudaMemcpy(h, d, bytes, D2H)); }

/* Input of rank r at element i: small integers so every sum is exact in float. */
static float val(int r, size_t i) { return (float)((r + 1) * (int)(i % 5 + 1)); }

static void fill(float *h, int r, size_t n, size_t base) {
    for (size_t i = 0; i < n; i++) h[i] = val(r, base + i);
}

static void expect(const float *got, const float *want, size_t n, const char *what, int rank) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "FAIL rank %d %s: element %zu is %g, expected %g\n", rank, what, i, got[i], want[i]);
            exit(1);
        }
    }
}

/* One rank's side of every collective on `comm` (nranks N), count elements. */
static void collectives(ncclComm_t comm, int r, int N, size_t count, void *stream) {
    size_t b = count * sizeof(float);
    float *h = malloc(b * N + 64), *w = malloc(b * N + 64), *g = malloc(b * N + 64);
    float *s = dalloc(b * N), *d = dalloc(b * N);

    /* AllReduce sum, out of place and in place. */
    fill(h, r, count, 0);
    put(s, h, b);
    OK(ncclAllReduce(s, d, count, ncclFloat, ncclSum, comm, stream));
    OK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i); w[i] = a; }
    get(g, d, b); expect(g, w, count, "allreduce sum", r);
    OK(ncclAllReduce(s, s, count, ncclFloat, ncclSum, comm, stream));
    get(g, s, b); expect(g, w, count, "allreduce sum in place", r);

    /* Max, min, avg. */
    put(s, h, b);
    OK(ncclAllReduce(s, d, count, ncclFloat, ncclMax, comm, stream));
    for (size_t i = 0; i < count; i++) w[i] = val(N - 1, i);
    get(g, d, b); expect(g, w, count, "allreduce max", r);
    OK(ncclAllReduce(s, d, count, ncclFloat, ncclMin, comm, stream));
    for (size_t i = 0; i < count; i++) w[i] = val(0, i);
    get(g, d, b); expect(g, w, count, "allreduce min", r);
    OK(ncclAllReduce(s, d, count, ncclFloat, ncclAvg, comm, stream));
    for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i) * (1.0f / N); w[i] = a; }
    get(g, d, b); expect(g, w, count, "allreduce avg", r);

    /* PreMulSum with a host scalar (2.0): twice the sum. */
    ncclRedOp_t pm;
    float two = 2.0f;
    OK(ncclRedOpCreatePreMulSum(&pm, &two, ncclFloat, ncclScalarHostImmediate, comm));
    OK(ncclAllReduce(s, d, count, ncclFloat, pm, comm, stream));
    for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i) * 2.0f; w[i] = a; }
    get(g, d, b); expect(g, w, count, "allreduce premulsum", r);
    OK(ncclRedOpDestroy(pm, comm));

    /* Reduce to the last rank. */
    OK(ncclReduce(s, d, count, ncclFloat, ncclSum, N - 1, comm, stream));
    if (r == N - 1) {
        for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i); w[i] = a; }
        get(g, d, b); expect(g, w, count, "reduce", r);
    }

    /* Broadcast from rank 1 % N, and Bcast in place from rank 0. */
    int root = 1 % N;
    OK(ncclBroadcast(s, d, count, ncclFloat, root, comm, stream));
    fill(w, root, count, 0);
    get(g, d, b); expect(g, w, count, "broadcast", r);
    put(d, h, b);
    OK(ncclBcast(d, count, ncclFloat, 0, comm, stream));
    fill(w, 0, count, 0);
    get(g, d, b); expect(g, w, count, "bcast", r);

    /* AllGather: block q is rank q's input. */
    OK(ncclAllGather(s, d, count, ncclFloat, comm, stream));
    for (int q = 0; q < N; q++) fill(w + q * count, q, count, 0);
    get(g, d, b * N); expect(g, w, count * N, "allgather", r);

    /* ReduceScatter: rank r gets block r of the sum of N-block inputs. */
    fill(h, r, count * N, 0);
    put(s, h, b * N);
    OK(ncclReduceScatter(s, d, count, ncclFloat, ncclSum, comm, stream));
    for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, r * count + i); w[i] = a; }
    get(g, d, b); expect(g, w, count, "reducescatter", r);

    /* AlltoAll: block q of rank r's output is block r of rank q's input. */
    OK(ncclAlltoAll(s, d, count, ncclFloat, comm, stream));
    for (int q = 0; q < N; q++) fill(w + q * count, q, count, r * count);
    get(g, d, b * N); expect(g, w, count * N, "alltoall", r);

    /* Gather to rank 0; Scatter from rank N-1. */
    OK(ncclGather(s, d, count, ncclFloat, 0, comm, stream));
    if (r == 0) {
        for (int q = 0; q < N; q++) fill(w + q * count, q, count, 0);
        get(g, d, b * N); expect(g, w, count * N, "gather", r);
    }
    OK(ncclScatter(s, d, count, ncclFloat, N - 1, comm, stream));
    fill(w, N - 1, count, r * count);
    get(g, d, b); expect(g, w, count, "scatter", r);

    /* Grouped send/recv all-to-all (every pair both ways, self included). */
    OK(ncclGroupStart());
    for (int q = 0; q < N; q++) {
        OK(ncclSend((char *)s + q * b, count, ncclFloat, q, comm, stream));
        OK(ncclRecv((char *)d + q * b, count, ncclFloat, q, comm, stream));
    }
    OK(ncclGroupEnd());
    for (int q = 0; q < N; q++) fill(w + q * count, q, count, r * count);
    get(g, d, b * N); expect(g, w, count * N, "send/recv all-to-all", r);

    OK(cudaStreamSynchronize(stream));
    OK(cudaFree(s)); OK(cudaFree(d));
    free(h); free(w); free(g);
}

/* Every data type with sum: inputs (r + i) % 2, sums exact in every type. */
static void all_types(ncclComm_t comm, int r, int N, void *stream) {
    static const int sizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    size_t count = 1001;
    for (int t = 0; t < 12; t++) {
        size_t es = sizes[t];
        unsigned char *h = calloc(count, es), *g = calloc(count, es);
        void *s = dalloc(count * es), *d = dalloc(count * es);
        for (size_t i = 0; i < count; i++) {
            int v = (int)((r + i) % 2);
            switch (t) {
            case 0: case 1: h[i] = (unsigned char)v; break;
            case 2: case 3: ((int32_t *)h)[i] = v; break;
            case 4: case 5: ((int64_t *)h)[i] = v; break;
            case 6: ((uint16_t *)h)[i] = v ? 0x3c00 : 0; break;      /* fp16 1.0 */
            case 7: ((float *)h)[i] = (float)v; break;
            case 8: ((double *)h)[i] = (double)v; break;
            case 9: ((uint16_t *)h)[i] = v ? 0x3f80 : 0; break;      /* bf16 1.0 */
            case 10: h[i] = v ? 0x38 : 0; break;                     /* e4m3 1.0 */
            case 11: h[i] = v ? 0x3c : 0; break;                     /* e5m2 1.0 */
            }
        }
        put(s, h, count * es);
        OK(ncclAllReduce(s, d, count, (ncclDataType_t)t, ncclSum, comm, stream));
        get(g, d, count * es);
        for (size_t i = 0; i < count; i++) {
            int ones = 0;
            for (int q = 0; q < N; q++) ones += (int)((q + i) % 2);
            double got = 0;
            switch (t) {
            case 0: got = (int8_t)g[i]; break;
            case 1: got = g[i]; break;
            case 2: case 3: got = ((int32_t *)g)[i]; break;
            case 4: case 5: got = (double)((int64_t *)g)[i]; break;
            case 7: got = ((float *)g)[i]; break;
            case 8: got = ((double *)g)[i]; break;
            default: {
                /* Half types and fp8: compare with the encoding of `ones` computed by the same
                 * rule the library uses is overkill here: small integers are exact, so decode. */
                float f = 0;
                if (t == 6) { uint16_t x = ((uint16_t *)g)[i]; int e = (x >> 10) & 31, m = x & 1023; f = e ? (1 + m / 1024.0f) * (float)(1 << e) / 32768.0f : 0; }
                if (t == 9) { uint32_t x = (uint32_t)((uint16_t *)g)[i] << 16; memcpy(&f, &x, 4); }
                if (t == 10) { int x = g[i], e = (x >> 3) & 15, m = x & 7; f = e ? (1 + m / 8.0f) * (float)(1 << e) / 128.0f : 0; }
                if (t == 11) { int x = g[i], e = (x >> 2) & 31, m = x & 3; f = e ? (1 + m / 4.0f) * (float)(1 << e) / 32768.0f : 0; }
                got = f;
            }
            }
            if (got != (double)ones) {
                fprintf(stderr, "FAIL rank %d type %d element %zu: %g, expected %d\n", r, t, i, got, ones);
                exit(1);
            }
        }
        OK(cudaFree(s)); OK(cudaFree(d));
        free(h); free(g);
    }
}

/* A call on a non-blocking communicator may answer ncclInProgress: poll the new one. */
static void settle(ncclResult_t rc, ncclComm_t c) {
    if (rc == ncclInProgress) {
        ncclResult_t st;
        do { OK(ncclCommGetAsyncError(c, &st)); usleep(1000); } while (st == ncclInProgress);
        OK(st);
    } else {
        OK(rc);
    }
}

static ncclUniqueId shared_id(int rank, const char *path) {
    ncclUniqueId id;
    if (rank == 0) { OK(ncclGetUniqueId(&id)); write_id(path, &id); }
    else read_id(path, &id, 60);
    return id;
}

struct thread_arg { int r; void *stream; void *exec; };

static void *launch_twice(void *p) {
    struct thread_arg *a = p;
    OK(cudaSetDevice(a->r));
    OK(cudaGraphLaunch(a->exec, a->stream));
    OK(cudaGraphLaunch(a->exec, a->stream));
    OK(cudaStreamSynchronize(a->stream));
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    int version = 0;
    OK(ncclGetVersion(&version));
    CHECK(version == NCCL_VERSION_CODE);
    if (strcmp(argv[1], "threads") == 0) {
        int N = atoi(argv[2]);
        ncclComm_t comms[16];
        OK(ncclCommInitAll(comms, N, NULL));
        void *streams[16];
        float *s[16], *d[16];
        size_t count = 4099;
        for (int r = 0; r < N; r++) {
            OK(cudaSetDevice(r));
            OK(cudaStreamCreate(&streams[r]));
            s[r] = dalloc(count * 4); d[r] = dalloc(count * 4);
            float *h = malloc(count * 4); fill(h, r, count, 0); put(s[r], h, count * 4); free(h);
            int n = 0, me = -1, dev = -1;
            OK(ncclCommCount(comms[r], &n)); OK(ncclCommUserRank(comms[r], &me)); OK(ncclCommCuDevice(comms[r], &dev));
            CHECK(n == N && me == r && dev == r);
        }
        /* A simulated group is priced, not run. */
        {
            ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
            OK(ncclGroupStart());
            for (int r = 0; r < N; r++) OK(ncclAllReduce(s[r], s[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
            OK(ncclGroupSimulateEnd(&info));
            CHECK(info.estimatedTime > 0.0f);
            float *h = malloc(count * 4), *w0 = malloc(count * 4);
            fill(w0, 0, count, 0);
            OK(cudaSetDevice(0)); get(h, s[0], count * 4); expect(h, w0, count, "simulated group ran nothing", 0);
            free(h); free(w0);
            printf("ok simulated group %.3f us\n", info.estimatedTime);
        }
        /* One thread drives every rank: only possible inside a group. */
        OK(ncclGroupStart());
        for (int r = 0; r < N; r++) OK(ncclAllReduce(s[r], d[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
        OK(ncclGroupEnd());
        float *g = malloc(count * 4), *w = malloc(count * 4);
        for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i); w[i] = a; }
        for (int r = 0; r < N; r++) { OK(cudaSetDevice(r)); get(g, d[r], count * 4); expect(g, w, count, "threads allreduce", r); }
        /* Captured into a graph on every rank, launched twice: the second launch sums again. */
        void *exec[16];
        OK(ncclGroupStart());
        for (int r = 0; r < N; r++) { OK(cudaSetDevice(r)); OK(cudaStreamBeginCapture(streams[r], 0)); }
        for (int r = 0; r < N; r++) OK(ncclAllReduce(d[r], d[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
        OK(ncclGroupEnd());
        for (int r = 0; r < N; r++) {
            void *graph;
            OK(cudaSetDevice(r));
            OK(cudaStreamEndCapture(streams[r], &graph));
            OK(cudaGraphInstantiate(&exec[r], graph, 0));
            get(g, d[r], count * 4); expect(g, w, count, "capture does not run", r);
        }
        /* A graph launch runs the captured collective, which waits for every rank: launch
         * each rank's graph from its own thread, twice. */
        struct thread_arg a[16];
        pthread_t t[16];
        for (int r = 0; r < N; r++) {
            a[r].r = r; a[r].stream = streams[r]; a[r].exec = exec[r];
            CHECK(pthread_create(&t[r], NULL, launch_twice, &a[r]) == 0);
        }
        for (int r = 0; r < N; r++) CHECK(pthread_join(t[r], NULL) == 0);
        for (size_t i = 0; i < count; i++) w[i] *= (float)N * (float)N;
        for (int r = 0; r < N; r++) { OK(cudaSetDevice(r)); get(g, d[r], count * 4); expect(g, w, count, "graph launched twice", r); }
        for (int r = 0; r < N; r++) { OK(ncclCommDestroy(comms[r])); }
        /* The same ranks created the nccl-tests -g way: one thread, one id, InitRank per
         * device inside a group, then a grouped AllReduce. */
        {
            ncclUniqueId gid;
            OK(ncclGetUniqueId(&gid));
            ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
            OK(ncclGroupStart());
            for (int r = 0; r < N; r++) { OK(cudaSetDevice(r)); OK(ncclCommInitRankConfig(&comms[r], N, gid, r, &cfg)); }
            OK(ncclGroupEnd());
            OK(ncclGroupStart());
            for (int r = 0; r < N; r++) OK(ncclAllReduce(s[r], d[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
            OK(ncclGroupEnd());
            for (size_t i = 0; i < count; i++) { float a = 0; for (int q = 0; q < N; q++) a += val(q, i); w[i] = a; }
            for (int r = 0; r < N; r++) { OK(cudaSetDevice(r)); get(g, d[r], count * 4); expect(g, w, count, "grouped InitRank allreduce", r); OK(ncclCommDestroy(comms[r])); }
        }
        printf("ok threads %d\n", N);
        return 0;
    }
    if (strcmp(argv[1], "rank") == 0 || strcmp(argv[1], "nonblocking") == 0) {
        int r = atoi(argv[2]), N = atoi(argv[3]), ndev = 0;
        /* Ranks fill the node's GPUs in order (8 on the default node, 4 on a GB200 tray). */
        OK(cudaGetDeviceCount(&ndev));
        OK(cudaSetDevice(r % ndev));
        ncclUniqueId id = shared_id(r, argv[4]);
        ncclComm_t comm;
        if (strcmp(argv[1], "nonblocking") == 0) {
            ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
            cfg.blocking = 0;
            ncclResult_t rc = ncclCommInitRankConfig(&comm, N, id, r, &cfg);
            CHECK(rc == ncclSuccess || rc == ncclInProgress);
            ncclResult_t st;
            int polls = 0;
            do { OK(ncclCommGetAsyncError(comm, &st)); polls++; usleep(1000); } while (st == ncclInProgress);
            CHECK(st == ncclSuccess);
            printf("ok nonblocking init after %d polls\n", polls);
        } else {
            OK(ncclCommInitRank(&comm, N, id, r));
        }
        void *stream;
        OK(cudaStreamCreate(&stream));
        collectives(comm, r, N, 1, stream);
        collectives(comm, r, N, 1000, stream);
        collectives(comm, r, N, 65537, stream);
        all_types(comm, r, N, stream);
        if (argc > 5) {
            size_t big = (size_t)atol(argv[5]);
            collectives(comm, r, N, big, stream);
        }
        /* Split in halves by parity, keys reversed; traffic on the child. */
        ncclComm_t half;
        ncclResult_t src = ncclCommSplit(comm, r % 2, -r, &half, NULL);
    settle(src, half);
        int hn = 0, hr = -1;
        OK(ncclCommCount(half, &hn)); OK(ncclCommUserRank(half, &hr));
        CHECK(hn == (N + 1 - r % 2) / 2);
        CHECK(hr == hn - 1 - r / 2);
        collectives(half, hr, hn, 777, stream);
        /* NOCOLOR gets no communicator. */
        ncclComm_t none = (ncclComm_t)0x1;
        {
        ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
        blocking.blocking = 1;
        OK(ncclCommSplit(comm, r == 0 ? NCCL_SPLIT_NOCOLOR : 0, r, &none, &blocking));
    }
        CHECK((r == 0) == (none == NULL));
        if (none) { collectives(none, r - 1, N - 1, 33, stream); OK(ncclCommDestroy(none)); }
        OK(ncclCommDestroy(half));
        OK(ncclCommFinalize(comm));
        OK(ncclCommDestroy(comm));
        CHECK(ncclCommDestroy(comm) == ncclInvalidArgument);
        printf("ok rank %d of %d\n", r, N);
        return 0;
    }
    if (strcmp(argv[1], "envchange") == 0) {
        /* The run environment is the core's, read when CUDA started: a variable the program
         * changes afterwards does not give libnccl.so.2 another job (or another error). */
        OK(cudaSetDevice(0));
        OK(cudaFree(NULL));
        CHECK(setenv("NCCLSIM_NODE", "x", 1) == 0);
        ncclComm_t c[2];
        OK(ncclCommInitAll(c, 2, NULL));
        int n = 0;
        OK(ncclCommCount(c[0], &n));
        CHECK(n == 2);
        OK(ncclCommDestroy(c[0]));
        OK(ncclCommDestroy(c[1]));
        printf("ok envchange\n");
        return 0;
    }
    if (strcmp(argv[1], "invalid") == 0) {
        /* Bad arguments get ncclInvalidArgument and a message naming them; nothing crashes. */
        ncclComm_t c;
        int dev0 = 0;
        OK(ncclCommInitAll(&c, 1, &dev0));
        float *d = dalloc(64 * 4), host[64];
#define BAD(call, want)                                                                   \
        do {                                                                                  \
            CHECK((call) == ncclInvalidArgument);                                             \
            const char *msg_ = ncclGetLastError(NULL);                                        \
            if (!strstr(msg_, want)) {                                                        \
                fprintf(stderr, "FAIL %s: last error '%s' lacks '%s'\n", #call, msg_, want);   \
                return 1;                                                                     \
            }                                                                                 \
        } while (0)
        BAD(ncclAllReduce(NULL, d, 16, ncclFloat, ncclSum, c, NULL), "sendbuff is NULL");
        BAD(ncclAllReduce(host, d, 16, ncclFloat, ncclSum, c, NULL), "not device memory");
        BAD(ncclAllReduce(d, d, 5000, ncclFloat, ncclSum, c, NULL), "bytes needed");
        BAD(ncclAllReduce(d, d, 16, (ncclDataType_t)42, ncclSum, c, NULL), "datatype 42");
        BAD(ncclAllReduce(d, d, 16, ncclFloat, (ncclRedOp_t)77, c, NULL), "op 77");
        BAD(ncclBroadcast(d, d, 16, ncclFloat, 3, c, NULL), "root 3");
        BAD(ncclSend(d, 16, ncclFloat, -1, c, NULL), "peer -1");
        BAD(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, (ncclComm_t)0x1234, NULL), "not a live communicator");
        OK(ncclCommDestroy(c));
        CHECK(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, c, NULL) == ncclInvalidArgument);
        printf("ok invalid arguments\n");
        return 0;
    }
    if (strcmp(argv[1], "mismatch") == 0) {
        /* Ranks calling different collectives fail alike, found in the operation's exchange. */
        int r = atoi(argv[2]), N = atoi(argv[3]);
        OK(cudaSetDevice(r % 8));
        ncclUniqueId id = shared_id(r, argv[4]);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, r));
        float *d = dalloc(64 * 4);
        ncclResult_t rc = ncclAllReduce(d, d, r == 0 ? 16 : 32, ncclFloat, ncclSum, comm, NULL);
        CHECK(rc == ncclInvalidUsage);
        CHECK(strstr(ncclGetLastError(comm), "disagree") != NULL);
        /* The communicator still works afterwards. */
        OK(ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, NULL));
        OK(ncclCommDestroy(comm));
        printf("ok mismatch detected\n");
        return 0;
    }
    if (strcmp(argv[1], "die") == 0) {
        /* The last rank is killed after init; the others' next collective must fail with
         * ncclRemoteError naming it, long before NCCLSIM_TIMEOUT. */
        int r = atoi(argv[2]), N = atoi(argv[3]);
        OK(cudaSetDevice(r % 8));
        ncclUniqueId id = shared_id(r, argv[4]);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, r));
        void *b = dalloc(4096);
        OK(ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, NULL));
        if (r == N - 1) raise(SIGKILL);
        ncclResult_t rc = ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, NULL);
        CHECK(rc == ncclRemoteError);
        printf("ok remote error: %s\n", ncclGetLastError(comm));
        OK(ncclCommAbort(comm));
        return 0;
    }
    if (strcmp(argv[1], "sim") == 0) {
        /* The TP=8/DP=2 job's communicators, then one AllReduce of 1 Mi floats on each; rank 0
         * first spends virtual time on a 128 MiB host-to-device copy (a stand-in for compute),
         * which the others wait for in the world AllReduce. */
        int r = atoi(argv[2]);
        OK(cudaSetDevice(r % 8));
        ncclUniqueId id = shared_id(r, argv[3]);
        ncclComm_t world, tp, dp;
        OK(ncclCommInitRank(&world, 16, id, r));
        OK(ncclCommSplit(world, r / 8, r, &tp, NULL));
        OK(ncclCommSplit(world, r % 8, r, &dp, NULL));
        void *stream;
        OK(cudaStreamCreate(&stream));
        size_t count = 1 << 20;
        void *buf = dalloc(count * 4);
        if (r == 0) {
            size_t big = (size_t)128 << 20;
            void *h = malloc(big), *d = dalloc(big);
            memset(h, 0, big);
            OK(cudaMemcpy(d, h, big, H2D));
            OK(cudaFree(d));
            free(h);
        }
        OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, world, stream));
        OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, tp, stream));
        OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, dp, stream));
        OK(cudaStreamSynchronize(stream));
        OK(ncclCommDestroy(dp)); OK(ncclCommDestroy(tp)); OK(ncclCommDestroy(world));
        printf("ok sim rank %d\n", r);
        return 0;
    }
    if (strcmp(argv[1], "steps") == 0) {
        /* A setup Broadcast, then three steps of an AllReduce and an AllGather, each step
         * between cudaProfilerStart and cudaProfilerStop unless argv[5] is "nomarks". With
         * marks, an AllReduce is then captured on one stream and its graph launched on
         * another, after rank 0 spent virtual time on a 128 MiB copy on that stream: the
         * others wait for rank 0 in the replay, which the event time around it shows. */
        int r = atoi(argv[2]), n = atoi(argv[3]);
        int marks = argc < 6 || strcmp(argv[5], "nomarks") != 0;
        OK(cudaSetDevice(r % 8));
        ncclUniqueId id = shared_id(r, argv[4]);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, n, id, r));
        void *stream;
        OK(cudaStreamCreate(&stream));
        size_t count = 1 << 18;
        void *buf = dalloc(count * 4), *all = dalloc(count * 4 * n);
        OK(ncclBroadcast(buf, buf, count, ncclFloat, 0, comm, stream));
        for (int step = 0; step < 3; step++) {
            if (marks) OK(cudaProfilerStart());
            OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream));
            OK(ncclAllGather(buf, all, count, ncclFloat, comm, stream));
            if (marks) OK(cudaProfilerStop());
        }
        OK(cudaStreamSynchronize(stream));
        if (marks) {
            void *cap, *launch, *graph, *exec, *e0, *e1;
            OK(cudaStreamCreate(&cap)); OK(cudaStreamCreate(&launch));
            OK(cudaStreamBeginCapture(cap, 0));
            OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, cap));
            OK(cudaStreamEndCapture(cap, &graph));
            OK(cudaGraphInstantiate(&exec, graph, 0));
            OK(cudaEventCreate(&e0)); OK(cudaEventCreate(&e1));
            OK(cudaEventRecord(e0, launch));
            size_t big = (size_t)128 << 20;
            void *h = NULL, *d = NULL;
            if (r == 0) {
                h = malloc(big); d = dalloc(big);
                memset(h, 0, big);
                OK(cudaMemcpyAsync(d, h, big, H2D, launch));
            }
            OK(cudaGraphLaunch(exec, launch));
            OK(cudaEventRecord(e1, launch));
            OK(cudaStreamSynchronize(launch));
            float ms = 0;
            OK(cudaEventElapsedTime(&ms, e0, e1));
            printf("replay rank %d elapsed_us %.3f\n", r, ms * 1000.0f);
            if (r == 0) { OK(cudaFree(d)); free(h); }
        }
        OK(ncclCommDestroy(comm));
        printf("ok steps rank %d\n", r);
        /* "exit-early": leave without exit handlers, as a killed process would after it. */
        if (argc >= 6 && strcmp(argv[5], "exit-early") == 0) { fflush(stdout); _exit(0); }
        return 0;
    }
    if (strcmp(argv[1], "tpdp") == 0) {
        int r = atoi(argv[2]);
        int N = 16;
        OK(cudaSetDevice(r % 8));
        ncclUniqueId id = shared_id(r, argv[3]);
        ncclComm_t world, tp, dp;
        OK(ncclCommInitRank(&world, N, id, r));
        OK(ncclCommSplit(world, r / 8, r, &tp, NULL));
        OK(ncclCommSplit(world, r % 8, r, &dp, NULL));
        void *stream;
        OK(cudaStreamCreate(&stream));
        for (int step = 0; step < 2; step++) {
            collectives(tp, r % 8, 8, 4096, stream);
            collectives(dp, r / 8, 2, 4096, stream);
            collectives(world, r, 16, 257, stream);
        }
        OK(ncclCommDestroy(dp)); OK(ncclCommDestroy(tp)); OK(ncclCommDestroy(world));
        printf("ok tpdp rank %d\n", r);
        return 0;
    }
    fprintf(stderr, "unknown scenario %s\n", argv[1]);
    return 2;
}
