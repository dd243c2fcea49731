/* Reads the usnic BTL's MPI_T counter btl_usnic_num_total_sends around 100 ping-pongs and
 * prints how much it grew: the test asserts the growth, so the counter is real, not a constant. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
static int find(const char *want) {
    int n; MPI_T_pvar_get_num(&n);
    for (int i = 0; i < n; i++) {
        char name[256], desc[1024]; int nl = sizeof name, dl = sizeof desc, verb, cls, bind, ro, cont, atomic;
        MPI_Datatype dt; MPI_T_enum en;
        if (MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &en, desc, &dl, &bind, &ro, &cont, &atomic) != MPI_SUCCESS) continue;
        if (!strcmp(name, want)) return i;
    }
    return -1;
}
int main(int argc, char **argv) {
    int provided; MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    int idx = find("btl_usnic_num_total_sends");
    if (idx < 0) { printf("rank %d: no pvar btl_usnic_num_total_sends\n", r); MPI_Abort(MPI_COMM_WORLD, 2); }
    MPI_T_pvar_session s; MPI_T_pvar_handle h; int count;
    MPI_T_pvar_session_create(&s);
    MPI_T_pvar_handle_alloc(s, idx, NULL, &h, &count);
    unsigned long before = 0, after = 0;
    MPI_T_pvar_read(s, h, &before);
    char buf[8] = {0};
    for (int i = 0; i < 100; i++) {
        if (r == 0) { MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    MPI_T_pvar_read(s, h, &after);
    printf("rank %d: btl_usnic_num_total_sends grew by %lu\n", r, after - before);
    MPI_T_pvar_handle_free(s, &h);
    MPI_T_pvar_session_free(&s);
    /* MPI_T_finalize before MPI_Finalize: Open MPI 4.1.4 segfaults in an MPI_T_finalize that
     * follows MPI_Finalize, with any pvar (seen with mpool_hugepage's over btl tcp too). */
    MPI_T_finalize();
    MPI_Finalize();
    return 0;
}
