/*
 * failsend: an LD_PRELOAD shim (PMPI) that makes sends fail, to check how the test programs
 * behave after a failed communication call (common.h's MPICHK must end the job at once with a
 * FAIL line, not block in a later receive until the watchdog fires).
 *
 * On rank FAILSEND_RANK (default: the highest rank; "all": every rank), the FAILSEND_AT-th
 * (default 5) and every later MPI_Send, MPI_Ssend and MPI_Isend (counted over all threads)
 * do not send: they raise MPI_ERR_OTHER on the communicator's error handler, as a send the
 * PML could not start would, and return it.
 * Nothing is sent, so the peer waits for a message that never comes.
 *
 *   make -C tests/mpi bin/libfailsend.so
 *   mpirun -np 2 -x LD_PRELOAD=$PWD/tests/mpi/bin/libfailsend.so ... tests/mpi/bin/pingpong -t 60
 */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t fs_once = PTHREAD_ONCE_INIT;
static int fs_here, fs_at = 5; /* this rank fails its sends from the fs_at-th on */
static long fs_count;          /* sends seen on this rank (atomic: threads test) */

static void fs_init(void)
{
    int me, np;
    const char *r = getenv("FAILSEND_RANK"), *a = getenv("FAILSEND_AT");
    PMPI_Comm_rank(MPI_COMM_WORLD, &me);
    PMPI_Comm_size(MPI_COMM_WORLD, &np);
    if (a && *a) fs_at = atoi(a);
    fs_here = (r && !strcmp(r, "all")) || (r && *r ? atoi(r) : np - 1) == me;
}

static int fs_fail(MPI_Comm comm)
{
    pthread_once(&fs_once, fs_init);
    if (!fs_here || __atomic_add_fetch(&fs_count, 1, __ATOMIC_RELAXED) < fs_at) return MPI_SUCCESS;
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm)
{
    int rc = fs_fail(comm);
    return rc != MPI_SUCCESS ? rc : PMPI_Send(buf, count, dt, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm)
{
    int rc = fs_fail(comm);
    return rc != MPI_SUCCESS ? rc : PMPI_Ssend(buf, count, dt, dest, tag, comm);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    int rc = fs_fail(comm);
    if (rc != MPI_SUCCESS) {
        *req = MPI_REQUEST_NULL;
        return rc;
    }
    return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}
