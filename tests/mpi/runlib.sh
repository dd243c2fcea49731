# Shared by tests/run-mpi.sh and tests/run-netns.sh (sourced, not executed).
# A "run" is one program at one rank count; its verdict comes from the
# program's own "PASS <name> np=<n>:" line AND mpirun's exit status, so a
# crash after the PASS line, a hang (timeout) or a missing line is a failure.
# The first "PASS|FAIL <name> np=" line is the one shown: rank 0's result, or
# the FAIL line of the rank whose MPI call failed (it ends the job at once).

MPI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN_DIR=$MPI_DIR/bin
ALL_PROGS="pingpong datatypes anysource manyreq collectives onesided threads demo_pingpong"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

RUNS_PASSED=0
RUNS_FAILED=0
TABLE=()

build_programs() {
    command -v "${MPICC:-mpicc}" >/dev/null || { echo "error: mpicc not found (apt-get install libopenmpi-dev)" >&2; return 1; }
    mkdir -p "$BIN_DIR"
    if ! make -s -C "$MPI_DIR" MPICC="${MPICC:-mpicc}" >"$BIN_DIR/build.log" 2>&1; then
        cat "$BIN_DIR/build.log" >&2
        echo "error: building the MPI test programs failed" >&2
        return 1
    fi
}

# extra mpirun arguments a program needs
prog_args() {
    case $1 in
        # Debian's openmpi-mca-params.conf disables osc pt2pt ("osc = ^ucx,pt2pt") and osc rdma
        # needs BTL atomics; OSC= picks the component (empty: Open MPI's choice)
        onesided) [ -n "${OSC-pt2pt}" ] && echo "--mca osc ${OSC-pt2pt}" ;;
    esac
}

# which rank counts a program runs with, from the list given
prog_nps() {
    local prog=$1; shift
    local np
    for np in "$@"; do
        if [ "$prog" = demo_pingpong ] && [ "$np" != 2 ]; then continue; fi
        echo "$np"
    done
}

# run_one LABEL PROG NP LOGFILE CMD...   (CMD = the full launcher command up to the program)
run_one() {
    local label=$1 prog=$2 np=$3 log=$4
    shift 4
    local t0 t1 rc verdict detail secs
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 9>&-   # fd 9: the netns cluster lock stays with the runner
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    local line
    line=$(grep -m1 -E "^(PASS|FAIL) $prog np=" "$log")
    if [ "${SELFTEST:-0}" = 1 ]; then
        # the checker must catch the deliberately corrupted byte
        if [ $rc -ne 0 ] && grep -qE "^FAIL $prog np=.*expected" "$log"; then
            verdict=PASS; detail="corruption detected: ${line#FAIL }"
        else
            verdict=FAIL; detail="corrupted byte NOT detected (rc=$rc): ${line:-no result line}"
        fi
    elif [ "${FAILTEST:-0}" = 1 ]; then
        # a failed send must end the job at once, with its own FAIL line (not the watchdog's)
        if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ "${secs%.*}" -lt "${FAILTEST_LIMIT:-60}" ] &&
            grep -qE "^FAIL $prog np=.*: MPI_I?S?[sS]end\(.* returned .*; aborting" "$log"; then
            verdict=PASS; detail="failed send ended the job in ${secs}s: $(grep -m1 -oE 'MPI_I?S?[sS]end\(.*' "$log" | cut -c1-60)"
        else
            verdict=FAIL; detail="failed send did NOT end the job at once (rc=$rc, ${secs}s): ${line:-no result line}"
        fi
    elif [ $rc -eq 0 ] && [[ "$line" == PASS* ]] && [ -n "${EXPECT_LINE:-}" ] && ! grep -qE "$EXPECT_LINE" "$log"; then
        # the run must show it took the path it was meant to test (an MCA name Open MPI does not
        # know is ignored without a word)
        verdict=FAIL; detail="passed, but no line matches '$EXPECT_LINE': the path meant was not taken"
    elif [ $rc -eq 0 ] && [[ "$line" == PASS* ]]; then
        verdict=PASS; detail=${line#PASS $prog np=$np: }
    else
        verdict=FAIL
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            detail="TIMEOUT after ${secs}s (rc=$rc) ${line}"
        elif [ -n "$line" ]; then
            detail="rc=$rc ${line}"
        else
            detail="rc=$rc, no result line; last output: $(grep -v '^\s*$' "$log" | grep -v -- '-----' | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
        fi
    fi
    if [ "$verdict" = PASS ]; then RUNS_PASSED=$((RUNS_PASSED + 1)); else RUNS_FAILED=$((RUNS_FAILED + 1)); fi
    local row
    row=$(printf '%-14s %-13s %3s  %-4s %7ss  %s' "$label" "$prog" "$np" "$verdict" "$secs" "$detail")
    TABLE+=("$row")
    echo "$row"
    [ "$verdict" = PASS ] || echo "               log: $log"
    # the demo's own lines (latency, which BTL carried it) are the point of running it
    [ "$prog" = demo_pingpong ] && grep '^demo_pingpong:' "$log" | sed 's/^/               /'
    return 0
}

print_table() {
    echo
    printf '%-14s %-13s %3s  %-4s %8s  %s\n' "where" "program" "np" "res" "time" "details"
    local r
    for r in "${TABLE[@]}"; do echo "$r"; done
    echo
    echo "$RUNS_PASSED passed, $RUNS_FAILED failed"
}
