/* MPI_THREAD_MULTIPLE: T threads per rank; thread t of rank r exchanges N messages of varying
 * sizes with thread t of the partner rank (tag = t), concurrently, verifying every byte. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T 4
static int rank, size, iters = 200;
static int errors[T];

static unsigned char val(int src, int t, int i, size_t k) { return (unsigned char) (src * 31 + t * 7 + i + k * 13); }

static void *worker(void *arg)
{
    int t = (int) (long) arg;
    int peer = rank ^ 1;
    size_t max = 70000;
    unsigned char *s = malloc(max), *r = malloc(max);
    for (int i = 0; i < iters; ++i) {
        size_t n = (size_t) ((i * 7919 + t * 104729) % (int) max);
        if (i % 5 == 0) n %= 700; /* plenty of tiny ones too */
        for (size_t k = 0; k < n; ++k) s[k] = val(rank, t, i, k);
        MPI_Request rq[2];
        MPI_Irecv(r, (int) max, MPI_BYTE, peer, t, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(s, (int) n, MPI_BYTE, peer, t, MPI_COMM_WORLD, &rq[1]);
        MPI_Status st[2];
        MPI_Waitall(2, rq, st);
        int got;
        MPI_Get_count(&st[0], MPI_BYTE, &got);
        if ((size_t) got != n) { errors[t]++; continue; }
        for (size_t k = 0; k < n; ++k) if (r[k] != val(peer, t, i, k)) { errors[t]++; break; }
    }
    free(s);
    free(r);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) { fprintf(stderr, "no THREAD_MULTIPLE\n"); MPI_Abort(MPI_COMM_WORLD, 3); }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) iters = atoi(argv[1]);
    pthread_t th[T];
    if (rank < (size & ~1)) {
        for (long t = 0; t < T; ++t) pthread_create(&th[t], NULL, worker, (void *) t);
        for (int t = 0; t < T; ++t) pthread_join(th[t], NULL);
    }
    int e = 0, all;
    for (int t = 0; t < T; ++t) e += errors[t];
    MPI_Allreduce(&e, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (0 == rank) printf("%s: %d errors (%d threads x %d messages per rank)\n", all ? "FAIL" : "OK", all, T, iters);
    MPI_Finalize();
    return all != 0;
}
