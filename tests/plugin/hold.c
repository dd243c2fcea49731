/* Rank 0 sends N eager messages of SIZE bytes to rank 1 while rank 1 is away from MPI for MS
 * milliseconds (asleep: no MPI call, so only the BTL's ACK helper thread answers the peers);
 * then rank 1 receives and checks every byte of every message, and prints its peak resident
 * memory (VmHWM of /proc/self/status). The ACK helper keeps a bounded amount of what arrives
 * for the application; beyond it the rank holds its receive side and the sender waits, so the
 * peak stays far below N * SIZE, and the sender must not declare the sleeping rank failed.
 * Arguments: N SIZE MS (default 12000 messages of 32 KiB, 8000 ms). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned char pattern(long msg, size_t i) { return (unsigned char)(msg * 31 + i * 7 + 1); }

static long vm_hwm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 12000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32768;
    long ms = argc > 3 ? atol(argv[3]) : 8000;
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    unsigned char *buf = malloc(size);
    if (!buf) { fprintf(stderr, "no memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    long bad = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) {
        for (long m = 0; m < n; m++) {
            for (size_t i = 0; i < size; i++) buf[i] = pattern(m, i);
            MPI_Send(buf, (int)size, MPI_BYTE, 1, (int)(m % 1000), MPI_COMM_WORLD);
        }
    } else if (r == 1) {
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0) {}
        for (long m = 0; m < n; m++) {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, (int)(m % 1000), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < size; i++) bad += buf[i] != pattern(m, i);
        }
        printf("rank 1: VmHWM %ld kB after %ld messages of %zu bytes\n", vm_hwm_kb(), n, size);
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (r == 0) {
        if (bad) printf("FAIL: %ld bytes differ\n", bad);
        else printf("OK: %ld messages of %zu bytes checked\n", n, size);
    }
    free(buf);
    MPI_Finalize();
    return bad != 0;
}
