#!/usr/bin/env bash
# Faults between hosts: runs the mpi4py suite's point-to-point subset (and, with FAULT_PROGRAMS=1, the
# project's MPI programs through tests/run-netns.sh) over 2 netns hosts, once clean and once per fault
# (loss 1/5/20 %, reordering, delay jitter via netns-cluster.sh netem on both directions of h2; duplication,
# and drops, duplicates and delays all at once, via the BTL's own fault injector), and prints a markdown
# table: fault, runtime, ratio vs clean, pass/fail, retransmissions.  Every run has a hard timeout; exceeding it is a failure.
# Root only; when it cannot run it says why, prints `0 passed, 1 failed` and exits non-zero.
#
# Environment (see docs/suite.md):
#   SUITE_BTL=usnic          BTL under test (tcp validates the harness: loss just slows TCP down)
#   FAULT_TIMEOUT=900        hard limit per fault run (s), whole run incl. launch
#   FAULT_STALL=300          a run whose ranks print nothing for this long is cut (hang = failure)
#   FAULT_MODULES='^test_p2p_'   suite modules to run (regex)
#   FAULT_NP=2  FAULT_HOSTS=2    ranks and hosts
#   FAULT_ONLY="clean loss5"     run only these rows (names from the first column)
#   FAULT_PROGRAMS=1         also run tests/run-netns.sh (project programs) under every netem fault
#   USNIC_FAULT_DUP_MCA      MCA args of the BTL's own injector for the duplication row (cluster netem cannot duplicate)
#   USNIC_FAULT_MIX_MCA      MCA args of the injector for the mixed row (drops, duplicates and delays on both sides)
#   USNIC_STATS_MCA          MCA args that make the BTL print its statistics (default --mca btl_usnic_stats 3600)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$SUITE_DIR/netns_lib.sh"
ROOT=$(cd "$SUITE_DIR/../.." && pwd)

BTL=${SUITE_BTL:-usnic}
TMO=${FAULT_TIMEOUT:-900}
STALL=${FAULT_STALL:-300}
MODS=${FAULT_MODULES:-^test_p2p_}
NP=${FAULT_NP:-2}
NH=${FAULT_HOSTS:-2}
OUT=${SUITE_OUT:-$ROOT/target/suite/faults-$(date -u +%Y%m%dT%H%M%S)-$$}
mkdir -p "$OUT"

# ---------------------------------------------------------------------------------------------
# The usnic BTL's own fault injector: netns-cluster.sh cannot duplicate packets (its netem
# emulation refuses "duplicate"), so duplication comes from the BTL, e.g.
# "--mca btl_usnic_fault_send_dup 1 --mca btl_usnic_fault_seed 7" (percentages).
USNIC_FAULT_DUP_MCA=${USNIC_FAULT_DUP_MCA:---mca btl_usnic_fault_send_dup 1 --mca btl_usnic_fault_seed 7}   # 1 % duplicated datagrams
# Every kind of fault the injector has at once, on the sending and the receiving side of every rank.
USNIC_FAULT_MIX_MCA=${USNIC_FAULT_MIX_MCA:---mca btl_usnic_fault_send_drop 2 --mca btl_usnic_fault_recv_drop 2 --mca btl_usnic_fault_send_dup 3 --mca btl_usnic_fault_recv_dup 3 --mca btl_usnic_fault_send_delay 2 --mca btl_usnic_fault_seed 11}
# ---------------------------------------------------------------------------------------------

# name | mechanism | netem spec on h2 (both directions), or the variable holding the injector's MCA args
FAULTS=(
    "clean|none|"
    "loss1|netem|loss 1%"
    "loss5|netem|loss 5%"
    "loss20|netem|loss 20%"
    "reorder|netem|delay 300us reorder 25%"
    "jitter|netem|delay 500us 400us"
    "dup1|btl-injector|USNIC_FAULT_DUP_MCA"
    "mixed|btl-injector|USNIC_FAULT_MIX_MCA"
)

