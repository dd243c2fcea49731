/*
 * onesided: MPI_Win_create windows, every rank targets every rank (itself included).
 *   fence epochs: MPI_Put into a per-origin slot, MPI_Get of the target's
 *     pattern region, MPI_Accumulate(SUM, int64), and an MPI_Put whose target
 *     datatype is a vector (gaps must stay untouched);
 *   lock/unlock epochs: the same Put/Get under MPI_LOCK_EXCLUSIVE, Accumulate
 *     under MPI_LOCK_SHARED, and MPI_Fetch_and_op on one counter (every
 *     fetched value must be distinct and the final count exact).
 * Transfer sizes go from 8 B to 1 MiB (osc splits them over the BTL's put/get
 * or its send path).
 */
#include "common.h"

#define NA 4096 /* accumulate elements */
#define VB 512  /* vector blocks for the strided put */

static size_t S;  /* slot size this iteration */
static size_t SMAX = 1u << 20;

typedef struct {
    uint8_t *base;
    size_t put_off, get_off, acc_off, vec_off, cnt_off, total;
} winmem_t;

static int64_t aval(int r, int k, int it) { return (int64_t)(mix64(seed4(7, (uint64_t)r, (uint64_t)k, (uint64_t)it)) >> 24); }
static uint64_t put_seed(int o, int t, int it, int ph) { return seed4(8, (uint64_t)o, (uint64_t)t, (uint64_t)(it * 4 + ph)); }
static uint64_t get_seed(int t, int it, int ph) { return seed4(9, (uint64_t)t, 0, (uint64_t)(it * 4 + ph)); }

/* local reset of the exposed memory; caller holds a fence or a self lock */
static void reset_local(winmem_t *m, int it, int ph)
{
    memset(m->base + m->put_off, POISON, SMAX * (size_t)t_size);
    pat_fill(m->base + m->get_off, SMAX, get_seed(t_rank, it, ph));
    memset(m->base + m->acc_off, 0, NA * 8);
    memset(m->base + m->vec_off, POISON, VB * 3 * 8);
    memset(m->base + m->cnt_off, 0, 8);
}

static void check_local(winmem_t *m, int it, int ph, const char *epoch)
{
    char what[160];
    for (int o = 0; o < t_size; o++) {
        snprintf(what, sizeof what, "%s iter %d: MPI_Put of %zu B from rank %d into my window", epoch, it, S, o);
        uint8_t *slot = m->base + m->put_off + (size_t)o * SMAX;
        pat_check(slot, S, put_seed(o, t_rank, it, ph), what);
        for (size_t i = S; i < SMAX && i < S + 64; i++)
            if (slot[i] != POISON) {
                t_error("%s: byte %zu past the put was written", what, i);
                break;
            }
    }
    int64_t *acc = (int64_t *)(m->base + m->acc_off);
    for (int k = 0; k < NA; k++) {
        int64_t e = 0;
        for (int r = 0; r < t_size; r++) e += aval(r, k, it * 4 + ph);
        if (acc[k] != e) {
            t_error("%s iter %d: MPI_Accumulate SUM element %d = %lld, expected %lld", epoch, it, k, (long long)acc[k], (long long)e);
            break;
        }
    }
}

