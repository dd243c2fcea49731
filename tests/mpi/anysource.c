/*
 * anysource: wildcard matching.  Each rank in turn is the root; every other
 * rank sends it K messages whose tag and size depend on (sender, sequence).
 * The root checks, from the status alone, that it got exactly the expected
 * messages, in per-sender order (MPI's non-overtaking rule), every byte right:
 *   A1 pre-posted MPI_Irecv(ANY_SOURCE, ANY_TAG)    (expected-message path)
 *   A2 MPI_Recv(ANY_SOURCE, ANY_TAG) after the sends (unexpected-message path)
 *   B  MPI_Probe(ANY_SOURCE, ANY_TAG) + MPI_Get_count (MPI_INT and MPI_BYTE)
 *      + MPI_Get_elements, then an exact-size receive
 *   C  MPI_Iprobe(src, ANY_TAG) polling per source, sources in reverse order,
 *      and MPI_Iprobe(ANY_SOURCE, tag) for a tag nobody sent (must say no)
 *   D  MPI_Mprobe(ANY_SOURCE, ANY_TAG) + MPI_Mrecv
 */
#include "common.h"

static const int size_tab[] = {0, 4, 8, 100, 1472, 4000, 65536, 153600, 200000, 524288, 600000, 1 << 20};
#define NSIZES ((int)(sizeof size_tab / sizeof size_tab[0]))
#define TAGS 50

static int K;
static long nmsg;

static int msg_tag(int phase, int src, int seq) { return (phase * 13 + seq * 7 + src * 3) % TAGS; }
static int msg_len(int phase, int src, int seq) { return size_tab[(phase + src * 3 + seq) % NSIZES]; }
static uint64_t msg_seed(int phase, int src, int root, int seq)
{
    return seed4((uint64_t)phase, (uint64_t)src, (uint64_t)root, (uint64_t)seq);
}

/* senders: Isend all K messages of a phase to root */
static void send_all(int phase, int root, int sync_before)
{
    MPI_Request *rq = malloc(sizeof *rq * (size_t)K);
    uint8_t **b = malloc(sizeof *b * (size_t)K);
    T_WHERE("phase %d: sending %d messages to root %d", phase, K, root);
    if (sync_before) MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    for (int s = 0; s < K; s++) {
        int len = msg_len(phase, t_rank, s);
        b[s] = t_alloc((size_t)len);
        pat_fill(b[s], (size_t)len, msg_seed(phase, t_rank, root, s));
        MPICHK(MPI_Isend(b[s], len / 4, MPI_INT, root, msg_tag(phase, t_rank, s), MPI_COMM_WORLD, &rq[s]));
    }
    if (!sync_before) MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    MPICHK(MPI_Waitall(K, rq, MPI_STATUSES_IGNORE));
    for (int s = 0; s < K; s++) free(b[s]);
    free(b);
    free(rq);
}

/* root: check one received message against the next expected one from its source */
static void check_msg(int phase, int *next, MPI_Status *st, uint8_t *buf, const char *how)
{
    char what[200];
    int src = st->MPI_SOURCE;
    if (src < 0 || src >= t_size || src == t_rank) {
        t_error("phase %d (%s): impossible source %d in status", phase, how, src);
        return;
    }
    int seq = next[src]++;
    T_WHERE("phase %d (%s): root checking message %d from rank %d", phase, how, seq, src);
    snprintf(what, sizeof what, "phase %d (%s) message %d from rank %d", phase, how, seq, src);
    if (seq >= K) {
        t_error("%s: more than %d messages from this source", what, K);
        return;
    }
    int len = msg_len(phase, src, seq);
    if (st->MPI_TAG != msg_tag(phase, src, seq))
        t_error("%s: tag %d, expected %d (lost, duplicated or overtaken message?)", what, st->MPI_TAG,
                msg_tag(phase, src, seq));
    count_check(st, MPI_INT, len / 4, what);
    count_check(st, MPI_BYTE, len, what);
    pat_check(buf, (size_t)len, msg_seed(phase, src, t_rank, seq), what);
    guard_check(buf, (size_t)len, what);
    nmsg++;
}

static void check_all_seen(int phase, int *next)
{
    for (int r = 0; r < t_size; r++)
        if (r != t_rank && next[r] != K)
            t_error("phase %d: got %d messages from rank %d, expected %d", phase, next[r], r, K);
}

static void phase_a1(int root)
{
    const int phase = 1;
    if (t_rank != root) {
        send_all(phase, root, 1);
        return;
    }
    int n = K * (t_size - 1), maxlen = 1 << 20;
    MPI_Request *rq = malloc(sizeof *rq * (size_t)n);
    MPI_Status *st = malloc(sizeof *st * (size_t)n);
    uint8_t **b = malloc(sizeof *b * (size_t)n);
    int *next = calloc((size_t)t_size, sizeof *next);
    for (int i = 0; i < n; i++) {
        b[i] = t_alloc((size_t)maxlen);
        t_poison(b[i], (size_t)maxlen);
        MPICHK(MPI_Irecv(b[i], maxlen / 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[i]));
    }
    MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    MPICHK(MPI_Waitall(n, rq, st));
    /* receives match in posting order, so per source the sequence must rise */
    for (int i = 0; i < n; i++) {
        check_msg(phase, next, &st[i], b[i], "pre-posted Irecv ANY/ANY");
        free(b[i]);
    }
    check_all_seen(phase, next);
    free(next), free(b), free(st), free(rq);
}

