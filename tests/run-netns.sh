#!/usr/bin/env bash
# Runs the MPI test programs of tests/mpi/ with ranks spread over several
# "hosts" made on this machine by ../shared/tools/netns-cluster.sh (network +
# UTS namespaces on a bridge, subnet $NC_NET.0/24), optionally with loss,
# delay and reordering injected between them.  Must run as root.
#
# usage: tests/run-netns.sh [program ...]        (default: all programs)
# environment:
#   BTL=usnic,self      BTL list (--mca btl); BTL=tcp,self validates the programs and the setup
#   LAYOUTS="2:1 2:2 3:1"  runs as HOSTS:RANKS_PER_HOST (2:2 = 4 ranks, 2 on each of h1, h2);
#                       demo_pingpong runs only where that gives 2 ranks
#   NETEM=""            impairment for every host's egress, netns-cluster.sh syntax, e.g.
#                       "loss 5%", "delay 200us 100us reorder 25%", "loss 1% delay 100us 50us"
#   NETEM_BOTH=1        also impair ingress (netns-cluster.sh netem --both)
#   MPI_ARGS=""         extra mpirun arguments (e.g. --mca btl_usnic_* knobs)
#   TIMEOUT=300         seconds per run (the program's own watchdog fires 15 s earlier)
#   SCALE=1, OSC=pt2pt, SELFTEST=1   as in tests/run-mpi.sh
#   NC=path             netns-cluster.sh (default: ../shared/tools/netns-cluster.sh from the project root)
#   NC_NET=10.77.0      cluster /24 prefix (passed to netns-cluster.sh)
#   NC_PIN=1            pin host I to CPU (I-1) mod nproc (netns-cluster.sh)
#   USNIC_IF_INCLUDE=$NC_NET.0/24  btl_usnic_if_include; empty: every interface of the hosts
#   KEEP_CLUSTER=1      leave the cluster up at the end
#   NC_LOCK_WAIT=1800   seconds to wait for the cluster lock
#   SHARED_NETEM=1      allow NETEM while other processes run inside the hosts
# netns-cluster.sh has fixed host names, so its users share one cluster: an existing cluster is
# reused and left up, and it is taken down at the end only if no other process runs in it.
# If it cannot run (not root, no network namespaces, the cluster does not come
# up, an impairment cannot be installed) it says why, prints "0 passed, 1 failed"
# and exits 1: never a silent pass.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. tests/mpi/runlib.sh
# the failing-send shim is preloaded by tests/run-mpi.sh only
[ "${FAILTEST:-0}" = 1 ] && { echo "error: FAILTEST is a mode of tests/run-mpi.sh only" >&2; exit 2; }

BTL=${BTL:-usnic,self}
LAYOUTS=${LAYOUTS:-2:1 2:2 3:1}
NETEM=${NETEM:-}
TIMEOUT=${TIMEOUT:-300}
SCALE=${SCALE:-1}
MPI_ARGS=${MPI_ARGS:-}
export NC_NET=${NC_NET:-10.77.0}
NC=${NC:-$("$ROOT/scripts/find-netns-cluster.sh")}
PROGS=${*:-$ALL_PROGS}
LOGDIR=$BIN_DIR/logs/netns-$(date +%Y%m%d-%H%M%S)

cannot() {
    echo "run-netns: cannot run: $*"
    echo "0 passed, 1 failed"
    exit 1
}

