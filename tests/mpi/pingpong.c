/*
 * pingpong: every size from 0 to 16 MiB (powers of two and +-1 around them,
 * plus the usnic/tcp eager, rendezvous and datagram limits and +-1 around
 * them), a few iterations each, between every pair of ranks (round-robin
 * schedule: with 4 ranks all 6 pairs, two pairs at a time).
 * Every byte of every message is checked, plus MPI_Get_count, the source and
 * tag in the status, and guard bytes behind the receive buffer.
 * Iterations rotate the send mode (Send, Ssend, Isend) and the receive
 * (Recv, Irecv), so eager, rendezvous and synchronous protocols all run.
 */
#include "common.h"

#define MAXSIZE (16u << 20)

static size_t sizes[256];
static int nsizes;

static void add_size(size_t s)
{
    if (s > MAXSIZE + 1) return;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] == s) return;
    sizes[nsizes++] = s;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void build_sizes(void)
{
    /* limits: usnic rndv_eager 500, usnic eager 25 KiB / 513 KiB (512 KiB before) and the original's 150 KiB
     * (and minus an ob1 header), udp datagram payload 1472, jumbo 9000, tcp eager 64 KiB */
    static const size_t limits[] = {500,         1472,   9000,        25600,       65536,  153600,      153600 - 14,
                                    153600 - 24, 524288, 524288 - 14, 524288 - 24, 525312, 525312 - 14, 525312 - 24};
    add_size(0);
    for (int k = 0; k <= 24; k++) {
        size_t p = (size_t)1 << k;
        add_size(p - 1);
        add_size(p);
        add_size(p + 1);
    }
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        add_size(limits[i] - 1);
        add_size(limits[i]);
        add_size(limits[i] + 1);
    }
    qsort(sizes, (size_t)nsizes, sizeof sizes[0], cmp_size);
}

/* round-robin (circle method) partner of rank in round r for m (even) players */
static int partner(int rank, int r, int m)
{
    if (rank == m - 1) return r;
    if (rank == r) return m - 1;
    return ((2 * r - rank) % (m - 1) + (m - 1)) % (m - 1);
}

static long msgs, bytes;

static void do_send(const void *buf, size_t len, int peer, int tag, int mode)
{
    MPI_Request rq;
    T_WHERE("sending %zu B to rank %d (tag %d, %s)", len, peer, tag, mode % 3 == 0 ? "MPI_Send" : mode % 3 == 1 ? "MPI_Ssend" : "MPI_Isend+Wait");
    switch (mode % 3) {
    case 0: MPICHK(MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD)); break;
    case 1: MPICHK(MPI_Ssend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD)); break;
    default:
        MPICHK(MPI_Isend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq));
        MPICHK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    }
}

static void do_recv_check(void *buf, size_t len, int peer, int tag, int mode, uint64_t seed,
                          const char *what)
{
    MPI_Status st;
    MPI_Request rq;
    t_poison(buf, len);
    T_WHERE("receiving %zu B from rank %d (tag %d, %s)", len, peer, tag, mode % 2 ? "MPI_Irecv+Wait" : "MPI_Recv");
    /* receive count is len+GUARD so a too-long message shows up as a wrong count, not an error */
    if (mode % 2 == 0) {
        MPICHK(MPI_Recv(buf, (int)(len + GUARD), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
    } else {
        MPICHK(MPI_Irecv(buf, (int)(len + GUARD), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq));
        MPICHK(MPI_Wait(&rq, &st));
    }
    if (st.MPI_SOURCE != peer || st.MPI_TAG != tag)
        t_error("%s: status source/tag %d/%d, expected %d/%d", what, st.MPI_SOURCE, st.MPI_TAG, peer,
                tag);
    count_check(&st, MPI_BYTE, (int)len, what);
    pat_check(buf, len, seed, what);
    guard_check(buf, len, what);
    msgs++;
    bytes += (long)len;
}

int main(int argc, char **argv)
{
    t_early("pingpong", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("pingpong", argc, argv);
    build_sizes();

    uint8_t *sbuf = t_alloc(MAXSIZE + 1), *rbuf = t_alloc(MAXSIZE + 1);
    int m = t_size + (t_size & 1);
    int pairs = 0;
    for (int r = 0; r < m - 1; r++) {
        int peer = partner(t_rank, r, m);
        if (peer >= t_size || peer == t_rank) {
            MPICHK(MPI_Barrier(MPI_COMM_WORLD));
            continue;
        }
        pairs++;
        T_WHERE("round %d: barrier", r);
        int first = t_rank < peer; /* the lower rank pings first */
        t_log("round %d: peer %d", r, peer);
        for (int si = 0; si < nsizes; si++) {
            size_t len = sizes[si];
            int iters = t_iters(len > (1u << 20) ? 2 : 3);
            for (int it = 0; it < iters; it++) {
                char what[128];
                int tag = si * 8 + it % 8;
                uint64_t my_seed = seed4((uint64_t)t_rank, (uint64_t)peer, len, (uint64_t)it);
                uint64_t peer_seed = seed4((uint64_t)peer, (uint64_t)t_rank, len, (uint64_t)it);
                snprintf(what, sizeof what, "pingpong %d->%d size %zu iter %d", peer, t_rank, len, it);
                pat_fill(sbuf, len, my_seed);
                if (first) {
                    do_send(sbuf, len, peer, tag, it);
                    do_recv_check(rbuf, len, peer, tag, it, peer_seed, what);
                } else {
                    do_recv_check(rbuf, len, peer, tag, it, peer_seed, what);
                    do_send(sbuf, len, peer, tag, it);
                }
            }
        }
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    }
    free(sbuf);
    free(rbuf);

    long tm = 0, tb = 0;
    MPICHK(MPI_Reduce(&msgs, &tm, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    MPICHK(MPI_Reduce(&bytes, &tb, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    char sum[200];
    snprintf(sum, sizeof sum, "%d sizes 0..%u B, %d pair(s) per rank, %ld messages, %.1f MiB checked",
             nsizes, MAXSIZE + 1, pairs, tm, tb / 1048576.0);
    return t_finish(sum);
}
