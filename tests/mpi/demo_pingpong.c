/*
 * demo_pingpong: the README's first command.  Two ranks, 8-byte ping-pong;
 * prints the one-way latency (median over individually timed round trips,
 * halved) and the evidence of which BTL carried the traffic:
 *   - the BTL list Open MPI was allowed to use (MPI_T control variable "btl");
 *   - the BTL components still loaded after MPI_Init (Open MPI unloads the
 *     ones that were not selected), read from /proc/self/maps;
 *   - from those, the BTLs other than "self" (self only carries a rank's
 *     messages to itself, so they are what carried rank 0 <-> rank 1);
 *   - MPI_T performance variables named btl_* that changed during the run,
 *     when the BTL registers any (the usnic BTL's counters, if present).
 * Options: -n ROUNDTRIPS (default 10000), -T SECONDS: stop timing after this long
 * (default 10, for loaded machines; the count used is printed), -t SECONDS watchdog.
 */
#include "common.h"

#define MSG 8

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* loaded mca_btl_*.so components, as "name (path)" joined by spaces */
static int loaded_btls(char names[][64], char paths[][512], int max)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int n = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "mca_btl_");
        if (!p || !strstr(p, ".so")) continue;
        char *path = strchr(line, '/');
        char nm[64];
        if (sscanf(p + 8, "%63[^.]", nm) != 1) continue;
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= !strcmp(names[i], nm);
        if (dup || n >= max) continue;
        snprintf(names[n], 64, "%s", nm);
        snprintf(paths[n], 512, "%s", path ? path : "?");
        paths[n][strcspn(paths[n], "\n")] = 0;
        n++;
    }
    fclose(f);
    return n;
}

static void cvar_string(const char *want, char *out, int outlen)
{
    int n = 0;
    snprintf(out, (size_t)outlen, "(unknown)");
    MPI_T_cvar_get_num(&n);
    for (int i = 0; i < n; i++) {
        char name[256], desc[256];
        int nl = sizeof name, dl = sizeof desc, verb, bind, scope, cnt;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(i, name, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope) != MPI_SUCCESS) continue;
        if (strcmp(name, want) || dt != MPI_CHAR) continue;
        MPI_T_cvar_handle h;
        if (MPI_T_cvar_handle_alloc(i, NULL, &h, &cnt) != MPI_SUCCESS) return;
        char *buf = calloc((size_t)cnt + 1, 1);
        if (MPI_T_cvar_read(h, buf) == MPI_SUCCESS) snprintf(out, (size_t)outlen, "%s", buf[0] ? buf : "(all)");
        free(buf);
        MPI_T_cvar_handle_free(&h);
        return;
    }
}

/* btl_* counter pvars without an object binding: up to 64 of them */
#define MAXPV 64
static MPI_T_pvar_session pv_sess;
static MPI_T_pvar_handle pv_h[MAXPV];
static char pv_name[MAXPV][128];
static unsigned long long pv_before[MAXPV];
static MPI_Datatype pv_dt[MAXPV];
static int pv_n, pv_ok;

static unsigned long long pv_read(int i)
{
    unsigned long long v = 0;
    if (pv_dt[i] == MPI_UNSIGNED_LONG_LONG || pv_dt[i] == MPI_UNSIGNED_LONG || pv_dt[i] == MPI_COUNT) {
        MPI_T_pvar_read(pv_sess, pv_h[i], &v);
    } else if (pv_dt[i] == MPI_UNSIGNED || pv_dt[i] == MPI_INT) {
        unsigned u = 0;
        MPI_T_pvar_read(pv_sess, pv_h[i], &u);
        v = u;
    }
    return v;
}

static void pvars_start(void)
{
    int n = 0;
    if (MPI_T_pvar_session_create(&pv_sess) != MPI_SUCCESS) return;
    pv_ok = 1;
    MPI_T_pvar_get_num(&n);
    for (int i = 0; i < n && pv_n < MAXPV; i++) {
        char name[128], desc[256];
        int nl = sizeof name, dl = sizeof desc, verb, cls, bind, ro, cont, atom, cnt;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &en, desc, &dl, &bind, &ro, &cont, &atom) != MPI_SUCCESS) continue;
        if (strncmp(name, "btl_", 4) || bind != MPI_T_BIND_NO_OBJECT) continue;
        if (cls != MPI_T_PVAR_CLASS_COUNTER && cls != MPI_T_PVAR_CLASS_AGGREGATE && cls != MPI_T_PVAR_CLASS_LEVEL) continue;
        if (MPI_T_pvar_handle_alloc(pv_sess, i, NULL, &pv_h[pv_n], &cnt) != MPI_SUCCESS || cnt != 1) continue;
        if (!cont) MPI_T_pvar_start(pv_sess, pv_h[pv_n]);
        snprintf(pv_name[pv_n], sizeof pv_name[0], "%s", name);
        pv_dt[pv_n] = dt;
        pv_before[pv_n] = pv_read(pv_n);
        pv_n++;
    }
}

