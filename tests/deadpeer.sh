#!/usr/bin/env bash
# A dead peer (issue 4, point 4): the survivors must end the job with an error that names the lost peer,
# within the peer-failure timeout plus slack, and never hang.
#   1. one host: SIGKILL rank 1 of a 2-rank job in the middle of its large transfers;
#   2. two netns hosts: cut h2 off (every UDP datagram in and out of it dropped) in the middle of the job,
#      so only the BTL can notice: Open MPI's own TCP control channel stays up. A cut is symmetric, so
#      whichever side has data waiting notices first; its message must name the other side's host.
# Root only for case 2 (network namespaces). Ends with `N passed, N failed`; exit non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NC=${NC:-$("$ROOT/scripts/find-netns-cluster.sh")}
PEER_TIMEOUT_MS=${PEER_TIMEOUT_MS:-4000}
SLACK=${SLACK:-20}
JOB_LIMIT=180
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LOGDIR=$(mktemp -d /tmp/usnic-deadpeer.XXXXXX)
# ok, bad, finish.
# shellcheck source=tests/verdict.sh
. "$ROOT/tests/verdict.sh"

make -s -C tests/mpi >/dev/null 2>&1 || { bad "the MPI programs do not build (make -C tests/mpi)"; finish; }
PROG=$ROOT/tests/mpi/bin/pingpong
USNIC=(--mca pml ob1 --mca btl usnic,self --mca btl_usnic_peer_timeout "$PEER_TIMEOUT_MS")

# pid of the process of rank $1 running $PROG (mpirun's own command line names the program too)
rank_pid() {
    local p
    for p in $(pgrep -f "$PROG"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
    done
}

# Waits for the job $1 (pid) that was hurt at epoch second $2; judges exit status, time and message.
judge() {
    local name=$1 job=$2 hurt=$3 log=$4 pattern=$5 rc took
    wait "$job"
    rc=$?
    took=$(($(date +%s) - hurt))
    if [ "$rc" -eq 0 ]; then
        bad "$name: the job exited 0 after its peer was lost (log: $log)"
    elif [ "$rc" -eq 124 ] || [ "$took" -ge "$JOB_LIMIT" ]; then
        bad "$name: the job hung until the test's ${JOB_LIMIT}s timeout (log: $log)"
    elif [ "$took" -gt $((PEER_TIMEOUT_MS / 1000 + SLACK)) ]; then
        bad "$name: the job ended ${took}s after the failure, over ${PEER_TIMEOUT_MS} ms + ${SLACK}s (log: $log)"
    elif ! grep -Eq "$pattern" "$log"; then
        bad "$name: exit $rc after ${took}s, but no message names the lost peer (want /$pattern/; log: $log)"
    else
        ok "$name: exit $rc ${took}s after the failure: $(grep -Em1 "$pattern" "$log" | cut -c1-160)"
    fi
}

# 1. one host, SIGKILL in the middle of large transfers: what a user sees end to end. mpirun itself
# ends the job the moment a rank dies (its "exited on signal 9" line names rank 1), before the BTL
# could; the BTL's own detection is case 2's. (With --enable-recovery, which leaves the survivor
# to the BTL, a survivor blocked receiving from the dead rank with nothing of its own in flight to
# it waits: the BTL declares a peer failed only when data for it goes unacknowledged.)
log=$LOGDIR/kill.log
timeout -k 5 "$JOB_LIMIT" mpirun -np 2 --bind-to none "${USNIC[@]}" "$PROG" -t 170 -s 20 >"$log" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 300); do
    victim=$(rank_pid 1)
    [ -n "$victim" ] && break
    sleep 0.1
done
if [ -z "$victim" ]; then
    bad "kill: rank 1 never started (log: $log)"
    wait "$job"
else
    sleep 3
    kill -9 "$victim"
    judge "kill: SIGKILL of rank 1 mid-transfer, one host" "$job" "$(date +%s)" "$log" \
        'rank 1|\[\[[0-9]+,[0-9]+\],1\]'
fi

# 2. two netns hosts, h2 cut off
if [ "$(id -u)" -ne 0 ]; then
    bad "cut: needs root for network namespaces (run as root)"
    finish
fi
[ -x "$NC" ] || { bad "cut: $NC not found"; finish; }
exec 9>/run/lock/usnic-rs-netns.lock
flock -w 1800 9 || { bad "cut: the netns cluster lock stayed taken for 30 minutes"; finish; }
created=0
if [ "$(cat /run/netns-cluster/hosts 2>/dev/null | wc -l)" -lt 2 ]; then
    created=1
    "$NC" up 2 >"$LOGDIR/cluster-up.log" 2>&1 || { bad "cut: netns-cluster.sh up 2 failed ($LOGDIR/cluster-up.log)"; finish; }
fi
net=$(awk '$2 == "h1" {print $1}' /etc/hosts | head -1 | sed 's/\.[0-9]*$//')
[ -n "$net" ] || { bad "cut: cannot find the cluster's addresses in /etc/hosts"; finish; }
# Leaves the cluster as found: our rule removed, and taken down if we brought it up.
uncut() {
    "$NC" exec h2 nft delete table inet usnic_cut >/dev/null 2>&1
    if [ "$created" = 1 ]; then "$NC" down >/dev/null 2>&1; created=0; fi
}
trap uncut EXIT
log=$LOGDIR/cut.log
"$NC" exec h1 timeout -k 5 "$JOB_LIMIT" mpirun -np 2 --host h1:1,h2:1 --bind-to none \
    --mca plm_rsh_agent "$NC rsh-agent" --mca oob_tcp_if_include "$net.0/24" \
    --mca btl_usnic_if_include "$net.0/24" "${USNIC[@]}" "$PROG" -t 170 -s 20 >"$log" 2>&1 &
job=$!
for _ in $(seq 1 300); do
    [ -n "$(rank_pid 1)" ] && break
    sleep 0.1
done
sleep 3
"$NC" exec h2 nft -f - <<'EOF'
table inet usnic_cut {
    chain in { type filter hook input priority -10; policy accept; meta l4proto udp drop; }
    chain out { type filter hook output priority -10; policy accept; meta l4proto udp drop; }
}
EOF
judge "cut: h2 cut off (all UDP dropped) mid-transfer, two hosts" "$job" "$(date +%s)" "$log" \
    '[Pp]eer.*host:? +h[12]'
uncut
finish
