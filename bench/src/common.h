/*
 * Shared harness of the usnic-rs MPI micro-benchmarks (in the spirit of the OSU micro-benchmarks).
 *
 * Every program takes the same options, prints '#'-prefixed metadata lines (program, ranks, where each
 * rank runs and on which CPUs, parameters) and then one line per message size. Iteration counts adapt
 * to a target time per size, so a slow transport (udp;ofi_rxd at 0.4 GB/s) and a fast one (vader) both
 * finish each size in about the same wall time; the count used is printed next to every result.
 * After the timed loop of each size, one exchange carries a known pattern and is checked byte by byte,
 * so a transport that delivers wrong data fails the run instead of producing a fast number.
 */
#ifndef USNIC_BENCH_COMMON_H
#define USNIC_BENCH_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_SIZES 64
#define BENCH_MAX_SIZE (4u << 20)
#define BENCH_TAG 7
#define BENCH_ACK_TAG 8
#define BENCH_CHECK_TAG 9

struct bench_opts {
    size_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    double target_s;  /* timed-loop duration aimed at per size */
    long min_iters;   /* never fewer timed iterations than this */
    long max_iters;   /* never more */
    long fixed_iters; /* > 0: no calibration, exactly this many timed iterations (for callgrind) */
    long fixed_warmup;
    int window;       /* messages in flight per iteration (bw, bibw, mr) */
    int check;        /* verify one patterned exchange per size */
};

static void bench_die(const char *msg)
{
    fprintf(stderr, "bench: error: %s\n", msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* MPI_Init, this process's rank and the job's size, which every program needs at least 2 of:
 * a smaller job stops with `too_few`. Returns the size. */
static int bench_init(int *argc, char ***argv, int *rank, const char *too_few)
{
    int nranks;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks < 2)
        bench_die(too_few);
    return nranks;
}

static void bench_usage(const char *prog, int rank)
{
    if (rank == 0)
        fprintf(stderr,
                "usage: %s [-m MIN:MAX | -s S1,S2,...] [-t SECONDS] [-i MIN_ITERS] [-x MAX_ITERS]\n"
                "          [-n FIXED_ITERS [-w WARMUP]] [-W WINDOW] [-C]\n"
                "  -m MIN:MAX   sizes 0 (if MIN is 0) and every power of two in [MIN, MAX] (default 0:4194304)\n"
                "  -s LIST      explicit comma-separated sizes in bytes (max %u)\n"
                "  -t SECONDS   target duration of the timed loop per size (default 0.1)\n"
                "  -i / -x      bounds on the adaptive iteration count (default 3 / 1000000)\n"
                "  -n N         exactly N timed iterations after -w warm-up iterations (default warm-up N/10)\n"
                "  -W WINDOW    messages per window for bw, bibw and mr (default 64)\n"
                "  -C           skip the per-size data check\n",
                prog, BENCH_MAX_SIZE);
}

static int bench_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || (*end && *end != ',' && *end != ':') || v > BENCH_MAX_SIZE)
        return -1;
    *out = (size_t)v;
    return 0;
}

