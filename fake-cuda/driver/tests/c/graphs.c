/* Stream capture, CUDA graphs and user objects through the driver API, from C: linked against
 * libcuda.so.1 and libcudart.so.12 by their real names. Scenarios (argv[1]):
 *   capture   a memset and a copy back to the host captured on a driver stream run nothing
 *             until the graph is launched; each instantiate form's executable graph replays
 *             them (three launches); the runtime launches the same graph; cuGraphExecUpdate
 *             (both forms) takes a graph of the same shape and refuses another node count
 *             with CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE and its result;
 *   objects   a user object's destructor runs once, when its last reference goes: the
 *             creator's moved to a graph, the graph's copied to its executable graph;
 *   versions  cuGetProcAddress resolves the plain names to the ABI of the caller's version. */
#include "cuda_vmm.h"

typedef void *CUstream;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUgraphNode;
typedef void *CUuserObject;
typedef struct { int result; CUgraphNode errorNode; CUgraphNode errorFromNode; } UpdateInfo;

int cuInit(unsigned);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemFree_v2(CUdeviceptr);
int cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
int cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream);
int cuStreamCreate(CUstream *, unsigned);
int cuStreamDestroy_v2(CUstream);
int cuStreamSynchronize(CUstream);
int cuCtxSynchronize(void);
int cuStreamBeginCapture_v2(CUstream, int);
int cuStreamEndCapture(CUstream, CUgraph *);
int cuStreamIsCapturing(CUstream, int *);
int cuStreamGetCaptureInfo_v3(CUstream, int *, unsigned long long *, CUgraph *,
                              const CUgraphNode **, const void **, size_t *);
