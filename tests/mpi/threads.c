/*
 * threads: MPI_THREAD_MULTIPLE with 4 threads per rank, all talking at once.
 * Fails loudly if the library does not provide MPI_THREAD_MULTIPLE.
 * Thread t of every rank uses only tags of its own range (t * 10000 + ...),
 * so messages of different threads can never match each other; within a
 * thread every byte is checked.  Each thread, concurrently with the others:
 *   1. non-blocking exchange with every peer (Irecv + Isend + Waitall),
 *      mixed sizes 0 B .. 1 MiB;
 *   2. blocking ping-pong with thread t of every peer (Send/Recv, Ssend);
 *   3. MPI_ANY_SOURCE receives on its own tag, one message from every peer;
 *   4. MPI_Iprobe polling on its own tag, then a receive of the probed size.
 */
#include "common.h"

#define NTHREADS 4
static const size_t size_tab[] = {0, 8, 1000, 1473, 65536, 153601, 1u << 20};
#define NSZ ((int)(sizeof size_tab / sizeof size_tab[0]))

static int K;
static long t_msgs[NTHREADS];
static volatile int th_phase[NTHREADS], th_k[NTHREADS];

static void where_threads(char *buf, size_t len)
{
    size_t o = 0;
    for (int i = 0; i < NTHREADS && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "; thread %d in phase %d step %d", i, th_phase[i], th_k[i]);
}
#define TH_AT(ph, k) (th_phase[th] = (ph), th_k[th] = (k))

static uint64_t tseed(int src, int dst, int th, int k) { return seed4((uint64_t)src, (uint64_t)dst, (uint64_t)th, (uint64_t)k); }
static int ttag(int th, int phase, int k) { return th * 10000 + phase * 1000 + k % 1000; }

