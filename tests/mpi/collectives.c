/*
 * collectives: MPI_Bcast from every root (0 B .. 4 MiB), MPI_Allreduce
 * (int64 SUM, double MAX, uint64 BXOR, also MPI_IN_PLACE; 1 .. 1M elements),
 * MPI_Alltoallv with uneven counts (including zero) and gapped displacements.
 * Results are checked against values each rank computes on its own; gaps and
 * guard bytes in receive buffers must stay untouched.
 */
#include "common.h"

static long nops;

static void test_bcast(int it)
{
    static const size_t sizes[] = {0, 1, 1000, 65537, 153601, (1u << 20) + 3, 4u << 20};
    for (int root = 0; root < t_size; root++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t len = sizes[si];
            uint64_t seed = seed4(1, (uint64_t)root, len, (uint64_t)it);
            uint8_t *b = t_alloc(len);
            char what[128];
            snprintf(what, sizeof what, "bcast root %d size %zu iter %d", root, len, it);
            T_WHERE("%s", what);
            if (t_rank == root) pat_fill(b, len, seed);
            else t_poison(b, len);
            MPICHK(MPI_Bcast(b, (int)len, MPI_BYTE, root, MPI_COMM_WORLD));
            if (t_rank != root) {
                pat_check(b, len, seed, what);
                guard_check(b, len, what);
            } else {
                pat_check(b, len, seed, what); /* the root's buffer must be left alone */
            }
            free(b);
            nops++;
        }
}

static int64_t ival(int r, int k, int it) { return (int64_t)(mix64(seed4(2, (uint64_t)r, (uint64_t)k, (uint64_t)it)) >> 21) - (1LL << 41); }
static double dval(int r, int k, int it) { return (double)(int64_t)(mix64(seed4(3, (uint64_t)r, (uint64_t)k, (uint64_t)it)) >> 12) - 1e15; }
static uint64_t uval(int r, int k, int it) { return mix64(seed4(4, (uint64_t)r, (uint64_t)k, (uint64_t)it)); }

