/* Faults against ncclsim's libnccl.so.2: lost ranks, aborts, bad arguments, mismatched calls.
 *
 *   nccl_faults before R N IDFILE     rank N-1 dies before init; the others' init fails
 *   nccl_faults during R N IDFILE     rank N-1 dies in init (NCCLSIM_TEST_KILL_IN_INIT set by the test)
 *   nccl_faults midcoll R N IDFILE    rank N-1 dies while the others are inside an AllReduce
 *   nccl_faults abort_coll R N IDFILE a second thread aborts a rank waiting in an AllReduce,
 *                                     then every rank makes a new communicator (restart path)
 *   nccl_faults abort_init R N IDFILE a second thread aborts a non-blocking init, then a
 *                                     blocking one, each waiting for a rank that never comes,
 *                                     then the restart path as above
 *   nccl_faults forged R N IDFILE     an ordinary job (rank N-1 starts late); the test sends
 *                                     forged connections to its root meanwhile
 *   nccl_faults duprank R 3 IDFILE    processes 1 and 2 both claim rank 1 of 2; process 0
 *                                     joins once the refused one has returned
 *   nccl_faults latedup R 3 IDFILE    processes 0 and 1 form a 2-rank communicator and reduce;
 *                                     then process 2 claims rank 1 of it and is refused; the
 *                                     two reduce again
 *   nccl_faults groupdup 0 1 -        one thread inits ranks 0 and 1 on device 0 in a group
 *                                     (blocking config): the group's end fails; then a group
 *                                     in which one rank splits with NCCL_SPLIT_NOCOLOR succeeds
 *   nccl_faults invalid 0 2 -         every invalid argument on a 2-rank ncclCommInitAll
 *   nccl_faults grouperr 0 2 -        an invalid argument inside a group of valid AllReduces
 *                                     (2-rank ncclCommInitAll): the call and the group's end
 *                                     fail, nothing queued runs; then a valid group works
 *   nccl_faults mismatch R N IDFILE   different counts, types, reductions, collectives, roots and
 *                                     sizes (small and large paths) across the ranks of a call,
 *                                     then a checked AllReduce
 *   nccl_faults idle R N IDFILE       rank 0 comes 500 ms late to an AllReduce; each rank reports the
 *                                     CPU time its call took (cpu_ms= in the message)
 *   nccl_faults hold R N IDFILE       a communicator formed and used, kept until IDFILE.go
 *                                     exists (the test probes its memory from outside), then
 *                                     used again and destroyed
 *
 * Each outcome is a line "result rank=R case=NAME code=C ms=T msg=TEXT"; the test checks the
 * codes and messages. Before the first communicator and after the last one is gone the
 * program counts its descriptors and threads: "leaks fds=BEFORE/AFTER threads=BEFORE/AFTER". */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaStreamCreate(void **);
int cudaStreamDestroy(void *);

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"
#include "unique_id_file.h"

static int R, N;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
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

struct counts { int fds, threads; };

static struct counts counts(void) {
    struct counts c = { entries("/proc/self/fd"), entries("/proc/self/task") };
    return c;
}

/* Threads end asynchronously (a root that was told to stop): allow them a moment. */
static void leaks(struct counts before) {
    struct counts after = counts();
    for (int i = 0; i < 200 && (after.threads > before.threads || after.fds > before.fds); i++) {
        usleep(10000);
        after = counts();
    }
    printf("leaks rank=%d fds=%d/%d threads=%d/%d\n", R, before.fds, after.fds, before.threads, after.threads);
}

static void result(const char *name, int code, double since, const char *msg) {
    printf("result rank=%d case=%s code=%d ms=%.1f msg=%s\n", R, name, code, now_ms() - since, msg ? msg : "");
    fflush(stdout);
}

/* The id of communicator `gen` of the job (rank 0 makes it, the others read it). */
static ncclUniqueId shared_id(const char *path, int gen) {
    char p[4096];
    snprintf(p, sizeof p, "%s.%d", path, gen);
    ncclUniqueId id;
    if (R == 0) { OK(ncclGetUniqueId(&id)); write_id(p, &id); }
    else read_id(p, &id, 30);
    return id;
}

/* Creates the empty file `path` (a signal between the ranks' processes). */
static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    CHECK(f);
    fclose(f);
}

