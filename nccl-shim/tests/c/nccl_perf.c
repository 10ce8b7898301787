/* Times collectives the way nccl-tests does (its common.cu: startColl/completeColl/BenchTime, and
 * each test's GetBw), so its table can be compared with `ncclsim predict`:
 *
 *   nccl_perf group N MIN MAX STEP WARMUP ITERS        one process, one thread, N devices (-g N)
 *   nccl_perf rank R N IDFILE MIN MAX STEP WARMUP ITERS   one rank of N processes (device R % 8)
 *   nccl_perf mpi MIN MAX STEP WARMUP ITERS           (built with -DUSE_MPI) one rank of an MPI
 *                                                     job, as nccl-tests built with MPI=1: rank
 *                                                     and size from MPI, the id broadcast by MPI
 *
 * For AllReduce, AllGather, ReduceScatter, Broadcast and SendRecv (float, sum, root 0,
 * out of place, or in place with NCCLSIM_PERF_IN_PLACE=1: one buffer per rank, placed as
 * nccl-tests places in-place operands), sizes MIN..MAX bytes, each STEP times the last (nccl-tests' -f): WARMUP calls and a stream synchronisation,
 * then the host clock (CLOCK_REALTIME, as std::chrono::high_resolution_clock reads it) around
 * ITERS calls and a cudaStreamQuery spin on every stream; time = elapsed / ITERS, algbw and
 * busbw by nccl-tests' formulas. Prints one line per rank (or per process in group mode):
 *   perf <coll> rank <r> size <bytes> count <elements> time_us <t> algbw <GB/s> busbw <GB/s>
 * and at the end, after one more AllReduce and ncclCommFinalize (which waits for it: under the
 * virtual clock, the clock reads the same after a stream synchronisation), the host clock's
 * reading in ns:
 *   clock rank <r> realtime <ns>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nccl.h"
#ifdef USE_MPI
#include <mpi.h>
#endif

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemset(void *, int, size_t);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);
int cudaStreamQuery(void *);
const char *cudaGetErrorName(int);

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"
#include "unique_id_file.h"

#define CUDA_ERROR_NOT_READY 600
#define MAXDEV 8

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, SENDRECV, NCOLL };
static const char *NAMES[NCOLL] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                   "sendrecv"};

/* The ranks this process drives. */
struct ranks {
    int n;        /* communicator size */
    int local;    /* ranks in this process */
    int first;    /* rank of local[0] */
    ncclComm_t comm[MAXDEV];
    void *stream[MAXDEV];
    void *send[MAXDEV], *recv[MAXDEV];
    int dev[MAXDEV];
    int in_place; /* receive into (and send from) one buffer, `send` */
};

/* nccl-tests' getCollByteCount: (count passed to the call, bytes the size column shows); the
 * per-rank count of AllGather and ReduceScatter is rounded down to whole 16-byte units. */
static void counts(enum coll c, size_t bytes, int n, size_t *count, size_t *shown) {
    size_t elems = bytes / sizeof(float);
    switch (c) {
    case ALL_GATHER:
    case REDUCE_SCATTER:
        *count = (elems / n) & ~(16 / sizeof(float) - 1);
        *shown = *count * n * sizeof(float);
        break;
    default:
        *count = elems;
        *shown = elems * sizeof(float);
    }
}

/* nccl-tests' GetBw: (algbw, busbw) in GB/s. */
static void bandwidth(enum coll c, size_t count, int n, double sec, double *alg, double *bus) {
    double base, factor;
    switch (c) {
    case ALL_REDUCE:
        base = (double)(count * sizeof(float)) / 1.0E9 / sec;
        factor = 2.0 * (n - 1) / n;
        break;
    case ALL_GATHER:
    case REDUCE_SCATTER:
        base = (double)(count * sizeof(float) * n) / 1.0E9 / sec;
        factor = (double)(n - 1) / n;
        break;
    default: /* Broadcast, SendRecv */
        base = (double)(count * sizeof(float)) / 1.0E9 / sec;
        factor = 1.0;
    }
    *alg = base;
    *bus = base * factor;
}

