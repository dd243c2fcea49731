# Sourced by tests/suite/netns.sh and faults.sh (after lib.sh): the netns cluster of
# ../shared/tools/netns-cluster.sh, taken under the same lock as tests/run-netns.sh.
# shellcheck source=tests/stats_lib.sh
. "$SUITE_DIR/../stats_lib.sh"
NC=${NC:-$("$SUITE_DIR/../../scripts/find-netns-cluster.sh")}
export NC_NET=${NC_NET:-10.77.0}
NC_LOCK=/run/lock/usnic-rs-netns.lock
NC_OWNED=0
NC_IMPAIRED=""

nc_cannot() {
    echo "suite: CANNOT RUN: $*"
    echo "0 passed, 1 failed"
    exit 2
}

# nc_prepare HOSTS: checks, lock, cluster up (or reuse one left up with enough hosts)
nc_prepare() {
    local want=$1
    [ "$(id -u)" -eq 0 ] || nc_cannot "must be run as root (network namespaces, bridge, nftables); try: sudo $0"
    [ -x "$NC" ] || nc_cannot "netns-cluster.sh not found or not executable at $NC (set NC=...)"
    command -v ip >/dev/null || nc_cannot "ip (iproute2) not found: apt-get install iproute2"
    command -v unshare >/dev/null || nc_cannot "unshare (util-linux) not found"
    command -v flock >/dev/null || nc_cannot "flock (util-linux) not found"
    local probe=usnicrs-suite-probe-$$
    ip netns add "$probe" 2>/dev/null || nc_cannot "cannot create a network namespace (ip netns add failed)"
    ip netns del "$probe"
    # one user of h1..hN at a time (same lock file as tests/run-netns.sh)
    exec 9>"$NC_LOCK"
    echo "suite: waiting for $NC_LOCK (another netns run may hold it)" >&2
    flock -w "${NC_LOCK_WAIT:-1800}" 9 || nc_cannot "another run holds $NC_LOCK for more than ${NC_LOCK_WAIT:-1800}s"
    if [ -s /run/netns-cluster/hosts ] && [ "$(wc -l </run/netns-cluster/hosts)" -ge "$want" ]; then
        echo "suite: note: a netns cluster is already up ($(wc -l </run/netns-cluster/hosts) hosts); reusing it and leaving it up"
        NC_OWNED=0
    else
        NC_OWNED=1
    fi
    trap nc_cleanup EXIT
    trap 'exit 130' INT TERM
    if [ "$NC_OWNED" = 1 ] || [ "$(wc -l </run/netns-cluster/hosts 2>/dev/null || echo 0)" -lt "$want" ]; then
        "$NC" up "$want" || nc_cannot "netns-cluster.sh up $want failed"
    fi
    "$NC" status
}

nc_resize() { # grow/shrink a cluster we own
    [ "$NC_OWNED" = 1 ] || return 0
    "$NC" up "$1" >/dev/null || nc_cannot "netns-cluster.sh up $1 failed"
}

nc_cleanup() {
    local h
    for h in $NC_IMPAIRED; do "$NC" netem "$h" clear >/dev/null 2>&1; done
    if [ "$NC_OWNED" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then "$NC" down >/dev/null 2>&1; fi
    exec 9>&- 2>/dev/null || true
}

nc_release_lock() { exec 9>&-; }

# mpirun arguments for N ranks over H hosts (ranks dealt round-robin so every host has one)
nc_hosts_arg() {
    local np=$1 nh=$2 i s=""
    for i in $(seq 1 "$nh"); do
        s+="h$i:$(( np / nh + (i <= np % nh ? 1 : 0) )),"
    done
    echo "${s%,}"
}

nc_btl_args() {
    case $1 in
    tcp) echo "--mca btl_tcp_if_include $NC_NET.0/24" ;;
    usnic) echo "--mca btl_usnic_if_include $NC_NET.0/24 ${USNIC_STATS_MCA:-}" ;;
    *) echo "" ;;
    esac
}

# The log directory tests/run-netns.sh named in its output saved in file $1 (its "logs: DIR").
run_netns_logdir() {
    sed -nE 's/.* logs: (\S+)$/\1/p' "$1" | head -1
}

# Whether file $1 holds manyreq's PASS line (its own, or tests/run-netns.sh's table row).
manyreq_passed() {
    grep -q 'PASS manyreq\|manyreq *[0-9]* *PASS' "$1"
}