/* Waits for another process to `touch` `path`, polling every 10 ms, at most `polls` times
 * (the waiting case then goes on and its checks tell what went wrong). */
static void await_file(const char *path, int polls) {
    for (int i = 0; i < polls && access(path, F_OK) != 0; i++) usleep(10000);
}

static float *buf;
static void *stream;

/* An AllReduce whose result is checked: every rank contributes rank+1. */
static void checked_allreduce(ncclComm_t comm) {
    float h[256], want = (float)N * (N + 1) / 2;
    for (int i = 0; i < 256; i++) h[i] = (float)(R + 1);
    OK(cudaMemcpy(buf, h, sizeof h, 1));
    OK(ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, comm, stream));
    OK(cudaMemcpy(h, buf, sizeof h, 2));
    for (int i = 0; i < 256; i++) CHECK(h[i] == want);
}

/* The restart path: a new communicator of every rank, used and destroyed. */
static void restart(const char *path) {
    ncclUniqueId id = shared_id(path, 2);
    ncclComm_t comm;
    double t = now_ms();
    OK(ncclCommInitRank(&comm, N, id, R));
    checked_allreduce(comm);
    OK(ncclCommDestroy(comm));
    result("restart", 0, t, "new communicator works");
}

/* Aborts `comm` `delay_ms` after `go` is set (at once when it is NULL). */
struct aborter { ncclComm_t comm; int delay_ms; volatile int *go; int rc; double took; };

static void *abort_later(void *p) {
    struct aborter *a = p;
    while (a->go && !__atomic_load_n(a->go, __ATOMIC_ACQUIRE)) usleep(1000);
    usleep(a->delay_ms * 1000);
    double t = now_ms();
    a->rc = ncclCommAbort(a->comm);
    a->took = now_ms() - t;
    return NULL;
}

/* Where abort_named finds the communicator to abort: a handle another thread is creating. */
static volatile ncclComm_t *volatile aborter_target;

static void *abort_named(void *p) {
    struct aborter *a = p;
    while (!__atomic_load_n(a->go, __ATOMIC_ACQUIRE)) usleep(1000);
    usleep(a->delay_ms * 1000);
    while (!aborter_target || !*aborter_target) usleep(1000);
    a->comm = *aborter_target;
    double t = now_ms();
    a->rc = ncclCommAbort(a->comm);
    a->took = now_ms() - t;
    return NULL;
}

static void invalid(void);
static void group_errors(void);

