/* Two ranks exchange a small and an MTU-sized-and-larger message both ways, then print
 * "PASS ring np=N". Used by netns.sh: a healthy path must pass, a broken one must be
 * stopped by the connectivity checker before the BTL's own peer timeout. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    static char buf[65536], back[65536];
    int rank, size, sizes[] = {8, 1400, 4000, 65536};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = sizes[i], peer = rank ^ 1;
        if (peer >= size) break;
        memset(buf, 'a' + (int)i + rank, (size_t)n);
        MPI_Sendrecv(buf, n, MPI_CHAR, peer, 7, back, n, MPI_CHAR, peer, 7, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (int j = 0; j < n; j++) {
            if (back[j] != (char)('a' + (int)i + peer)) {
                printf("FAIL ring np=%d: byte %d of %d from rank %d\n", size, j, n, peer);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("PASS ring np=%d\n", size);
    MPI_Finalize();
    return 0;
}
