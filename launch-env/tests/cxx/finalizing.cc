// A thread ended with pthread_exit inside a destructor, as CPython (before 3.14) ends a thread
// whose GIL guard takes the GIL back while the interpreter finalizes. The program stands in for
// the interpreter: it exports _Py_IsFinalizing, which reads its own flag.
//   finalizing: the guard's destructor calls pthread_exit once the flag is set; a destructor
//               may not throw, so the forced unwind ends in std::terminate unless the thread is
//               parked instead. Prints "exit" and returns 0 if the process gets that far.
//   plain:      a thread calls pthread_exit(42) while nothing finalizes; main joins it and
//               prints "joined 42".
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

static std::atomic<int> finalizing{0};
static std::atomic<int> entered{0};

extern "C" __attribute__((visibility("default"))) int _Py_IsFinalizing(void) {
    return finalizing.load();
}

struct Guard {
    ~Guard() { pthread_exit(nullptr); }
};

static void *guarded(void *) {
    Guard g;
    entered = 1;
    while (!finalizing.load()) usleep(1000);
    return nullptr;
}

static void *plain(void *) {
    pthread_exit(reinterpret_cast<void *>(42));
}

int main(int argc, char **argv) {
    pthread_t t;
    if (argc > 1 && !strcmp(argv[1], "plain")) {
        void *r = nullptr;
        pthread_create(&t, nullptr, plain, nullptr);
        pthread_join(t, &r);
        printf("joined %ld\n", reinterpret_cast<long>(r));
        return 0;
    }
    pthread_create(&t, nullptr, guarded, nullptr);
    while (!entered.load()) usleep(1000);
    finalizing = 1;
    usleep(200000);
    printf("exit\n");
    fflush(stdout);
    return 0;
}
