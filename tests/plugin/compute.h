/* Computing outside MPI: a busy loop on the monotonic clock that makes no MPI call, so only the
 * BTL's ACK helper thread (if any) can answer the peers meanwhile. */
#ifndef USNIC_TESTS_COMPUTE_H
#define USNIC_TESTS_COMPUTE_H
#include <time.h>

static void compute_outside_mpi(long ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L < ms);
}
#endif
