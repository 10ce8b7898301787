/* Checks shared by the fake CUDA libraries' C test programs. A program defines
 * `static const char *error_name(int code)` (e.g. with cudaGetErrorName) before including this.
 * CHECK(cond) and OK(call) print where and what failed and exit(1); OK expects 0 (success). */
#ifndef NCCLSIM_CHECK_H
#define NCCLSIM_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)
#define OK(call)                                                                     \
    do {                                                                             \
        int e_ = (int)(call);                                                        \
        if (e_ != 0) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call,  \
                    e_, error_name(e_));                                             \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)
#endif
