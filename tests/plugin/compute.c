/* Rank 1 computes for 5 s outside MPI while rank 0 sends it eager messages: with the ACK helper
 * thread the sender must not declare rank 1 failed (run with a 2 s btl_usnic_peer_timeout). */
#include <mpi.h>
#include <stdio.h>
#include "compute.h"
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    static char buf[1024];
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 1) compute_outside_mpi(5000);
    else for (int i = 0; i < 100; i++) MPI_Send(buf, sizeof buf, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    if (r == 1) for (int i = 0; i < 100; i++) MPI_Recv(buf, sizeof buf, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!r) printf("OK: computing peer survived\n");
    MPI_Finalize(); return 0;
}
