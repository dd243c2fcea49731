/*
 * manyreq: many outstanding non-blocking requests in both directions at once.
 * Every rank has R (default 256) MPI_Irecv and R MPI_Isend in flight with
 * EVERY other rank, mixed sizes (0 B .. 300 KB: eager, rendezvous, datagram
 * boundaries), only 16 distinct tags so many messages share a (source, tag)
 * and must match in send order.  Rounds vary the order and the completion:
 *   round%3 == 0: receives posted first, MPI_Waitall
 *   round%3 == 1: sends posted first (receives find unexpected messages), MPI_Testsome loop
 *   round%3 == 2: interleaved per message, MPI_Waitany
 * Every byte of every message is checked, with count, source, tag and guard bytes.
 */
#include "common.h"

static const int size_tab[] = {0, 1, 8, 64, 500, 501, 1472, 1473, 4096, 9000, 65536, 153601, 300000};
#define NSZ ((int)(sizeof size_tab / sizeof size_tab[0]))
#define NTAGS 16

static int R = 256;

static size_t msg_len(int src, int i) { return (size_t)size_tab[(i * 7 + src) % NSZ]; }
static uint64_t msg_seed(int src, int dst, int round, int i) { return seed4((uint64_t)src, (uint64_t)dst, (uint64_t)round, (uint64_t)i); }

int main(int argc, char **argv)
{
    t_early("manyreq", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("manyreq", argc, argv);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-r")) R = atoi(argv[i + 1]);
    int rounds = t_iters(6);
    int npeer = t_size - 1, n = npeer * R;
    MPI_Request *rq = malloc(sizeof *rq * (size_t)(2 * n));
    MPI_Status *st = malloc(sizeof *st * (size_t)(2 * n));
    int *idx = malloc(sizeof *idx * (size_t)(2 * n));
    int *done = malloc(sizeof *done * (size_t)(2 * n));
    uint8_t **sb = malloc(sizeof *sb * (size_t)n), **rb = malloc(sizeof *rb * (size_t)n);
    int *peer = malloc(sizeof *peer * (size_t)npeer);
    for (int k = 0, p = 0; p < t_size; p++)
        if (p != t_rank) peer[k++] = p;
    /* request slot j: receives 0..n-1, sends n..2n-1; message j = (peer j / R, index j % R) */
    for (int j = 0; j < n; j++) {
        sb[j] = t_alloc(300000);
        rb[j] = t_alloc(300000);
    }
    long msgs = 0, bytes = 0;

    for (int round = 0; round < rounds; round++) {
        int mode = round % 3;
        t_log("round %d mode %d, %d requests", round, mode, 2 * n);
        for (int j = 0; j < 2 * n; j++) st[j].MPI_SOURCE = st[j].MPI_TAG = -1; /* never completed = wrong */
        for (int j = 0; j < n; j++) {
            int p = peer[j / R], i = j % R;
            pat_fill(sb[j], msg_len(t_rank, i), msg_seed(t_rank, p, round, i));
            t_poison(rb[j], msg_len(p, i));
        }
        T_WHERE("round %d (mode %d): barrier before posting", round, mode);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        T_WHERE("round %d (mode %d): posting and completing %d requests", round, mode, 2 * n);
        if (mode == 0 || mode == 1) {
            for (int pass = 0; pass < 2; pass++) {
                int recvs = (pass == 0) == (mode == 0);
                for (int j = 0; j < n; j++) {
                    int p = peer[j / R], i = j % R;
                    if (recvs)
                        MPICHK(MPI_Irecv(rb[j], (int)(msg_len(p, i) + GUARD), MPI_BYTE, p, i % NTAGS,
                                         MPI_COMM_WORLD, &rq[j]));
                    else
                        MPICHK(MPI_Isend(sb[j], (int)msg_len(t_rank, i), MPI_BYTE, p, i % NTAGS,
                                         MPI_COMM_WORLD, &rq[n + j]));
                }
            }
        } else {
            for (int j = 0; j < n; j++) {
                int p = peer[j / R], i = j % R;
                MPICHK(MPI_Isend(sb[j], (int)msg_len(t_rank, i), MPI_BYTE, p, i % NTAGS, MPI_COMM_WORLD, &rq[n + j]));
                MPICHK(MPI_Irecv(rb[j], (int)(msg_len(p, i) + GUARD), MPI_BYTE, p, i % NTAGS, MPI_COMM_WORLD, &rq[j]));
            }
        }
        if (mode == 0) {
            MPICHK(MPI_Waitall(2 * n, rq, st));
        } else if (mode == 1) {
            int left = 2 * n, outc;
            MPI_Status *ts = malloc(sizeof *ts * (size_t)(2 * n));
            while (left > 0) {
                MPICHK(MPI_Testsome(2 * n, rq, &outc, idx, ts));
                if (outc == MPI_UNDEFINED) break;
                for (int c = 0; c < outc; c++) st[idx[c]] = ts[c];
                left -= outc;
            }
            free(ts);
        } else {
            memset(done, 0, sizeof *done * (size_t)(2 * n));
            for (int c = 0; c < 2 * n; c++) {
                int k;
                MPI_Status s;
                MPICHK(MPI_Waitany(2 * n, rq, &k, &s));
                if (k == MPI_UNDEFINED || k < 0 || k >= 2 * n || done[k]) {
                    t_error("round %d: MPI_Waitany returned index %d (completion %d of %d)", round, k, c, 2 * n);
                    break;
                }
                done[k] = 1;
                st[k] = s;
            }
        }
        for (int j = 0; j < n; j++) {
            int p = peer[j / R], i = j % R;
            size_t len = msg_len(p, i);
            char what[160];
            snprintf(what, sizeof what, "round %d message %d (tag %d, %zu B) from rank %d", round, i, i % NTAGS, len, p);
            if (st[j].MPI_SOURCE != p || st[j].MPI_TAG != i % NTAGS)
                t_error("%s: status source/tag %d/%d", what, st[j].MPI_SOURCE, st[j].MPI_TAG);
            count_check(&st[j], MPI_BYTE, (int)len, what);
            pat_check(rb[j], len, msg_seed(p, t_rank, round, i), what);
            guard_check(rb[j], len, what);
            msgs++;
            bytes += (long)len;
        }
    }
    for (int j = 0; j < n; j++) free(sb[j]), free(rb[j]);
    long tm = 0, tb = 0;
    MPICHK(MPI_Reduce(&msgs, &tm, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    MPICHK(MPI_Reduce(&bytes, &tb, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    char sum[200];
    snprintf(sum, sizeof sum, "%d rounds, %d sends + %d receives in flight per rank, %ld messages, %.1f MiB checked",
             rounds, n, n, tm, tb / 1048576.0);
    return t_finish(sum);
}