suite_check_btl "$BTL,self"
TESTDIR=$(suite_testdir)
nc_prepare "$NH"
hosts=$(nc_hosts_arg "$NP" "$NH")
common="--host $hosts --mca plm_rsh_agent '$NC rsh-agent' --mca oob_tcp_if_include $NC_NET.0/24 --mca mpi_yield_when_idle 1 ${SUITE_MPIRUN_ARGS:-}"

# HOOK: retransmission counters from the BTL's statistics output (usnic only), summed over every rank's
# final statistics line.  Two layouts are understood; adapt here if the plugin's line changes:
#  - usnic-rs (src/ompi/stats_line.rs, docs/operations.md), read by usnic_final_resends (netns_lib.sh):
#      "btl:usnic: stats (final) rank=R module=M iface=I ... resends_timeout=T resends_fast=F ..."
#  - the C original: "... ST(P+D)/F/C/R(T+F)/A: a(b+c)/d/e/f(g+h)/i ..." (f = resends, g timeout, h fast)
# The statistics are switched on by USNIC_STATS_MCA (default here: one line at finalize only).
USNIC_STATS_MCA=${USNIC_STATS_MCA:---mca btl_usnic_stats 3600}
retrans_of() {
    local dir=$1 rs c
    suite_is_usnic "$BTL" || { echo "n/a (tcp)"; return; }
    # the suite's runs only (ranks write to rank.N; not the preflight job, which is not measured)
    local logs=("$dir"/*-np*-*/rank.* "$dir"/*-np*-*/mpirun.log)
    rs=$(usnic_final_resends "${logs[@]}")
    if [ -z "$rs" ]; then
        rs=$(grep -hoE 'R\(T\+F\)/A: *[0-9]+\([0-9]+\+[0-9]+\)/[0-9]+/[0-9]+/[0-9]+\([0-9]+\+[0-9]+\)' "${logs[@]}" 2>/dev/null |
            sed -E 's/.*\/[0-9]+\(([0-9]+)\+([0-9]+)\)$/\1 \2/')
    fi
    c=$(echo "$rs" | grep -c .)
    [ "$c" -gt 0 ] || { echo "no statistics line in the logs (USNIC_STATS_MCA='$USNIC_STATS_MCA')"; return; }
    echo "$rs" | awk -v n="$c" '{t+=$1; f+=$2} END {printf "%d (%d timeout + %d fast; %d stats lines)", t+f, t, f, n}'
}

