/* Memory-safety and fidelity scenarios run by tests/safety.rs against the fake libcudart.so.12,
 * one per process (so a crash fails its test instead of the test runner). Each prints
 * "PASS <scenario>" on success and exits non-zero with a message on the first failed check. */
#include "cuda_subset.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"

static void hex_out(const ipc_handle_t *h) {
    for (int i = 0; i < 64; i++) printf("%02x", h->bytes[i]);
    printf("\n");
    fflush(stdout);
}

static int hex_in(const char *s, ipc_handle_t *h) {
    if (strlen(s) != 128) return -1;
    for (int i = 0; i < 64; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        h->bytes[i] = (unsigned char)v;
    }
    return 0;
}

static void wait_line(void) {
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL);
}

static void count_callback(cudaStream_t s, cudaError_t status, void *n) {
    (void)s;
    CHECK(status == 0);
    *(int *)n += 1;
}

/* A stream callback captured into a graph runs on every replay, and its graph outlives the
 * capture's stream. */
static int captured_callback(void) {
    cudaStream_t s;
    void *graph, *exec, *exec2;
    int calls = 0;
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaStreamAddCallback(s, count_callback, &calls, 0)); /* runs now, not captured */
    CHECK(calls == 1);
    OK(cudaStreamBeginCapture(s, 0));
    OK(cudaStreamAddCallback(s, count_callback, &calls, 0));
    OK(cudaStreamEndCapture(s, &graph));
    CHECK(calls == 1);
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphInstantiate(&exec2, graph, 0));
    OK(cudaGraphDestroy(graph)); /* the executable graphs keep the callback */
    for (int i = 0; i < 3; i++) OK(cudaGraphLaunch(exec, s));
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphLaunch(exec2, s));
    OK(cudaStreamSynchronize(s));
    CHECK(calls == 5);
    OK(cudaGraphExecDestroy(exec2));
    OK(cudaStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *s = argv[1];
    int rc = 2;
    (void)hex_in;
    (void)hex_out;
    (void)wait_line;
    if (!strcmp(s, "captured-callback")) rc = captured_callback();
    if (rc == 0) printf("PASS %s\n", s);
    return rc;
}
