/* The anchor of the host AllReduce benchmark: OpenMPI's MPI_Allreduce (float sum, out of
 * place) over its shared-memory transport. Usage: mpi_allreduce BYTES ITERS (under mpirun).
 * Rank 0 prints the mean seconds per MPI_Allreduce over ITERS after one warm-up, measured
 * between two barriers. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    size_t bytes = (size_t)atoll(argv[1]);
    long iters = atol(argv[2]);
    size_t count = bytes / 4 ? bytes / 4 : 1;
    float *s = calloc(count, 4), *d = calloc(count, 4);
    MPI_Allreduce(s, d, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) MPI_Allreduce(s, d, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters;
    if (r == 0) printf("%.9f\n", t);
    free(s);
    free(d);
    MPI_Finalize();
    return 0;
}
