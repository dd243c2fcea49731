#!/usr/bin/env bash
# Full sockets: a send the kernel refuses for now (EAGAIN, a full socket send buffer) is kept and
# offered again, and nothing is lost, duplicated or reordered for it. A token-bucket qdisc (tc tbf)
# slower than the ranks holds their datagrams, and each one stays charged to the socket that sent it
# until it leaves the qdisc, so the send buffers fill:
#   1. one host: both ranks in a private network namespace, over its own lo with tbf at 1 Gbit/s;
#      the udp channels send every datagram on the socket themselves (sendto, or sendmsg with the
#      payload read in place, which a refusal makes copy behind the header);
#   2. two netns hosts with tbf at 50 Mbit/s on every host's egress: batched sends (btl_usnic_gso);
#   3. the same with btl_usnic_gso 0: sends through the udp provider (fi_send, fi_inject);
#   4. one host, a private namespace's lo with an nftables rule dropping 2 % of outgoing UDP: the
#      kernel refuses those sends for good (EPERM), lone datagrams of 65507 bytes and, with
#      btl_usnic_mtu 1472, batches; they are lost like on a wire, repaired, and counted.
# Each case runs manyreq (sends and receives in flight both ways, mixed sizes, every byte checked),
# which must pass, and the ranks' final statistics lines must show refusals on the path the case
# names (busy_sends or busy_batches above 0; lost_sends for case 4): a case whose sockets never
# filled (or never refused) tested nothing, and fails. `btl_usnic_sd_num 16` keeps each socket's send buffer smaller than what the qdisc holds
# (the buffer is sized for sd_num datagrams), so the socket fills before the qdisc drops.
# Root only. Ends with `N passed, N failed`; exit non-zero on failure.
#
# Environment: RATE_LO=1gbit, RATE_HOSTS=50mbit (tbf rates), JOB_LIMIT=180 (seconds per job).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
RATE_LO=${RATE_LO:-1gbit}
RATE_HOSTS=${RATE_HOSTS:-50mbit}
JOB_LIMIT=${JOB_LIMIT:-180}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LOGDIR=$(mktemp -d /tmp/usnic-fullsocket.XXXXXX)
STATS=(--mca btl_usnic_stats 3600 --mca btl_usnic_sd_num 16)
# ok, bad, finish.
# shellcheck source=tests/verdict.sh
. "$ROOT/tests/verdict.sh"

# usnic_final_sum, run_netns_logdir, manyreq_passed.
SUITE_DIR=$ROOT/tests/suite
# shellcheck source=tests/suite/netns_lib.sh
. "$SUITE_DIR/netns_lib.sh"

# Judges one case: the job's exit status $2 and result line in log $3, then counter $4 in logs $5...
judge() {
    local name=$1 rc=$2 log=$3 key=$4 n
    shift 4
    n=$(usnic_final_sum "$key" "$@")
    if [ "$rc" -ne 0 ]; then
        bad "$name: exit $rc (log: $log)"
    elif ! manyreq_passed "$log"; then
        bad "$name: exit 0 but no PASS line from manyreq (log: $log)"
    elif [ -z "$n" ]; then
        bad "$name: no final statistics line with $key (log: $log)"
    elif [ "$n" -eq 0 ]; then
        bad "$name: passed, but $key=0: the sockets never filled, so the case tested nothing (log: $log)"
    else
        ok "$name: $(grep -ohE '[0-9]+ messages, [0-9.]+ MiB checked' "$log" | head -1), $key=$n"
    fi
}

[ "$(id -u)" -eq 0 ] || { bad "needs root (network namespaces, tc)"; finish; }
command -v tc >/dev/null || { bad "tc not found (apt-get install iproute2)"; finish; }
make -s -C tests/mpi >/dev/null 2>&1 || { bad "the MPI programs do not build (make -C tests/mpi)"; finish; }
PROG=$ROOT/tests/mpi/bin/manyreq

# 1. one host, lo of a private namespace
ns=usnicrs-fullsock-$$
trap 'ip netns del "$ns" 2>/dev/null' EXIT
log=$LOGDIR/lo.log
if ! ip netns add "$ns" 2>"$log"; then
    bad "lo: cannot create a network namespace (log: $log)"
