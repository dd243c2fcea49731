/*
 * bench_mr: message rate, like osu_mbw_mr. Ranks [0, n/2) each stream WINDOW non-blocking sends to
 * rank i + n/2, which posts WINDOW receives and answers each window with a 4-byte ack. With 2 ranks that
 * is one pair. Reports the aggregate messages per second (and MB/s); the time of a window round is the
 * slowest sender's.
 */
#include "window_check.h"

struct mr_ctx {
    unsigned char *sbuf, *rbuf;
    MPI_Request *reqs;
    int rank, pairs, window;
    struct window_check wc;
};

static double mr_body(size_t size, long iters, void *vctx)
{
    struct mr_ctx *c = vctx;
    char ack[4] = {0};
    int sender = c->rank < c->pairs;
    int receiver = !sender && c->rank < 2 * c->pairs;
    int peer = sender ? c->rank + c->pairs : c->rank - c->pairs;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (long i = 0; i < iters; i++) {
        if (sender) {
            for (int w = 0; w < c->window; w++)
                MPI_Isend(c->sbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[w]);
            MPI_Waitall(c->window, c->reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(ack, 4, MPI_BYTE, peer, BENCH_ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (receiver) {
            for (int w = 0; w < c->window; w++)
                MPI_Irecv(c->rbuf, (int)size, MPI_BYTE, peer, BENCH_TAG, MPI_COMM_WORLD, &c->reqs[w]);
            MPI_Waitall(c->window, c->reqs, MPI_STATUSES_IGNORE);
            MPI_Send(ack, 4, MPI_BYTE, peer, BENCH_ACK_TAG, MPI_COMM_WORLD);
        }
    }
    double t = bench_now() - t0, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct mr_ctx c;
    const char *pairs_only = "bench_mr needs an even number of ranks (pairs i <-> i + n/2)";
    int nranks = bench_init(&argc, &argv, &c.rank, pairs_only);
    if (nranks % 2)
        bench_die(pairs_only);
    c.pairs = nranks / 2;
    bench_parse(argc, argv, &o, 1);
    size_t maxsz = bench_max_size(&o);
    c.window = o.window;
    c.sbuf = bench_alloc(maxsz);
    c.rbuf = bench_alloc(maxsz);
    c.reqs = calloc((size_t)o.window, sizeof(MPI_Request));
    if (!c.reqs)
        bench_die("out of memory");
    if (o.check)
        window_check_init(&c.wc, maxsz);
    if (c.rank == 0)
        printf("# pairs: %d\n", c.pairs);
    bench_header("bench_mr", &o, "size_bytes messages_per_s MB_per_s iterations");
    for (int i = 0; i < o.nsizes; i++) {
        size_t size = o.sizes[i];
        long iters = bench_calibrate(mr_body, size, &c, &o);
        double t = mr_body(size, iters, &c);
        if (o.check) {
            MPI_Request reqs[CHECK_MSGS];
            int from = c.rank < c.pairs ? c.rank : c.rank - c.pairs;
            int n = window_check_post(&c.wc, size, c.rank, from, from + c.pairs, reqs);
            MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
            window_check_verify(&c.wc, size, c.rank, from, from + c.pairs, "bench_mr");
        }
        if (c.rank == 0) {
            double msgs = (double)c.pairs * (double)c.window * (double)iters;
            printf("%zu %.0f %.2f %ld\n", size, msgs / t, msgs * (double)size / t / 1e6, iters);
            fflush(stdout);
        }
    }
    if (o.check)
        window_check_free(&c.wc);
    free(c.sbuf);
    free(c.rbuf);
    free(c.reqs);
    MPI_Finalize();
    return 0;
}
