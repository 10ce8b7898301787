/* Every collective, data type and reduction on the world communicator, with data uniform
 * across data-parallel replicas: rank r's inputs depend only on r % LOCAL_WORLD_SIZE (its
 * position in its node), so a job run all-real and the same job folded over its outer
 * dimension (`ncclsim run --fold dp`) must give every real rank the same bytes.
 *
 *   nccl_fold IDFILE OUTDIR        ranks from RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE
 *   nccl_fold IDFILE OUTDIR split  the world split in two halves by rank: prints what
 *                                  ncclCommSplit returns and ncclGetLastError
 *   nccl_fold IDFILE OUTDIR big    an AllReduce of 4 values copied from the host, checked,
 *                                  then an AllReduce and an AllGather of 1 GiB buffers
 *                                  never written: prints "big ok" or the error
 *
 * Then sends and receives with peers on other nodes (virtual when folded) and inside the node.
 * Writes OUTDIR/rank<R>.bin: every result buffer in call order, and prints "ok <calls>". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nccl.h"

int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaMemset(void *, int, size_t);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);

static const char *error_name(int code) { return ncclGetErrorString((ncclResult_t)code); }
#include "ncclsim_check.h"
#include "unique_id_file.h"

#define H2D 1
#define D2H 2

static int env_int(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "FAIL %s is not set\n", name);
        exit(1);
    }
    return atoi(v);
}

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

/* Element i of the input of the rank at position `pos` of its node, as the type's bits:
 * values near 1 for the narrow floating types (so sums and products stay in range), small
 * integers and fractions for the others. */
static void element(ncclDataType_t t, int pos, size_t i, unsigned char *out) {
    unsigned k = (unsigned)(pos * 31 + i * 7) % 97;
    switch (t) {
    case ncclInt8: case ncclUint8: { uint8_t v = (uint8_t)(k % 5 + 1); memcpy(out, &v, 1); break; }
    case ncclInt32: { int32_t v = (int32_t)k - 40; memcpy(out, &v, 4); break; }
    case ncclUint32: { uint32_t v = k + 1; memcpy(out, &v, 4); break; }
    case ncclInt64: { int64_t v = (int64_t)k - 40; memcpy(out, &v, 8); break; }
    case ncclUint64: { uint64_t v = k + 1; memcpy(out, &v, 8); break; }
    case ncclFloat16: { uint16_t v = (uint16_t)(0x3C00 | (k * 9 & 0x3FF)); memcpy(out, &v, 2); break; }
    case ncclBfloat16: { uint16_t v = (uint16_t)(0x3F80 | (k & 0x7F)); memcpy(out, &v, 2); break; }
    case ncclFloat8e4m3: { uint8_t v = (uint8_t)(0x38 | (k & 7)); memcpy(out, &v, 1); break; }
    case ncclFloat8e5m2: { uint8_t v = (uint8_t)(0x3C | (k & 3)); memcpy(out, &v, 1); break; }
    case ncclFloat32: { float v = (float)k * 0.37f - 11.1f; memcpy(out, &v, 4); break; }
    default: { double v = (double)k * 0.37 - 11.1; memcpy(out, &v, 8); break; }
    }
}

static void *input(ncclDataType_t t, int pos, size_t count) {
    size_t es = type_size(t);
    unsigned char *h = malloc(count * es + 1);
    for (size_t i = 0; i < count; i++) element(t, pos, i, h + i * es);
    void *d = NULL;
    OK(cudaMalloc(&d, count * es + 1));
    OK(cudaMemcpy(d, h, count * es, H2D));
    free(h);
    return d;
}

static void *output(size_t bytes) {
    void *d = NULL;
    OK(cudaMalloc(&d, bytes + 1));
    OK(cudaMemset(d, 0xA5, bytes + 1));
    return d;
}

static FILE *out;
static int calls;

