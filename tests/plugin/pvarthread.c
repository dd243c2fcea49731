/* A tool thread reads every btl_usnic_* MPI_T counter over and over while the main thread
 * ping-pongs at MPI_THREAD_FUNNELED: MPI_T is thread-safe on its own (MPI_T_init_thread), and
 * Open MPI's MPI_T_pvar_read takes only its own lock, so the BTL's reads meet its progress. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
static volatile int stop;
static MPI_T_pvar_session session;
static MPI_T_pvar_handle handles[64];
static int nhandles;
static unsigned long reads;
static void *tool(void *arg) {
    unsigned long v[8];
    (void) arg;
    while (!stop)
        for (int i = 0; i < nhandles; i++, reads++) MPI_T_pvar_read(session, handles[i], v);
    return NULL;
}
int main(int argc, char **argv) {
    int provided, r, n;
    MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_T_pvar_get_num(&n);
    MPI_T_pvar_session_create(&session);
    for (int i = 0; i < n && nhandles < 64; i++) {
        char name[256], desc[1024]; int nl = sizeof name, dl = sizeof desc, verb, cls, bind, ro, cont, atomic, count;
        MPI_Datatype dt; MPI_T_enum en;
        if (MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &en, desc, &dl, &bind, &ro, &cont, &atomic) != MPI_SUCCESS
            || strncmp(name, "btl_usnic_", 10))
            continue;
        if (MPI_T_pvar_handle_alloc(session, i, NULL, &handles[nhandles], &count) == MPI_SUCCESS) nhandles++;
    }
    if (!nhandles) { printf("rank %d: no btl_usnic_ counters\n", r); MPI_Abort(MPI_COMM_WORLD, 2); }
    pthread_t t;
    pthread_create(&t, NULL, tool, NULL);
    char buf[8] = {0};
    for (int i = 0; i < 50000; i++) {
        if (r == 0) { MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("rank %d: OK, %d counters read %lu times during 50000 round trips\n", r, nhandles, reads);
    for (int i = 0; i < nhandles; i++) MPI_T_pvar_handle_free(session, &handles[i]);
    MPI_T_pvar_session_free(&session);
    MPI_T_finalize();
    MPI_Finalize();
    return 0;
}