rows=()
clean_s=""
npass=0 nfail=0
for entry in "${FAULTS[@]}"; do
    IFS='|' read -r name mech spec <<<"$entry"
    if [ -n "${FAULT_ONLY:-}" ] && [[ " $FAULT_ONLY " != *" $name "* ]]; then continue; fi
    extra=""
    case $mech in
    netem)
        "$NC" netem h2 --both "$spec" || nc_cannot "netns-cluster.sh netem h2 --both '$spec' failed (delay/reorder need: $NC deps)"
        NC_IMPAIRED="h2"
        ;;
    btl-injector)
        if ! suite_is_usnic "$BTL"; then
            rows+=("| $name | BTL fault injector | - | - | n/a: $BTL has no injector (row applies to usnic) | - |")
            continue
        fi
        if [ -z "${!spec}" ]; then
            rows+=("| $name | BTL fault injector | - | - | **FAIL: not run, $spec (injector MCA names) not filled in** | - |")
            nfail=$((nfail + 1))
            continue
        fi
        extra=${!spec}
        ;;
    esac
    echo
    echo "######## fault $name ($mech${spec:+: $spec})"
    d="$OUT/$name"
    mkdir -p "$d"
    t0=$(date +%s.%N)
    timeout -k 30 "$TMO" "$SUITE_PY" "$SUITE_DIR/suite.py" --testdir "$TESTDIR" --out "$d" \
        --btl "$BTL,self" --btl-args "$(nc_btl_args "$BTL") $extra" --ref-btl none \
        --np "$NP" --passes main --modules "$MODS" \
        --launcher "$NC exec h1" --mpirun-args "$common" \
        --timeout "$TMO" --stall "$STALL" \
        --exclude "${SUITE_EXCLUDE-$SUITE_EXCLUDE_DEFAULT}" \
        --summary-json "$d/summary.json" \
        --title "fault $name: suite subset $MODS, $NH hosts, $NP ranks" >"$d/suite.log" 2>&1
    rc=$?
    el=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    queued=$(nc_queued_packets h2)
    if [ "$mech" = netem ]; then "$NC" netem h2 clear >/dev/null; NC_IMPAIRED=""; fi
    grep -E '^   (np |note|module|test_|\(mpirun)|FAILED|passed, ' "$d/suite.log" | sed 's/^/  /' | head -40
    res=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$d/suite.log" | tail -n 1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        verdict="**FAIL: exceeded the ${TMO}s hard timeout**"
    elif [ "$rc" -eq 0 ] && [ "$mech" = netem ] && ! suite_is_usnic "$BTL" && [[ $spec != *delay* ]]; then
        verdict="pass ($res; a netem loss's effect is read from usnic's statistics only)"
    elif why=$(fault_no_effect "$([ "$mech" = netem ] && echo "$spec")" \
        "$([ "$mech" = btl-injector ] && echo "${!spec}")" "$queued" \
        "$d"/*-np*-*/rank.* "$d"/*-np*-*/mpirun.log); [ "$rc" -eq 0 ] && [ -n "$why" ]; then
        verdict="**FAIL: passed, but the fault did not act ($why): the row tested nothing**"
        rc=1
    elif [ "$rc" -eq 0 ]; then
        verdict="pass ($res)"
    else
        verdict="**FAIL** (${res:-no result line}, exit $rc)"
    fi
    if [ "$name" = clean ]; then clean_s=$el; fi
    ratio="-"
    [ -n "$clean_s" ] && ratio=$(awk -v a="$el" -v b="$clean_s" 'BEGIN { printf "%.2f", a / b }')
    [ "$name" = clean ] && ratio="1.00"
    retr=$(retrans_of "$d")
    rows+=("| $name | ${mech}${spec:+: $spec} | $(printf '%.1f' "$el") | ${ratio}x | $verdict | $retr |")
    if [ "$rc" -eq 0 ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi

    if [ "${FAULT_PROGRAMS:-0}" = 1 ] && [ "$mech" != btl-injector ]; then
        if [ -x "$ROOT/tests/run-netns.sh" ]; then
            nc_release_lock
            t0=$(date +%s.%N)
            NETEM=$([ "$mech" = netem ] && echo "$spec") NETEM_BOTH=1 BTL="$BTL,self" KEEP_CLUSTER=1 \
                LAYOUTS="$NH:$((NP / NH))" TIMEOUT="$TMO" "$ROOT/tests/run-netns.sh" >"$d/programs.log" 2>&1
            prc=$?
            el=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
            exec 9>"$NC_LOCK"; flock -w "${NC_LOCK_WAIT:-1800}" 9 || true
            pres=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$d/programs.log" | tail -n 1)
            rows+=("| $name (programs) | run-netns.sh | $(printf '%.1f' "$el") | - | $([ $prc -eq 0 ] && echo pass || echo '**FAIL**') (${pres:-no result line}) | - |")
            if [ "$prc" -eq 0 ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi
        else
            rows+=("| $name (programs) | - | - | - | not run: tests/run-netns.sh not in this tree | - |")
        fi
    fi
done

echo
echo "## Faults: BTL $BTL,self, suite subset \`$MODS\`, $NH hosts, $NP ranks, hard timeout ${TMO}s per run"
echo
echo "| fault | injected by | runtime s | vs clean | result | retransmissions |"
echo "|---|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "$r"; done
echo
echo "(netem faults apply to both directions of h2's traffic; runtime = whole run incl. mpirun launch; logs: $OUT)"
echo "$npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
