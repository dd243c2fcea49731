/*
 * Data check shared by the windowed benchmarks: 'from' sends CHECK_MSGS differently patterned messages
 * back to back, 'to' posts all receives first and verifies each one. MPI's non-overtaking rule means
 * message k must land in receive k, so a transport that reorders, duplicates or corrupts fails here.
 */
#ifndef USNIC_BENCH_WINDOW_CHECK_H
#define USNIC_BENCH_WINDOW_CHECK_H
#include "common.h"

#define CHECK_MSGS 4

struct window_check {
    unsigned char *buf[CHECK_MSGS];
};

static void window_check_init(struct window_check *w, size_t maxsz)
{
    for (int k = 0; k < CHECK_MSGS; k++)
        w->buf[k] = bench_alloc(maxsz);
}

static void window_check_free(struct window_check *w)
{
    for (int k = 0; k < CHECK_MSGS; k++)
        free(w->buf[k]);
}

/* Posts (does not wait for) the sends or receives of one direction; the caller waits on reqs. */
static int window_check_post(struct window_check *w, size_t size, int me, int from, int to, MPI_Request *reqs)
{
    int n = 0;
    for (int k = 0; k < CHECK_MSGS; k++) {
        if (me == from) {
            bench_fill(w->buf[k], size, from, k + 2);
            MPI_Isend(w->buf[k], (int)size, MPI_BYTE, to, BENCH_CHECK_TAG, MPI_COMM_WORLD, &reqs[n++]);
        } else if (me == to) {
            memset(w->buf[k], 0x5a, size);
            MPI_Irecv(w->buf[k], (int)size, MPI_BYTE, from, BENCH_CHECK_TAG, MPI_COMM_WORLD, &reqs[n++]);
        }
    }
    return n;
}

static void window_check_verify(struct window_check *w, size_t size, int me, int from, int to, const char *what)
{
    if (me != to)
        return;
    for (int k = 0; k < CHECK_MSGS; k++)
        bench_verify(w->buf[k], size, from, k + 2, what);
}

#endif