/* startColl: one call of the collective on every local rank (grouped when there are several). */
static void start(struct ranks *R, enum coll c, size_t count) {
    if (R->local > 1 || c == SENDRECV) OK(ncclGroupStart());
    for (int i = 0; i < R->local; i++) {
        int r = R->first + i;
        ncclComm_t comm = R->comm[i];
        void *s = R->stream[i], *sb = R->send[i], *rb = R->recv[i];
        if (R->in_place) {
            /* nccl-tests' in-place operands: AllGather sends its own slice of the output,
             * ReduceScatter receives into its own slice of the input. */
            char *buf = R->send[i];
            size_t slice = count * sizeof(float) * (size_t)r;
            sb = c == ALL_GATHER ? buf + slice : buf;
            rb = c == REDUCE_SCATTER ? buf + slice : buf;
        }
        switch (c) {
        case ALL_REDUCE: OK(ncclAllReduce(sb, rb, count, ncclFloat, ncclSum, comm, s)); break;
        case ALL_GATHER: OK(ncclAllGather(sb, rb, count, ncclFloat, comm, s)); break;
        case REDUCE_SCATTER:
            OK(ncclReduceScatter(sb, rb, count, ncclFloat, ncclSum, comm, s));
            break;
        case BROADCAST: OK(ncclBroadcast(sb, rb, count, ncclFloat, 0, comm, s)); break;
        case SENDRECV:
            OK(ncclSend(sb, count, ncclFloat, (r + 1) % R->n, comm, s));
            OK(ncclRecv(rb, count, ncclFloat, (r - 1 + R->n) % R->n, comm, s));
            break;
        default: break;
        }
    }
    if (R->local > 1 || c == SENDRECV) OK(ncclGroupEnd());
}

