/*
 * bench_sendrecv: time per MPI_Sendrecv between rank 0 and rank 1, both sending at once (a halo
 * exchange's step). bench_sendloop (built with -DSENDLOOP): time per message of rank 0's blocking
 * MPI_Send loop into rank 1's MPI_Recv loop. Both wait for each send to complete, so they show a
 * transport whose sends complete only when the peer acknowledges them; the ping-pong and the
 * windowed bandwidth benchmarks hide that, because a reply or the window's last message carries
 * the acknowledgement. Extra ranks only take part in the collectives.
 */
#include "common.h"

struct xch_ctx {
    unsigned char *sbuf, *rbuf;
    int rank;
};

static double xch_body(size_t size, long iters, void *vctx)
{
    struct xch_ctx *c = vctx;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (c->rank <= 1) {
        int peer = 1 - c->rank;
        for (long i = 0; i < iters; i++) {
#ifdef SENDLOOP
            if (c->rank == 0)
                MPI_Send(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD);
            else
                MPI_Recv(c->rbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
#else
            MPI_Sendrecv(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, c->rbuf, (int)size,
                         MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#endif
        }
    }
    /* The loop's time includes the last message's arrival. */
    MPI_Barrier(MPI_COMM_WORLD);
    return bench_now() - t0;
}

static void xch_check(size_t size, void *vctx)
{
    struct xch_ctx *c = vctx;
    if (c->rank > 1)
        return;
    int peer = 1 - c->rank;
    bench_fill(c->sbuf, size, c->rank, 1);
    MPI_Sendrecv(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_CHECK_TAG, c->rbuf, (int)size, MPI_BYTE,
                 peer, BENCH_CHECK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    bench_verify(c->rbuf, size, peer, 1, "exchange");
}

int main(int argc, char **argv)
{
#ifdef SENDLOOP
    const char *prog = "bench_sendloop";
#else
    const char *prog = "bench_sendrecv";
#endif
    struct bench_opts o;
    struct xch_ctx c;
    bench_init(&argc, &argv, &c.rank, "bench_sendrecv/bench_sendloop need at least 2 ranks");
    bench_parse(argc, argv, &o, 0);
    size_t maxsz = bench_max_size(&o);
    c.sbuf = bench_alloc(maxsz);
    c.rbuf = bench_alloc(maxsz);
    bench_header(prog, &o, "size_bytes us_per_iteration iterations");
    bench_us_per_size(xch_body, xch_check, &c, &o, 1.0);
    free(c.sbuf);
    free(c.rbuf);
    MPI_Finalize();
    return 0;
}