static void phase_a2(int root)
{
    const int phase = 2;
    if (t_rank != root) {
        send_all(phase, root, 0);
        return;
    }
    int n = K * (t_size - 1), maxlen = 1 << 20;
    uint8_t *b = t_alloc((size_t)maxlen);
    int *next = calloc((size_t)t_size, sizeof *next);
    MPICHK(MPI_Barrier(MPI_COMM_WORLD)); /* all sends are issued: eager ones arrive unexpected */
    for (int i = 0; i < n; i++) {
        MPI_Status st;
        t_poison(b, (size_t)maxlen);
        MPICHK(MPI_Recv(b, maxlen / 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        check_msg(phase, next, &st, b, "Recv ANY/ANY");
    }
    check_all_seen(phase, next);
    free(next), free(b);
}

static void phase_b(int root)
{
    const int phase = 3;
    if (t_rank != root) {
        send_all(phase, root, 0);
        return;
    }
    int n = K * (t_size - 1);
    int *next = calloc((size_t)t_size, sizeof *next);
    MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        MPI_Status pst, st;
        int nint = -1, nbyte = -1, nel = -1;
        MPICHK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pst));
        MPI_Get_count(&pst, MPI_INT, &nint);
        MPI_Get_count(&pst, MPI_BYTE, &nbyte);
        MPI_Get_elements(&pst, MPI_INT, &nel);
        if (nint < 0 || nbyte != 4 * nint || nel != nint) {
            t_error("phase %d: Probe from %d tag %d: Get_count int %d byte %d, Get_elements %d inconsistent",
                    phase, pst.MPI_SOURCE, pst.MPI_TAG, nint, nbyte, nel);
            nint = 1 << 18; /* still drain the message */
        }
        uint8_t *b = t_alloc((size_t)nint * 4);
        t_poison(b, (size_t)nint * 4);
        MPICHK(MPI_Recv(b, nint, MPI_INT, pst.MPI_SOURCE, pst.MPI_TAG, MPI_COMM_WORLD, &st));
        if (st.MPI_SOURCE != pst.MPI_SOURCE || st.MPI_TAG != pst.MPI_TAG)
            t_error("phase %d: probed %d/%d but received %d/%d", phase, pst.MPI_SOURCE, pst.MPI_TAG,
                    st.MPI_SOURCE, st.MPI_TAG);
        check_msg(phase, next, &st, b, "Probe ANY/ANY + Get_count");
        free(b);
    }
    check_all_seen(phase, next);
    free(next);
}

static void phase_c(int root)
{
    const int phase = 4;
    if (t_rank != root) {
        send_all(phase, root, 0);
        return;
    }
    int *next = calloc((size_t)t_size, sizeof *next);
    MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    for (int src = t_size - 1; src >= 0; src--) {
        if (src == t_rank) continue;
        for (int s = 0; s < K; s++) {
            MPI_Status pst, st;
            int flag = 0, nint = -1;
            long spins = 0;
            while (!flag) {
                MPICHK(MPI_Iprobe(src, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &pst));
                spins++;
            }
            if (pst.MPI_SOURCE != src) t_error("phase %d: Iprobe(%d, ANY_TAG) returned source %d", phase, src, pst.MPI_SOURCE);
            MPI_Get_count(&pst, MPI_INT, &nint);
            if (nint < 0) nint = 1 << 18;
            uint8_t *b = t_alloc((size_t)nint * 4);
            t_poison(b, (size_t)nint * 4);
            MPICHK(MPI_Recv(b, nint, MPI_INT, src, pst.MPI_TAG, MPI_COMM_WORLD, &st));
            check_msg(phase, next, &st, b, "Iprobe src/ANY_TAG");
            free(b);
        }
    }
    int flag = 1;
    MPI_Status st;
    MPICHK(MPI_Iprobe(MPI_ANY_SOURCE, TAGS + 7, MPI_COMM_WORLD, &flag, &st));
    if (flag) t_error("phase %d: Iprobe found a message with tag %d that nobody sent (from %d)", phase, TAGS + 7, st.MPI_SOURCE);
    MPICHK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    if (flag) t_error("phase %d: Iprobe found an extra message (source %d tag %d) after all were received", phase, st.MPI_SOURCE, st.MPI_TAG);
    check_all_seen(phase, next);
    free(next);
}

static void phase_d(int root)
{
    const int phase = 5;
    if (t_rank != root) {
        send_all(phase, root, 0);
        return;
    }
    int n = K * (t_size - 1);
    int *next = calloc((size_t)t_size, sizeof *next);
    MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        MPI_Status pst, st;
        MPI_Message m;
        int nint = -1;
        MPICHK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &pst));
        MPI_Get_count(&pst, MPI_INT, &nint);
        if (nint < 0) nint = 1 << 18;
        uint8_t *b = t_alloc((size_t)nint * 4);
        t_poison(b, (size_t)nint * 4);
        MPICHK(MPI_Mrecv(b, nint, MPI_INT, &m, &st));
        check_msg(phase, next, &st, b, "Mprobe/Mrecv ANY/ANY");
        free(b);
    }
    check_all_seen(phase, next);
    free(next);
}

int main(int argc, char **argv)
{
    t_early("anysource", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("anysource", argc, argv);
    K = t_iters(20);
    for (int root = 0; root < t_size; root++) {
        t_log("root %d", root);
        T_WHERE("root %d: phases 1-5 (the last checked message follows if any)", root);
        /* a barrier after each phase: an eager send completes before it is received,
         * so without it the next phase's messages could match this phase's wildcards */
        phase_a1(root);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        phase_a2(root);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        phase_b(root);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        phase_c(root);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        phase_d(root);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    }
    long tm = 0;
    MPICHK(MPI_Reduce(&nmsg, &tm, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    char sum[200];
    snprintf(sum, sizeof sum, "%ld wildcard messages (Irecv/Recv ANY, Probe, Iprobe, Mprobe) in sender order, sizes 0..1 MiB",
             tm);
    return t_finish(sum);
}