static void bench_parse(int argc, char **argv, struct bench_opts *o, size_t default_min)
{
    int rank, opt;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(o, 0, sizeof(*o));
    o->target_s = 0.1;
    o->min_iters = 3;
    o->max_iters = 1000000;
    o->fixed_warmup = -1;
    o->window = 64;
    o->check = 1;
    size_t lo = default_min, hi = BENCH_MAX_SIZE;
    int explicit_list = 0;
    while ((opt = getopt(argc, argv, "m:s:t:i:x:n:w:W:Ch")) != -1) {
        switch (opt) {
        case 'm': {
            const char *colon = strchr(optarg, ':');
            if (!colon || bench_parse_size(optarg, &lo) || bench_parse_size(colon + 1, &hi) || lo > hi)
                bench_die("-m wants MIN:MAX with 0 <= MIN <= MAX <= 4194304");
            break;
        }
        case 's': {
            const char *p = optarg;
            explicit_list = 1;
            while (*p) {
                if (o->nsizes == BENCH_MAX_SIZES || bench_parse_size(p, &o->sizes[o->nsizes]))
                    bench_die("-s wants a comma-separated list of sizes <= 4194304");
                o->nsizes++;
                p = strchr(p, ',');
                if (!p)
                    break;
                p++;
            }
            break;
        }
        case 't':
            o->target_s = atof(optarg);
            if (!(o->target_s > 0 && o->target_s < 600))
                bench_die("-t wants seconds in (0, 600)");
            break;
        case 'i': o->min_iters = atol(optarg); break;
        case 'x': o->max_iters = atol(optarg); break;
        case 'n': o->fixed_iters = atol(optarg); break;
        case 'w': o->fixed_warmup = atol(optarg); break;
        case 'W': o->window = atoi(optarg); break;
        case 'C': o->check = 0; break;
        default:
            bench_usage(argv[0], rank);
            MPI_Finalize();
            exit(opt == 'h' ? 0 : 2);
        }
    }
    if (o->min_iters < 1 || o->max_iters < o->min_iters || o->fixed_iters < 0 || o->window < 1 ||
        o->window > 1024)
        bench_die("bad iteration bounds or window (need 1 <= -i <= -x, -n >= 0, 1 <= -W <= 1024)");
    if (o->fixed_warmup < 0)
        o->fixed_warmup = o->fixed_iters / 10;
    if (!explicit_list) {
        if (lo == 0)
            o->sizes[o->nsizes++] = 0;
        size_t s = 1;
        while (s < lo)
            s <<= 1;
        for (; s <= hi && o->nsizes < BENCH_MAX_SIZES; s <<= 1)
            o->sizes[o->nsizes++] = s;
    }
    if (o->nsizes == 0)
        bench_die("no message sizes selected");
}

/* The largest selected message size: what each program's buffers must hold. */
static size_t bench_max_size(const struct bench_opts *o)
{
    size_t m = 0;
    for (int i = 0; i < o->nsizes; i++)
        m = o->sizes[i] > m ? o->sizes[i] : m;
    return m;
}

static void *bench_alloc(size_t bytes)
{
    void *p = NULL;
    size_t len = bytes ? bytes : 1;
    if (posix_memalign(&p, 4096, (len + 4095) & ~(size_t)4095))
        bench_die("out of memory");
    memset(p, 0xa5, len); /* touch every page before timing */
    return p;
}

/* Pattern depends on the size, the sender and a round number, so a stale or misrouted buffer fails. */
static unsigned char bench_pattern(size_t i, size_t size, int sender, int round)
{
    return (unsigned char)((i * 131u) ^ (size * 7u) ^ ((unsigned)sender * 29u) ^ ((unsigned)round * 17u) ^
                           (i >> 8));
}

static void bench_fill(unsigned char *b, size_t size, int sender, int round)
{
    for (size_t i = 0; i < size; i++)
        b[i] = bench_pattern(i, size, sender, round);
}

static void bench_verify(const unsigned char *b, size_t size, int sender, int round, const char *what)
{
    for (size_t i = 0; i < size; i++) {
        if (b[i] != bench_pattern(i, size, sender, round)) {
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "%s: data check failed at size %zu, byte %zu from rank %d: got 0x%02x, want 0x%02x", what,
                     size, i, sender, b[i], bench_pattern(i, size, sender, round));
            bench_die(msg);
        }
    }
}

