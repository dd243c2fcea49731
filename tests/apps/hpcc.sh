#!/usr/bin/env bash
# An application, not a test program: the HPC Challenge suite (Debian's `hpcc`: HPL, PTRANS,
# MPIRandomAccess, MPIFFT, the b_eff ping-pong and rings, each checking its own result) with 4 ranks on
# two netns hosts, clean, under 1 % loss both ways, under the BTL's seeded duplication and drops, beside
# vader on-node (usnic,vader,self, what a user would write) and over btl tcp for reference. A row passes
# when mpirun exits 0 within its time limit and tests/apps/hpcc_check.py finds every verification in
# hpccoutf.txt passed (the clean row also wants its data chunks to have left in batched sends, see
# batched_share); the checker's own self-test (each check fails on a damaged copy) counts too.
# Root only; when it cannot run it says why, prints `0 passed, 1 failed` and exits non-zero.
#
# Environment: HPCC_TIMEOUT=300 (seconds per run), HPCC_ONLY="clean loss1" (rows to run),
#   HPCC_NP=4 over 2 hosts, HPCC_STRESS=1 adds rows under harsher faults (5 and 20 % loss,
#   reordering, jitter, 5 % duplication and drops; about 3 minutes more), which HPCC_ONLY can
#   also name.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SUITE_DIR=$ROOT/tests/suite
source "$SUITE_DIR/netns_lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMO=${HPCC_TIMEOUT:-300}
NP=${HPCC_NP:-4}
NH=2
LOGDIR=$(mktemp -d /tmp/usnic-hpcc.XXXXXX)
CHECK=$ROOT/tests/apps/hpcc_check.py

command -v hpcc >/dev/null || nc_cannot "hpcc not found (apt-get install hpcc; scripts/deps.sh installs it)"
command -v mpirun >/dev/null || nc_cannot "mpirun not found (apt-get install openmpi-bin)"

# name | btl list | netem on h2 (both directions) | extra MCA arguments
ROWS=(
    "clean|usnic,self||"
    "loss1|usnic,self|loss 1%|"
    "dup-drop|usnic,self||--mca btl_usnic_fault_send_dup 1 --mca btl_usnic_fault_send_drop 1 --mca btl_usnic_fault_seed 11"
    "vader|usnic,vader,self||"
    "tcp|tcp,self||"
)
STRESS_ROWS=(
    "loss5|usnic,self|loss 5%|"
    "loss20|usnic,self|loss 20%|"
    "reorder|usnic,self|delay 300us reorder 25%|"
    "jitter|usnic,self|delay 500us 400us|"
    "dupdrop5|usnic,self||--mca btl_usnic_fault_send_dup 5 --mca btl_usnic_fault_send_drop 5 --mca btl_usnic_fault_seed 7"
    "tcp-reorder|tcp,self|delay 300us reorder 25%|"
)
if [ "${HPCC_STRESS:-0}" = 1 ] || [ -n "${HPCC_ONLY:-}" ]; then ROWS+=("${STRESS_ROWS[@]}"); fi

# HPL N=1000 on a 2x2 grid (the other kernels size themselves from it); ~15 s a run over usnic here.
input() {
    cat <<'EOF'
HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
1000         Ns
1            # of NBs
80           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
2            Ps
2            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
EOF
}

# sum of the usnic ranks' final statistics: "T (timeout + fast) resent, S reported needless,
# D duplicates received"
resends_of() {
    usnic_final_resends "$1" |
        awk '{t += $1; f += $2; d += $3; s += $4; n++} END {
            if (n) printf "%d (%d + %d) resent, %d reported needless, %d duplicates received", t + f, t, f, s, d
            else print "-" }'
}

# "SHARE SENDS": datagrams that left in batched sends (btl_usnic_gso) per data chunk sent, and
# the batched sends, summed over the usnic ranks' final statistics. The first counts every
# datagram a batch carried (retransmissions and single-datagram fragments too), so a clean run
# whose runs to one peer stay whole reads about 1.0; peers served a segment at a time read
# 0.95-0.96 here (two peers with data alternate, and each switch ends a batch).
batched_share() {
    usnic_final_lines "$1" |
        sed -nE 's/.* chunk_sends=([0-9]+) .* gso_sends=([0-9]+) gso_datagrams=([0-9]+) .*/\1 \2 \3/p' |
        awk '{c += $1; s += $2; g += $3} END { if (c) printf "%.3f %d", g / c, s }'
}

