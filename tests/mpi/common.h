/*
 * Shared helpers for the usnic-rs MPI test programs.
 *
 * Every program fills send buffers with a pattern that depends on the byte's
 * position and on a "seed" built from (sender, receiver, tag/iteration, size),
 * so a byte delivered to the wrong offset, from the wrong peer, from an older
 * iteration or twice in a row never compares equal.  Receive buffers are
 * poisoned before each receive and carry guard bytes behind the message, so
 * stale data and writes past the end are caught as well.
 *
 * Each program ends with ONE line on rank 0:
 *   PASS <name> np=<n>: <summary>
 *   FAIL <name> np=<n>: <k> error(s) on <m> rank(s); first (rank r): <details>
 * and exits non-zero on failure.  Data errors (pattern, guard, count, status
 * checks) are only recorded where they are found, so one run reports them all
 * in that line.  Two things end the job at once instead (MPI_Abort), each with
 * one FAIL line from the rank that saw it, and the job exits non-zero:
 *   - a failed MPI call (MPICHK): a call that did not do its part (a send that
 *     did not go out, a receive that did not complete) leaves its peers, or
 *     this rank's own next call, waiting for it; going on would only end in
 *     the watchdog's "hang?" line, which names a later call on another rank.
 *     The line names the rank, the call, file:line and the MPI error string
 *     (exit code 4);
 *   - the watchdog (alarm), if the program does not finish in time (code 3).
 * Open MPI's own messages (e.g. a BTL naming a lost peer) are printed as well.
 *
 * Options common to all programs:
 *   -t SECONDS   watchdog (default 120), armed before MPI_Init (t_early) and
 *                cancelled after MPI_Finalize; it prints what the rank was doing
 *   -s SCALE     multiply iteration counts (default 1; 0 = minimum)
 *   -v           verbose progress on stderr
 * Environment:
 *   MPITEST_CORRUPT=1   deliberately corrupt one received byte on the highest
 *                       rank (self-test of the checker: the program must FAIL)
 */
#ifndef USNIC_TEST_COMMON_H
#define USNIC_TEST_COMMON_H

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN 384

static const char *t_name = "?";
static int t_rank = -1, t_size = 0;
static double t_scale = 1.0;
static int t_verbose = 0;
static unsigned t_timeout = 120;
static long t_errors = 0;          /* errors found on this rank */
static char t_first[ERRLEN] = "";  /* first error on this rank */
static int t_corrupt = 0;          /* MPITEST_CORRUPT self-test pending */
static int t_ending = 0;           /* set by the first thread that ends the job (atomic) */
static double t_start;

/* ---- pattern ---------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x)
{
    /* splitmix64 finaliser: every input bit changes about half the output bits */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* seed from up to four small integers (sender, receiver, tag, iteration...) */
static inline uint64_t seed4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

static inline uint8_t pat_byte(uint64_t seed, size_t pos)
{
    return (uint8_t)(mix64(seed ^ (uint64_t)(pos >> 3)) >> ((pos & 7) * 8));
}

static void pat_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed ^ (uint64_t)(i >> 3));
        memcpy(p + i, &w, 8); /* little endian: byte k of w = pat_byte(i+k) */
    }
    for (; i < len; i++) p[i] = pat_byte(seed, i);
}

/* ---- error recording -------------------------------------------------- */

static pthread_mutex_t t_lock = PTHREAD_MUTEX_INITIALIZER; /* threads test */

static void t_error(const char *fmt, ...)
{
    char msg[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&t_lock);
    if (t_errors == 0) snprintf(t_first, sizeof t_first, "%s", msg);
    t_errors++;
    if (t_errors <= 5)
        fprintf(stderr, "%s rank %d: error: %s\n", t_name, t_rank, msg);
    pthread_mutex_unlock(&t_lock);
}

/* the MPITEST_CORRUPT self-test flips one received byte, once, on the last rank */
static void t_maybe_corrupt(void *buf, size_t len)
{
    if (!t_corrupt || len == 0 || t_rank != t_size - 1) return;
    pthread_mutex_lock(&t_lock);
    if (t_corrupt) ((uint8_t *)buf)[len / 2] ^= 0x5a;
    t_corrupt = 0;
    pthread_mutex_unlock(&t_lock);
}

/*
 * Checks len bytes of buf against the pattern; what says what was received
 * (e.g. "pingpong 0->1 size 4096 iter 2").  Returns the number of bad bytes.
 */
