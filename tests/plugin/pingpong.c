/* Ping-pong between ranks 0 and 1 over whatever BTL carries them; verifies every byte.
 * usage: pingpong [max_bytes [iterations]]  -- sizes 0,1,2,4,... up to max_bytes (and +-1). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; ++i) {
        b[i] = (unsigned char) (seed * 131 + i * 7 + (i >> 8));
    }
}

static int check(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; ++i) {
        if (b[i] != (unsigned char) (seed * 131 + i * 7 + (i >> 8))) {
            return (int) i + 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    unsigned char *sbuf = malloc(max + 2), *rbuf = malloc(max + 2);
    int errors = 0;
    if (size < 2) {
        if (0 == rank) fprintf(stderr, "needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t sizes[256];
    int ns = 0;
    sizes[ns++] = 0;
    for (size_t s = 1; s <= max && ns < 250; s *= 2) {
        if (s > 2) sizes[ns++] = s - 1;
        sizes[ns++] = s;
        if (s + 1 <= max) sizes[ns++] = s + 1;
    }
    if (rank < 2) {
        int peer = 1 - rank;
        for (int k = 0; k < ns; ++k) {
            size_t n = sizes[k];
            int it = n <= 65536 ? iters : (n <= (1 << 20) ? 10 : 3);
            double t0 = 0;
            for (int i = -1; i < it; ++i) {
                if (i == 0) t0 = MPI_Wtime();
                unsigned seed = (unsigned) (k * 1000 + i + 1);
                if (0 == rank) {
                    fill(sbuf, n, seed);
                    MPI_Send(sbuf, (int) n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
                    memset(rbuf, 0, n);
                    MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    int bad = check(rbuf, n, seed ^ 0x55);
                    if (bad) {
                        fprintf(stderr, "size %zu iter %d: byte %d wrong\n", n, i, bad - 1);
                        ++errors;
                    }
                } else {
                    memset(rbuf, 0, n);
                    MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    int bad = check(rbuf, n, seed);
                    if (bad) {
                        fprintf(stderr, "size %zu iter %d: byte %d wrong (rank 1)\n", n, i, bad - 1);
                        ++errors;
                    }
                    fill(sbuf, n, seed ^ 0x55);
                    MPI_Send(sbuf, (int) n, MPI_BYTE, peer, 8, MPI_COMM_WORLD);
                }
            }
            double us = (MPI_Wtime() - t0) * 1e6 / it / 2;
            if (0 == rank) {
                printf("%10zu bytes  %10.2f us one-way  %10.2f MB/s\n", n, us, n / us);
                fflush(stdout);
            }
        }
    }
    int all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (0 == rank) printf("%s: %d errors\n", all ? "FAIL" : "OK", all);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return all ? 1 : 0;
}
