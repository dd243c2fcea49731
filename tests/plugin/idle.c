/* Both ranks stay in MPI (MPI_Iprobe loop) for N seconds (default 4) without sending, so the
 * test can throw datagrams at the plugin's ports and read the statistics at finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, flag; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    double secs = argc > 1 ? atof(argv[1]) : 4.0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < secs) MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!r) printf("OK: idle done\n");
    MPI_Finalize(); return 0;
}