static long pat_check(const void *buf, size_t len, uint64_t seed, const char *what)
{
    const uint8_t *p = buf;
    long bad = 0;
    size_t first = 0;
    t_maybe_corrupt((void *)buf, len);
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pat_byte(seed, i)) {
            if (!bad) first = i;
            bad++;
        }
    }
    if (bad)
        t_error("%s: %ld of %zu bytes wrong, first at offset %zu: expected 0x%02x got 0x%02x",
                what, bad, len, first, pat_byte(seed, first), p[first]);
    return bad;
}

/* poison + guard: receive buffers are allocated with GUARD spare bytes */
#define GUARD 64
#define POISON 0xEE

static void *t_alloc(size_t len)
{
    void *p = malloc(len + GUARD);
    if (!p) {
        fprintf(stderr, "%s rank %d: malloc(%zu) failed\n", t_name, t_rank, len + GUARD);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void t_poison(void *buf, size_t len) { memset(buf, POISON, len + GUARD); }

static long guard_check(const void *buf, size_t len, const char *what)
{
    const uint8_t *p = (const uint8_t *)buf + len;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != POISON) {
            t_error("%s: byte written past the end of the %zu-byte message (guard offset %zu = 0x%02x)",
                    what, len, i, p[i]);
            return 1;
        }
    return 0;
}

static void count_check(MPI_Status *st, MPI_Datatype dt, int expect, const char *what)
{
    int n = -1;
    MPI_Get_count(st, dt, &n);
    if (n != expect) t_error("%s: MPI_Get_count = %d, expected %d", what, n, expect);
}

/* ---- watchdog --------------------------------------------------------- */

/* what the program is doing now, printed by the watchdog (set it before blocking calls) */
static char t_where[200] = "in MPI_Init";
#define T_WHERE(...) snprintf(t_where, sizeof t_where, __VA_ARGS__)
static void (*t_where_hook)(char *buf, size_t len); /* extra detail (threads) */
static int t_armed;

/* writes the first n of the characters snprintf wanted in a buffer of `room` bytes (at most
 * room - 1 made it in); write() only, so safe in the watchdog's signal handler */
static void t_write(int fd, const char *msg, int n, size_t room)
{
    if (n > 0) (void)!write(fd, msg, (size_t)n < room ? (size_t)n : room - 1);
}
/* seconds a failed call's MPI_Abort may take before the watchdog exits the rank itself */
#define T_ABORT_GRACE 30

static void t_alarm(int sig)
{
    (void)sig;
    char msg[1024], extra[600] = "";
    int inited = 0;
    if (__atomic_exchange_n(&t_ending, 1, __ATOMIC_SEQ_CST)) {
        /* a failed MPI call printed this rank's FAIL line and re-armed the alarm, and its
         * MPI_Abort is stuck */
        int n = snprintf(msg, sizeof msg, "%s rank %d: watchdog: MPI_Abort did not end the job within %d s; exiting\n",
                         t_name, t_rank, T_ABORT_GRACE);
        t_write(STDERR_FILENO, msg, n, sizeof msg);
        _exit(4);
    }
    if (t_where_hook) t_where_hook(extra, sizeof extra);
    MPI_Initialized(&inited);
    int n = snprintf(msg, sizeof msg,
                     "FAIL %s np=%d: watchdog: rank %d (pid %d) still running after %u s (hang?): %s%s; aborting\n",
                     t_name, t_size, t_rank, (int)getpid(), t_timeout, t_where, extra);
    t_write(STDOUT_FILENO, msg, n, sizeof msg);
    if (inited) MPI_Abort(MPI_COMM_WORLD, 3);
    _exit(3);
}

/* call first thing in main, before MPI_Init: the watchdog then also covers a hang in MPI_Init */
static void t_early(const char *name, int argc, char **argv)
{
    t_name = name;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-t") && i + 1 < argc) t_timeout = (unsigned)atoi(argv[++i]);
    signal(SIGALRM, t_alarm);
    if (t_timeout) alarm(t_timeout);
    t_armed = 1;
}

static int t_iters(int base)
{
    int n = (int)(base * t_scale + 0.5);
    return n < 1 ? 1 : n;
}

static void t_log(const char *fmt, ...)
{
    if (!t_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s r%d %.2fs] ", t_name, t_rank, MPI_Wtime() - t_start);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* parse common options, set up watchdog; call right after MPI_Init* */
static void t_setup(const char *name, int argc, char **argv)
{
    t_name = name;
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) t_timeout = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) t_scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "-v")) t_verbose = 1;
    }
    const char *c = getenv("MPITEST_CORRUPT");
    t_corrupt = c && *c && strcmp(c, "0");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!t_armed) {
        signal(SIGALRM, t_alarm);
        if (t_timeout) alarm(t_timeout);
        t_armed = 1;
    }
    T_WHERE("after MPI_Init");
    /* errors come back as codes so that MPICHK can say which call failed, where and while
     * doing what, in the program's FAIL format; MPI_ERRORS_ARE_FATAL would abort with only
     * Open MPI's generic message.  MPICHK then ends the job itself (see there). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    t_start = MPI_Wtime();
}

/*
 * A failed MPI call ends the job at once (fail fast).  The error is recorded like any other
 * (t_error), then this rank prints its FAIL line and calls MPI_Abort.  Going on is no use: the
 * call did not do its part (a message that never left, a receive that never completed), so a
 * later receive or collective here or on a peer would wait for it until the watchdog fires,
 * minutes later, with a "hang?" line that names that later call instead of this one.
 * Safe from any thread (threads test): the first failing thread prints the one line of its
 * rank and aborts; other threads that fail meanwhile wait for the abort to end the process.
 * Calls that are allowed to fail must not use MPICHK: check their code by hand, as onesided
 * does for MPI_Win_create (no osc component), and report through t_error.
 */