static void recv_check(int th, uint8_t *b, size_t len, int src, int tag, uint64_t seed, const char *phase, int k)
{
    char what[160];
    MPI_Status st;
    snprintf(what, sizeof what, "thread %d %s #%d: %zu B from rank %d tag %d", th, phase, k, len, src, tag);
    t_poison(b, len);
    MPICHK(MPI_Recv(b, (int)(len + GUARD), MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    if (src != MPI_ANY_SOURCE && st.MPI_SOURCE != src) t_error("%s: status source %d", what, st.MPI_SOURCE);
    if (st.MPI_TAG != tag) t_error("%s: status tag %d", what, st.MPI_TAG);
    count_check(&st, MPI_BYTE, (int)len, what);
    pat_check(b, len, seed, what);
    guard_check(b, len, what);
}

static void *worker(void *arg)
{
    int th = (int)(intptr_t)arg;
    size_t maxl = 1u << 20;
    int np = t_size - 1;
    uint8_t **sb = malloc(sizeof *sb * (size_t)t_size), **rb = malloc(sizeof *rb * (size_t)t_size);
    MPI_Request *rq = malloc(sizeof *rq * 2 * (size_t)t_size);
    for (int p = 0; p < t_size; p++) sb[p] = t_alloc(maxl), rb[p] = t_alloc(maxl);
    char what[160];

    /* 1. non-blocking exchange with every peer */
    for (int k = 0; k < K; k++) {
        size_t len = size_tab[(k + th) % NSZ];
        int n = 0;
        TH_AT(1, k);
        for (int p = 0; p < t_size; p++) {
            if (p == t_rank) continue;
            t_poison(rb[p], len);
            MPICHK(MPI_Irecv(rb[p], (int)(len + GUARD), MPI_BYTE, p, ttag(th, 1, k), MPI_COMM_WORLD, &rq[n++]));
        }
        for (int p = 0; p < t_size; p++) {
            if (p == t_rank) continue;
            pat_fill(sb[p], len, tseed(t_rank, p, th, k));
            MPICHK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, ttag(th, 1, k), MPI_COMM_WORLD, &rq[n++]));
        }
        MPICHK(MPI_Waitall(n, rq, MPI_STATUSES_IGNORE));
        for (int p = 0; p < t_size; p++) {
            if (p == t_rank) continue;
            snprintf(what, sizeof what, "thread %d exchange #%d: %zu B from rank %d", th, k, len, p);
            pat_check(rb[p], len, tseed(p, t_rank, th, k), what);
            guard_check(rb[p], len, what);
            t_msgs[th]++;
        }
    }

    t_log("thread %d: phase 2 (ping-pong)", th);
    /* 2. blocking ping-pong with thread th of every peer, lower rank first */
    for (int p = 0; p < t_size; p++) {
        if (p == t_rank) continue;
        for (int k = 0; k < K; k++) {
            size_t len = size_tab[(k * 3 + th) % NSZ];
            int tag = ttag(th, 2, k);
            TH_AT(2, k);
            pat_fill(sb[p], len, tseed(t_rank, p, th, 1000 + k));
            if (t_rank < p) {
                if (k & 1) MPICHK(MPI_Ssend(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD));
                else MPICHK(MPI_Send(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD));
                recv_check(th, rb[p], len, p, tag, tseed(p, t_rank, th, 1000 + k), "ping-pong", k);
            } else {
                recv_check(th, rb[p], len, p, tag, tseed(p, t_rank, th, 1000 + k), "ping-pong", k);
                if (k & 1) MPICHK(MPI_Ssend(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD));
                else MPICHK(MPI_Send(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD));
            }
            t_msgs[th]++;
        }
    }

    t_log("thread %d: phase 3 (ANY_SOURCE)", th);
    /* 3. ANY_SOURCE on this thread's tag: one message from each peer per round */
    for (int k = 0; k < K; k++) {
        size_t len = size_tab[(k + 2 * th) % NSZ];
        int tag = ttag(th, 3, k), n = 0;
        TH_AT(3, k);
        for (int p = 0; p < t_size; p++) {
            if (p == t_rank) continue;
            pat_fill(sb[p], len, tseed(t_rank, p, th, 2000 + k));
            MPICHK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD, &rq[n++]));
        }
        int *seen = calloc((size_t)t_size, sizeof *seen);
        for (int i = 0; i < np; i++) {
            MPI_Status st;
            uint8_t *b = rb[0];
            t_poison(b, len);
            MPICHK(MPI_Recv(b, (int)(len + GUARD), MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st));
            int src = st.MPI_SOURCE;
            snprintf(what, sizeof what, "thread %d ANY_SOURCE #%d: %zu B tag %d from rank %d", th, k, len, tag, src);
            if (src < 0 || src >= t_size || src == t_rank || seen[src]++) {
                t_error("%s: unexpected or repeated source", what);
                continue;
            }
            count_check(&st, MPI_BYTE, (int)len, what);
            pat_check(b, len, tseed(src, t_rank, th, 2000 + k), what);
            guard_check(b, len, what);
            t_msgs[th]++;
        }
        free(seen);
        MPICHK(MPI_Waitall(n, rq, MPI_STATUSES_IGNORE));
    }

    t_log("thread %d: phase 4 (Iprobe)", th);
    /* 4. Iprobe on this thread's tag, receive exactly the probed size */
    for (int k = 0; k < K; k++) {
        size_t len = size_tab[(k * 5 + th) % NSZ];
        int tag = ttag(th, 4, k), n = 0;
        TH_AT(4, k);
        for (int p = 0; p < t_size; p++) {
            if (p == t_rank) continue;
            pat_fill(sb[p], len, tseed(t_rank, p, th, 3000 + k));
            MPICHK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD, &rq[n++]));
        }
        for (int i = 0; i < np; i++) {
            MPI_Status pst;
            int flag = 0, cnt = -1;
            while (!flag) MPICHK(MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &pst));
            MPI_Get_count(&pst, MPI_BYTE, &cnt);
            if (cnt != (int)len)
                t_error("thread %d Iprobe #%d tag %d from rank %d: Get_count %d, expected %zu", th, k, tag, pst.MPI_SOURCE, cnt, len);
            /* another thread never probes this tag, so the probed message is still there */
            recv_check(th, rb[0], len, pst.MPI_SOURCE, tag, tseed(pst.MPI_SOURCE, t_rank, th, 3000 + k), "Iprobe", k);
            t_msgs[th]++;
        }
        MPICHK(MPI_Waitall(n, rq, MPI_STATUSES_IGNORE));
    }

    t_log("thread %d: done", th);
    TH_AT(5, 0);
    for (int p = 0; p < t_size; p++) free(sb[p]), free(rb[p]);
    free(sb), free(rb), free(rq);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1;
    t_early("threads", argc, argv);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    t_setup("threads", argc, argv);
    if (provided < MPI_THREAD_MULTIPLE) {
        t_error("MPI_Init_thread(MPI_THREAD_MULTIPLE) provided only level %d (SINGLE=%d FUNNELED=%d SERIALIZED=%d MULTIPLE=%d)",
                provided, MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE);
        return t_finish("");
    }
    K = t_iters(30);
    t_where_hook = where_threads;
    T_WHERE("threads running");
    pthread_t tid[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        if (pthread_create(&tid[i], NULL, worker, (void *)(intptr_t)i)) {
            t_error("pthread_create failed");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    for (int i = 0; i < NTHREADS; i++) pthread_join(tid[i], NULL);
    long mine = 0, tm = 0;
    for (int i = 0; i < NTHREADS; i++) mine += t_msgs[i];
    MPICHK(MPI_Reduce(&mine, &tm, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    char sum[200];
    snprintf(sum, sizeof sum, "MPI_THREAD_MULTIPLE, %d threads per rank, %ld messages checked (Isend/Irecv, Send/Ssend, ANY_SOURCE, Iprobe)",
             NTHREADS, tm);
    return t_finish(sum);
}