int main(int argc, char **argv) {
    CHECK(argc >= 5);
    const char *what = argv[1], *path = argv[4];
    R = atoi(argv[2]);
    N = atoi(argv[3]);
    OK(cudaSetDevice(R % 8));
    OK(cudaStreamCreate(&stream));
    OK(cudaMalloc((void **)&buf, 256 * sizeof(float)));
    if (strcmp(what, "grouperr") == 0) {
        /* Device 1's memory (its arena's descriptors) stays for the process's life. */
        void *warm;
        OK(cudaSetDevice(1));
        OK(cudaMalloc(&warm, 256));
        OK(cudaFree(warm));
        OK(cudaSetDevice(R % 8));
    }
    struct counts before = counts();
    int victim = R == N - 1;

    if (strcmp(what, "invalid") == 0) {
        invalid();
        leaks(before);
        return 0;
    }
    if (strcmp(what, "grouperr") == 0) {
        group_errors();
        leaks(before);
        return 0;
    }
    if (strcmp(what, "before") == 0 || strcmp(what, "during") == 0) {
        if (victim && what[0] == 'b') raise(SIGKILL);
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        double t = now_ms();
        ncclResult_t rc = ncclCommInitRank(&comm, N, id, R);
        result(what, rc, t, ncclGetLastError(NULL));
        CHECK(rc != ncclSuccess);
        leaks(before);
        return 0;
    }
    if (strcmp(what, "midcoll") == 0) {
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, R));
        checked_allreduce(comm);
        if (victim) { usleep(300000); raise(SIGKILL); }
        double t = now_ms();
        ncclResult_t rc = ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, comm, stream);
        result(what, rc, t, ncclGetLastError(comm));
        /* What a watchdog polling the communicator sees. */
        ncclResult_t async = ncclSuccess;
        OK(ncclCommGetAsyncError(comm, &async));
        result("async", async, t, "ncclCommGetAsyncError");
        OK(ncclCommAbort(comm));
        leaks(before);
        return 0;
    }
    if (strcmp(what, "abort_coll") == 0) {
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, R));
        checked_allreduce(comm);
        if (victim) {
            usleep(600000);
            OK(ncclCommAbort(comm));
        } else {
            volatile int go = 0;
            struct aborter a = { comm, 300, &go, -1, 0 };
            pthread_t th;
            CHECK(pthread_create(&th, NULL, abort_later, &a) == 0);
            double t = now_ms();
            __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
            ncclResult_t rc = ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, comm, stream);
            result(what, rc, t, ncclGetLastError(NULL));
            CHECK(pthread_join(th, NULL) == 0);
            OK(a.rc);
            CHECK(rc != ncclSuccess);
        }
        restart(path);
        leaks(before);
        return 0;
    }
    if (strcmp(what, "abort_init") == 0) {
        if (!victim) {
            ncclUniqueId id = shared_id(path, 1);
            ncclComm_t comm;
            ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
            cfg.blocking = 0;
            ncclResult_t rc = ncclCommInitRankConfig(&comm, N, id, R, &cfg);
            CHECK(rc == ncclInProgress);
            /* Rank N-1 never joins this one: the init stays in progress until aborted. */
            ncclResult_t st = ncclSuccess;
            for (int i = 0; i < 30; i++) { OK(ncclCommGetAsyncError(comm, &st)); CHECK(st == ncclInProgress); usleep(10000); }
            struct aborter a = { comm, 0, NULL, -1, 0 };
            pthread_t th;
            CHECK(pthread_create(&th, NULL, abort_later, &a) == 0);
            CHECK(pthread_join(th, NULL) == 0);
            result(what, a.rc, now_ms() - a.took, "ncclCommAbort of an init in progress returned");
            CHECK(ncclCommGetAsyncError(comm, &st) == ncclInvalidArgument);
            /* A blocking init names its communicator before it completes (as NCCL does), so
             * another thread can abort it: the init then returns. */
            id = shared_id(path, 3);
            volatile ncclComm_t blocking = NULL;
            volatile int go = 0;
            struct aborter b = { NULL, 300, &go, -1, 0 };
            pthread_t tb;
            CHECK(pthread_create(&tb, NULL, abort_named, (void *)&b) == 0);
            aborter_target = &blocking;
            double t = now_ms();
            __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
            rc = ncclCommInitRank((ncclComm_t *)&blocking, N, id, R);
            result("abort_blocking_init", rc, t, ncclGetLastError(NULL));
            CHECK(pthread_join(tb, NULL) == 0);
            OK(b.rc);
            CHECK(rc != ncclSuccess && blocking == NULL);
        }
        restart(path);
        leaks(before);
        return 0;
    }
    if (strcmp(what, "forged") == 0) {
        ncclUniqueId id = shared_id(path, 1);
        if (victim) usleep(1500000);
        ncclComm_t comm;
        double t = now_ms();
        OK(ncclCommInitRank(&comm, N, id, R));
        checked_allreduce(comm);
        OK(ncclCommDestroy(comm));
        result(what, 0, t, "initialised and reduced despite forged peers");
        leaks(before);
        return 0;
    }
    if (strcmp(what, "duprank") == 0) {
        /* The refused process writes IDFILE.refused; rank 0 joins only after that, so the
         * refusal happens while the root still gathers. */
        char refused[4096];
        snprintf(refused, sizeof refused, "%s.refused", path);
        ncclUniqueId id = shared_id(path, 1);
        if (R == 0)
            await_file(refused, 3000);
        ncclComm_t comm;
        double t = now_ms();
        ncclResult_t rc = ncclCommInitRank(&comm, 2, id, R == 0 ? 0 : 1);
        result(what, rc, t, ncclGetLastError(NULL));
        if (rc != ncclSuccess) {
            touch(refused);
        } else {
            OK(ncclCommDestroy(comm));
        }
        leaks(before);
        return 0;
    }
    if (strcmp(what, "latedup") == 0) {
        char formed[4096], refused[4096];
        snprintf(formed, sizeof formed, "%s.formed", path);
        snprintf(refused, sizeof refused, "%s.refused", path);
        N = 2;
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        double t;
        if (R == 2) {
            await_file(formed, 3000);
            t = now_ms();
            ncclResult_t rc = ncclCommInitRank(&comm, 2, id, 1);
            result(what, rc, t, ncclGetLastError(NULL));
            touch(refused);
            if (rc == ncclSuccess) OK(ncclCommDestroy(comm));
            leaks(before);
            return 0;
        }
        t = now_ms();
        OK(ncclCommInitRank(&comm, 2, id, R));
        checked_allreduce(comm);
        if (R == 0) touch(formed);
        await_file(refused, 6000);
        checked_allreduce(comm);
        OK(ncclCommDestroy(comm));
        result(what, 0, t, "reduced before and after the late rank");
        leaks(before);
        return 0;
    }
    if (strcmp(what, "groupdup") == 0) {
        ncclUniqueId id;
        OK(ncclGetUniqueId(&id));
        ncclComm_t c[2] = { NULL, NULL };
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 1;
        double t = now_ms();
        OK(ncclGroupStart());
        for (int r = 0; r < 2; r++) OK(ncclCommInitRankConfig(&c[r], 2, id, r, &cfg));
        ncclResult_t rc = ncclGroupEnd();
        result("group_end", rc, t, ncclGetLastError(NULL));
        t = now_ms();
        rc = ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, c[0], stream);
        result("allreduce", rc, t, ncclGetLastError(NULL));
        for (int r = 0; r < 2; r++) OK(ncclCommDestroy(c[r]));
        /* NCCL_SPLIT_NOCOLOR in a group: that rank gets no communicator, which is no failure. */
        ncclComm_t all[2], part[2] = { NULL, NULL };
        int devs[2] = { 0, 1 };
        OK(ncclCommInitAll(all, 2, devs));
        t = now_ms();
        OK(ncclGroupStart());
        OK(ncclCommSplit(all[0], NCCL_SPLIT_NOCOLOR, 0, &part[0], NULL));
        OK(ncclCommSplit(all[1], 0, 0, &part[1], NULL));
        rc = ncclGroupEnd();
        result("group_nocolor", rc, t, rc == ncclSuccess ? "" : ncclGetLastError(NULL));
        int n = 0;
        OK(ncclCommCount(part[1], &n));
        CHECK(n == 1);
        for (int r = 0; r < 2; r++) OK(ncclCommDestroy(part[r]));
        for (int r = 0; r < 2; r++) OK(ncclCommDestroy(all[r]));
        leaks(before);
        return 0;
    }
    if (strcmp(what, "hold") == 0) {
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        double t = now_ms();
        OK(ncclCommInitRank(&comm, N, id, R));
        checked_allreduce(comm);
        printf("holding rank=%d\n", R);
        fflush(stdout);
        char go[4096];
        snprintf(go, sizeof go, "%s.go", path);
        await_file(go, 3000);
        checked_allreduce(comm);
        OK(ncclCommDestroy(comm));
        result(what, 0, t, "held and used");
        leaks(before);
        return 0;
    }
    if (strcmp(what, "idle") == 0) {
        /* Rank 0 comes 500 ms late to an AllReduce: the others' CPU time over their wait. */
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, R));
        checked_allreduce(comm);
        if (R == 0) usleep(500 * 1000);
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        double t = now_ms();
        ncclResult_t rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, stream);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        char msg[64];
        snprintf(msg, sizeof msg, "cpu_ms=%.1f",
                 (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) * 1e-6);
        result("idle", rc, t, msg);
        OK(ncclCommDestroy(comm));
        return 0;
    }
    if (strcmp(what, "mismatch") == 0) {
        ncclUniqueId id = shared_id(path, 1);
        ncclComm_t comm;
        OK(ncclCommInitRank(&comm, N, id, R));
        double t = now_ms();
        ncclResult_t rc = ncclAllReduce(buf, buf, R == 0 ? 16 : 32, ncclFloat, ncclSum, comm, stream);
        result("count", rc, t, ncclGetLastError(comm));
        t = now_ms();
        rc = ncclAllReduce(buf, buf, 16, R == 1 ? ncclInt32 : ncclFloat, ncclSum, comm, stream);
        result("type", rc, t, ncclGetLastError(comm));
        /* The same bytes moved, something else called. */
        t = now_ms();
        rc = ncclAllReduce(buf, buf, 16, ncclFloat, R == 1 ? ncclMax : ncclSum, comm, stream);
        result("op", rc, t, ncclGetLastError(comm));
        t = now_ms();
        rc = R == N - 1 ? ncclReduce(buf, buf, 16, ncclFloat, ncclSum, 0, comm, stream)
                        : ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, stream);
        result("kind", rc, t, ncclGetLastError(comm));
        t = now_ms();
        rc = ncclBroadcast(buf, buf, 16, ncclFloat, R == N - 1 ? 1 : 0, comm, stream);
        result("root", rc, t, ncclGetLastError(comm));
        /* Calls of different sizes take different paths (inputs copied into the shared
         * segment up to 1 KiB, buffers used in place above): the ranks still meet. */
        float *big = NULL;
        OK(cudaMalloc((void **)&big, 4096 * sizeof(float)));
        t = now_ms();
        rc = ncclAllReduce(big, big, R == 0 ? 16 : 4096, ncclFloat, ncclSum, comm, stream);
        result("path", rc, t, ncclGetLastError(comm));
        t = now_ms();
        rc = ncclAllReduce(big, big, R == N - 1 ? 16 : 4096, ncclFloat, ncclSum, comm, stream);
        result("path_last", rc, t, ncclGetLastError(comm));
        OK(cudaFree(big));
        checked_allreduce(comm);
        OK(ncclCommDestroy(comm));
        leaks(before);
        return 0;
    }
    fprintf(stderr, "unknown scenario %s\n", what);
    return 2;
}

