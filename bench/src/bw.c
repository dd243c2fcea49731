/*
 * bench_bw / bench_bibw: streaming bandwidth with a window of non-blocking messages, like osu_bw and
 * osu_bibw. bw: rank 0 posts WINDOW sends to rank 1, which posts WINDOW receives and answers each window
 * with a 4-byte ack. bibw (built with -DBIDIR): both ranks post WINDOW receives and WINDOW sends at once;
 * the bytes of both directions count. MB/s means 10^6 bytes per second, as in OSU.
 */
#include "window_check.h"

#ifdef BIDIR
#define PROG "bench_bibw"
#else
#define PROG "bench_bw"
#endif

struct bw_ctx {
    unsigned char *sbuf, *rbuf;
    MPI_Request *reqs;
    int rank, window;
    struct window_check wc, wc_back; /* wc_back: the reverse direction of bibw */
};

static double bw_body(size_t size, long iters, void *vctx)
{
    struct bw_ctx *c = vctx;
    int peer = c->rank == 0 ? 1 : 0;
#ifndef BIDIR
    char ack[4] = {0};
#endif
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (c->rank <= 1) {
        for (long i = 0; i < iters; i++) {
#ifdef BIDIR
            for (int w = 0; w < c->window; w++)
                MPI_Irecv(c->rbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[w]);
            for (int w = 0; w < c->window; w++)
                MPI_Isend(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[c->window + w]);
            MPI_Waitall(2 * c->window, c->reqs, MPI_STATUSES_IGNORE);
#else
            if (c->rank == 0) {
                for (int w = 0; w < c->window; w++)
                    MPI_Isend(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[w]);
                MPI_Waitall(c->window, c->reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_BYTE, peer, BENCH_ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < c->window; w++)
                    MPI_Irecv(c->rbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[w]);
                MPI_Waitall(c->window, c->reqs, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_BYTE, peer, BENCH_ACK_TAG, MPI_COMM_WORLD);
            }
#endif
        }
    }
    return bench_now() - t0;
}

static void bw_check(struct bw_ctx *c, size_t size)
{
    MPI_Request reqs[2 * CHECK_MSGS];
    int n = window_check_post(&c->wc, size, c->rank, 0, 1, reqs);
#ifdef BIDIR
    n += window_check_post(&c->wc_back, size, c->rank, 1, 0, reqs + n);
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    window_check_verify(&c->wc_back, size, c->rank, 1, 0, PROG);
#else
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
#endif
    window_check_verify(&c->wc, size, c->rank, 0, 1, PROG);
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct bw_ctx c;
    bench_init(&argc, &argv, &c.rank, PROG " needs at least 2 ranks");
    bench_parse(argc, argv, &o, 1);
    size_t maxsz = bench_max_size(&o);
    c.window = o.window;
    c.sbuf = bench_alloc(maxsz);
    c.rbuf = bench_alloc(maxsz);
    c.reqs = calloc(2 * (size_t)o.window, sizeof(MPI_Request));
    if (!c.reqs)
        bench_die("out of memory");
    if (o.check) {
        window_check_init(&c.wc, maxsz);
#ifdef BIDIR
        window_check_init(&c.wc_back, maxsz);
#endif
    }
    bench_header(PROG, &o, "size_bytes MB_per_s iterations");
    for (int i = 0; i < o.nsizes; i++) {
        size_t size = o.sizes[i];
        long iters = bench_calibrate(bw_body, size, &c, &o);
        double t = bw_body(size, iters, &c);
        if (o.check)
            bw_check(&c, size);
        if (c.rank == 0) {
#ifdef BIDIR
            double bytes = 2.0 * (double)size * (double)c.window * (double)iters;
#else
            double bytes = (double)size * (double)c.window * (double)iters;
#endif
            printf("%zu %.2f %ld\n", size, bytes / t / 1e6, iters);
            fflush(stdout);
        }
    }
    if (o.check) {
        window_check_free(&c.wc);
#ifdef BIDIR
        window_check_free(&c.wc_back);
#endif
    }
    free(c.sbuf);
    free(c.rbuf);
    free(c.reqs);
    MPI_Finalize();
    return 0;
}