# A burst below 64 KiB would make tbf drop every 65507-byte datagram instead of holding it.
elif ! { ip -n "$ns" link set lo up &&
    ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$RATE_LO" burst 256kb latency 100ms; } >>"$log" 2>&1; then
    bad "lo: cannot put a tbf qdisc on the namespace's lo (log: $log)"
else
    ip netns exec "$ns" timeout -k 5 "$JOB_LIMIT" mpirun -np 2 --bind-to none \
        --mca oob_tcp_if_include lo --mca pml ob1 --mca btl usnic,self --mca btl_usnic_if_include lo \
        -x FI_UDP_IFACE=lo "${STATS[@]}" "$PROG" -t $((JOB_LIMIT - 15)) >"$log" 2>&1
    rc=$?
    # What the qdisc dropped (shown, not judged: a drop is repaired like any loss).
    drops=$(ip netns exec "$ns" tc -s qdisc show dev lo | sed -nE 's/.*\(dropped ([0-9]+),.*/\1/p' | head -1)
    judge "lo, tbf $RATE_LO: sends on the socket (tbf dropped ${drops:-?})" "$rc" "$log" busy_sends "$log"
fi
ip netns del "$ns" 2>/dev/null

# 2 and 3. two netns hosts (tests/run-netns.sh brings the cluster up, rate-limits it and clears it)
hosts() {
    local name=$1 key=$2 out dir
    shift 2
    out=$LOGDIR/$name.out
    NETEM="rate $RATE_HOSTS" LAYOUTS="2:1" TIMEOUT="$JOB_LIMIT" MPI_ARGS="${STATS[*]} $*" \
        tests/run-netns.sh manyreq >"$out" 2>&1
    local rc=$?
    dir=$(run_netns_logdir "$out")
    if [ -z "$dir" ] || [ ! -d "$dir" ]; then
        bad "$name: tests/run-netns.sh named no log directory (exit $rc; output: $out)"
        return
    fi
    judge "$name" "$rc" "$out" "$key" "$dir"/*.log
}
hosts "two hosts, tbf $RATE_HOSTS: batched sends" busy_batches
hosts "two hosts, tbf $RATE_HOSTS, btl_usnic_gso 0: sends through the provider" busy_sends \
    --mca btl_usnic_gso 0 --mca btl_usnic_gro 0

# 4. sends refused for good: one host, lo of a private namespace, nftables dropping on output
# refused NAME LOG ALSO [mpirun args]: ALSO, when not empty, is a counter that must be above 0 too
# (that the path the case names was taken: gso_datagrams for batches).
refused() {
    local name=$1 log=$LOGDIR/$2.log also=$3 rc n
    shift 3
    ns=usnicrs-refused-$$
    if ! ip netns add "$ns" 2>"$log"; then
        bad "$name: cannot create a network namespace (log: $log)"
    elif ! { ip -n "$ns" link set lo up &&
        ip netns exec "$ns" nft -f - <<'EOF'
table inet usnicrs {
    chain out {
        type filter hook output priority 0;
        meta l4proto udp numgen random mod 100 < 2 drop
    }
}
EOF
    } >>"$log" 2>&1; then
        bad "$name: cannot add the nftables rule in the namespace (log: $log)"
    else
        ip netns exec "$ns" timeout -k 5 "$JOB_LIMIT" mpirun -np 2 --bind-to none \
            --mca oob_tcp_if_include lo --mca pml ob1 --mca btl usnic,self \
            --mca btl_usnic_if_include lo -x FI_UDP_IFACE=lo --mca btl_usnic_stats 3600 "$@" \
            "$PROG" -t $((JOB_LIMIT - 15)) >"$log" 2>&1
        rc=$?
        n=$([ -n "$also" ] && usnic_final_sum "$also" "$log")
        if [ -n "$also" ] && [ "${n:-0}" -eq 0 ]; then
            bad "$name: $also=${n:-absent}: the path the case names was not taken (log: $log)"
        else
            judge "$name" "$rc" "$log" lost_sends "$log"
        fi
    fi
    ip netns del "$ns" 2>/dev/null
}
if command -v nft >/dev/null; then
    refused "lo, 2 % of sends refused (EPERM): lone datagrams" refused-lone ""
    refused "lo, 2 % of sends refused (EPERM), btl_usnic_mtu 1472: batches" refused-batched \
        gso_datagrams --mca btl_usnic_mtu 1472
else
    bad "nft not found (apt-get install nftables): the refused-send cases cannot run"
fi
finish
