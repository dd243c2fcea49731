/* Local rank 0 reaches MPI_Init LATE0_S seconds after its siblings (it reads its input first, say);
 * then every rank sums its rank over MPI_COMM_WORLD. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const char *late = getenv("LATE0_S");
    if (lr && atoi(lr) == 0 && late)
        sleep((unsigned) atoi(late));
    MPI_Init(&argc, &argv);
    int r, n, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (r == 0)
        printf("%s sum=%d\n", sum == n * (n - 1) / 2 ? "PASS" : "FAIL", sum);
    MPI_Finalize();
    return 0;
}