/* One call that must fail: its code and message go to the result lines. */
#define TRY(name, call)                                                                        \
    do {                                                                                       \
        double t_ = now_ms();                                                                  \
        ncclResult_t rc_ = (call);                                                             \
        result(name, rc_, t_, ncclGetLastError(NULL));                                         \
    } while (0)

static void invalid(void) {
    ncclComm_t c[2];
    int devs[2] = { 0, 1 };
    OK(ncclCommInitAll(c, 2, devs));
    OK(cudaSetDevice(0));
    float *d = NULL, host[64];
    /* One page: the fake core's allocation granule, so the allocation is exactly 1024 floats. */
    OK(cudaMalloc((void **)&d, 1024 * sizeof(float)));
    TRY("null_sendbuff", ncclAllReduce(NULL, d, 16, ncclFloat, ncclSum, c[0], stream));
    TRY("null_recvbuff", ncclAllReduce(d, NULL, 16, ncclFloat, ncclSum, c[0], stream));
    TRY("host_sendbuff", ncclAllReduce(host, d, 16, ncclFloat, ncclSum, c[0], stream));
    TRY("host_recvbuff", ncclBroadcast(d, host, 16, ncclFloat, 0, c[0], stream));
    TRY("small_buffer", ncclAllReduce(d, d, 1025, ncclFloat, ncclSum, c[0], stream));
    TRY("small_offset", ncclAllReduce(d + 1020, d + 1020, 8, ncclFloat, ncclSum, c[0], stream));
    TRY("small_allgather", ncclAllGather(d, d, 600, ncclFloat, c[0], stream));
    TRY("bad_type", ncclAllReduce(d, d, 16, (ncclDataType_t)42, ncclSum, c[0], stream));
    TRY("bad_op", ncclReduceScatter(d, d, 8, ncclFloat, (ncclRedOp_t)77, c[0], stream));
    TRY("bad_root", ncclReduce(d, d, 16, ncclFloat, ncclSum, 2, c[0], stream));
    TRY("negative_root", ncclBroadcast(d, d, 16, ncclFloat, -1, c[0], stream));
    TRY("bad_peer", ncclSend(d, 16, ncclFloat, 2, c[0], stream));
    TRY("negative_peer", ncclRecv(d, 16, ncclFloat, -1, c[0], stream));
    TRY("send_bad_type", ncclSend(d, 16, (ncclDataType_t)-3, 1, c[0], stream));
    {
        ncclUniqueId id;
        ncclComm_t x;
        OK(ncclGetUniqueId(&id));
        TRY("bad_rank", ncclCommInitRank(&x, 2, id, 2));
        TRY("bad_nranks", ncclCommInitRank(&x, 0, id, 0));
        /* That id's root waits for ranks that will never come: a failed init stops it. */
    }
    TRY("forged_comm", ncclAllReduce(d, d, 16, ncclFloat, ncclSum, (ncclComm_t)0x1234, stream));
    OK(ncclCommDestroy(c[0]));
    OK(ncclCommDestroy(c[1]));
    TRY("destroyed_comm", ncclAllReduce(d, d, 16, ncclFloat, ncclSum, c[0], stream));
    TRY("destroyed_send", ncclSend(d, 16, ncclFloat, 1, c[0], stream));
    int n = 0;
    TRY("destroyed_count", ncclCommCount(c[1], &n));
    TRY("destroy_twice", ncclCommDestroy(c[0]));
    OK(cudaFree(d));
}