static void test_allreduce(int it)
{
    static const int counts[] = {1, 7, 1000, 100000, 1 << 20};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        int n = counts[ci];
        int64_t *is = malloc(8 * (size_t)n), *ir = t_alloc(8 * (size_t)n);
        double *ds = malloc(8 * (size_t)n), *dr = t_alloc(8 * (size_t)n);
        uint64_t *ub = malloc(8 * (size_t)n);
        for (int k = 0; k < n; k++) {
            is[k] = ival(t_rank, k, it);
            ds[k] = dval(t_rank, k, it);
            ub[k] = uval(t_rank, k, it);
        }
        t_poison(ir, 8 * (size_t)n);
        t_poison(dr, 8 * (size_t)n);
        T_WHERE("allreduce count %d iter %d", n, it);
        MPICHK(MPI_Allreduce(is, ir, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
        MPICHK(MPI_Allreduce(ds, dr, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        MPICHK(MPI_Allreduce(MPI_IN_PLACE, ub, n, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD));
        long bad_i = 0, bad_d = 0, bad_u = 0;
        for (int k = 0; k < n; k++) {
            int64_t es = 0;
            double em = -1e300;
            uint64_t ex = 0;
            for (int r = 0; r < t_size; r++) {
                es += ival(r, k, it);
                double v = dval(r, k, it);
                if (v > em) em = v;
                ex ^= uval(r, k, it);
            }
            if (ir[k] != es && !bad_i++)
                t_error("allreduce SUM int64 count %d iter %d: element %d = %lld, expected %lld", n, it, k, (long long)ir[k], (long long)es);
            if (dr[k] != em && !bad_d++)
                t_error("allreduce MAX double count %d iter %d: element %d = %.17g, expected %.17g", n, it, k, dr[k], em);
            if (ub[k] != ex && !bad_u++)
                t_error("allreduce BXOR in-place uint64 count %d iter %d: element %d = %#llx, expected %#llx", n, it, k,
                        (unsigned long long)ub[k], (unsigned long long)ex);
        }
        char what[96];
        snprintf(what, sizeof what, "allreduce count %d iter %d", n, it);
        guard_check(ir, 8 * (size_t)n, what);
        guard_check(dr, 8 * (size_t)n, what);
        if (bad_i + bad_d + bad_u > 1)
            t_error("allreduce count %d iter %d: %ld/%ld/%ld wrong elements (sum/max/bxor)", n, it, bad_i, bad_d, bad_u);
        free(is), free(ir), free(ds), free(dr), free(ub);
        nops += 3;
    }
}

/* ints sent from i to j in alltoallv round w: uneven, zero for some pairs */
static int a2a_count(int i, int j, int w) { return ((i * 5 + j * 3 + w) % 7) * w; }

static void test_alltoallv(int it)
{
    static const int widths[] = {1, 100, 5000, 40000};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int w = widths[wi];
        int *sc = malloc(sizeof(int) * (size_t)t_size), *sd = malloc(sizeof(int) * (size_t)t_size);
        int *rc = malloc(sizeof(int) * (size_t)t_size), *rd = malloc(sizeof(int) * (size_t)t_size);
        int stot = 0, rtot = 0;
        for (int j = 0; j < t_size; j++) {
            /* gaps of 3*(j+1) ints between blocks, in both buffers */
            stot += 3 * (j + 1);
            sc[j] = a2a_count(t_rank, j, w), sd[j] = stot, stot += sc[j];
            rtot += 3 * (j + 1);
            rc[j] = a2a_count(j, t_rank, w), rd[j] = rtot, rtot += rc[j];
        }
        int *sbuf = malloc(4 * (size_t)stot + 4), *rbuf = t_alloc(4 * (size_t)rtot);
        for (int j = 0; j < t_size; j++)
            pat_fill(sbuf + sd[j], 4 * (size_t)sc[j], seed4(5, (uint64_t)t_rank, (uint64_t)j, (uint64_t)(it * 16 + (int)wi)));
        t_poison(rbuf, 4 * (size_t)rtot);
        T_WHERE("alltoallv width %d iter %d", w, it);
        MPICHK(MPI_Alltoallv(sbuf, sc, sd, MPI_INT, rbuf, rc, rd, MPI_INT, MPI_COMM_WORLD));
        uint8_t *rb = (uint8_t *)rbuf;
        int prev_end = 0;
        for (int j = 0; j < t_size; j++) {
            char what[128];
            snprintf(what, sizeof what, "alltoallv width %d iter %d: block from rank %d (%d ints at int offset %d)", w, it, j, rc[j], rd[j]);
            for (int g = prev_end * 4; g < rd[j] * 4; g++)
                if (rb[g] != POISON) {
                    t_error("%s: gap byte %d before the block was written (0x%02x)", what, g, rb[g]);
                    break;
                }
            pat_check(rbuf + rd[j], 4 * (size_t)rc[j], seed4(5, (uint64_t)j, (uint64_t)t_rank, (uint64_t)(it * 16 + (int)wi)), what);
            prev_end = rd[j] + rc[j];
        }
        guard_check(rbuf, 4 * (size_t)rtot, "alltoallv");
        free(sc), free(sd), free(rc), free(rd), free(sbuf), free(rbuf);
        nops++;
    }
}

int main(int argc, char **argv)
{
    t_early("collectives", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("collectives", argc, argv);
    int iters = t_iters(2);
    for (int it = 0; it < iters; it++) {
        t_log("iter %d bcast", it);
        test_bcast(it);
        t_log("iter %d allreduce", it);
        test_allreduce(it);
        t_log("iter %d alltoallv", it);
        test_alltoallv(it);
        MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    }
    char sum[160];
    snprintf(sum, sizeof sum, "%ld collective calls checked (bcast all roots 0..4 MiB, allreduce sum/max/bxor 1..1M, alltoallv uneven)", nops);
    return t_finish(sum);
}
