/* The virtual host clock as a program sees it, run by tests/host_clock.rs with the core
 * preloaded and NCCLSIM_CLOCK=virtual (NCCLSIM_CLOCK_EPOCH=<realtime ns>,<monotonic ns>).
 * CLOCK_TAI is not virtualised: it is the real clock the checks measure waits against.
 * Prints "PASS host_clock" on success; exits non-zero with a message on the first failed check. */
#define _GNU_SOURCE
#include "cuda_subset.h"
#include "ncclsim_cuda.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *error_name(int code) { return cudaGetErrorName(code); }
#include "ncclsim_check.h"
#include "core_api.h"

static int64_t ns(clockid_t c) {
    struct timespec t;
    CHECK(clock_gettime(c, &t) == 0);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static struct timespec at(int64_t t) {
    struct timespec ts = {t / 1000000000, t % 1000000000};
    return ts;
}

static void nothing(void *p) { (void)p; }

/* A wait of `ms` milliseconds of real time took about that long (not 0, not much more). */
static void waited_about(int64_t tai0, int ms, const char *what) {
    double real_ms = (ns(CLOCK_TAI) - tai0) / 1e6;
    printf("%s waited %.1f ms of real time for %d ms\n", what, real_ms, ms);
    CHECK(real_ms >= ms * 0.9 && real_ms < ms + 5000);
}

int main(void) {
    const char *epoch = getenv("NCCLSIM_CLOCK_EPOCH");
    CHECK(epoch != NULL);
    long long e_rt = 0, e_mono = 0;
    CHECK(sscanf(epoch, "%lld,%lld", &e_rt, &e_mono) == 2);

    /* Before any device work the clocks read the job's epoch; host work takes no virtual
     * time, but a sleep is host time passing: the sleeping thread's clock moves by it. */
    OK(cudaSetDevice(0));
    int64_t m0 = ns(CLOCK_MONOTONIC), r0 = ns(CLOCK_REALTIME);
    CHECK(m0 == e_mono && r0 == e_rt);
    CHECK(ns(CLOCK_MONOTONIC) == m0);
    usleep(50000);
    CHECK(ns(CLOCK_MONOTONIC) == m0 + 50000000 && ns(CLOCK_REALTIME) == r0 + 50000000);
    m0 += 50000000;
    r0 += 50000000;
    struct timeval tv;
    CHECK(gettimeofday(&tv, NULL) == 0);
    CHECK((int64_t)tv.tv_sec * 1000000 + tv.tv_usec == r0 / 1000);
    time_t secs;
    CHECK(time(&secs) == r0 / 1000000000 && secs == r0 / 1000000000);
    /* CPU-time clocks stay real: this process has used some CPU. */
    CHECK(ns(CLOCK_PROCESS_CPUTIME_ID) > 0);

    /* 20 ms of device work: a query finds it running, and costs the host a poll; spinning on
     * it (each poll costing twice the last) reaches the completion in a few dozen polls, and
     * the clock moved by what the events measure on the device. */
    cudaStream_t s;
    cudaEvent_t e0, e1;
    OK(cudaStreamCreateWithFlags(&s, 1));
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    const struct ncclsim_core_api_v1 *api = core_api();
    OK(cudaEventRecord(e0, s));
    CHECK(api->enqueue((uint64_t)(uintptr_t)s, 20000000, nothing, NULL) == 0);
    OK(cudaEventRecord(e1, s));
    CHECK(ns(CLOCK_MONOTONIC) == m0); /* enqueueing is asynchronous */
    CHECK(cudaStreamQuery(s) == 600);
    CHECK(ns(CLOCK_MONOTONIC) - m0 < 20000000);
    int polls = 1;
    while (cudaStreamQuery(s) == 600)
        polls++;
    CHECK(polls > 2 && polls < 40);
    OK(cudaStreamQuery(s));
    float ms;
    OK(cudaEventElapsedTime(&ms, e0, e1));
    int64_t m1 = ns(CLOCK_MONOTONIC);
    printf("device %.3f ms, host clock moved %.3f ms\n", ms, (m1 - m0) / 1e6);
    CHECK(ms > 19.99 && ms < 20.01);
    CHECK(m1 - m0 >= 20000000 && ns(CLOCK_REALTIME) - r0 == m1 - m0);
    /* A second piece, waited for by synchronising. */
    CHECK(api->enqueue((uint64_t)(uintptr_t)s, 5000000, nothing, NULL) == 0);
    OK(cudaStreamSynchronize(s));
    CHECK(ns(CLOCK_MONOTONIC) - m1 == 5000000);
    OK(cudaStreamQuery(s));

    /* Absolute deadlines the program computes from the virtual clock wait as long as asked in
     * real time (the real clock is far ahead of the virtual one by now). */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int64_t tai = ns(CLOCK_TAI);
    struct timespec d = at(ns(CLOCK_REALTIME) + 200000000);
    CHECK(pthread_mutex_lock(&mu) == 0);
    int rc;
    do rc = pthread_cond_timedwait(&cv, &mu, &d); while (rc == 0);
    CHECK(rc == ETIMEDOUT);
    waited_about(tai, 200, "pthread_cond_timedwait");
    tai = ns(CLOCK_TAI);
    d = at(ns(CLOCK_MONOTONIC) + 200000000);
    do rc = pthread_cond_clockwait(&cv, &mu, CLOCK_MONOTONIC, &d); while (rc == 0);
    CHECK(rc == ETIMEDOUT);
    waited_about(tai, 200, "pthread_cond_clockwait");
    CHECK(pthread_mutex_unlock(&mu) == 0);
    /* A futex wait with an absolute deadline made through syscall(2), as libstdc++'s
     * std::future::wait_for waits, also lasts what it asks. */
    uint32_t word = 0;
    tai = ns(CLOCK_TAI);
    d = at(ns(CLOCK_MONOTONIC) + 200000000);
    long frc;
    do frc = syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, &d, NULL, FUTEX_BITSET_MATCH_ANY);
    while (frc == 0 || (frc == -1 && errno == EINTR));
    CHECK(frc == -1 && errno == ETIMEDOUT);
    waited_about(tai, 200, "futex FUTEX_WAIT_BITSET");
    sem_t sem;
    CHECK(sem_init(&sem, 0, 0) == 0);
    tai = ns(CLOCK_TAI);
    d = at(ns(CLOCK_REALTIME) + 200000000);
    CHECK(sem_timedwait(&sem, &d) == -1 && errno == ETIMEDOUT);
    waited_about(tai, 200, "sem_timedwait");
    /* The next two reads of a virtual clock after a timed-out wait answer at least the wait's
     * deadline: a loop that waits until a deadline and then compares the clock with it
     * (libstdc++'s condition_variable::wait_until reads two clocks, gloo's timeouts) ends. The
     * clock itself has not moved. */
    CHECK(ns(CLOCK_REALTIME) >= (int64_t)d.tv_sec * 1000000000 + d.tv_nsec);
    (void)ns(CLOCK_MONOTONIC);
    int64_t unmoved = ns(CLOCK_MONOTONIC);
    int64_t deadline = unmoved + 50000000;
    d = at(deadline);
    CHECK(pthread_mutex_lock(&mu) == 0);
    do rc = pthread_cond_clockwait(&cv, &mu, CLOCK_MONOTONIC, &d); while (rc == 0);
    CHECK(rc == ETIMEDOUT);
    CHECK(ns(CLOCK_TAI) > 0); /* a real clock's read leaves them pending */
    CHECK(ns(CLOCK_MONOTONIC) == deadline);
    CHECK(ns(CLOCK_REALTIME) - e_rt == deadline - e_mono);
    CHECK(ns(CLOCK_MONOTONIC) == unmoved);
    /* Deadlines computed from such reads wait what they ask (each read answers its wait's
     * deadline); the clock has not moved. */
    for (int i = 1; i <= 3; i++) {
        tai = ns(CLOCK_TAI);
        d = at(ns(CLOCK_MONOTONIC) + 20000000);
        do rc = pthread_cond_clockwait(&cv, &mu, CLOCK_MONOTONIC, &d); while (rc == 0);
        CHECK(rc == ETIMEDOUT);
        waited_about(tai, 20, "pthread_cond_clockwait in a loop");
        CHECK(ns(CLOCK_MONOTONIC) == unmoved + i * 20000000);
    }
    CHECK(pthread_mutex_unlock(&mu) == 0);
    CHECK(ns(CLOCK_MONOTONIC) == unmoved + 60000000);
    CHECK(ns(CLOCK_MONOTONIC) == unmoved);
    tai = ns(CLOCK_TAI);
    /* Timed waits that time out leave the virtual clock where it was; a sleep to an absolute
     * wake-up time moves it there. */
    int64_t wake = ns(CLOCK_MONOTONIC) + 200000000;
    d = at(wake);
    CHECK(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == 0);
    waited_about(tai, 200, "clock_nanosleep");
    CHECK(ns(CLOCK_MONOTONIC) == wake);
    /* A relative sleep is real time and moves the virtual clock by its length. */
    int64_t before = ns(CLOCK_MONOTONIC);
    tai = ns(CLOCK_TAI);
    struct timespec rel = {0, 100000000};
    CHECK(clock_nanosleep(CLOCK_MONOTONIC, 0, &rel, NULL) == 0);
    waited_about(tai, 100, "relative clock_nanosleep");
    CHECK(ns(CLOCK_MONOTONIC) == before + 100000000);
    /* nanosleep and sleep alike. */
    before = ns(CLOCK_MONOTONIC);
    struct timespec ten_ms = {0, 10000000};
    CHECK(nanosleep(&ten_ms, NULL) == 0);
    CHECK(ns(CLOCK_MONOTONIC) == before + 10000000);
    CHECK(sleep(1) == 0);
    CHECK(ns(CLOCK_MONOTONIC) == before + 1010000000);
    printf("PASS host_clock\n");
    return 0;
}