/* Fills dev[r] (256 floats on device r) with r+1. */
static void fill(float *dev[2]) {
    float h[256];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 256; i++) h[i] = (float)(r + 1);
        OK(cudaSetDevice(r));
        OK(cudaMemcpy(dev[r], h, sizeof h, 1));
    }
}

/* Whether every float of dev[0] is `want0` and every float of dev[1] `want1`. */
static int holds(float *dev[2], float want0, float want1) {
    float h[256];
    for (int r = 0; r < 2; r++) {
        OK(cudaSetDevice(r));
        OK(cudaMemcpy(h, dev[r], sizeof h, 2));
        for (int i = 0; i < 256; i++)
            if (h[i] != (r == 0 ? want0 : want1)) return 0;
    }
    return 1;
}

/* Each bad call inside a group beside two valid AllReduces (one per rank): the call fails at
 * once, the group's end fails with its code, and the AllReduces do not run (the buffers keep
 * 1 and 2). A valid group afterwards sums them to 3. */
static void group_errors(void) {
    ncclComm_t c[2];
    int devs[2] = { 0, 1 };
    OK(ncclCommInitAll(c, 2, devs));
    float *d[2];
    for (int r = 0; r < 2; r++) {
        OK(cudaSetDevice(r));
        OK(cudaMalloc((void **)&d[r], 256 * sizeof(float)));
    }
    static const char *names[] = { "count", "dtype", "op", "null", "peer", "root" };
    for (int k = 0; k < 6; k++) {
        fill(d);
        char name[64];
        OK(ncclGroupStart());
        for (int r = 0; r < 2; r++) OK(ncclAllReduce(d[r], d[r], 256, ncclFloat, ncclSum, c[r], stream));
        double t = now_ms();
        ncclResult_t rc;
        switch (k) {
        case 0: rc = ncclAllReduce(d[0], d[0], 257, ncclFloat, ncclSum, c[0], stream); break;
        case 1: rc = ncclAllReduce(d[0], d[0], 16, (ncclDataType_t)42, ncclSum, c[0], stream); break;
        case 2: rc = ncclAllReduce(d[0], d[0], 16, ncclFloat, (ncclRedOp_t)77, c[0], stream); break;
        case 3: rc = ncclAllReduce(NULL, d[0], 16, ncclFloat, ncclSum, c[0], stream); break;
        case 4: rc = ncclSend(d[0], 16, ncclFloat, 2, c[0], stream); break;
        default: rc = ncclBroadcast(d[0], d[0], 16, ncclFloat, 5, c[0], stream); break;
        }
        snprintf(name, sizeof name, "call_%s", names[k]);
        result(name, rc, t, ncclGetLastError(NULL));
        t = now_ms();
        rc = ncclGroupEnd();
        snprintf(name, sizeof name, "end_%s", names[k]);
        result(name, rc, t, rc == ncclSuccess ? "" : ncclGetLastError(NULL));
        snprintf(name, sizeof name, "untouched_%s", names[k]);
        int kept = holds(d, 1, 2);
        result(name, kept ? 0 : 1, t, kept ? "1 and 2 kept" : "the group's AllReduces ran");
    }
    OK(cudaSetDevice(0));
    fill(d);
    OK(ncclGroupStart());
    for (int r = 0; r < 2; r++) OK(ncclAllReduce(d[r], d[r], 256, ncclFloat, ncclSum, c[r], stream));
    OK(ncclGroupEnd());
    CHECK(holds(d, 3, 3));
    for (int r = 0; r < 2; r++) OK(ncclCommDestroy(c[r]));
    for (int r = 0; r < 2; r++) OK(cudaFree(d[r]));
    OK(cudaSetDevice(0));
}
