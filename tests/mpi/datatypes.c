/*
 * datatypes: non-contiguous send/recv with derived datatypes, checked element
 * by element.  Every datatype is also described here as the ordered list of
 * byte segments it selects (its type map), so the test knows, without asking
 * MPI, which bytes of the receive buffer must hold which byte of the message
 * stream and which bytes (gaps, padding, beyond the end) must stay untouched.
 *
 * Cases (send layout -> receive layout), each small (eager) and large
 * (rendezvous, the convertor packs/unpacks in pieces):
 *   vector -> vector, vector -> contiguous, contiguous -> vector,
 *   indexed -> same indexed, indexed (blocks in REVERSE memory order) ->
 *   differently blocked indexed, struct with gaps -> same struct,
 *   struct with gaps -> packed struct, byte vector (blocklen 1) -> contiguous,
 *   hvector of struct -> contiguous struct array.
 * Pattern: every rank sends to rank+1 and receives from rank-1 (a ring).
 */
#include "common.h"
#include <stddef.h>

typedef struct {
    size_t off, len;
} seg_t;

typedef struct {
    const char *name;
    MPI_Datatype type; /* committed; a derived type is freed at the end */
    int count;         /* how many `type` in one message */
    size_t span;       /* bytes of buffer the message touches (true extent) */
    seg_t *segs;       /* type map order */
    int nsegs, cap;
    int derived;
} layout_t;

static void seg_add(layout_t *l, size_t off, size_t len)
{
    if (l->nsegs == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->segs = realloc(l->segs, (size_t)l->cap * sizeof *l->segs);
        if (!l->segs) MPI_Abort(MPI_COMM_WORLD, 2);
    }
    l->segs[l->nsegs].off = off;
    l->segs[l->nsegs].len = len;
    l->nsegs++;
    if (off + len > l->span) l->span = off + len;
}

static size_t l_bytes(const layout_t *l)
{
    size_t n = 0;
    for (int i = 0; i < l->nsegs; i++) n += l->segs[i].len;
    return n;
}

static void l_free(layout_t *l)
{
    if (l->derived) MPI_Type_free(&l->type);
    free(l->segs);
    memset(l, 0, sizeof *l);
}

static void commit(layout_t *l, MPI_Datatype t)
{
    MPI_Type_commit(&t);
    l->type = t;
    l->derived = 1;
}

/* contiguous: n elements of base (elsize bytes) */
static layout_t mk_contig(MPI_Datatype base, size_t elsize, int n)
{
    layout_t l = {.name = "contiguous", .type = base, .count = n};
    seg_add(&l, 0, (size_t)n * elsize);
    return l;
}

/* vector: count blocks of blk elements, stride elements apart */
static layout_t mk_vector(MPI_Datatype base, size_t elsize, int count, int blk, int stride)
{
    layout_t l = {.name = "vector", .count = 1};
    MPI_Datatype t;
    MPI_Type_vector(count, blk, stride, base, &t);
    commit(&l, t);
    for (int i = 0; i < count; i++) seg_add(&l, (size_t)i * stride * elsize, (size_t)blk * elsize);
    return l;
}

/* indexed doubles: irregular block lengths (1..5) and gaps (0..2);
 * reverse: the type map lists the blocks from the highest address down */
static layout_t mk_indexed(int nblocks, int reverse, int total_elems)
{
    layout_t l = {.name = reverse ? "indexed(reversed)" : "indexed", .count = 1};
    int *bl = malloc(sizeof(int) * (size_t)nblocks), *dp = malloc(sizeof(int) * (size_t)nblocks);
    int pos = 0, used = 0, nb = 0;
    for (int i = 0; i < nblocks && used < total_elems; i++) {
        int b = 1 + (i * 7) % 5;
        if (total_elems >= 0 && used + b > total_elems) b = total_elems - used;
        pos += i % 3; /* gap */
        bl[nb] = b;
        dp[nb] = pos;
        pos += b;
        used += b;
        nb++;
    }
    if (reverse)
        for (int i = 0; i < nb / 2; i++) {
            int a = bl[i], d = dp[i];
            bl[i] = bl[nb - 1 - i], dp[i] = dp[nb - 1 - i];
            bl[nb - 1 - i] = a, dp[nb - 1 - i] = d;
        }
    MPI_Datatype t;
    MPI_Type_indexed(nb, bl, dp, MPI_DOUBLE, &t);
    commit(&l, t);
    for (int i = 0; i < nb; i++) seg_add(&l, (size_t)dp[i] * 8, (size_t)bl[i] * 8);
    free(bl);
    free(dp);
    return l;
}

