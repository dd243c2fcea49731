/* Rank 1 computes for 5 s outside MPI while rank 0 sends it eager messages: with the ACK helper
 * thread the sender must not declare rank 1 failed (run with a 2 s btl_usnic_peer_timeout).
 * Arguments: the number of messages and their size (default 100 of 1024 bytes; 200 KiB ones
 * are fragments of several datagrams, which the helper must not keep in receive buffers).
 * Every byte is checked. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "compute.h"
static unsigned char pattern(int msg, size_t i) { return (unsigned char)(msg * 31 + i * 7 + 1); }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 100;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    unsigned char *buf = malloc((size_t)n * size);
    if (!buf) { fprintf(stderr, "no memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int m = 0; m < n; m++)
        for (size_t i = 0; i < size; i++) buf[(size_t)m * size + i] = r ? 0 : pattern(m, i);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 1) compute_outside_mpi(5000);
    else for (int m = 0; m < n; m++) MPI_Send(buf + (size_t)m * size, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    long bad = 0;
    if (r == 1) {
        for (int m = 0; m < n; m++) MPI_Recv(buf + (size_t)m * size, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int m = 0; m < n; m++)
            for (size_t i = 0; i < size; i++) bad += buf[(size_t)m * size + i] != pattern(m, i);
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (!r) {
        if (bad) printf("FAIL: %ld bytes differ\n", bad);
        else printf("OK: computing peer survived, %d messages of %zu bytes checked\n", n, size);
    }
    free(buf);
    MPI_Finalize(); return bad != 0;
}
