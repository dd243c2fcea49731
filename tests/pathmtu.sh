#!/usr/bin/env bash
# A path MTU below the interface MTU: each netns host's route to the other is capped at MTU 1200
# while the interfaces stay at 1500, so the BTL's 1472-byte data datagrams still go (IP fragments
# each one), but the kernel refuses a batched send of them (sendmsg with UDP_SEGMENT: EMSGSIZE).
# Such a destination must get its datagrams one per system call from then on, with a warning
# naming it; before, every batch to it was lost and its resends too, until the peer was declared
# failed 20 s later. The connectivity check is off here: with it on (the default) its probes,
# sent with "don't fragment" as the original's, find the large datagram refused and abort the job
# about 10 s in, naming the path (tests/connectivity/netns.sh checks that for a narrower switch
# port), which would race a short job.
# manyreq (sends and receives in flight both ways, mixed sizes, every byte checked) must pass on
# two netns hosts, and the job's output must carry the warning (a case whose batches were never
# refused tested nothing, and fails). Root only. Ends with `N passed, N failed`; exit non-zero on
# failure.
#
# Environment: ROUTE_MTU=1200, JOB_LIMIT=180 (seconds per job).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
ROUTE_MTU=${ROUTE_MTU:-1200}
JOB_LIMIT=${JOB_LIMIT:-180}
export NC_NET=${NC_NET:-10.77.0}
NC=${NC:-$("$ROOT/scripts/find-netns-cluster.sh")}
# two_hosts_for_manyreq, manyreq_on_two_hosts.
SUITE_DIR=$ROOT/tests/suite
# shellcheck source=tests/suite/netns_lib.sh
. "$SUITE_DIR/netns_lib.sh"
LOGDIR=$(mktemp -d /tmp/usnic-pathmtu.XXXXXX)
WARNING='takes no run of 1472-byte datagrams'
# ok, bad, finish.
# shellcheck source=tests/verdict.sh
. "$ROOT/tests/verdict.sh"

# The cluster is brought up here (and its routes capped) before tests/run-netns.sh reuses it; it is
# taken down at the end unless it was up before.
log=$LOGDIR/setup.log
two_hosts_for_manyreq "$log"
# shellcheck disable=SC2317  # run by the trap
cleanup() {
    for i in 1 2; do ip -n "h$i" route del "$NC_NET.$((3 - i))/32" 2>/dev/null; done
    [ "$NC_WAS_UP" = 1 ] || "$NC" down >/dev/null 2>&1
}
trap cleanup EXIT
for i in 1 2; do
    peer=$NC_NET.$((3 - i))
    if ! ip -n "h$i" route replace "$peer/32" dev veth0 mtu "$ROUTE_MTU" >>"$log" 2>&1; then
        bad "cannot cap the route from h$i to $peer at MTU $ROUTE_MTU (log: $log)"
        finish
    fi
    # The interface stays at 1500: only the route is narrower.
    if ! ip -n "h$i" route get "$peer" | grep -qw "mtu $ROUTE_MTU"; then
        bad "h$i's route to $peer does not show mtu $ROUTE_MTU: $(ip -n "h$i" route get "$peer")"
        finish
    fi
done

out=$LOGDIR/manyreq.out
if ! manyreq_on_two_hosts "$out" \
    MPI_ARGS="--mca btl_usnic_stats 3600 --mca btl_usnic_connectivity_check 0"; then
    bad "manyreq across a route of MTU $ROUTE_MTU: $WHY"
elif ! grep -qh "$WARNING" "$CASE_DIR"/*.log; then
    bad "manyreq passed, but no '$WARNING' warning: no batch was refused, so the case tested nothing (logs: $CASE_DIR)"
else
    ok "manyreq across a route of MTU $ROUTE_MTU: $(grep -ohE '[0-9]+ messages, [0-9.]+ MiB checked' "$out" | head -1); warned $(cat "$CASE_DIR"/*.log | grep -c "$WARNING") time(s)"
fi
finish