/* a record with gaps: padding after c, after s, and an unsent field */
struct rec {
    char c;
    double d;
    int i[3];
    short s;
    char unused[5];
};

/* struct type over n records; packed: same signature at offsets 0,1,9,21, extent 23 */
static layout_t mk_struct(int n, int packed)
{
    layout_t l = {.name = packed ? "struct(packed)" : "struct(gaps)", .count = n};
    int bl[4] = {1, 1, 3, 1};
    MPI_Aint dsp[4], ext;
    MPI_Datatype ty[4] = {MPI_CHAR, MPI_DOUBLE, MPI_INT, MPI_SHORT}, t, r;
    size_t fsz[4] = {1, 8, 12, 2};
    if (packed) {
        dsp[0] = 0, dsp[1] = 1, dsp[2] = 9, dsp[3] = 21, ext = 23;
    } else {
        dsp[0] = offsetof(struct rec, c), dsp[1] = offsetof(struct rec, d);
        dsp[2] = offsetof(struct rec, i), dsp[3] = offsetof(struct rec, s);
        ext = sizeof(struct rec);
    }
    MPI_Type_create_struct(4, bl, dsp, ty, &t);
    MPI_Type_create_resized(t, 0, ext, &r);
    MPI_Type_free(&t);
    commit(&l, r);
    for (int k = 0; k < n; k++)
        for (int f = 0; f < 4; f++) seg_add(&l, (size_t)k * (size_t)ext + (size_t)dsp[f], fsz[f]);
    l.span = (size_t)n * (size_t)ext; /* trailing gap of the last record is inside the buffer */
    return l;
}

/* hvector of pairs of gapped records, blocks 3 records apart (nested derived type) */
static layout_t mk_hvector_struct(int nblocks)
{
    layout_t inner = mk_struct(1, 0);
    layout_t l = {.name = "hvector(struct)", .count = 1};
    MPI_Datatype t;
    MPI_Aint stride = 3 * (MPI_Aint)sizeof(struct rec);
    MPI_Type_create_hvector(nblocks, 2, stride, inner.type, &t);
    commit(&l, t);
    for (int b = 0; b < nblocks; b++)
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < inner.nsegs; s++)
                seg_add(&l, (size_t)b * (size_t)stride + (size_t)k * sizeof(struct rec) + inner.segs[s].off,
                        inner.segs[s].len);
    l_free(&inner);
    return l;
}

/* fill the bytes the layout selects with the stream pattern; the rest with noise */
static void l_fill(const layout_t *l, uint8_t *buf, uint64_t seed)
{
    pat_fill(buf, l->span, ~seed); /* gaps: something that is NOT the stream */
    size_t k = 0;
    for (int i = 0; i < l->nsegs; i++)
        for (size_t j = 0; j < l->segs[i].len; j++, k++) buf[l->segs[i].off + j] = pat_byte(seed, k);
}

/* check the received buffer: selected bytes = stream, everything else poison */
static void l_check(const layout_t *l, uint8_t *buf, uint64_t seed, const char *what)
{
    size_t k = 0;
    long bad = 0;
    uint8_t *touched = calloc(l->span + GUARD, 1);
    t_maybe_corrupt(buf + l->segs[l->nsegs / 2].off, l->segs[l->nsegs / 2].len);
    for (int i = 0; i < l->nsegs; i++) {
        for (size_t j = 0; j < l->segs[i].len; j++, k++) {
            size_t o = l->segs[i].off + j;
            touched[o] = 1;
            if (buf[o] != pat_byte(seed, k)) {
                if (!bad)
                    t_error("%s: block %d (buffer offset %zu, byte %zu of block, stream byte %zu): "
                            "expected 0x%02x got 0x%02x",
                            what, i, l->segs[i].off, j, k, pat_byte(seed, k), buf[o]);
                bad++;
            }
        }
    }
    for (size_t o = 0; o < l->span + GUARD && !bad; o++)
        if (!touched[o] && buf[o] != POISON) {
            t_error("%s: gap byte at buffer offset %zu was written (0x%02x); the type does not select it",
                    what, o, buf[o]);
            bad++;
        }
    if (bad > 1) t_error("%s: %ld bytes wrong in total", what, bad);
    free(touched);
}

static long ncases, nbytes;

