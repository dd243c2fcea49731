/* Rank 1 stops (SIGSTOP) right after a barrier; rank 0 then sends eager messages nobody
 * acknowledges. The usnic BTL must name the failed peer and end the job (never hang). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    static char buf[1024];
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 1) raise(SIGSTOP); /* stops acknowledging anything */
    sleep(1);
    for (int i = 0; i < 100; i++) MPI_Send(buf, sizeof buf, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: barrier done (should not happen)\n", r);
    MPI_Finalize(); return 0;
}