/* Prints, on rank 0, the program, the rank count and where every rank runs (host and CPU mask). */
static void bench_header(const char *prog, const struct bench_opts *o, const char *columns)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char line[512];
    char host[MPI_MAX_PROCESSOR_NAME];
    int hlen = 0;
    MPI_Get_processor_name(host, &hlen);
    cpu_set_t set;
    CPU_ZERO(&set);
    char cpus[256] = "";
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        size_t off = 0;
        int ncpu = 0;
        for (int c = 0; c < CPU_SETSIZE && off + 8 < sizeof(cpus); c++)
            if (CPU_ISSET(c, &set))
                off += (size_t)snprintf(cpus + off, sizeof(cpus) - off, "%s%d", ncpu++ ? "," : "", c);
    } else {
        snprintf(cpus, sizeof(cpus), "unknown");
    }
    snprintf(line, sizeof(line), "# rank %d: host=%s pid=%d cpus=%s", rank, host, (int)getpid(), cpus);
    char *all = NULL;
    if (rank == 0)
        all = malloc((size_t)size * sizeof(line));
    MPI_Gather(line, sizeof(line), MPI_CHAR, all, sizeof(line), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int v, sv;
        MPI_Get_version(&v, &sv);
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int llen;
        MPI_Get_library_version(lib, &llen);
        char *nl = strchr(lib, '\n');
        if (nl)
            *nl = 0;
        printf("# program: %s (usnic-rs bench, OSU-style)\n", prog);
        printf("# mpi: %s\n", lib);
        printf("# ranks: %d\n", size);
        for (int r = 0; r < size; r++)
            printf("%s\n", all + (size_t)r * sizeof(line));
        if (o->fixed_iters)
            printf("# iterations: fixed %ld (warm-up %ld)\n", o->fixed_iters, o->fixed_warmup);
        else
            printf("# iterations: adaptive, target %.3f s per size, bounds [%ld, %ld]\n", o->target_s,
                   o->min_iters, o->max_iters);
        printf("# window: %d\n# data check: %s\n", o->window, o->check ? "on" : "off");
        printf("# %s\n", columns);
        fflush(stdout);
        free(all);
    }
}

/*
 * One timed phase: 'body' runs 'iters' iterations collectively and returns the seconds it took as seen
 * by rank 0. Rank 0 alone decides the counts and broadcasts them, so all ranks loop the same number of
 * times. Calibration runs 1, 2, 4, ... iterations (which also warms the path up) until a round lasts a
 * tenth of the target, then sizes the timed loop to the target.
 */
typedef double (*bench_body)(size_t size, long iters, void *ctx);

static long bench_calibrate(bench_body body, size_t size, void *ctx, const struct bench_opts *o)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (o->fixed_iters) {
        if (o->fixed_warmup)
            body(size, o->fixed_warmup, ctx);
        return o->fixed_iters;
    }
    /* The fastest round sets the estimate: on a shared machine a single preempted round can be 100x
     * slower than the path itself, and would otherwise shrink the timed loop to a handful of iterations. */
    long n = 1;
    double best = -1, spent = 0;
    for (;;) {
        double t = body(size, n, ctx);
        long next = 0;
        if (rank == 0) {
            double per = t / (double)n;
            spent += t;
            if (best < 0 || per < best)
                best = per;
            if ((t >= o->target_s / 10 && n >= 4) || spent >= o->target_s / 2 || n >= o->max_iters ||
                n >= (1L << 20)) {
                double want = best > 0 ? o->target_s / best : (double)o->max_iters;
                long chosen = want > (double)o->max_iters ? o->max_iters : (long)want;
                if (chosen < o->min_iters)
                    chosen = o->min_iters;
                next = -chosen;
            } else {
                next = n * 2;
            }
        }
        MPI_Bcast(&next, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        if (next < 0)
            return -next;
        n = next;
    }
}

/*
 * The per-size loop of a program that reports microseconds: for every selected size, calibrate,
 * time `body`, run `check` once when the data check is on, and print on rank 0 the size, the
 * time per iteration divided by `per_iter` (2 for a ping-pong's one-way time) and the count.
 */
typedef void (*bench_check)(size_t size, void *ctx);

static inline void bench_us_per_size(bench_body body, bench_check check, void *ctx, const struct bench_opts *o,
                                     double per_iter)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        long iters = bench_calibrate(body, size, ctx, o);
        double t = body(size, iters, ctx);
        if (o->check)
            check(size, ctx);
        if (rank == 0) {
            printf("%zu %.3f %ld\n", size, t * 1e6 / (per_iter * (double)iters), iters);
            fflush(stdout);
        }
    }
}

/* CLOCK_MONOTONIC directly rather than MPI_Wtime, so the clock is the same whatever MPI library runs. */
static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
