#!/usr/bin/env bash
# mpi4py's test suite with ranks spread over 2 and 3 hosts made by ../shared/tools/netns-cluster.sh
# (mpirun inside h1, remote orteds through its rsh-agent), BTL under test vs reference BTL side by side,
# then the project's own MPI programs across hosts (tests/run-netns.sh) when that script exists.
# Root only; when it cannot run it says why, prints `0 passed, 1 failed` and exits non-zero.
#
# Environment (see docs/suite.md): SUITE_BTL=usnic SUITE_REF_BTL=tcp SUITE_QUICK=1
#   SUITE_LAYOUTS="2:2 2:3 3:3" (HOSTS:RANKS; quick: "2:2 3:3")  SUITE_PASSES  SUITE_MODULES
#   SUITE_TIMEOUT SUITE_STALL SUITE_EXCLUDE SUITE_OUT  SUITE_PROGRAMS=0 skips tests/run-netns.sh
#   NC=path/to/netns-cluster.sh  NC_NET=10.77.0  KEEP_CLUSTER=1
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$SUITE_DIR/netns_lib.sh"
ROOT=$(cd "$SUITE_DIR/../.." && pwd)

BTL=${SUITE_BTL:-usnic}
REF=${SUITE_REF_BTL:-tcp}
if [ "${SUITE_QUICK:-0}" = 1 ]; then
    LAYOUTS=${SUITE_LAYOUTS:-2:2 3:3}
    PASSES=${SUITE_PASSES:-main}
else
    LAYOUTS=${SUITE_LAYOUTS:-2:2 2:3 3:3}
    PASSES=${SUITE_PASSES:-main,rma-pt2pt}  # not rma-rdma: see mpi4py.sh
fi
OUT=${SUITE_OUT:-$ROOT/target/suite/netns-$(date -u +%Y%m%dT%H%M%S)-$$}
mkdir -p "$OUT"

suite_check_btl "$BTL,self"
suite_check_btl "$REF,self"
TESTDIR=$(suite_testdir)

hmax=0
for l in $LAYOUTS; do
    [[ "$l" =~ ^([0-9]+):([0-9]+)$ ]] || nc_cannot "bad SUITE_LAYOUTS entry '$l' (want HOSTS:RANKS)"
    [ "${BASH_REMATCH[1]}" -ge 2 ] || nc_cannot "layout '$l': needs at least 2 hosts"
    [ "${BASH_REMATCH[1]}" -gt "$hmax" ] && hmax=${BASH_REMATCH[1]}
done
nc_prepare "$hmax"

total_p=0 total_f=0 rc_all=0 t0=$(date +%s)
summary_lines=()
for l in $LAYOUTS; do
    nh=${l%%:*} np=${l##*:}
    hosts=$(nc_hosts_arg "$np" "$nh")
    echo
    echo "######## $nh hosts, $np ranks (--host $hosts)"
    # ranks > hosts' cores: let idle ranks yield (3 ranks on 2 vCPUs, shared machine)
    common="--host $hosts --mca plm_rsh_agent '$NC rsh-agent' --mca oob_tcp_if_include $NC_NET.0/24 --mca mpi_yield_when_idle 1 ${SUITE_MPIRUN_ARGS:-}"
    log="$OUT/${nh}hosts-np$np.log"
    "$SUITE_PY" "$SUITE_DIR/suite.py" --testdir "$TESTDIR" --out "$OUT/${nh}hosts-np$np" \
        --btl "$BTL,self" --btl-args "$(nc_btl_args "$BTL")" \
        --ref-btl "$REF,self" --ref-args "$(nc_btl_args "$REF")" \
        --np "$np" --passes "$PASSES" --modules "${SUITE_MODULES:-}" \
        --launcher "$NC exec h1" --mpirun-args "$common" \
        --timeout "${SUITE_TIMEOUT:-1800}" --stall "${SUITE_STALL:-600}" \
        --exclude "${SUITE_EXCLUDE-$SUITE_EXCLUDE_DEFAULT}" \
        --summary-json "$OUT/${nh}hosts-np$np.json" \
        --title "mpi4py $MPI4PY_VERSION test suite, $nh netns hosts, $np ranks" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -ne 0 ] && rc_all=1
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$last" ]; then
        last="0 passed, 1 failed"
        echo "suite: the ${nh}-host run printed no result line (exit $rc): counted as 1 failure"
    fi
    p=${last%% passed*}; f=${last#*, }; f=${f%% failed}
    total_p=$((total_p + p)); total_f=$((total_f + f))
    summary_lines+=("$(printf '%-10s %-6s %-8s %s' "${nh} hosts" "np $np" "exit $rc" "$last")")
done

prog_line=""
if [ "${SUITE_PROGRAMS:-1}" = 1 ]; then
    if [ -x "$ROOT/tests/run-netns.sh" ]; then
        echo
        echo "######## project MPI programs across hosts: tests/run-netns.sh (BTL=$BTL,self)"
        # run-netns.sh takes the same lock itself: hand it over
        nc_release_lock
        plog="$OUT/run-netns.log"
        BTL="$BTL,self" KEEP_CLUSTER=1 "$ROOT/tests/run-netns.sh" 2>&1 | tee "$plog"
        prc=${PIPESTATUS[0]}
        exec 9>"$NC_LOCK"; flock -w "${NC_LOCK_WAIT:-1800}" 9 || true
        [ "$prc" -ne 0 ] && rc_all=1
        prog_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$plog" | tail -n 1)
        [ -n "$prog_line" ] || prog_line="0 passed, 1 failed"
        p=${prog_line%% passed*}; f=${prog_line#*, }; f=${f%% failed}
        total_p=$((total_p + p)); total_f=$((total_f + f))
        summary_lines+=("$(printf '%-10s %-6s %-8s %s' "programs" "-" "exit $prc" "$prog_line (tests/run-netns.sh)")")
    else
        summary_lines+=("programs: tests/run-netns.sh not in this tree; only the mpi4py suite ran")
    fi
fi

echo
echo "== netns summary (BTL under test $BTL, reference $REF; $(( $(date +%s) - t0 )) s; logs in $OUT)"
for s in "${summary_lines[@]}"; do echo "   $s"; done
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ] && [ "$rc_all" -eq 0 ]