static void t_mpi_failed(int rc, const char *call, const char *file, int line)
{
    char es[MPI_MAX_ERROR_STRING] = "?", extra[600] = "", earlier[ERRLEN + 64] = "", msg[2048];
    int el = 0;
    MPI_Error_string(rc, es, &el);
    t_error("%s:%d: %s returned %d (%s)", file, line, call, rc, es);
    if (__atomic_exchange_n(&t_ending, 1, __ATOMIC_SEQ_CST))
        for (;;) pause(); /* another thread (or the watchdog) is ending the job already */
    /* the watchdog now bounds the abort itself, whatever was left of the program's time */
    alarm(T_ABORT_GRACE);
    if (t_where_hook) t_where_hook(extra, sizeof extra);
    pthread_mutex_lock(&t_lock);
    if (t_errors > 1)
        snprintf(earlier, sizeof earlier, "; %ld error(s) on this rank in all, the first: %s", t_errors, t_first);
    pthread_mutex_unlock(&t_lock);
    int n = snprintf(msg, sizeof msg,
                     "FAIL %s np=%d: rank %d (pid %d): %s:%d: %s returned %d (%s); step: %s%s%s; aborting\n",
                     t_name, t_size, t_rank, (int)getpid(), file, line, call, rc, es, t_where, extra, earlier);
    fflush(stdout);
    t_write(STDOUT_FILENO, msg, n, sizeof msg);
    MPI_Abort(MPI_COMM_WORLD, 4);
    _exit(4);
}

/* check an MPI return code; a failure ends the job (t_mpi_failed) */
#define MPICHK(call)                                                               \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != MPI_SUCCESS) t_mpi_failed(rc_, #call, __FILE__, __LINE__);     \
    } while (0)

/*
 * Collects the result of every rank, prints the one PASS/FAIL line on rank 0,
 * finalizes MPI and returns the process exit code.
 */
static int t_finish(const char *summary)
{
    long errs = t_errors, total = 0;
    T_WHERE("collecting results (MPI_Reduce/Gather) in t_finish");
    int failed_here = errs > 0, failed_ranks = 0;
    char *all = NULL;
    if (t_rank == 0) all = calloc((size_t)t_size, ERRLEN);
    MPICHK(MPI_Reduce(&errs, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    MPICHK(MPI_Reduce(&failed_here, &failed_ranks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    MPICHK(MPI_Gather(t_first, ERRLEN, MPI_CHAR, all, ERRLEN, MPI_CHAR, 0, MPI_COMM_WORLD));
    double el = MPI_Wtime() - t_start;
    if (t_rank == 0) {
        if (total == 0) {
            printf("PASS %s np=%d: %s (%.2f s)\n", t_name, t_size, summary, el);
        } else {
            int r = 0;
            while (r < t_size && all[(size_t)r * ERRLEN] == 0) r++;
            printf("FAIL %s np=%d: %ld error(s) on %d rank(s); first (rank %d): %s (%.2f s)\n", t_name,
                   t_size, total, failed_ranks, r, r < t_size ? all + (size_t)r * ERRLEN : "?", el);
        }
        fflush(stdout);
    }
    free(all);
    MPICHK(MPI_Bcast(&total, 1, MPI_LONG, 0, MPI_COMM_WORLD));
    T_WHERE("in MPI_Finalize");
    int frc = MPI_Finalize();
    alarm(0);
    if (frc != MPI_SUCCESS) { /* too late for MPI_Abort: say so and exit non-zero */
        printf("FAIL %s np=%d: rank %d: MPI_Finalize returned %d\n", t_name, t_size, t_rank, frc);
        return 1;
    }
    return total ? 1 : 0;
}

#endif