int main(int argc, char **argv)
{
    t_early("onesided", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("onesided", argc, argv);
    winmem_t m;
    m.put_off = 0;
    m.get_off = m.put_off + SMAX * (size_t)t_size;
    m.acc_off = m.get_off + SMAX;
    m.vec_off = m.acc_off + NA * 8;
    m.cnt_off = m.vec_off + VB * 3 * 8;
    m.total = m.cnt_off + 8;
    MPI_Alloc_mem((MPI_Aint)m.total, MPI_INFO_NULL, &m.base);
    MPI_Win win;
    int wrc = MPI_Win_create(m.base, (MPI_Aint)m.total, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (wrc != MPI_SUCCESS) {
        /* Debian's /etc/openmpi/openmpi-mca-params.conf has "osc = ^ucx,pt2pt", and osc rdma needs
         * BTL atomics that tcp (and usnic) lack: then no osc component can serve the window.
         * Checked by hand, not with MPICHK (which would abort): every rank fails alike, so the
         * program can go on to t_finish and report it as its FAIL line. */
        t_error("MPI_Win_create failed (error %d): no usable osc component; run with --mca osc pt2pt", wrc);
        MPI_Free_mem(m.base);
        return t_finish("");
    }
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);

    uint8_t *src = malloc(SMAX), *getb = t_alloc(SMAX * (size_t)t_size);
    int64_t *accv = malloc(NA * 8);
    double *vsrc = malloc(VB * 8);
    MPI_Datatype vec;
    MPI_Type_vector(VB, 1, 3, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    static const size_t sizes[] = {8, 1000, 65537, 150000, 1u << 20};
    int nsz = (int)(sizeof sizes / sizeof sizes[0]), iters = t_iters(2) * nsz;
    long nops = 0;
    int fetch_k = t_iters(50);

    for (int it = 0; it < iters; it++) {
        S = sizes[it % nsz];
        char what[160];
        /* ---- fence epoch ---- */
        MPICHK(MPI_Win_fence(0, win));
        reset_local(&m, it, 0);
        MPICHK(MPI_Win_fence(0, win));
        t_poison(getb, SMAX * (size_t)t_size);
        for (int k = 0; k < VB; k++) vsrc[k] = (double)(t_rank * 100000 + k + it);
        for (int d = 0; d < t_size; d++) {
            int t = (t_rank + d) % t_size;
            T_WHERE("iter %d size %zu: fence epoch with target %d", it, S, t);
            pat_fill(src, S, put_seed(t_rank, t, it, 0));
            MPICHK(MPI_Put(src, (int)S, MPI_BYTE, t, (MPI_Aint)(m.put_off + (size_t)t_rank * SMAX), (int)S, MPI_BYTE, win));
            MPICHK(MPI_Get(getb + (size_t)t * SMAX, (int)S, MPI_BYTE, t, (MPI_Aint)m.get_off, (int)S, MPI_BYTE, win));
            for (int k = 0; k < NA; k++) accv[k] = aval(t_rank, k, it * 4);
            MPICHK(MPI_Accumulate(accv, NA, MPI_INT64_T, t, (MPI_Aint)m.acc_off, NA, MPI_INT64_T, MPI_SUM, win));
            /* the vector put targets the next rank only, so each vector region has one writer */
            if (t == (t_rank + 1) % t_size)
                MPICHK(MPI_Put(vsrc, VB, MPI_DOUBLE, t, (MPI_Aint)m.vec_off, 1, vec, win));
            /* origin buffers may be reused only after the epoch closes: src is reused per target,
             * so close the epoch per target when the origin data changes */
            MPICHK(MPI_Win_fence(0, win));
        }
        check_local(&m, it, 0, "fence");
        for (int t = 0; t < t_size; t++) {
            snprintf(what, sizeof what, "fence iter %d: MPI_Get of %zu B from rank %d", it, S, t);
            pat_check(getb + (size_t)t * SMAX, S, get_seed(t, it, 0), what);
        }
        {
            int from = (t_rank + t_size - 1) % t_size;
            double *v = (double *)(m.base + m.vec_off);
            uint8_t *vb = (uint8_t *)v;
            for (int k = 0; k < VB * 3; k++) {
                if (k % 3 == 0) {
                    double e = (double)(from * 100000 + k / 3 + it);
                    if (v[k] != e) {
                        t_error("fence iter %d: vector put from rank %d: element %d = %g, expected %g", it, from, k / 3, v[k], e);
                        break;
                    }
                } else if (vb[k * 8] != POISON || vb[k * 8 + 7] != POISON) {
                    t_error("fence iter %d: vector put from rank %d wrote the gap double %d", it, from, k);
                    break;
                }
            }
        }
        nops += 4L * t_size;

        /* ---- lock/unlock epochs ---- */
        MPICHK(MPI_Win_fence(0, win));
        reset_local(&m, it, 1);
        MPICHK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
        t_poison(getb, SMAX * (size_t)t_size);
        for (int d = 0; d < t_size; d++) {
            int t = (t_rank + d + 1) % t_size;
            T_WHERE("iter %d size %zu: lock epochs with target %d", it, S, t);
            pat_fill(src, S, put_seed(t_rank, t, it, 1));
            MPICHK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win));
            MPICHK(MPI_Put(src, (int)S, MPI_BYTE, t, (MPI_Aint)(m.put_off + (size_t)t_rank * SMAX), (int)S, MPI_BYTE, win));
            MPICHK(MPI_Get(getb + (size_t)t * SMAX, (int)S, MPI_BYTE, t, (MPI_Aint)m.get_off, (int)S, MPI_BYTE, win));
            MPICHK(MPI_Win_unlock(t, win));
            for (int k = 0; k < NA; k++) accv[k] = aval(t_rank, k, it * 4 + 1);
            MPICHK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
            MPICHK(MPI_Accumulate(accv, NA, MPI_INT64_T, t, (MPI_Aint)m.acc_off, NA, MPI_INT64_T, MPI_SUM, win));
            MPICHK(MPI_Win_unlock(t, win));
        }
        /* atomic counter on rank it % size */
        int ctr = it % t_size;
        int64_t one = 1, *got = malloc(8 * (size_t)fetch_k);
        T_WHERE("iter %d: fetch_and_op on rank %d", it, ctr);
        MPICHK(MPI_Win_lock(MPI_LOCK_SHARED, ctr, 0, win));
        for (int k = 0; k < fetch_k; k++) {
            MPICHK(MPI_Fetch_and_op(&one, &got[k], MPI_INT64_T, ctr, (MPI_Aint)m.cnt_off, MPI_SUM, win));
            MPICHK(MPI_Win_flush(ctr, win));
        }
        MPICHK(MPI_Win_unlock(ctr, win));
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
        MPICHK(MPI_Win_lock(MPI_LOCK_SHARED, t_rank, 0, win));
        check_local(&m, it, 1, "lock/unlock");
        int64_t cnt;
        memcpy(&cnt, m.base + m.cnt_off, 8);
        MPICHK(MPI_Win_unlock(t_rank, win));
        if (t_rank == ctr && cnt != (int64_t)fetch_k * t_size)
            t_error("lock iter %d: Fetch_and_op counter = %lld, expected %lld", it, (long long)cnt, (long long)fetch_k * t_size);
        for (int t = 0; t < t_size; t++) {
            snprintf(what, sizeof what, "lock iter %d: MPI_Get of %zu B from rank %d", it, S, t);
            pat_check(getb + (size_t)t * SMAX, S, get_seed(t, it, 1), what);
        }
        /* every fetched value is distinct across all ranks: gather and check as a set */
        int64_t *all = t_rank == 0 ? malloc(8 * (size_t)fetch_k * (size_t)t_size) : NULL;
        MPICHK(MPI_Gather(got, fetch_k, MPI_INT64_T, all, fetch_k, MPI_INT64_T, 0, MPI_COMM_WORLD));
        if (t_rank == 0) {
            long n = (long)fetch_k * t_size;
            uint8_t *seen = calloc((size_t)n, 1);
            for (long i = 0; i < n; i++) {
                if (all[i] < 0 || all[i] >= n || seen[all[i]]++) {
                    t_error("lock iter %d: Fetch_and_op returned %lld twice or out of range [0,%ld)", it, (long long)all[i], n);
                    break;
                }
            }
            free(seen);
        }
        free(all);
        free(got);
        nops += 3L * t_size + fetch_k;
        t_log("iter %d size %zu done", it, S);
    }
    MPICHK(MPI_Win_free(&win));
    MPI_Free_mem(m.base);
    MPI_Type_free(&vec);
    free(src), free(getb), free(accv), free(vsrc);
    char sum[200];
    snprintf(sum, sizeof sum, "%d iterations (fence + lock epochs), put/get 8 B..1 MiB, accumulate, vector put, fetch_and_op; %ld RMA ops per rank",
             iters, nops);
    return t_finish(sum);
}
