#!/usr/bin/env bash
# A bridge with the same address on every host, as Docker's docker0 (172.17.0.1/16) or libvirt's
# virbr0 (192.168.122.1/24) has: each netns host gets an interface virbr0 at 192.168.122.1/24 (one
# end of a veth pair of its own, so it is up with a carrier and the udp provider lists it) beside
# its real link, and the job runs with every interface (no btl_usnic_if_include). The two virbr0
# modules share a subnet but must not be paired across hosts: a datagram to 192.168.122.1 never
# leaves the sending host. Before, they were, and the connectivity checker aborted the job about
# 10 s in ("could not get any UDP datagram to the peer"); with the check off, the peer timeout
# would have.
# manyreq (sends and receives in flight both ways, every byte checked) must pass, and the final
# statistics must show a virbr0 module on each rank (else the case tested nothing) that sent
# nothing. Then usnic is limited to virbr0 with tcp beside it: each rank must say the bridge was
# refused by the same-address rule, and tcp carries manyreq. Root only. Ends with `N passed, N failed`; exit non-zero on failure.
#
# Environment: JOB_LIMIT=120 (seconds per job).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
JOB_LIMIT=${JOB_LIMIT:-120}
BRIDGE_ADDR=192.168.122.1/24
export NC_NET=${NC_NET:-10.77.0}
NC=${NC:-$("$ROOT/scripts/find-netns-cluster.sh")}
# two_hosts_for_manyreq, manyreq_on_two_hosts, usnic_final_lines.
SUITE_DIR=$ROOT/tests/suite
# shellcheck source=tests/suite/netns_lib.sh
. "$SUITE_DIR/netns_lib.sh"
LOGDIR=$(mktemp -d /tmp/usnic-bridges.XXXXXX)
# ok, bad, finish.
# shellcheck source=tests/verdict.sh
. "$ROOT/tests/verdict.sh"

log=$LOGDIR/setup.log
two_hosts_for_manyreq "$log"
# shellcheck disable=SC2317  # run by the trap
cleanup() {
    for i in 1 2; do ip -n "h$i" link del virbr0 2>/dev/null; done
    [ "$NC_WAS_UP" = 1 ] || "$NC" down >/dev/null 2>&1
}
trap cleanup EXIT
for i in 1 2; do
    if ! { ip -n "h$i" link add virbr0 type veth peer name vnet0 &&
        ip -n "h$i" addr add "$BRIDGE_ADDR" dev virbr0 &&
        ip -n "h$i" link set virbr0 up && ip -n "h$i" link set vnet0 up; } >>"$log" 2>&1; then
        bad "cannot give h$i a virbr0 at $BRIDGE_ADDR (log: $log)"
        finish
    fi
done

out=$LOGDIR/manyreq.out
bridge_stats() { usnic_final_lines "$CASE_DIR"/*.log | grep " iface=virbr0 "; }
if ! manyreq_on_two_hosts "$out" USNIC_IF_INCLUDE="" MPI_ARGS="--mca btl_usnic_stats 3600"; then
    bad "manyreq beside a bridge of one address on both hosts: $WHY"
elif [ "$(bridge_stats | wc -l)" -ne 2 ]; then
    bad "manyreq passed, but not both ranks had a virbr0 module, so the case tested nothing (logs: $CASE_DIR)"
elif bridge_stats | grep -qv " sends=0 "; then
    bad "a virbr0 module sent datagrams: $(bridge_stats | grep -v ' sends=0 ' | head -1)"
else
    ok "manyreq beside virbr0 $BRIDGE_ADDR on both hosts: $(grep -ohE '[0-9]+ messages, [0-9.]+ MiB checked' "$out" | head -1); the virbr0 modules sent nothing"
fi

# With usnic limited to the bridges, the hosts share no usable interface: each rank says why
# (the same-address rule, not "no subnet in common"), and tcp carries the job.
out=$LOGDIR/manyreq-bridge-only.out
reason="Reason:          the peer's interface on the shared subnet has this host's own address ${BRIDGE_ADDR%/*} "
if ! manyreq_on_two_hosts "$out" BTL="usnic,tcp,self" USNIC_IF_INCLUDE="virbr0"; then
    bad "manyreq with usnic limited to virbr0 and tcp beside it: $WHY"
elif [ "$(cat "$CASE_DIR"/*.log | grep -cF "$reason")" -ne 2 ]; then
    bad "manyreq with usnic limited to virbr0 passed, but the ranks did not each give the same-address reason once (want 2 lines '$reason', got $(cat "$CASE_DIR"/*.log | grep -cF "$reason"); logs: $CASE_DIR)"
else
    ok "usnic limited to virbr0 $BRIDGE_ADDR on both hosts: each rank names the same-address rule, tcp carried manyreq"
fi
finish
