#!/usr/bin/env bash
# Builds the MPI test programs of tests/mpi/ and runs each with 2 and 4 ranks
# on this host under Open MPI's ob1 PML and the BTLs in $BTL.
#
# usage: tests/run-mpi.sh [program ...]        (default: all programs)
# environment:
#   BTL=usnic,self      BTL list (--mca btl); e.g. BTL=tcp,self or BTL=vader,self
#   NPS="2 4"           rank counts (demo_pingpong always runs with 2 only)
#   MPI_ARGS=""         extra mpirun arguments, e.g. "--mca btl_usnic_eager_limit 4096"
#   EXPECT_LINE=RE      a passing run must also print a line matching RE (that it took its path)
#   TIMEOUT=240         seconds per run (the program's own watchdog fires 15 s earlier)
#   SCALE=1             iteration multiplier for the programs (e.g. 0.5 or 3)
#   OSC=pt2pt           osc component for onesided (Debian disables pt2pt by default; empty = Open MPI's choice)
#   SELFTEST=1          run every program with one received byte deliberately corrupted; a run passes
#                       only if the program reports the corruption (proves the checkers can fail)
#   FAILTEST=1          run every program with the highest rank's sends failing from the 5th on
#                       (tests/mpi/failsend.c, LD_PRELOAD); a run passes only if the job ends at once
#                       with the FAIL line of the failed call (proves a failed call cannot hang a run);
#                       for the programs that call MPI_Send/Ssend/Isend (not collectives, onesided)
# Prints one row per run, a table, and the line "N passed, N failed"; exits 1 if any run failed.
set -u
cd "$(dirname "$0")/.."
. tests/mpi/runlib.sh

BTL=${BTL:-usnic,self}
NPS=${NPS:-2 4}
TIMEOUT=${TIMEOUT:-240}
SCALE=${SCALE:-1}
MPI_ARGS=${MPI_ARGS:-}
PROGS=${*:-$ALL_PROGS}
LOGDIR=$BIN_DIR/logs/local-$(date +%Y%m%d-%H%M%S)

for p in $PROGS; do
    [[ " $ALL_PROGS " == *" $p "* ]] || { echo "error: unknown program '$p' (known: $ALL_PROGS)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "error: mpirun not found (apt-get install openmpi-bin)"; echo "0 passed, 1 failed"; exit 1; }
build_programs || { echo "0 passed, 1 failed"; exit 1; }
mkdir -p "$LOGDIR"

if [[ ",$BTL," == *",usnic,"* ]] && ! ompi_info --parsable 2>/dev/null | grep -q '^mca:btl:usnic:'; then
    echo "note: ompi_info does not list 'btl usnic': is mca_btl_usnic.so installed (~/.openmpi/components)? Runs will fail."
fi
SELFARGS=()
[ "${SELFTEST:-0}" = 1 ] && SELFARGS=(-x MPITEST_CORRUPT=1)
if [ "${FAILTEST:-0}" = 1 ]; then
    [ "${SELFTEST:-0}" = 1 ] && { echo "error: SELFTEST and FAILTEST exclude each other" >&2; exit 2; }
    make -s -C tests/mpi bin/libfailsend.so >"$BIN_DIR/build-failsend.log" 2>&1 ||
        { cat "$BIN_DIR/build-failsend.log" >&2; echo "0 passed, 1 failed"; exit 1; }
    SELFARGS=(-x LD_PRELOAD="$BIN_DIR/libfailsend.so")
fi

ncpu=$(nproc 2>/dev/null || echo 1)
echo "run-mpi: BTL=$BTL NPS='$NPS' SCALE=$SCALE TIMEOUT=${TIMEOUT}s MPI_ARGS='$MPI_ARGS'${SELFTEST:+ SELFTEST=$SELFTEST}${FAILTEST:+ FAILTEST=$FAILTEST} logs: $LOGDIR"
start=$(date +%s)
for prog in $PROGS; do
    for np in $(prog_nps "$prog" $NPS); do
        extra=()
        # more busy-polling ranks than cores: let idle ranks yield
        [ "$np" -gt "$ncpu" ] && extra+=(--mca mpi_yield_when_idle 1)
        # shellcheck disable=SC2046,SC2086
        run_one "local" "$prog" "$np" "$LOGDIR/$prog.np$np.log" \
            timeout -k 10 "$TIMEOUT" mpirun -np "$np" --oversubscribe --bind-to none \
            --mca pml ob1 --mca btl "$BTL" "${extra[@]}" $(prog_args "$prog") "${SELFARGS[@]}" $MPI_ARGS \
            "$BIN_DIR/$prog" -t $((TIMEOUT > 30 ? TIMEOUT - 15 : TIMEOUT)) -s "$SCALE"
    done
done
echo "run-mpi: total $(( $(date +%s) - start )) s"
print_table
[ "$RUNS_FAILED" -eq 0 ]
