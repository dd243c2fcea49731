/*
 * slowcheck: a slow, byte-checked ping-pong between 2 ranks, the target of the hostile tests
 * that forge *sequenced* segments (replays, duplicate floods, in-window PUT/GET).
 *
 * Why slow: a forged segment carrying the real job key and a sequence number inside the
 * receive window is indistinguishable from real traffic and consumes that sequence number.
 * The tool forges numbers ~2500 ahead of the last one it saw; this program keeps each
 * direction's traffic far below that (about 2 segments per 10 ms period, one 20 KB chunked
 * message every 25 periods), so the real sender never reaches a forged number and the job's
 * results stay meaningful. Also runs long enough (-T seconds) for the tool to act.
 *
 * Options: -T SECONDS (default 6), plus the common -t/-s/-v (tests/mpi/common.h).
 */
#include "../mpi/common.h"

#define SMALL 1000
#define BIG 20000

int main(int argc, char **argv)
{
    double secs = 6;
    MPI_Init(&argc, &argv);
    t_setup("slowcheck", argc, argv);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-T")) secs = atof(argv[i + 1]);
    if (t_size != 2) {
        if (t_rank == 0) t_error("run me with exactly 2 ranks (got %d)", t_size);
        return t_finish("");
    }
    int peer = 1 - t_rank, go = 1;
    uint8_t *sb = t_alloc(BIG), *rb = t_alloc(BIG);
    long msgs = 0, bytes = 0;
    double t0 = MPI_Wtime();
    for (int it = 0; go; it++) {
        size_t len = it % 25 == 24 ? BIG : SMALL;
        char what[96];
        if (t_rank == 0) {
            pat_fill(sb, len, seed4(0, 1, (uint64_t)it, len));
            MPICHK(MPI_Send(sb, (int)len, MPI_BYTE, peer, it % 64, MPI_COMM_WORLD));
        }
        MPI_Status st;
        t_poison(rb, len);
        int from = t_rank == 0 ? 1 : 0;
        MPICHK(MPI_Recv(rb, (int)len + GUARD, MPI_BYTE, peer, it % 64, MPI_COMM_WORLD, &st));
        snprintf(what, sizeof what, "slowcheck %d->%d iter %d size %zu", from, t_rank, it, len);
        count_check(&st, MPI_BYTE, (int)len, what);
        pat_check(rb, len, seed4((uint64_t)from, (uint64_t)t_rank, (uint64_t)it, len), what);
        guard_check(rb, len, what);
        if (t_rank == 1) {
            pat_fill(sb, len, seed4(1, 0, (uint64_t)it, len));
            MPICHK(MPI_Send(sb, (int)len, MPI_BYTE, peer, it % 64, MPI_COMM_WORLD));
        }
        msgs++;
        bytes += (long)len;
        usleep(10000);
        if (t_rank == 0) go = MPI_Wtime() - t0 < secs;
        MPICHK(MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD));
    }
    char summary[128];
    snprintf(summary, sizeof summary, "%ld messages, %ld bytes checked per rank", msgs, bytes);
    free(sb);
    free(rb);
    return t_finish(summary);
}
