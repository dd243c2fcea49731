/* connect server|client PORTFILE: the server job opens a port (written to PORTFILE) and accepts,
 * the client job connects; every server rank and client rank exchange a checked 64 KiB message
 * both ways, then disconnect. Two mpiruns, so Open MPI calls each other's processes remote. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char port[MPI_MAX_PORT_NAME] = "";
    int rank, rs, srv = !strcmp(argv[1], "server"), errs = 0, tot;
    static unsigned char sb[65536], rb[65536];
    MPI_Comm inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (srv) {
        if (rank == 0) { MPI_Open_port(MPI_INFO_NULL, port); FILE *f = fopen("port.tmp", "w"); fputs(port, f); fclose(f); rename("port.tmp", argv[2]); }
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
    } else {
        FILE *f;
        if (rank == 0) { while (!(f = fopen(argv[2], "r"))) usleep(100000); fgets(port, sizeof port, f); fclose(f); }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
    }
    MPI_Comm_remote_size(inter, &rs);
    for (int r = 0; r < rs; r++) {
        for (int i = 0; i < 65536; i++) sb[i] = (unsigned char)(i * 7 + rank * 13 + r * 31 + srv);
        MPI_Sendrecv(sb, 65536, MPI_BYTE, r, 0, rb, 65536, MPI_BYTE, r, 0, inter, MPI_STATUS_IGNORE);
        for (int i = 0; i < 65536; i++) if (rb[i] != (unsigned char)(i * 7 + r * 13 + rank * 31 + !srv)) { errs++; break; }
    }
    MPI_Comm_disconnect(&inter);
    MPI_Allreduce(&errs, &tot, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s %s\n", tot ? "FAIL" : "PASS", argv[1]);
    MPI_Finalize();
    return tot != 0;
}
