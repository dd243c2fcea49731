/* 5 times: spawn 2 children, each parent rank sends each of them 8 B, which is the last thing the
 * children receive before they disconnect and exit (owing the ACK of it); then the parent ranks
 * ping-pong (checked) for PP seconds (default 40) after the children have gone. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Comm parent, inter;
    int rank, nr, errs = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {                      /* child */
        MPI_Comm_remote_size(parent, &nr);
        for (int r = 0; r < nr; r++) {
            long v = -1;
            MPI_Recv(&v, 1, MPI_LONG, r, 0, parent, MPI_STATUS_IGNORE);
            if (v != 1000 * r + rank) errs++;
        }
        MPI_Comm_disconnect(&parent);
        printf("%s child %d\n", errs ? "FAIL" : "PASS", rank);
        MPI_Finalize();
        return errs != 0;
    }
    for (int round = 0; round < 5; round++) {
    MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    for (int c = 0; c < 2; c++) {
        long v = 1000 * rank + c;
        MPI_Send(&v, 1, MPI_LONG, c, 0, inter);
    }
    MPI_Comm_disconnect(&inter);
    }
    static char b[65536];
    double t0 = MPI_Wtime();
    long it = 0;
    for (int go = 1; go; it++) {                        /* parent ranks 0 <-> 1 */
        if (rank == 0) {
            memset(b, (int)(it & 0x7f), sizeof b);
            MPI_Send(b, sizeof b, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(b, sizeof b, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < sizeof b; i++) if (b[i] != (char)((it & 0x7f) ^ 1)) { errs++; break; }
            go = MPI_Wtime() - t0 < (getenv("PP") ? atoi(getenv("PP")) : 40);
        } else {
            MPI_Recv(b, sizeof b, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < sizeof b; i++) if (b[i] != (char)(it & 0x7f)) { errs++; break; }
            memset(b, (int)((it & 0x7f) ^ 1), sizeof b);
            MPI_Send(b, sizeof b, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    int tot;
    MPI_Allreduce(&errs, &tot, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s parent: %ld ping-pongs in %.0f s\n", tot ? "FAIL" : "PASS", it, MPI_Wtime() - t0);
    MPI_Finalize();
    return tot != 0;
}
