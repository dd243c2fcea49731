/* Rank 1 computes for 3 s outside MPI (no MPI call, so nothing of its acknowledges) while rank
 * 0 sends it N bytes (argv[1], default 64 KiB, at most 64 KiB), contiguous and so read in place
 * by the BTL, and then overwrites its buffer. Prints how long the MPI_Send took; rank 1 checks
 * it received the bytes as they were before the overwrite (any retransmission must come from
 * the BTL's copy). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "compute.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    static unsigned char buf[65536];
    int N = argc > 1 ? atoi(argv[1]) : 65536;
    if (N < 1 || N > 65536) {
        fprintf(stderr, "lentsend: size %s is not within 1..65536\n", argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 7 + 3);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) {
        double t = MPI_Wtime();
        MPI_Send(buf, N, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        for (int i = 0; i < N; i++) buf[i] = 0xee;  /* the buffer is the application's again */
        printf("send returned after %.0f ms\n", t * 1e3);
    } else {
        compute_outside_mpi(3000);
        MPI_Recv(buf, N, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += buf[i] != (unsigned char)(i * 7 + 3);
        printf("received: %d bytes differ\n", bad);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