static void keep(void *d, size_t bytes, void *stream) {
    OK(cudaStreamSynchronize(stream));
    unsigned char *h = malloc(bytes + 1);
    OK(cudaMemcpy(h, d, bytes, D2H));
    CHECK(fwrite(h, 1, bytes, out) == bytes);
    free(h);
    calls++;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: nccl_fold IDFILE OUTDIR\n");
        return 2;
    }
    int rank = env_int("RANK"), n = env_int("WORLD_SIZE");
    int local = env_int("LOCAL_RANK"), per = env_int("LOCAL_WORLD_SIZE");
    int pos = rank % per;
    OK(cudaSetDevice(local));
    ncclUniqueId id;
    if (rank == 0) {
        OK(ncclGetUniqueId(&id));
        write_id(argv[1], &id);
    } else {
        read_id(argv[1], &id, 60);
    }
    ncclComm_t comm;
    OK(ncclCommInitRank(&comm, n, id, rank));
    int got = 0;
    OK(ncclCommCount(comm, &got));
    CHECK(got == n);
    OK(ncclCommUserRank(comm, &got));
    CHECK(got == rank);
    if (argc == 4 && strcmp(argv[3], "big") == 0) {
        void *a = NULL, *b = NULL, *st = NULL;
        size_t count = (size_t)1 << 28;
        OK(cudaMalloc(&a, count * 4));
        OK(cudaMalloc(&b, count * 4 * (size_t)n));
        OK(cudaStreamCreate(&st));
        /* A small call moves its bytes even under --compute time: programs exchange host-made
         * values this way. */
        float h[4] = {1, 2, 3, (float)(rank % per)}, want = 0;
        for (int q = 0; q < n; q++) want += (float)(q % per);
        OK(cudaMemcpy(b, h, sizeof h, H2D));
        OK(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, comm, st));
        OK(cudaStreamSynchronize(st));
        OK(cudaMemcpy(h, b, sizeof h, D2H));
        CHECK(h[0] == (float)n && h[1] == 2.0f * n && h[3] == want);
        ncclResult_t r = ncclAllReduce(a, a, count, ncclFloat32, ncclSum, comm, st);
        if (r == ncclSuccess) r = ncclAllGather(a, b, count, ncclFloat32, comm, st);
        if (r == ncclSuccess) OK(cudaStreamSynchronize(st));
        if (r != ncclSuccess) {
            printf("big failed: %s\n", ncclGetLastError(comm));
            return 3;
        }
        printf("big ok\n");
        return 0;
    }
    if (argc == 4) {
        ncclComm_t half;
        ncclResult_t r = ncclCommSplit(comm, rank < n / 2, rank, &half, NULL);
        printf("split %d: %s\n", (int)r, ncclGetLastError(comm));
        return r == ncclSuccess ? 0 : 3;
    }
    void *s = NULL;
    OK(cudaStreamCreate(&s));
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d.bin", argv[2], rank);
    out = fopen(path, "wb");
    CHECK(out != NULL);

    const ncclDataType_t types[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                    ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
                                    ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
    const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    /* A small call (the inline path) and a large one (the general path). */
    const size_t counts[] = {24, 3000};
    /* Roots: rank 0 (real) and the last rank (virtual when folded). */
    const int roots[] = {0, n - 1};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        ncclDataType_t t = types[ti];
        size_t es = type_size(t);
        for (size_t ci = 0; ci < 2; ci++) {
            size_t c = counts[ci];
            void *in = input(t, pos, c), *big = input(t, pos, c * n);
            void *res = output(c * es), *all = output(c * n * es);
            for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
                OK(ncclAllReduce(in, res, c, t, ops[oi], comm, s));
                keep(res, c * es, s);
                OK(ncclReduceScatter(big, res, c, t, ops[oi], comm, s));
                keep(res, c * es, s);
                for (int ri = 0; ri < 2; ri++) {
                    OK(ncclReduce(in, res, c, t, ops[oi], roots[ri], comm, s));
                    if (rank == roots[ri]) keep(res, c * es, s);
                }
            }
            /* PreMulSum with a scalar that depends on the rank's position. */
            unsigned char scalar[8];
            element(t, pos + 3, 1, scalar);
            ncclRedOp_t pre;
            OK(ncclRedOpCreatePreMulSum(&pre, scalar, t, ncclScalarHostImmediate, comm));
            OK(ncclAllReduce(in, res, c, t, pre, comm, s));
            keep(res, c * es, s);
            OK(ncclReduceScatter(big, res, c, t, pre, comm, s));
            keep(res, c * es, s);
            OK(ncclRedOpDestroy(pre, comm));
            /* In place. */
            OK(cudaMemcpy(res, in, c * es, 3));
            OK(ncclAllReduce(res, res, c, t, ncclSum, comm, s));
            keep(res, c * es, s);
            OK(ncclAllGather(in, all, c, t, comm, s));
            keep(all, c * n * es, s);
            /* An all-gather as one in-place broadcast per root in a group (torch's all_gather
             * into a list): each root sends its own input, the others pass their slot. */
            OK(cudaMemset(all, 0, c * n * es));
            OK(ncclGroupStart());
            for (int r = 0; r < n; r++) {
                char *slot = (char *)all + (size_t)r * c * es;
                OK(ncclBroadcast(r == rank ? in : slot, slot, c, t, r, comm, s));
            }
            OK(ncclGroupEnd());
            keep(all, c * n * es, s);
            OK(ncclAlltoAll(big, all, c, t, comm, s));
            keep(all, c * n * es, s);
            for (int ri = 0; ri < 2; ri++) {
                OK(ncclBroadcast(in, res, c, t, roots[ri], comm, s));
                keep(res, c * es, s);
                OK(ncclGather(in, all, c, t, roots[ri], comm, s));
                if (rank == roots[ri]) keep(all, c * n * es, s);
                OK(ncclScatter(big, res, c, t, roots[ri], comm, s));
                keep(res, c * es, s);
            }
            /* Sends and receives in one group: a ring over the nodes (peer rank +- per), a
             * ring over the nodes shifted by one position (peer rank +- (per + 1)) and a ring
             * inside the node; each direction sends its own data. Folded, the first two have
             * virtual peers. */
            int base = rank - pos;
            int to[3] = {(rank + per) % n, (rank + per + 1) % n, base + (pos + 1) % per};
            int from[3] = {(rank - per + n) % n, (rank - per - 1 + 2 * n) % n,
                           base + (pos - 1 + per) % per};
            void *sent[3], *got[3];
            for (int d = 0; d < 3; d++) {
                sent[d] = input(t, pos * 4 + d + 1, c);
                got[d] = output(c * es);
            }
            OK(ncclGroupStart());
            for (int d = 0; d < 3; d++) {
                OK(ncclSend(sent[d], c, t, to[d], comm, s));
                OK(ncclRecv(got[d], c, t, from[d], comm, s));
            }
            OK(ncclGroupEnd());
            for (int d = 0; d < 3; d++) {
                keep(got[d], c * es, s);
                OK(cudaFree(sent[d])); OK(cudaFree(got[d]));
            }
            OK(cudaFree(in)); OK(cudaFree(big)); OK(cudaFree(res)); OK(cudaFree(all));
        }
    }
    fclose(out);
    OK(ncclCommDestroy(comm));
    printf("ok %d\n", calls);
    return 0;
}