int cuGraphCreate(CUgraph *, unsigned);
int cuGraphDestroy(CUgraph);
int cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *);
int cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
int cuGraphInstantiate_v2(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
int cuGraphLaunch(CUgraphExec, CUstream);
int cuGraphExecDestroy(CUgraphExec);
int cuGraphExecUpdate(CUgraphExec, CUgraph, CUgraphNode *, int *);
int cuGraphExecUpdate_v2(CUgraphExec, CUgraph, UpdateInfo *);
int cuUserObjectCreate(CUuserObject *, void *, void (*)(void *), unsigned, unsigned);
int cuUserObjectRetain(CUuserObject, unsigned);
int cuUserObjectRelease(CUuserObject, unsigned);
int cuGraphRetainUserObject(CUgraph, CUuserObject, unsigned, unsigned);
int cuGraphReleaseUserObject(CUgraph, CUuserObject, unsigned);
int cuGetErrorName(int, const char **);
cudaError_t cudaGraphInstantiate(void **, void *, unsigned long long);
cudaError_t cudaGraphLaunch(void *, cudaStream_t);
cudaError_t cudaGraphExecDestroy(void *);

/* CUstreamCaptureStatus, CUgraphExecUpdateResult, CUresult. */
enum { NONE = 0, ACTIVE = 1, TOPOLOGY_CHANGED = 2, UPDATE_FAILURE = 910 };
#define N 4096

static unsigned char host[N];

/* A graph captured on `s`: a memset of `d` to `value`, then, with `copy`, `d` copied to the
 * host buffer. */
static CUgraph capture(CUstream s, CUdeviceptr d, unsigned char value, int copy) {
    OK(cuStreamBeginCapture_v2(s, 0));
    int status = -1;
    OK(cuStreamIsCapturing(s, &status));
    CHECK(status == ACTIVE);
    unsigned long long id = 0;
    CUgraph during = NULL;
    size_t deps = 99;
    OK(cuStreamGetCaptureInfo_v3(s, &status, &id, &during, NULL, NULL, &deps));
    CHECK(status == ACTIVE && id != 0 && during != NULL && deps == 0);
    OK(cuMemsetD8Async(d, value, N, s));
    if (copy) OK(cuMemcpyAsync((CUdeviceptr)host, d, N, s));
    CUgraph g = NULL;
    OK(cuStreamEndCapture(s, &g));
    OK(cuStreamIsCapturing(s, &status));
    CHECK(status == NONE && g != NULL);
    return g;
}

static int all(unsigned char v) {
    for (size_t i = 0; i < N; i++)
        if (host[i] != v) return 0;
    return 1;
}

static void launch_and_check(CUgraphExec e, CUstream s, unsigned char v) {
    for (int round = 0; round < 3; round++) {
        memset(host, 0, N);
        OK(cuGraphLaunch(e, s));
        OK(cuStreamSynchronize(s));
        CHECK(all(v));
    }
}

static void capture_scenario(void) {
    OK(cuInit(0));
    CUstream s;
    OK(cuStreamCreate(&s, 1));
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, N));
    memset(host, 0, N);
    CUgraph g = capture(s, d, 7, 1);
    OK(cuStreamSynchronize(s));
    CHECK(all(0)); /* captured, not run */
    size_t count = 0;
    OK(cuGraphGetNodes(g, NULL, &count));
    CHECK(count == 2);
    CUgraphNode nodes[2] = {NULL, NULL};
    OK(cuGraphGetNodes(g, nodes, &count));
    CHECK(count == 2 && nodes[0] && nodes[1] && nodes[0] != nodes[1]);

    CUgraphExec e1, e2;
    OK(cuGraphInstantiateWithFlags(&e1, g, 0));
    launch_and_check(e1, s, 7);
    char log[16] = "x";
    CUgraphNode bad = (CUgraphNode)1;
    OK(cuGraphInstantiate_v2(&e2, g, &bad, log, sizeof log));
    CHECK(bad == NULL && log[0] == 0);
    launch_and_check(e2, s, 7);
    /* The runtime instantiates and launches the driver's graph. */
    void *re;
    OK(cudaGraphInstantiate(&re, g, 0));
    memset(host, 0, N);
    OK(cudaGraphLaunch(re, (cudaStream_t)s));
    OK(cuStreamSynchronize(s));
    CHECK(all(7));
    OK(cudaGraphExecDestroy(re));

    /* Updates: the same shape is taken, another node count refused. */
    CUgraph same = capture(s, d, 9, 1);
    UpdateInfo info = {-1, (CUgraphNode)1, (CUgraphNode)1};
    OK(cuGraphExecUpdate_v2(e1, same, &info));
    CHECK(info.result == 0 && info.errorNode == NULL);
    launch_and_check(e1, s, 9);
    CUgraph shorter = capture(s, d, 5, 0);
    CHECK(cuGraphExecUpdate_v2(e1, shorter, &info) == UPDATE_FAILURE);
    CHECK(info.result == TOPOLOGY_CHANGED);
    const char *name = NULL;
    OK(cuGetErrorName(UPDATE_FAILURE, &name));
    CHECK(strcmp(name, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE") == 0);
    int result = -1;
    CUgraphNode node = (CUgraphNode)1;
    CHECK(cuGraphExecUpdate(e2, shorter, &node, &result) == UPDATE_FAILURE);
    CHECK(result == TOPOLOGY_CHANGED);
    OK(cuGraphExecUpdate(e2, same, &node, &result));
    CHECK(result == 0 && node == NULL);
    launch_and_check(e2, s, 9);
    launch_and_check(e1, s, 9); /* the refused update left e1 as it was */
    CHECK(cuGraphExecUpdate_v2(e1, same, NULL) == INVALID_VALUE);

    OK(cuGraphExecDestroy(e1));
    OK(cuGraphExecDestroy(e2));
    CHECK(cuGraphLaunch(e1, s) != 0);
    OK(cuGraphDestroy(g));
    OK(cuGraphDestroy(same));
    OK(cuGraphDestroy(shorter));
    OK(cuMemFree_v2(d));
    OK(cuStreamDestroy_v2(s));
    printf("PASS capture\n");
}

static int destroyed;
static void destroy(void *p) { *(int *)p += 1; }

static void objects_scenario(void) {
    OK(cuInit(0));
    CUuserObject o;
    CHECK(cuUserObjectCreate(&o, &destroyed, destroy, 1, 0) == INVALID_VALUE); /* flags */
    CHECK(cuUserObjectCreate(&o, &destroyed, NULL, 1, 1) == INVALID_VALUE);
    OK(cuUserObjectCreate(&o, &destroyed, destroy, 1, 1));
    OK(cuUserObjectRetain(o, 2));
    OK(cuUserObjectRelease(o, 2));
    CHECK(destroyed == 0);
    CUgraph g;
    OK(cuGraphCreate(&g, 0));
    OK(cuGraphRetainUserObject(g, o, 1, 1)); /* moves the creator's reference */
    CHECK(cuUserObjectRelease(o, 1) != 0);   /* the creator holds none now */
    CUgraphExec e;
    OK(cuGraphInstantiateWithFlags(&e, g, 0));
    OK(cuGraphDestroy(g));
    OK(cuCtxSynchronize());
    CHECK(destroyed == 0); /* the executable graph holds it */
    OK(cuGraphExecDestroy(e));
    OK(cuCtxSynchronize());
    CHECK(destroyed == 1);

    /* A reference a graph retains and releases again leaves the creator's. */
    CUuserObject o2;
    OK(cuUserObjectCreate(&o2, &destroyed, destroy, 1, 1));
    OK(cuGraphCreate(&g, 0));
    OK(cuGraphRetainUserObject(g, o2, 2, 0));
    OK(cuGraphReleaseUserObject(g, o2, 2));
    CHECK(cuGraphReleaseUserObject(g, o2, 1) == INVALID_VALUE);
    OK(cuGraphDestroy(g));
    CHECK(destroyed == 1);
    OK(cuUserObjectRelease(o2, 1));
    OK(cuCtxSynchronize());
    CHECK(destroyed == 2);
    printf("PASS objects\n");
}

/* The export `name` resolves to at CUDA version `version`. */
static void *proc(const char *name, int version) {
    void *p = NULL;
    int status = -1;
    OK(cuGetProcAddress_v2(name, &p, version, 0, &status));
    CHECK(status == 0 && p != NULL);
    return p;
}

static void versions_scenario(void) {
    OK(cuInit(0));
    CHECK(proc("cuGraphInstantiate", 12000) == (void *)cuGraphInstantiateWithFlags);
    CHECK(proc("cuGraphInstantiate", 11040) == (void *)cuGraphInstantiate_v2);
    CHECK(proc("cuGraphExecUpdate", 12090) == (void *)cuGraphExecUpdate_v2);
    CHECK(proc("cuGraphExecUpdate", 11040) == (void *)cuGraphExecUpdate);
    CHECK(proc("cuStreamBeginCapture", 12000) == (void *)cuStreamBeginCapture_v2);
    CHECK(proc("cuStreamGetCaptureInfo", 12090) == (void *)cuStreamGetCaptureInfo_v3);
    CHECK(proc("cuUserObjectCreate", 11030) == (void *)cuUserObjectCreate);
    CHECK(proc("cuGraphRetainUserObject", 11030) == (void *)cuGraphRetainUserObject);
    printf("PASS versions\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && strcmp(argv[1], "capture") == 0) {
        capture_scenario();
    } else if (argc >= 2 && strcmp(argv[1], "objects") == 0) {
        objects_scenario();
    } else if (argc >= 2 && strcmp(argv[1], "versions") == 0) {
        versions_scenario();
    } else {
        fprintf(stderr, "usage: %s capture | objects | versions\n", argv[0]);
        return 2;
    }
    return 0;
}