int main(int argc, char **argv)
{
    int provided, n = 10000;
    double max_secs = 10;
    t_early("demo_pingpong", argc, argv);
    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    t_setup("demo_pingpong", argc, argv);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) max_secs = atof(argv[i + 1]);
    if (n < 1) n = 1;
    if (t_size != 2) {
        if (t_rank == 0) t_error("run me with exactly 2 ranks (got %d)", t_size);
        MPI_T_finalize();
        return t_finish("");
    }
    pvars_start();
    int peer = 1 - t_rank, warm = n < 2000 ? n / 10 + 10 : 200, done = 0;
    uint8_t sb[MSG], rb[MSG + GUARD];
    double *rtt = malloc(sizeof(double) * (size_t)n);
    MPICHK(MPI_Barrier(MPI_COMM_WORLD));
    double tbeg = MPI_Wtime();
    /* batches of 100 round trips; between batches (untimed) rank 0 decides whether to go on,
     * so a loaded machine ends the demo after max_secs instead of dragging on */
    int i = -warm, go = 1;
    long any = 0; /* errors on all ranks so far */
    while (go) {
        T_WHERE("ping-pong round trips from %d (negative: warm-up)", i);
        for (int b = 0; b < 100 && i < n; b++, i++) {
            uint64_t s = seed4(0, (uint64_t)t_rank, 0, (uint64_t)(i + warm));
            pat_fill(sb, MSG, s);
            MPI_Status st;
            if (t_rank == 0) {
                double t0 = MPI_Wtime();
                MPICHK(MPI_Send(sb, MSG, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
                MPICHK(MPI_Recv(rb, MSG, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
                double t1 = MPI_Wtime();
                if (i >= 0) rtt[done++] = t1 - t0;
            } else {
                MPICHK(MPI_Recv(rb, MSG, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
                MPICHK(MPI_Send(sb, MSG, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
            }
            char what[64];
            snprintf(what, sizeof what, "round trip %d", i);
            pat_check(rb, MSG, seed4(0, (uint64_t)peer, 0, (uint64_t)(i + warm)), what);
        }
        long errs = t_errors;
        MPICHK(MPI_Allreduce(&errs, &any, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
        /* at least 200 timed round trips (or all n) before the time cap applies */
        go = i < n && any == 0 && (done < 200 || MPI_Wtime() - tbeg < max_secs);
        MPICHK(MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD));
    }

    char allowed[256], names[16][64], paths[16][512], host0[MPI_MAX_PROCESSOR_NAME] = "", host1[MPI_MAX_PROCESSOR_NAME] = "";
    int hl;
    cvar_string("btl", allowed, sizeof allowed);
    int nl = loaded_btls(names, paths, 16);
    MPI_Get_processor_name(t_rank == 0 ? host0 : host1, &hl);
    if (t_rank == 0) MPICHK(MPI_Recv(host1, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    else MPICHK(MPI_Send(host1, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 2, MPI_COMM_WORLD));

    if (t_rank == 0) {
        if (done < 1) {
            if (!any) t_error("no round trip was timed"); /* else the data errors say why */
            rtt[done++] = 0;
        }
        qsort(rtt, (size_t)done, sizeof *rtt, cmp_d);
        double med = rtt[done / 2] / 2 * 1e6, mn = rtt[0] / 2 * 1e6, p90 = rtt[(size_t)(done * 0.9)] / 2 * 1e6;
        printf("demo_pingpong: %d-byte one-way latency: median %.2f us (min %.2f, p90 %.2f) over %d round trips, %s <-> %s\n",
               MSG, med, mn, p90, done, host0, host1);
        printf("demo_pingpong: BTLs allowed (MCA btl): %s\n", allowed);
        char carried[256] = "";
        int ncar = 0;
        printf("demo_pingpong: BTL components loaded after MPI_Init:");
        if (nl < 0) printf(" (cannot read /proc/self/maps)");
        for (int i = 0; i < nl; i++) {
            printf(" %s [%s]", names[i], paths[i]);
            if (strcmp(names[i], "self")) {
                if (ncar) strncat(carried, ", ", sizeof carried - strlen(carried) - 1);
                strncat(carried, names[i], sizeof carried - strlen(carried) - 1);
                ncar++;
            }
        }
        printf("\n");
        if (ncar == 1)
            printf("demo_pingpong: traffic rank 0 <-> rank 1 carried by: %s (the only BTL besides self that is loaded)\n", carried);
        else if (ncar > 1)
            printf("demo_pingpong: traffic rank 0 <-> rank 1 carried by one of: %s (ob1 picks per peer by exclusivity)\n", carried);
        else
            printf("demo_pingpong: traffic rank 0 <-> rank 1 carried by: unknown (no BTL besides self found loaded)\n");
        int shown = 0;
        for (int i = 0; i < pv_n; i++) {
            unsigned long long v = pv_read(i);
            if (v != pv_before[i] && shown < 8) {
                printf("demo_pingpong: MPI_T %s: %llu -> %llu\n", pv_name[i], pv_before[i], v);
                shown++;
            }
        }
        if (!shown) printf("demo_pingpong: (no btl_* MPI_T counters changed: %d registered)\n", pv_n);
        char sum[200];
        snprintf(sum, sizeof sum, "%d-byte latency %.2f us, BTL %s", MSG, med, ncar ? carried : "?");
        free(rtt);
        for (int i = 0; i < pv_n; i++) MPI_T_pvar_handle_free(pv_sess, &pv_h[i]);
        if (pv_ok) MPI_T_pvar_session_free(&pv_sess);
        MPI_T_finalize();
        return t_finish(sum);
    }
    free(rtt);
    for (int i = 0; i < pv_n; i++) MPI_T_pvar_handle_free(pv_sess, &pv_h[i]);
    if (pv_ok) MPI_T_pvar_session_free(&pv_sess);
    MPI_T_finalize();
    return t_finish("");
}
