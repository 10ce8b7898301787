/* The fake CUDA core's vtable from a C test program. Include after ncclsim_cuda.h and
 * ncclsim_check.h (CHECK). */
#ifndef NCCLSIM_CORE_API_H
#define NCCLSIM_CORE_API_H
#include <dlfcn.h>
#include <stdlib.h>

/* The core the runtime loaded (NCCLSIM_TEST_CORE names its file: the same file opened again is
 * the same instance), checked for its version and size. */
static const struct ncclsim_core_api_v1 *core_api(void) {
    const char *path = getenv("NCCLSIM_TEST_CORE");
    void *lib = path ? dlopen(path, RTLD_NOW) : NULL;
    CHECK(lib != NULL);
    const struct ncclsim_core_api_v1 *(*get)(void) =
        (const struct ncclsim_core_api_v1 *(*)(void))dlsym(lib, "ncclsim_cuda_core_v1");
    CHECK(get != NULL);
    const struct ncclsim_core_api_v1 *api = get();
    CHECK(api->version == NCCLSIM_CORE_ABI_VERSION && api->size == sizeof *api);
    return api;
}
#endif