# two_hosts_for_manyreq LOG: the checks and set-up of a script that changes h1 and h2 and then
# runs manyreq_on_two_hosts (it needs ok/bad/finish from tests/verdict.sh): root, the cluster
# script, the MPI programs, and h1 and h2 up (their output in LOG). Sets NC_WAS_UP to 1 when a
# cluster was up before, which the caller's cleanup then leaves up. Ends the script on failure.
two_hosts_for_manyreq() {
    [ "$(id -u)" -eq 0 ] || { bad "needs root (network namespaces)"; finish; }
    [ -x "$NC" ] || { bad "netns-cluster.sh not found at $NC"; finish; }
    make -s -C tests/mpi >/dev/null 2>&1 || { bad "the MPI programs do not build (make -C tests/mpi)"; finish; }
    # Held until the script exits, across the set-up it does itself and the jobs of
    # tests/run-netns.sh, which inherits it (NC_LOCK_HELD).
    exec 9>"$NC_LOCK"
    flock -w "${NC_LOCK_WAIT:-1800}" 9 || { bad "another run held $NC_LOCK for more than ${NC_LOCK_WAIT:-1800}s"; finish; }
    export NC_LOCK_HELD=1
    NC_WAS_UP=0
    ip netns list | grep -qw h1 && NC_WAS_UP=1
    "$NC" up 2 >"$1" 2>&1 || { bad "the netns cluster does not come up (log: $1)"; finish; }
}

# manyreq_on_two_hosts OUT [VAR=VALUE...]: tests/run-netns.sh manyreq with one rank on each of
# h1 and h2 (left up), within $JOB_LIMIT seconds, its output in OUT and the given variables in its
# environment. Sets CASE_DIR to the job's log directory; returns 1 with WHY set when the job did
# not pass.
manyreq_on_two_hosts() {
    local out=$1 rc
    shift
    env LAYOUTS="2:1" TIMEOUT="$JOB_LIMIT" KEEP_CLUSTER=1 "$@" tests/run-netns.sh manyreq >"$out" 2>&1
    rc=$?
    CASE_DIR=$(run_netns_logdir "$out")
    WHY=""
    if [ -z "$CASE_DIR" ] || [ ! -d "$CASE_DIR" ]; then
        WHY="tests/run-netns.sh named no log directory (exit $rc; output: $out)"
    elif [ "$rc" -ne 0 ]; then
        WHY="exit $rc (output: $out, logs: $CASE_DIR)"
    elif ! manyreq_passed "$out"; then
        WHY="exit 0 but no PASS line from manyreq (output: $out)"
    fi
    [ -z "$WHY" ]
}

# Datagrams the cluster's emulated netem on host $1 took through its queue (the iptables NFQUEUE
# rules' packet counters; delays, jitter and reordering go that way). Read before it is cleared.
nc_queued_packets() {
    ip netns exec "$1" iptables-save -c 2>/dev/null | grep -- '-j NFQUEUE' |
        sed -nE 's/^\[([0-9]+):.*/\1/p' | awk '{s += $1} END {print s + 0}'
}

# Why a run that passed under a fault tested nothing (printed), or nothing: the fault must show in
# what the run measured. Arguments: the netem spec ("" for none), the BTL injector's MCA arguments
# ("" for none), the packets nc_queued_packets counted, then the usnic logs. A netem delay must have
# queued datagrams, a netem loss must have made usnic resend, and every injector fault with a
# percentage above 0 must have acted (its fault_* counter above 0): an MCA name Open MPI does not
# know is ignored without a word, and a netem that applied nothing would leave the run green.
fault_no_effect() {
    local netem=$1 injector=$2 queued=$3 k n key acting=0
    local -a args
    shift 3
    if [[ $netem == *delay* ]]; then
        [ "$queued" -gt 0 ] || { echo "the emulated netem queued no datagram"; return; }
    elif [[ $netem == *loss* ]]; then
        n=$(usnic_final_resends "$@" | awk '{s += $1 + $2} END {print s + 0}')
        [ "$n" -gt 0 ] || { echo "no datagram was resent under loss"; return; }
    fi
    read -ra args <<<"$injector"
    for ((k = 0; k + 1 < ${#args[@]}; k++)); do
        # A misspelt name is ignored by Open MPI without a word, so it is named here.
        if [[ ${args[$k]} == btl_usnic_fault_* ]] &&
            ! [[ ${args[$k]} =~ ^btl_usnic_fault_((send|recv)_(drop|dup|delay)|seed|delay_us|panic_after)$ ]]; then
            echo "${args[$k]} is no parameter of the injector"
            return
        fi
        [[ ${args[$k]} =~ ^btl_usnic_fault_(send|recv)_(drop|dup|delay)$ ]] || continue
        awk -v p="${args[$((k + 1))]}" 'BEGIN {exit !(p > 0)}' || continue
        key=fault_${BASH_REMATCH[1]}_${BASH_REMATCH[2]}
        key=${key/%_drop/_dropped}
        key=${key/%_dup/_duplicated}
        key=${key/%_delay/_delayed}
        n=$(usnic_final_sum "$key" "$@")
        [ "${n:-0}" -gt 0 ] || { echo "${args[$k]} ${args[$((k + 1))]} acted nowhere ($key ${n:-0})"; return; }
        acting=$((acting + 1))
    done
    if [ -n "$injector" ] && [ "$acting" -eq 0 ]; then
        echo "no injector fault with a percentage above 0 among '$injector'"
    fi
}