nc_prepare "$NH"
hosts=$(nc_hosts_arg "$NP" "$NH")
pass=0 fail=0 table=() clean_s=""
for entry in "${ROWS[@]}"; do
    IFS='|' read -r name btl netem extra <<<"$entry"
    if [ -n "${HPCC_ONLY:-}" ] && [[ " $HPCC_ONLY " != *" $name "* ]]; then continue; fi
    d=$LOGDIR/$name
    mkdir -p "$d"
    input >"$d/hpccinf.txt"
    if [ -n "$netem" ]; then
        # shellcheck disable=SC2086
        "$NC" netem h2 --both $netem >/dev/null || nc_cannot "netns-cluster.sh netem h2 --both $netem failed"
        NC_IMPAIRED="h2"
    fi
    ifargs=(--mca oob_tcp_if_include "$NC_NET.0/24")
    [[ ",$btl," == *",usnic,"* ]] && ifargs+=(--mca btl_usnic_if_include "$NC_NET.0/24" --mca btl_usnic_stats 3600)
    [[ ",$btl," == *",tcp,"* ]] && ifargs+=(--mca btl_tcp_if_include "$NC_NET.0/24")
    echo "== $name: btl $btl${netem:+, netem h2 both ways: $netem}${extra:+, $extra}"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    (cd "$d" && "$NC" exec h1 timeout -k 10 "$TMO" mpirun -np "$NP" --host "$hosts" --bind-to none \
        --mca plm_rsh_agent "$NC rsh-agent" "${ifargs[@]}" --mca pml ob1 --mca btl "$btl" \
        --mca mpi_yield_when_idle 1 -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 $extra hpcc) \
        >"$d/mpirun.log" 2>&1
    rc=$?
    el=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    queued=$(nc_queued_packets h2)
    if [ -n "$netem" ]; then "$NC" netem h2 clear >/dev/null; NC_IMPAIRED=""; fi
    # The fault must have acted (a loss's resends are read from usnic's statistics only).
    why=""
    if [[ ",$btl," == *",usnic,"* || $netem == *delay* ]]; then
        why=$(fault_no_effect "$netem" "$extra" "$queued" "$d/mpirun.log")
    fi
    verdict=""
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        verdict="FAIL: exceeded the ${TMO}s limit"
    elif [ "$rc" -ne 0 ]; then
        verdict="FAIL: mpirun exit $rc ($(grep -m1 -iE 'error|abort' "$d/mpirun.log" | cut -c1-160))"
    elif ! out=$(python3 "$CHECK" "$d/hpccoutf.txt" "$NP"); then
        verdict="FAIL: $(echo "$out" | paste -sd ';' -)"
    elif [ -n "$why" ]; then
        verdict="FAIL: passed, but the fault did not act ($why): the row tested nothing"
    elif [ "$name" = clean ]; then
        read -r share bsends <<<"$(batched_share "$d/mpirun.log")"
        if [ -z "${share:-}" ]; then
            verdict="FAIL: no final statistics line of the usnic BTL in the log"
        elif [ "$bsends" -eq 0 ]; then
            verdict="FAIL: no batched sends at all (btl_usnic_gso off, or a kernel without UDP_SEGMENT)"
        elif awk -v s="$share" 'BEGIN { exit !(s < 0.98) }'; then
            verdict="FAIL: $share batched datagrams per data chunk sent (want >= 0.98: a peer keeps the data channel for a batch)"
        fi
    fi
    [ "$name" = clean ] && [ -z "$verdict" ] && clean_s=$el
    ratio=-
    [ -n "$clean_s" ] && ratio=$(awk -v a="$el" -v b="$clean_s" 'BEGIN { printf "%.2fx", a / b }')
    if [ -z "$verdict" ]; then
        pass=$((pass + 1))
        verdict="pass: $(grep -E '^(HPL_Tflops|PTRANS_GBs|MPIRandomAccess_GUPs|MPIFFT_Gflops)=' "$d/hpccoutf.txt" |
            sed -E 's/_(Tflops|GBs|GUPs|Gflops)=/ /; s/^MPI//' | awk '{printf "%s%s %.3g", (NR > 1 ? ", " : ""), $1, $2}')"
    else
        fail=$((fail + 1))
        echo "   log: $d/mpirun.log"
    fi
    echo "   $verdict (${el} s)"
    fault=${netem:-none}
    [ -n "$extra" ] && fault="BTL injector: $(echo "$extra" | sed -E 's/--mca btl_usnic_fault_(send_)?//g')"
    table+=("| $name | $btl | $fault | $el | $ratio | $verdict | $(resends_of "$d/mpirun.log") |")
done

# The checker must be able to fail: every check is tried on a damaged copy of a good output.
good=$(ls "$LOGDIR"/*/hpccoutf.txt 2>/dev/null | while read -r f; do python3 "$CHECK" "$f" "$NP" >/dev/null && echo "$f"; done | head -1)
if [ -n "$good" ] && python3 "$CHECK" --selftest "$good" "$NP"; then
    pass=$((pass + 1))
else
    echo "FAIL: the checker's self-test (${good:-no passing output to damage})"
    fail=$((fail + 1))
fi

echo
echo "HPCC, $NP ranks on $NH netns hosts (logs: $LOGDIR)"
echo
echo "| row | btl | fault | runtime s | vs clean | result | usnic retransmissions |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
echo
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
