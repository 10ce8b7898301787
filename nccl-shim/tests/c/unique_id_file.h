/* Handing an ncclUniqueId from rank 0 to the other processes through a file: rank 0 writes it
 * whole (a temporary file renamed into place), the others poll for it. Include after
 * ncclsim_check.h (CHECK) and nccl.h. */
#ifndef NCCLSIM_UNIQUE_ID_FILE_H
#define NCCLSIM_UNIQUE_ID_FILE_H
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void write_id(const char *path, ncclUniqueId *id) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    CHECK(f && fwrite(id, sizeof *id, 1, f) == 1);
    fclose(f);
    CHECK(rename(tmp, path) == 0);
}

/* Waits up to `seconds` for the id; exits with a message when it does not come. */
static void read_id(const char *path, ncclUniqueId *id, int seconds) {
    for (int tries = 0; tries < seconds * 100; tries++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t n = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (n == 1) return;
        }
        usleep(10000);
    }
    fprintf(stderr, "FAIL no unique id in %s\n", path);
    exit(1);
}
#endif