/* completeColl: spin on cudaStreamQuery of every stream until each reports completion. */
static void complete(struct ranks *R) {
    for (int i = 0; i < R->local; i++) {
        int rc;
        while ((rc = cudaStreamQuery(R->stream[i])) == CUDA_ERROR_NOT_READY) {
            ncclResult_t async;
            OK(ncclCommGetAsyncError(R->comm[i], &async));
            OK(async);
        }
        OK(rc);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    CHECK(clock_gettime(CLOCK_REALTIME, &ts) == 0);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void bench(struct ranks *R, size_t min, size_t max, size_t step, int warmup, int iters) {
    for (int c = 0; c < NCOLL; c++) {
        for (size_t bytes = min; bytes <= max; bytes *= step) {
            size_t count, shown;
            counts((enum coll)c, bytes, R->n, &count, &shown);
            for (int w = 0; w < warmup; w++) start(R, (enum coll)c, count);
            for (int i = 0; i < R->local; i++) {
                OK(cudaSetDevice(R->dev[i]));
                OK(cudaStreamSynchronize(R->stream[i]));
            }
            int64_t t0 = now_ns();
            for (int it = 0; it < iters; it++) start(R, (enum coll)c, count);
            complete(R);
            double sec = (double)(now_ns() - t0) / 1e9 / iters;
            double alg = 0, bus = 0; /* an empty call (count 0) moves nothing: 0, not 0/0 */
            if (count > 0) bandwidth((enum coll)c, count, R->n, sec, &alg, &bus);
            for (int i = 0; i < R->local; i++)
                printf("perf %s rank %d size %zu count %zu time_us %.4f algbw %.6e busbw %.6e\n",
                       NAMES[c], R->first + i, shown, count, sec * 1e6, alg, bus);
        }
    }
}

/* Buffers for the largest size of any collective: send and receive hold `max` bytes (AllGather's
 * receive and ReduceScatter's send are the whole `max`). */
static void buffers(struct ranks *R, size_t max) {
    for (int i = 0; i < R->local; i++) {
        OK(cudaSetDevice(R->dev[i]));
        OK(cudaStreamCreate(&R->stream[i]));
        OK(cudaMalloc(&R->send[i], max));
        R->recv[i] = R->send[i];
        if (!R->in_place) OK(cudaMalloc(&R->recv[i], max));
        OK(cudaMemset(R->send[i], 0, max));
    }
}

int main(int argc, char **argv) {
    /* Whole lines: processes sharing the launcher's pipe must not split each other's lines. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct ranks R;
    memset(&R, 0, sizeof R);
    const char *in_place = getenv("NCCLSIM_PERF_IN_PLACE");
    R.in_place = in_place && strcmp(in_place, "1") == 0;
    int a;
    if (argc == 8 && strcmp(argv[1], "group") == 0) {
        R.n = R.local = atoi(argv[2]);
        CHECK(R.n >= 1 && R.n <= MAXDEV);
        for (int i = 0; i < R.n; i++) R.dev[i] = i;
        OK(ncclCommInitAll(R.comm, R.n, R.dev));
        a = 3;
    } else if (argc == 10 && strcmp(argv[1], "rank") == 0) {
        int r = atoi(argv[2]);
        R.n = atoi(argv[3]);
        R.local = 1;
        R.first = r;
        R.dev[0] = r % 8;
        OK(cudaSetDevice(R.dev[0]));
        ncclUniqueId id;
        if (r == 0) { OK(ncclGetUniqueId(&id)); write_id(argv[4], &id); }
        else read_id(argv[4], &id, 60);
        OK(ncclCommInitRank(&R.comm[0], R.n, id, r));
        a = 5;
#ifdef USE_MPI
    } else if (argc == 7 && strcmp(argv[1], "mpi") == 0) {
        int r, n;
        CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        R.n = n;
        R.local = 1;
        R.first = r;
        R.dev[0] = r % 8;
        OK(cudaSetDevice(R.dev[0]));
        ncclUniqueId id;
        if (r == 0) OK(ncclGetUniqueId(&id));
        CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
        OK(ncclCommInitRank(&R.comm[0], R.n, id, r));
        a = 2;
#endif
    } else {
        fprintf(stderr, "usage: nccl_perf group N MIN MAX STEP WARMUP ITERS\n"
                        "       nccl_perf rank R N IDFILE MIN MAX STEP WARMUP ITERS\n"
                        "       nccl_perf mpi MIN MAX STEP WARMUP ITERS\n");
        return 2;
    }
    size_t min = (size_t)atoll(argv[a]), max = (size_t)atoll(argv[a + 1]);
    size_t step = (size_t)atoll(argv[a + 2]);
    int warmup = atoi(argv[a + 3]), iters = atoi(argv[a + 4]);
    CHECK(min >= 1 && max >= min && step >= 2 && iters >= 1 && warmup >= 0);
    buffers(&R, max);
    bench(&R, min, max, step, warmup, iters);
    start(&R, ALL_REDUCE, 1);
    for (int i = 0; i < R.local; i++) OK(ncclCommFinalize(R.comm[i]));
    int64_t end = now_ns();
    for (int i = 0; i < R.local; i++) {
        OK(cudaSetDevice(R.dev[i]));
        OK(cudaStreamSynchronize(R.stream[i]));
    }
    const char *clock = getenv("NCCLSIM_CLOCK");
    if (clock && strcmp(clock, "virtual") == 0) CHECK(now_ns() == end);
    for (int i = 0; i < R.local; i++) printf("clock rank %d realtime %lld\n", R.first + i, (long long)end);
    for (int i = 0; i < R.local; i++) {
        OK(cudaSetDevice(R.dev[i]));
        OK(cudaFree(R.send[i]));
        if (!R.in_place) OK(cudaFree(R.recv[i]));
        OK(ncclCommDestroy(R.comm[i]));
    }
#ifdef USE_MPI
    if (strcmp(argv[1], "mpi") == 0) MPI_Finalize();
#endif
    return 0;
}
