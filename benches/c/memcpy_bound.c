/* The memory bound of the host AllReduce benchmark: NRANKS processes each copy BYTES between
 * two buffers of their own, all at once (what each rank of an AllReduce must at least read
 * and write). Usage: memcpy_bound NRANKS BYTES ITERS; prints the mean seconds per copy round
 * (all processes' copies), from a shared start barrier to the last process's end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct shared { pthread_barrier_t start, end; double t0, t1; };

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    size_t bytes = (size_t)atoll(argv[2]);
    long iters = atol(argv[3]);
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_barrierattr_t a;
    pthread_barrierattr_init(&a);
    pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->start, &a, n);
    pthread_barrier_init(&sh->end, &a, n);
    for (int r = 0; r < n; r++) {
        if (fork() == 0) {
            char *s = malloc(bytes ? bytes : 1), *d = malloc(bytes ? bytes : 1);
            memset(s, 1, bytes);
            memset(d, 2, bytes);
            memcpy(d, s, bytes);
            pthread_barrier_wait(&sh->start);
            if (r == 0) sh->t0 = now();
            for (long i = 0; i < iters; i++) {
                memcpy(d, s, bytes);
                __asm__ volatile("" ::: "memory");
            }
            pthread_barrier_wait(&sh->end);
            if (r == 0) sh->t1 = now();
            _exit(0);
        }
    }
    for (int r = 0; r < n; r++) wait(NULL);
    printf("%.9f\n", (sh->t1 - sh->t0) / iters);
    return 0;
}