static void run_case(int id, const char *size_label, layout_t *snd, layout_t *rcv)
{
    int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    char what[200];
    size_t sb = l_bytes(snd), rb = l_bytes(rcv);
    snprintf(what, sizeof what, "case %d %s %s->%s (%zu B) from rank %d", id, size_label, snd->name,
             rcv->name, sb, left);
    if (sb != rb) {
        t_error("%s: test bug: send selects %zu bytes, receive %zu", what, sb, rb);
        return;
    }
    uint8_t *s = t_alloc(snd->span), *r = t_alloc(rcv->span);
    l_fill(snd, s, seed4((uint64_t)t_rank, (uint64_t)right, (uint64_t)id, sb));
    t_poison(r, rcv->span);
    MPI_Request rq;
    MPI_Status st;
    T_WHERE("%s", what);
    MPICHK(MPI_Irecv(r, rcv->count, rcv->type, left, id, MPI_COMM_WORLD, &rq));
    MPICHK(MPI_Send(s, snd->count, snd->type, right, id, MPI_COMM_WORLD));
    MPICHK(MPI_Wait(&rq, &st));
    count_check(&st, rcv->type, rcv->count, what);
    l_check(rcv, r, seed4((uint64_t)left, (uint64_t)t_rank, (uint64_t)id, sb), what);
    free(s);
    free(r);
    ncases++;
    nbytes += (long)sb;
    t_log("%s done", what);
}

int main(int argc, char **argv)
{
    t_early("datatypes", argc, argv);
    MPI_Init(&argc, &argv);
    t_setup("datatypes", argc, argv);
    int reps = t_iters(2);
    for (int rep = 0; rep < reps; rep++) {
        /* small = well under any eager limit; large = several MiB through rendezvous */
        for (int big = 0; big <= 1; big++) {
            const char *sl = big ? "large" : "small";
            int id = rep * 100 + big * 50;
            int vc = big ? 100000 : 10; /* vector blocks */
            layout_t a, b;

            a = mk_vector(MPI_INT, 4, vc, 3, 7), b = mk_vector(MPI_INT, 4, vc, 3, 7);
            run_case(id + 1, sl, &a, &b), l_free(&a), l_free(&b);
            a = mk_vector(MPI_INT, 4, vc, 3, 7), b = mk_contig(MPI_INT, 4, vc * 3);
            run_case(id + 2, sl, &a, &b), l_free(&a), l_free(&b);
            a = mk_contig(MPI_INT, 4, vc * 3), b = mk_vector(MPI_INT, 4, vc, 3, 7);
            run_case(id + 3, sl, &a, &b), l_free(&a), l_free(&b);

            int ne = big ? 400000 : 40; /* doubles */
            a = mk_indexed(ne, 0, ne), b = mk_indexed(ne, 0, ne);
            run_case(id + 4, sl, &a, &b), l_free(&a), l_free(&b);
            a = mk_indexed(ne, 1, ne), b = mk_vector(MPI_DOUBLE, 8, ne / 2, 2, 3);
            run_case(id + 5, sl, &a, &b), l_free(&a), l_free(&b);

            int nr = big ? 100000 : 5; /* records */
            a = mk_struct(nr, 0), b = mk_struct(nr, 0);
            run_case(id + 6, sl, &a, &b), l_free(&a), l_free(&b);
            a = mk_struct(nr, 0), b = mk_struct(nr, 1);
            run_case(id + 7, sl, &a, &b), l_free(&a), l_free(&b);
            a = mk_struct(nr, 1), b = mk_struct(nr, 0);
            run_case(id + 8, sl, &a, &b), l_free(&a), l_free(&b);

            int nc = big ? 1 << 20 : 100; /* single bytes, 3 apart */
            a = mk_vector(MPI_CHAR, 1, nc, 1, 3), b = mk_contig(MPI_CHAR, 1, nc);
            run_case(id + 9, sl, &a, &b), l_free(&a), l_free(&b);

            int nh = big ? 50000 : 3;
            a = mk_hvector_struct(nh), b = mk_struct(2 * nh, 0);
            run_case(id + 10, sl, &a, &b), l_free(&a), l_free(&b);
        }
    }
    long tc = 0, tb = 0;
    MPICHK(MPI_Reduce(&ncases, &tc, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    MPICHK(MPI_Reduce(&nbytes, &tb, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    char sum[200];
    snprintf(sum, sizeof sum, "%ld transfers (vector, indexed, struct, hvector; eager and rendezvous), %.1f MiB checked",
             tc, tb / 1048576.0);
    return t_finish(sum);
}