for p in $PROGS; do
    [[ " $ALL_PROGS " == *" $p "* ]] || { echo "error: unknown program '$p' (known: $ALL_PROGS)" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || cannot "must be run as root (network namespaces, bridge, nftables); try: sudo $0"
[ -x "$NC" ] || cannot "netns-cluster.sh not found or not executable at $NC (set NC=...)"
command -v ip >/dev/null || cannot "ip (iproute2) not found: apt-get install iproute2"
command -v unshare >/dev/null || cannot "unshare (util-linux) not found"
command -v mpirun >/dev/null || cannot "mpirun not found (apt-get install openmpi-bin)"
ip netns list >/dev/null 2>&1 || cannot "'ip netns' does not work here (no network namespace support?)"
# a throwaway namespace proves the kernel lets us create one
probe=usnicrs-probe-$$
ip netns add "$probe" 2>/dev/null || cannot "cannot create a network namespace (ip netns add failed: no CONFIG_NET_NS or no privilege)"
ip netns del "$probe"
build_programs || cannot "the MPI programs do not build"
mkdir -p "$LOGDIR"

# largest host count needed
hmax=0
for l in $LAYOUTS; do
    [[ "$l" =~ ^([0-9]+):([0-9]+)$ ]] || cannot "bad LAYOUTS entry '$l' (want HOSTS:RANKS_PER_HOST)"
    [ "${BASH_REMATCH[1]}" -gt "$hmax" ] && hmax=${BASH_REMATCH[1]}
done

# Only one user of the cluster at a time: netns-cluster.sh has fixed host names (h1..hN).
# (tests/suite/netns.sh takes the same lock.) NC_LOCK_HELD=1: the caller holds it on the fd 9
# we inherit (netns_lib.sh's two_hosts_for_manyreq); opening the file again would wait for it.
# flock on that fd succeeds at once when it is so; a stray NC_LOCK_HELD without it does not.
if ! { [ "${NC_LOCK_HELD:-0}" = 1 ] && flock -n 9 2>/dev/null; }; then
    exec 9>/run/lock/usnic-rs-netns.lock
    if ! flock -n 9; then
        echo "run-netns: waiting for /run/lock/usnic-rs-netns.lock (another netns run holds it)"
        flock -w "${NC_LOCK_WAIT:-1800}" 9 || cannot "another run holds /run/lock/usnic-rs-netns.lock for more than ${NC_LOCK_WAIT:-1800}s"
    fi
fi

owned=1
if [ -s /run/netns-cluster/hosts ]; then
    have=$(wc -l </run/netns-cluster/hosts)
    # never shrink someone else's cluster: "up N" removes hosts above N
    [ "$have" -gt "$hmax" ] && hmax=$have
    echo "run-netns: note: a netns cluster is already up ($have host(s)); someone else may be using it."
    if [ "$have" -ge "$hmax" ]; then
        owned=0
        echo "run-netns: reusing it as is, and leaving it up at the end"
    fi
fi

impaired=""
# clear only the impairments we installed; nc-netem (delay/reorder) prints its counters when it stops
clear_netem() {
    local h
    for h in $impaired; do
        "$NC" netem "$h" clear >/dev/null 2>&1
        [ -f "/run/netns-cluster/$h.netem.log" ] && grep -h 'seen' "/run/netns-cluster/$h.netem.log" | sed "s/^/run-netns: $h /"
    done
    impaired=""
}
cleanup() {
    local h
    clear_netem >/dev/null
    if [ "$owned" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
        # our runs are over (strays were reaped): processes still in a host belong to someone else
        local busy=""
        for h in $(cat /run/netns-cluster/hosts 2>/dev/null); do
            [ -n "$(ip netns pids "$h" 2>/dev/null)" ] && busy+=" $h"
        done
        if [ -n "$busy" ]; then
            echo "run-netns: leaving the cluster up: other processes run in$busy"
        else
            "$NC" down >/dev/null 2>&1
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$owned" = 1 ]; then
    "$NC" up "$hmax" >"$LOGDIR/cluster-up.log" 2>&1 || { cat "$LOGDIR/cluster-up.log"; cannot "netns-cluster.sh up $hmax failed (log above)"; }
    cat "$LOGDIR/cluster-up.log"
fi
if [ -n "$NETEM" ]; then
    # we hold the lock, so cooperating users are idle; processes inside the hosts would still be hit
    busy=""
    for h in $(seq 1 "$hmax"); do [ -n "$(ip netns pids "h$h" 2>/dev/null)" ] && busy+=" h$h"; done
    [ -z "$busy" ] || [ "${SHARED_NETEM:-0}" = 1 ] \
        || cannot "NETEM would impair other processes running in$busy (SHARED_NETEM=1 to do it anyway)"
    both=()
    [ "${NETEM_BOTH:-0}" = 1 ] && both=(--both)
    for h in $(seq 1 "$hmax"); do
        # shellcheck disable=SC2086
        impaired+=" h$h"
        "$NC" netem "h$h" "${both[@]}" $NETEM 9>&- || cannot "netns-cluster.sh netem h$h '$NETEM' failed (delay/reorder need: $NC deps)"
    done
fi
"$NC" status

SELFARGS=()
[ "${SELFTEST:-0}" = 1 ] && SELFARGS=(-x MPITEST_CORRUPT=1)
IFARGS=(--mca oob_tcp_if_include "$NC_NET.0/24")
[[ ",$BTL," == *",tcp,"* ]] && IFARGS+=(--mca btl_tcp_if_include "$NC_NET.0/24")
USNIC_IF_INCLUDE=${USNIC_IF_INCLUDE-$NC_NET.0/24}
[[ ",$BTL," == *",usnic,"* && -n "$USNIC_IF_INCLUDE" ]] && IFARGS+=(--mca btl_usnic_if_include "$USNIC_IF_INCLUDE")
ncpu=$(nproc 2>/dev/null || echo 1)

# processes left in a host after a failed run (an orted whose mpirun was killed)
reap_strays() {
    [ "$owned" = 1 ] || return 0
    local h pids
    for h in $(seq 1 "$hmax"); do
        pids=$(ip netns pids "h$h" 2>/dev/null | tr '\n' ' ')
        [ -n "${pids// /}" ] || continue
        echo "               reaping leftover processes in h$h: $(ps -o pid=,comm= -p ${pids// /,} 2>/dev/null | tr '\n' ' ')"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null; sleep 1; kill -KILL $pids 2>/dev/null
    done
}

echo "run-netns: BTL=$BTL LAYOUTS='$LAYOUTS' NETEM='${NETEM:-none}' SCALE=$SCALE TIMEOUT=${TIMEOUT}s MPI_ARGS='$MPI_ARGS' logs: $LOGDIR"
start=$(date +%s)
for prog in $PROGS; do
    for l in $LAYOUTS; do
        nh=${l%%:*} ppn=${l##*:}
        np=$((nh * ppn))
        [ -n "$(prog_nps "$prog" "$np")" ] || continue
        hosts=$(for h in $(seq 1 "$nh"); do printf 'h%s:%s,' "$h" "$ppn"; done)
        extra=()
        [ "$np" -gt "$ncpu" ] && extra+=(--mca mpi_yield_when_idle 1)
        # shellcheck disable=SC2046,SC2086
        run_one "${nh}hosts" "$prog" "$np" "$LOGDIR/$prog.${nh}h.np$np.log" \
            "$NC" exec h1 timeout -k 10 "$TIMEOUT" mpirun --allow-run-as-root -np "$np" --host "${hosts%,}" \
            --bind-to none --mca plm_rsh_agent "$NC rsh-agent" "${IFARGS[@]}" \
            --mca pml ob1 --mca btl "$BTL" "${extra[@]}" $(prog_args "$prog") "${SELFARGS[@]}" $MPI_ARGS \
            "$BIN_DIR/$prog" -t $((TIMEOUT > 30 ? TIMEOUT - 15 : TIMEOUT)) -s "$SCALE"
        [[ "${TABLE[-1]}" == *" PASS "* ]] || reap_strays
    done
done
echo "run-netns: total $(( $(date +%s) - start )) s"
clear_netem
print_table
[ "$RUNS_FAILED" -eq 0 ]
