/*
 * bench_latency: one-way latency (half the round trip) of a blocking MPI_Send/MPI_Recv ping-pong
 * between rank 0 and rank 1, like osu_latency. Extra ranks only take part in the collectives.
 */
#include "common.h"

struct lat_ctx {
    unsigned char *sbuf, *rbuf;
    int rank;
};

static double lat_body(size_t size, long iters, void *vctx)
{
    struct lat_ctx *c = vctx;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (c->rank == 0) {
        for (long i = 0; i < iters; i++) {
            MPI_Send(c->sbuf, (int)size, MPI_BYTE, 1, BENCH_TAG, MPI_COMM_WORLD);
            MPI_Recv(c->rbuf, (int)size, MPI_BYTE, 1, BENCH_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    } else if (c->rank == 1) {
        for (long i = 0; i < iters; i++) {
            MPI_Recv(c->rbuf, (int)size, MPI_BYTE, 0, BENCH_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(c->sbuf, (int)size, MPI_BYTE, 0, BENCH_TAG, MPI_COMM_WORLD);
        }
    }
    return bench_now() - t0;
}

static void lat_check(size_t size, void *vctx)
{
    struct lat_ctx *c = vctx;
    if (c->rank == 0) {
        bench_fill(c->sbuf, size, 0, 1);
        MPI_Send(c->sbuf, (int)size, MPI_BYTE, 1, BENCH_CHECK_TAG, MPI_COMM_WORLD);
        MPI_Recv(c->rbuf, (int)size, MPI_BYTE, 1, BENCH_CHECK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bench_verify(c->rbuf, size, 1, 1, "latency");
    } else if (c->rank == 1) {
        MPI_Recv(c->rbuf, (int)size, MPI_BYTE, 0, BENCH_CHECK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bench_verify(c->rbuf, size, 0, 1, "latency");
        bench_fill(c->sbuf, size, 1, 1);
        MPI_Send(c->sbuf, (int)size, MPI_BYTE, 0, BENCH_CHECK_TAG, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct lat_ctx c;
    bench_init(&argc, &argv, &c.rank, "bench_latency needs at least 2 ranks");
    bench_parse(argc, argv, &o, 0);
    size_t maxsz = bench_max_size(&o);
    c.sbuf = bench_alloc(maxsz);
    c.rbuf = bench_alloc(maxsz);
    bench_header("bench_latency", &o, "size_bytes latency_us iterations");
    bench_us_per_size(lat_body, lat_check, &c, &o, 2.0);
    free(c.sbuf);
    free(c.rbuf);
    MPI_Finalize();
    return 0;
}
