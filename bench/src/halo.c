/*
 * bench_halo: time per step of a ring halo exchange. Every rank exchanges one message with each
 * of its two ring neighbours at once (MPI_Irecv x2, MPI_Isend x2, MPI_Waitall), as a 1-D stencil
 * does. The two-rank programs have one peer per rank; here a rank's transport serves two peers
 * with data at the same time, which is where its choice of whom to serve next shows (with two
 * ranks both neighbours are the same rank, and the step still moves two messages each way).
 */
#include "common.h"

struct halo_ctx {
    unsigned char *sbuf[2], *rbuf[2]; /* [0]: to/from the right neighbour, [1]: the left */
    int rank, right, left;
};

static void halo_step(struct halo_ctx *c, size_t size, int tag)
{
    MPI_Request q[4];
    /* A message to the right travels with tag, one to the left with tag + 1, so with two ranks
     * (right == left) each receive still matches the send meant for it. */
    MPI_Irecv(c->rbuf[1], (int)size, MPI_BYTE, c->left, tag, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(c->rbuf[0], (int)size, MPI_BYTE, c->right, tag + 1, MPI_COMM_WORLD, &q[1]);
    MPI_Isend(c->sbuf[0], (int)size, MPI_BYTE, c->right, tag, MPI_COMM_WORLD, &q[2]);
    MPI_Isend(c->sbuf[1], (int)size, MPI_BYTE, c->left, tag + 1, MPI_COMM_WORLD, &q[3]);
    MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
}

static double halo_body(size_t size, long iters, void *vctx)
{
    struct halo_ctx *c = vctx;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (long i = 0; i < iters; i++)
        halo_step(c, size, BENCH_TAG);
    /* A step ends for the job when the slowest rank has its messages. */
    MPI_Barrier(MPI_COMM_WORLD);
    return bench_now() - t0;
}

/* Each direction carries its own pattern (round 1 rightwards, 2 leftwards), so a message that
 * reached the wrong neighbour or the wrong buffer fails the check. */
static void halo_check(size_t size, void *vctx)
{
    struct halo_ctx *c = vctx;
    bench_fill(c->sbuf[0], size, c->rank, 1);
    bench_fill(c->sbuf[1], size, c->rank, 2);
    halo_step(c, size, BENCH_CHECK_TAG);
    bench_verify(c->rbuf[1], size, c->left, 1, "halo from the left");
    bench_verify(c->rbuf[0], size, c->right, 2, "halo from the right");
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct halo_ctx c;
    int nranks = bench_init(&argc, &argv, &c.rank, "bench_halo needs at least 2 ranks");
    c.right = (c.rank + 1) % nranks;
    c.left = (c.rank + nranks - 1) % nranks;
    bench_parse(argc, argv, &o, 0);
    size_t maxsz = bench_max_size(&o);
    for (int d = 0; d < 2; d++) {
        c.sbuf[d] = bench_alloc(maxsz);
        c.rbuf[d] = bench_alloc(maxsz);
    }
    bench_header("bench_halo", &o, "size_bytes us_per_step iterations");
    bench_us_per_size(halo_body, halo_check, &c, &o, 1.0);
    for (int d = 0; d < 2; d++) {
        free(c.sbuf[d]);
        free(c.rbuf[d]);
    }
    MPI_Finalize();
    return 0;
}
