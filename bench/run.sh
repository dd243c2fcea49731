#!/usr/bin/env bash
# The benchmark command: measures this BTL (ob1 + btl usnic) and its peers in ONE run on this machine,
# then prints ratio tables (medians over the repetitions) and draws latency/bandwidth PNGs.
#
#   bench/run.sh                   full run on this host (5 repetitions, 0 B .. 4 MiB; ~10 min on 2 cores)
#   bench/run.sh --quick           smoke run (1 repetition, a few sizes; ~2 min)
#   bench/run.sh --netns           MPI configurations across two netns-cluster.sh hosts (root only)
#   bench/run.sh --loss 1,5        also measure bandwidth with 1 % and 5 % loss injected, as a fraction of clean
#   bench/run.sh --help            every option
#
# Peers: btl tcp, cm + mtl ofi "udp;ofi_rxd" (libfabric's reliable datagrams over the same UDP), btl vader
# (on-node ceiling), the raw datagram floor fi_pingpong -p udp -e dgram (latency), the raw libfabric
# datagram streaming test `cargo bench --bench raw_datagram` (bandwidth),
# and NetPIPE (NPopenmpi). The usnic row is always reported: measured, or "not available" with the reason.
set -euo pipefail

# ---- The plugin's names this script uses (overridable, e.g. to measure an older plugin) ----
# MCA parameter of btl usnic that caps its data-channel datagram size. Passed only with --dgram-size N, which
# then also sets the raw floor's size; without it the BTL follows its interface-MTU rule and the raw streaming
# test (same fabric code) uses the same default size, which the summary prints.
USNIC_DGRAM_PARAM=${USNIC_DGRAM_PARAM:-btl_usnic_mtu}
# MCA parameter of btl usnic's fault injection: drop this percentage of outgoing datagrams (one-host --loss).
# Empty = one-host loss runs of usnic are reported as not available for that reason (a plugin without one).
USNIC_LOSS_PARAM=${USNIC_LOSS_PARAM:-btl_usnic_fault_send_drop}
# Extra MCA arguments for the usnic configuration (e.g. "--mca btl_usnic_if_include lo").
USNIC_EXTRA_MCA=${USNIC_EXTRA_MCA:-}
# ---------------------------------------------------------------------------------------------------------

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
NETNS_CLUSTER=${NETNS_CLUSTER:-$("$ROOT/scripts/find-netns-cluster.sh")}
PY=/usr/bin/python3

usage() {
    cat <<EOF
usage: bench/run.sh [options]
  --quick            1 repetition, few sizes, short timed loops, NetPIPE up to 64 KiB (smoke run)
  --reps N           repetitions per measurement (default 5; medians are taken over them)
  --netns            run the MPI configurations across two netns-cluster.sh hosts h1, h2 (root only)
  --reuse-cluster    with --netns: use an already running cluster instead of refusing to touch it
  --mtu N            with --netns: set the MTU of every veth and the bridge to N (e.g. 9000, jumbo frames);
                     the BTL and the raw streaming test then use N - 28 byte datagrams (default: 1500)
  --loss LIST        comma list of loss percentages (e.g. 1,5): bandwidth under loss vs the clean run
                     (--netns: netem on h2's link for every MPI configuration; one host: usnic only,
                     through its fault-injection MCA parameter USNIC_LOSS_PARAM)
  --configs LIST     subset of usnic,tcp,rxd,vader (default all; usnic is always reported)
  --subject CFG      configuration the targets are judged for (default usnic)
  --target-time S    seconds per message size for the adaptive timed loops (default 0.1; quick 0.03)
  --dgram-size N     datagram size for usnic (--mca $USNIC_DGRAM_PARAM N) and the raw floor
                     (default: the BTL's own rule; fi_pingpong uses the udp provider's max_msg_size)
  --no-netpipe       skip NetPIPE
  --no-boost         do not raise the benchmark's scheduling priority (setsid + autogroup nice -20 + nice -15)
  --out DIR          where summary.md and the PNGs go (default bench/results/<local|netns>[-quick])
Environment: USNIC_DGRAM_PARAM, USNIC_LOSS_PARAM, USNIC_EXTRA_MCA (see the top of this script),
  RAW_DGRAM_CMD (default "cargo bench --bench raw_datagram"; setting it enables the raw streaming test
  even without benches/raw_datagram.rs here), RAW_STREAM_SECTION (which device section of its output is
  the floor; default "BTL default device"), JOB_TIMEOUT (seconds per job, default 180).
EOF
}

die() { echo "bench/run.sh: error: $*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }

QUICK=0 REPS=5 NETNS=0 REUSE=0 LOSS="" CONFIGS="usnic,tcp,rxd,vader" SUBJECT=usnic TARGET_TIME=""
DGRAM_SIZE="" DGRAM_SET=0 NETPIPE=1 BOOST=1 OUT="" REPS_SET=0 LINK_MTU=""
ARGS=("$@")
while (($#)); do
    case $1 in
        --quick) QUICK=1 ;;
        --reps) REPS=${2:?--reps needs N}; REPS_SET=1; shift ;;
        --netns) NETNS=1 ;;
        --reuse-cluster) REUSE=1 ;;
        --mtu) LINK_MTU=${2:?--mtu needs N}; shift ;;
        --loss) LOSS=${2:?--loss needs a list like 1,5}; shift ;;
        --configs) CONFIGS=${2:?--configs needs a list}; shift ;;
        --subject) SUBJECT=${2:?--subject needs a configuration}; shift ;;
        --target-time) TARGET_TIME=${2:?}; shift ;;
        --dgram-size) DGRAM_SIZE=${2:?}; DGRAM_SET=1; shift ;;
        --no-netpipe) NETPIPE=0 ;;
        --no-boost) BOOST=0 ;;
        --out) OUT=${2:?}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps wants a positive integer, got '$REPS'"
if [ -n "$LINK_MTU" ]; then
    ((NETNS)) || die "--mtu applies to the netns links only (add --netns)"
    [[ $LINK_MTU =~ ^[0-9]+$ ]] && ((LINK_MTU >= 576 && LINK_MTU <= 65535)) ||
        die "--mtu wants a number of bytes between 576 and 65535, got '$LINK_MTU'"
fi
((QUICK && !REPS_SET)) && REPS=1
if [ -n "$LOSS" ]; then
    [[ $LOSS =~ ^[0-9]+(\.[0-9]+)?(,[0-9]+(\.[0-9]+)?)*$ ]] || die "--loss wants percentages like 1,5, got '$LOSS'"
    # As summarize.py names the scenarios (loss%g): 1.0 is loss1, not loss1.0.
    read -ra loss_list <<<"${LOSS//,/ }"
    LOSS=$(LC_ALL=C printf '%g,' "${loss_list[@]}") LOSS=${LOSS%,}
    [ "$(tr , '\n' <<<"$LOSS" | sort -u | wc -l)" -eq "${#loss_list[@]}" ] || die "--loss names a percentage twice: '$LOSS'"
fi
for c in ${CONFIGS//,/ }; do
    case $c in usnic|tcp|rxd|vader) ;; *) die "unknown configuration '$c' (known: usnic,tcp,rxd,vader)" ;; esac
done
case ",$CONFIGS," in *,usnic,*) ;; *) CONFIGS="usnic,$CONFIGS" ;; esac  # the usnic row is never omitted
case ",$CONFIGS," in *",$SUBJECT,"*) ;; *) die "--subject $SUBJECT is not among --configs $CONFIGS" ;; esac

if ((NETNS)) && [ "$(id -u)" -ne 0 ]; then
    die "--netns needs root: netns-cluster.sh creates network namespaces, nftables rules and /etc/hosts entries"
fi

# Raise priority once, in a new session (kernel autogroups make plain nice useless against other sessions).
if ((BOOST)) && [ -z "${BENCH_BOOSTED:-}" ]; then
    if [ "$(id -u)" -eq 0 ] && [ -w /proc/self/autogroup ] && command -v setsid >/dev/null; then
        BENCH_BOOSTED=1 exec setsid -w "$0" "${ARGS[@]}"
    fi
    say "note: not root (or no autogroup support): running without the priority boost"
    BOOST=0
fi
if ((BOOST)); then
    echo -20 > /proc/$$/autogroup || die "could not set the autogroup nice value"
    NICE=(nice -n -15)
    BOOST_DESC="setsid + /proc/<pid>/autogroup nice -20 + nice -n -15 (benchmark processes only)"
else
    NICE=()
    BOOST_DESC="none (--no-boost)"
fi

# ---- dependencies ----
need_pkgs=()
for p in netpipe-openmpi python3-matplotlib libfabric-bin openmpi-bin libopenmpi-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
    say "installing missing Debian packages: ${need_pkgs[*]}"
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
make -s -C "$BENCH" >/dev/null || die "building the benchmark programs failed (make -C bench)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB_TIMEOUT=${JOB_TIMEOUT:-180}  # the slowest clean job here (rxd bibw to 4 MiB) takes ~35 s

# ---- run layout ----
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LABEL=$( ((NETNS)) && echo netns || echo local )
[ -n "$LINK_MTU" ] && LABEL+=-mtu$LINK_MTU
((QUICK)) && LABEL+=-quick
OUT=${OUT:-$BENCH/results/$LABEL}
RAW=$BENCH/results/raw/$STAMP-$LABEL
mkdir -p "$RAW" "$OUT"
JOBS=$RAW/jobs.tsv
printf 'scenario\tconfig\tbench\trep\tstatus\trc\twall_s\tothers_cores\tfile\tnote\n' > "$JOBS"

if ((QUICK)); then
    TARGET_TIME=${TARGET_TIME:-0.03}
    SIZES_LAT=(-s 0,8,64,1024,65536,1048576)
    SIZES_BW=(-s 8,65536,1048576)
    SIZES_MR=(-s 8,1024)
    SIZES_LOSS=(-s 65536,1048576)
    SIZES_XCH=(-s 8,16384,65536)
    SIZES_HALO=(-s 8,65536,1048576)
    NP_MAX=65536 FPP_ITERS=2000 NP_ARGS=(-n 200)
else
    TARGET_TIME=${TARGET_TIME:-0.1}
    SIZES_LAT=(-m 0:4194304)
    SIZES_BW=(-m 1:4194304)
    SIZES_MR=(-m 1:65536)
    SIZES_LOSS=(-s 65536,262144,1048576)
    SIZES_XCH=(-s 8,512,2048,8192,16384,32768,65536,262144,1048576,4194304)
    SIZES_HALO=(-s 0,8,8192,65536,262144,1048576,4194304)
    NP_MAX=4194304 FPP_ITERS=10000 NP_ARGS=()
fi
COMMON_ARGS=(-t "$TARGET_TIME" -i 3)
# latency, bandwidth both ways and message rate, then the two that wait for every send to complete
# (an MPI_Send loop and MPI_Sendrecv: the others never wait for a send's acknowledgement), and a
# 4-rank halo exchange, where each rank sends to two peers at once (the others have one peer per rank)
CLEAN_BENCHES="latency bw bibw mr sendloop sendrecv halo"

# ---- where the processes run ----
NC_NET=${NC_NET:-10.77.0}
CLUSTER_UP_BY_US=0 NETEM_ON=0
cleanup() {
    # A loss left on h2 would impair whoever uses the cluster next (a failed `down` keeps it up).
    if ((NETEM_ON)); then
        "$NETNS_CLUSTER" netem h2 clear >/dev/null 2>&1 || echo "warning: netns-cluster.sh netem h2 clear failed" >&2
    fi
    if ((CLUSTER_UP_BY_US)); then
        "$NETNS_CLUSTER" down >/dev/null 2>&1 || echo "warning: netns-cluster.sh down failed" >&2
    fi
}
trap cleanup EXIT
if ((NETNS)); then
    [ -x "$NETNS_CLUSTER" ] || die "--netns: $NETNS_CLUSTER not found (set NETNS_CLUSTER)"
    if ip netns list 2>/dev/null | grep -qE '^(h[0-9]+|ncbr)( |$)'; then
        ((REUSE)) || die "--netns: a netns cluster is already up (another user's?); pass --reuse-cluster to use it, or bring it down first"
        [ -z "$LOSS" ] || die "--netns --loss with --reuse-cluster: the loss would impair the other user's traffic on h2; bring the cluster down first"
    else
        "$NETNS_CLUSTER" up 2 >/dev/null || die "--netns: netns-cluster.sh up 2 failed"
        CLUSTER_UP_BY_US=1
    fi
    if [ -n "$LINK_MTU" ]; then
        ((CLUSTER_UP_BY_US)) || die "--mtu with --reuse-cluster would change another user's links; bring the cluster down first"
        ip -n ncbr link set br0 mtu "$LINK_MTU" &&
            for i in 1 2; do
                ip -n ncbr link set "p$i" mtu "$LINK_MTU" && ip -n "h$i" link set veth0 mtu "$LINK_MTU" || exit 1
            done || die "--mtu: cannot set MTU $LINK_MTU on the netns links"
    fi
    LAUNCH=(env NC_PIN=1 "$NETNS_CLUSTER" exec h1 mpirun --allow-run-as-root --host h1,h2 -np 2 --bind-to none
            --mca plm_rsh_agent "$NETNS_CLUSTER rsh-agent" --mca oob_tcp_if_include "$NC_NET.0/24"
            -x FI_UDP_IFACE=veth0 -x FI_TCP_IFACE=veth0)
    # The halo exchange: 4 ranks, 2 per host, free to use both CPUs (NC_PIN would put two ranks on
    # one CPU per host), yielding when idle as MPI does by default on an oversubscribed node.
    LAUNCH_HALO=(env NC_PIN=0 "$NETNS_CLUSTER" exec h1 mpirun --allow-run-as-root --host h1:2,h2:2 -np 4 --bind-to none
                 --mca plm_rsh_agent "$NETNS_CLUSTER rsh-agent" --mca oob_tcp_if_include "$NC_NET.0/24"
                 --mca mpi_yield_when_idle 1 -x FI_UDP_IFACE=veth0 -x FI_TCP_IFACE=veth0)
    HALO_LAYOUT="4 ranks, 2 per netns host (h1, h2), mpirun --bind-to none, mpi_yield_when_idle 1 (4 ranks on 2 CPUs)"
    IFACE=veth0 TCP_IF="$NC_NET.0/24"
    BINDING="2 hosts (netns h1, h2 over veth + bridge, link MTU ${LINK_MTU:-1500}); NC_PIN=1 pins h1 to CPU 0 and h2 to CPU 1; mpirun --bind-to none keeps that mask"
else
    LAUNCH=(mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca oob_tcp_if_include lo
            -x FI_UDP_IFACE=lo -x FI_TCP_IFACE=lo)
    LAUNCH_HALO=(mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca oob_tcp_if_include lo
                 --mca mpi_yield_when_idle 1 -x FI_UDP_IFACE=lo -x FI_TCP_IFACE=lo)
    HALO_LAYOUT="4 ranks on 1 host, mpirun --oversubscribe --bind-to none, mpi_yield_when_idle 1 (4 ranks on 2 CPUs)"
    IFACE=lo TCP_IF=lo
    BINDING="1 host; mpirun --bind-to core --map-by core: rank 0 on CPU 0, rank 1 on CPU 1 (each program prints its ranks' CPU masks)"
fi

declare -A CFG_ARGS CFG_DESC CFG_SKIP
CFG_DESC[usnic]="ob1 + btl usnic,self (this project)"
CFG_DESC[tcp]="ob1 + btl tcp,self"
CFG_DESC[rxd]="cm + mtl ofi udp;ofi_rxd"
CFG_DESC[vader]="ob1 + btl vader,self (on-node ceiling)"
CFG_ARGS[usnic]="--mca pml ob1 --mca btl usnic,self $USNIC_EXTRA_MCA"
CFG_ARGS[tcp]="--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $TCP_IF"
# ^usnic: the plugin under test must not be opened (and fail) in the peer's job.
CFG_ARGS[rxd]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include udp;ofi_rxd --mca btl ^usnic"
CFG_ARGS[vader]="--mca pml ob1 --mca btl vader,self"
((NETNS)) && CFG_SKIP[vader]="not applicable across hosts (shared memory is on-node only)"
if ! ompi_info 2>/dev/null | grep -q 'MCA btl: usnic'; then
    CFG_SKIP[usnic]="plugin missing: ompi_info lists no 'MCA btl: usnic' (build and install it with ./install.sh)"
fi

# ---- raw floor parameters ----
PROV_MAX=$(FI_UDP_IFACE=$IFACE fi_info -p udp -t FI_EP_DGRAM -v 2>/dev/null | awk '/max_msg_size:/ && m == "" {m = $2} END {print m}')
PROV_MAX=${PROV_MAX:-1472}
DGRAM_SIZE=${DGRAM_SIZE:-$PROV_MAX}
[[ $DGRAM_SIZE =~ ^[0-9]+$ ]] || die "--dgram-size wants bytes"
if ((DGRAM_SET)); then
    [ -n "$USNIC_DGRAM_PARAM" ] || die "--dgram-size: USNIC_DGRAM_PARAM is empty"
    CFG_ARGS[usnic]+=" --mca $USNIC_DGRAM_PARAM $DGRAM_SIZE"
    DGRAM_DESC="$DGRAM_SIZE B for usnic (--mca $USNIC_DGRAM_PARAM $DGRAM_SIZE) and fi_pingpong"
else
    DGRAM_DESC="usnic: its own rule (interface MTU; raw streaming uses the same code and prints the size); fi_pingpong: $DGRAM_SIZE B (udp provider max_msg_size)"
fi
HAVE_RAW_STREAM=0
if [ -n "${RAW_DGRAM_CMD:-}" ] || [ -f "$ROOT/benches/raw_datagram.rs" ] || grep -qs 'name *= *"raw_datagram"' "$ROOT/Cargo.toml"; then
    HAVE_RAW_STREAM=1
fi
RAW_DGRAM_CMD=${RAW_DGRAM_CMD:-cargo bench --bench raw_datagram}
# The raw test reports two devices: the BTL's default one and loopback. The floor is the one usnic runs on:
# on one host the launcher's FI_UDP_IFACE=lo puts usnic on lo (btl_usnic_verbose shows "module lo ... data
# MTU 65507"); across namespaces it runs from h1 to h2 (bench/raw-across-hosts.sh) on veth0, as usnic does.
if ((NETNS)); then RAW_STREAM_SECTION=${RAW_STREAM_SECTION:-across hosts}; else RAW_STREAM_SECTION=${RAW_STREAM_SECTION:-loopback}; fi

bench_args() {  # bench -> program + size arguments
    case $1 in
        latency) echo "bench_latency ${SIZES_LAT[*]}" ;;
        bw) echo "bench_bw ${SIZES_BW[*]}" ;;
        bibw) echo "bench_bibw ${SIZES_BW[*]}" ;;
        mr) echo "bench_mr ${SIZES_MR[*]}" ;;
        sendloop) echo "bench_sendloop ${SIZES_XCH[*]}" ;;
        sendrecv) echo "bench_sendrecv ${SIZES_XCH[*]}" ;;
        halo) echo "bench_halo ${SIZES_HALO[*]}" ;;
        bw_loss) echo "bench_bw ${SIZES_LOSS[*]}" ;;
    esac
}

# ---- the meta file: machine, date, software, settings ----
{
    echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "host: $(hostname)"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "kernel: $(uname -r)"
    echo "os: $(. /etc/os-release; echo "$PRETTY_NAME") (debian_version $(cat /etc/debian_version 2>/dev/null))"
    echo "open_mpi: $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')"
    echo "libfabric: $(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p')"
    echo "compiler: $(mpicc --version | head -1)"
    echo "load_at_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "mode: $LABEL"
    echo "reps: $REPS"
    echo "target_time_s: $TARGET_TIME"
    echo "binding: $BINDING"
    echo "priority: $BOOST_DESC"
    echo "dgram_size: $DGRAM_SIZE"
    echo "dgram_rule: $DGRAM_DESC"
    echo "raw_stream_section: $RAW_STREAM_SECTION"
    echo "provider_max_msg_size: $PROV_MAX"
    echo "usnic_dgram_param: $( ((DGRAM_SET)) && echo "$USNIC_DGRAM_PARAM=$DGRAM_SIZE" || echo "not passed (BTL default)")"
    echo "usnic_loss_param: ${USNIC_LOSS_PARAM:-<unset>}"
    plug=""
    for d in "$HOME/.openmpi/components" "$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/^path:pkglibdir://')" $(echo "${OMPI_MCA_mca_component_path:-}" | tr : " "); do
        [ -f "$d/mca_btl_usnic.so" ] && { plug="$d/mca_btl_usnic.so"; break; }
    done
    if [ -n "$plug" ]; then
        echo "usnic_plugin: $plug ($(stat -c '%s bytes, modified %y' "$plug" | cut -d. -f1), sha256 $(sha256sum "$plug" | cut -c1-12))"
    else
        echo "usnic_plugin: none found"
    fi
    echo "subject: $SUBJECT"
    echo "configs: $CONFIGS"
    echo "loss: ${LOSS:-none}"
    for c in ${CONFIGS//,/ }; do
        echo "config_$c: ${CFG_DESC[$c]} | ${CFG_ARGS[$c]}"
        [ -n "${CFG_SKIP[$c]:-}" ] && echo "skip_$c: ${CFG_SKIP[$c]}"
    done
    echo "launcher: ${NICE[*]} ${LAUNCH[*]}"
    echo "launcher_halo: ${NICE[*]} ${LAUNCH_HALO[*]}"
    echo "halo_layout: $HALO_LAYOUT"
    if ((NETNS)); then raw_how="bench/raw-across-hosts.sh (the $RAW_DGRAM_CMD executable, --serve in h2, --stream-to from h1)"; else raw_how=$RAW_DGRAM_CMD; fi
    echo "raw_stream: $( ((HAVE_RAW_STREAM)) && echo "$raw_how" || echo "not available: no raw_datagram bench in this tree (it comes from branch fabric)")"
    echo "invocation: bench/run.sh ${ARGS[*]}"
    for b in $CLEAN_BENCHES; do echo "cmd_$b: bench/bin/$(bench_args "$b") ${COMMON_ARGS[*]}"; done
    [ -n "$LOSS" ] && echo "cmd_bw_loss: bench/bin/bench_bw ${SIZES_LOSS[*]} ${COMMON_ARGS[*]}"
    if ((NETNS)); then
        echo "cmd_floor: server: NC_PIN=1 netns-cluster.sh exec h2 env FI_UDP_IFACE=veth0 fi_pingpong -p udp -e dgram -I $FPP_ITERS -S <all|$DGRAM_SIZE> -B <port>; client: same in h1 with -P <port> $NC_NET.2"
    else
        echo "cmd_floor: server: FI_UDP_IFACE=lo taskset -c 0 fi_pingpong -p udp -e dgram -I $FPP_ITERS -S <all|$DGRAM_SIZE> -B <port>; client: FI_UDP_IFACE=lo taskset -c 1 fi_pingpong ... -P <port> 127.0.0.1"
    fi
    echo "cmd_netpipe: NPopenmpi -p 0 ${NP_ARGS[*]} -u $NP_MAX -o <file>"
} > "$RAW/meta.txt"

say "== usnic-rs benchmarks: $LABEL, $REPS repetition(s), raw files in ${RAW#$ROOT/}"
sed 's/^/   /' "$RAW/meta.txt"
((HAVE_RAW_STREAM)) || say "   NOTE: raw datagram streaming test not available (no 'cargo bench --bench raw_datagram' in this tree; branch fabric adds it): bandwidth vs raw streaming is reported as n/a"

# ---- job runner: raw file with the command, exit code, wall time and the CPU other processes used ----
cpu_busy() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
HZ=$(getconf CLK_TCK)
# A job's own CPU time comes from a cgroup made for it when we may make one: `time` counts only
# the children it reaps, and a rank that orted starts on the second netns host never reaches it
# (that rank read as about one core of "other" load in every --netns run). Without a cgroup,
# `time`'s user + sys are used and the raw file says so.
CG_ROOT="" CG_PROCS="" CG_USAGE=""
if [ "$(id -u)" -eq 0 ]; then
    if [ -w /sys/fs/cgroup/cpuacct/tasks ]; then
        CG_ROOT=/sys/fs/cgroup/cpuacct CG_PROCS=tasks CG_USAGE=cpuacct.usage
    else
        for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
            if [ -f "$d/cgroup.procs" ] && [ -f "$d/cgroup.controllers" ]; then
                CG_ROOT=$d CG_PROCS=cgroup.procs CG_USAGE=cpu.stat
                break
            fi
        done
    fi
fi
cg_make() {  # prints the path of a fresh cgroup, or nothing
    [ -n "$CG_ROOT" ] || return 0
    local cg="$CG_ROOT/usnic-bench.$$.$1"
    mkdir "$cg" 2>/dev/null && [ -f "$cg/$CG_USAGE" ] && echo "$cg"
    return 0
}
cg_cpu_s() {  # CPU seconds used in cgroup $1 (cpuacct.usage: ns; cpu.stat: usage_usec)
    if [ "$CG_USAGE" = cpuacct.usage ]; then
        awk '{printf "%.3f", $1 / 1e9}' "$1/$CG_USAGE"
    else
        awk '$1 == "usage_usec" {printf "%.3f", $2 / 1e6}' "$1/$CG_USAGE"
    fi
}
in_cgroup() {  # in_cgroup CG command...: runs the command inside cgroup CG ("" = as it is)
    local cg=$1; shift
    if [ -z "$cg" ]; then "$@"; return; fi
    ( echo "$BASHPID" > "$cg/$CG_PROCS" && exec "$@" )
}
JOB_SEQ=0
run_job() {  # scenario config bench rep timeout -- command...
    local scen=$1 cfg=$2 bench=$3 rep=$4 tmo=$5; shift 5
    local f="$RAW/$scen/$cfg/$bench.$rep.txt"
    mkdir -p "${f%/*}"
    { echo "## command: $*"; echo "## start_utc: $(date -u '+%F %T')"; echo "## loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$f"
    local b0 t rc=0 b1 wall user sys others cg own own_from
    JOB_SEQ=$((JOB_SEQ + 1))
    cg=$(cg_make "$JOB_SEQ")
    b0=$(cpu_busy)
    local TIMEFORMAT='%3R %3U %3S'
    t=$( { time in_cgroup "$cg" timeout -k 10 "$tmo" "${NICE[@]}" "$@" >>"$f" 2>"$f.err"; } 2>&1 ) || rc=$?
    t=${t##*$'\n'}
    [ -z "$t" ] && t="0 0 0"
    b1=$(cpu_busy)
    read -r wall user sys <<<"$t"
    own=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }') own_from=time
    if [ -n "$cg" ]; then
        own=$(cg_cpu_s "$cg") own_from=cgroup
        rmdir "$cg" 2>/dev/null || true
    fi
    others=$(awk -v b="$((b1 - b0))" -v hz="$HZ" -v c="$own" -v w="$wall" \
        'BEGIN { o = (w > 0) ? (b / hz - c) / w : 0; if (o < 0) o = 0; printf "%.2f", o }')
    # rc comes from the group above when time fails; recover it from the command's own exit
    { echo "## rc: $rc"; echo "## wall_s: $wall user_s: $user sys_s: $sys job_cpu_s: $own ($own_from) others_cores: $others"; } >> "$f"
    local status=ok note=""
    if ((rc != 0)); then
        status=failed
        if ((rc == 124 || rc == 137)); then
            local last
            last=$(grep -v '^#' "$f" | awk 'NF >= 2 && $1 ~ /^[0-9]+$/ {s = $1} END {print s}')
            note="timeout after ${tmo}s (last size completed: ${last:-none})"
        fi
        # First error-looking line, without Open MPI's "[host:pid]" prefixes.
        [ -z "$note" ] && note=$(cat "$f.err" "$f" 2>/dev/null | sed -E 's/\[[^]]*:[0-9]+\] ?//g; s/^ +//' |
            grep -m1 -iE 'error|abort|failed|unable|signal|not implemented|cannot' | cut -c1-200 || true)
        [ -z "$note" ] && note=$(tail -n1 "$f.err" | cut -c1-160)
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scen" "$cfg" "$bench" "$rep" "$status" "$rc" "$wall" "$others" \
        "${f#$RAW/}" "${note//$'\t'/ }" >> "$JOBS"
    printf '   %-6s %-6s %-9s rep %-2s %-6s %6ss others=%s %s\n' "$scen" "$cfg" "$bench" "$rep" "$status" "$wall" "$others" "$note"
    return 0
}
record_skip() {  # scenario config bench reason
    printf '%s\t%s\t%s\t-\tunavailable\t-\t-\t-\t-\t%s\n' "$1" "$2" "$3" "$4" >> "$JOBS"
}


last_job_ok() { tail -n1 "$JOBS" | cut -f5 | grep -qx ok; }

# MPI jobs of one scenario: round-robin over repetitions x benchmarks x configurations, so slow drifts of
# the machine's load spread over every configuration. A (config, bench) pair that fails is retried up to
# two extra times; after two failures without a success it is given up (reported with the error).
declare -A OKS FAILS TIMEOUTS
# One repetition of a scenario, with those rules (repetitions above REPS only rerun what failed). The
# loss measurement calls it directly to put repetition r of each loss level beside the clean one's.
# before_first runs right before the first job this call starts, if any (netem loss, set only when used).
run_mpi_rep() {  # scenario "benches" timeout rep [before_first, given the scenario]
    local scen=$1 benches=$2 tmo=$3 rep=$4 before=${5:-} cfg b key prog
    for b in $benches; do
        for cfg in ${CONFIGS//,/ }; do
            key="$scen/$cfg/$b"
            if [ -n "${CFG_SKIP[$cfg]:-}" ]; then
                ((rep == 1)) && record_skip "$scen" "$cfg" "$b" "${CFG_SKIP[$cfg]}"
                continue
            fi
            if [ -n "${SCEN_SKIP[$cfg]:-}" ]; then
                ((rep == 1)) && record_skip "$scen" "$cfg" "$b" "${SCEN_SKIP[$cfg]}"
                continue
            fi
            ((${OKS[$key]:-0} >= REPS)) && continue
            ((${FAILS[$key]:-0} >= 2 && ${OKS[$key]:-0} == 0)) && continue
            ((${TIMEOUTS[$key]:-0} >= 1)) && continue  # a hang is not retried: it costs a full timeout
            ((rep > REPS && ${FAILS[$key]:-0} == 0)) && continue
            local -a cargs; read -ra cargs <<<"${CFG_ARGS[$cfg]} ${SCEN_MCA[$cfg]:-}"
            read -ra prog <<<"$(bench_args "$b")"
            local -a launch=("${LAUNCH[@]}")
            [ "$b" = halo ] && launch=("${LAUNCH_HALO[@]}")
            if [ -n "$before" ]; then "$before" "$scen"; before=""; fi
            run_job "$scen" "$cfg" "$b" "$rep" "$tmo" "${launch[@]}" "${cargs[@]}" \
                "$BENCH/bin/${prog[0]}" "${prog[@]:1}" "${COMMON_ARGS[@]}"
            if last_job_ok; then
                OKS[$key]=$((${OKS[$key]:-0} + 1))
            else
                FAILS[$key]=$((${FAILS[$key]:-0} + 1))
                tail -n1 "$JOBS" | cut -f10 | grep -q '^timeout' && TIMEOUTS[$key]=1
            fi
        done
    done
    return 0  # else a failed last job's status above would end the script (set -e)
}
run_mpi_scenario() {  # scenario "benches" timeout [hook run with the repetition before its jobs]
    local scen=$1 benches=$2 tmo=$3 hook=${4:-} rep
    for ((rep = 1; rep <= REPS + 2; rep++)); do
        if [ -n "$hook" ] && ((rep <= REPS)); then "$hook" "$rep"; fi
        run_mpi_rep "$scen" "$benches" "$tmo" "$rep"
    done
}

# Raw floor: fi_pingpong -p udp -e dgram, server on CPU 0 (or host h2), client on CPU 1 (or host h1).
fpp_once() {  # rep size-arg
    local rep=$1 sarg=$2 port=$((20000 + RANDOM % 20000)) srv_pid
    local -a srv cli
    if ((NETNS)); then
        srv=(env NC_PIN=1 "$NETNS_CLUSTER" exec h2 env FI_UDP_IFACE=veth0)
        cli=(env NC_PIN=1 "$NETNS_CLUSTER" exec h1 env FI_UDP_IFACE=veth0)
        addr=$NC_NET.2
    else
        srv=(env FI_UDP_IFACE=lo taskset -c 0)
        cli=(env FI_UDP_IFACE=lo taskset -c 1)
        addr=127.0.0.1
    fi
    local f="$RAW/clean/raw_floor/fi_pingpong_S$sarg.$rep.server.txt"
    mkdir -p "${f%/*}"
    timeout -k 5 120 "${NICE[@]}" "${srv[@]}" fi_pingpong -p udp -e dgram -I "$FPP_ITERS" -S "$sarg" -B "$port" >"$f" 2>&1 &
    srv_pid=$!
    # The client connects to the server's TCP port first: wait until it listens (a fixed 0.5 s
    # was too short under load once in five repetitions), at most 5 s.
    local i
    for ((i = 0; i < 50; i++)); do
        "${srv[@]}" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        sleep 0.1
    done
    run_job clean raw_floor "fi_pingpong_S$sarg" "$rep" 120 "${cli[@]}" fi_pingpong -p udp -e dgram -I "$FPP_ITERS" -S "$sarg" -P "$port" "$addr"
    # A client that failed leaves its server waiting for the rest of its 120 s.
    last_job_ok || kill "$srv_pid" 2>/dev/null
    wait "$srv_pid" 2>/dev/null || true
}
# fpp_once, and once more when that failed: a client that starts before its server listens is refused
# (one of five repetitions of a netns run), and a lost floor repetition leaves its targets no verdict.
fpp() {  # rep size-arg
    fpp_once "$1" "$2"
    last_job_ok || fpp_once "$1" "$2"
}
floor_rep() {  # rep
    fpp "$1" all
    if ((DGRAM_SIZE <= PROV_MAX)); then
        fpp "$1" "$DGRAM_SIZE"
    elif (($1 == 1)); then
        record_skip clean raw_floor "fi_pingpong_S$DGRAM_SIZE" "fi_pingpong cannot send $DGRAM_SIZE-byte datagrams (udp provider max_msg_size $PROV_MAX)"
    fi
}

# The raw streaming test is compiled once, outside the timed jobs (cargo bench --no-run); RAW_CMD is
# its command on one host, RAW_EXE its executable across netns hosts. Sets RAW_STREAM_OK.
RAW_STREAM_OK=0 RAW_EXE="" RAW_CMD=()
prepare_raw_stream() {
    if ! ((HAVE_RAW_STREAM)); then
        record_skip clean raw_stream raw_datagram "not available: no raw_datagram bench in this tree (branch fabric adds it)"
        return
    fi
    read -ra RAW_CMD <<<"$RAW_DGRAM_CMD"
    (cd "$ROOT" && "${RAW_CMD[@]}" --no-run >"$RAW/raw_stream_build.log" 2>&1) ||
        { record_skip clean raw_stream raw_datagram "build failed: $(grep -m1 -E '^error' "$RAW/raw_stream_build.log" | cut -c1-150)"; return; }
    if ((NETNS)); then
        # || true: under pipefail a log naming no executable would end the script here, unexplained.
        RAW_EXE=$(grep -oE 'target/[a-z]+/deps/raw_datagram-[0-9a-f]+' "$RAW/raw_stream_build.log" | head -1 || true)
        [ -n "$RAW_EXE" ] || { record_skip clean raw_stream raw_datagram "no executable named in $RAW/raw_stream_build.log"; return; }
    fi
    RAW_STREAM_OK=1
}

raw_stream_rep() {  # rep
    ((RAW_STREAM_OK)) || return 0
    if ((NETNS)); then
        # Across namespaces: one process per host, so the datagrams cross veth and bridge as the
        # BTL's do (two threads in h1 would take the kernel's cheaper local path).
        run_job clean raw_stream raw_datagram "$1" 300 "$BENCH/raw-across-hosts.sh" "$NETNS_CLUSTER" "$ROOT/$RAW_EXE"
        # The same with runs of datagrams sent in one system call, as the BTL does there.
        run_job clean raw_stream_batched raw_datagram "$1" 300 env USNIC_RAW_GSO=1 \
            "$BENCH/raw-across-hosts.sh" "$NETNS_CLUSTER" "$ROOT/$RAW_EXE"
        return
    fi
    local iters
    iters=$( ((QUICK)) && echo 2000 || echo 10000 )
    (cd "$ROOT" && run_job clean raw_stream raw_datagram "$1" 600 \
        env USNIC_BENCH_ITERS="$iters" RAW_DGRAM_SIZE="$DGRAM_SIZE" "${RAW_CMD[@]}")
}

# Each repetition of the floors runs right before the same repetition of the MPI jobs: this VM
# drifts between a fast and a slow state over minutes (usnic and tcp bandwidth moved together by
# 25 % between repetitions), and floors measured in one block before them made the ratios depend
# on which state each block fell in.
floors_rep() {  # rep
    say "   -- repetition $1: raw floors, then the MPI jobs"
    floor_rep "$1"
    raw_stream_rep "$1"
}

run_netpipe() {
    ((NETPIPE)) || return 0
    command -v NPopenmpi >/dev/null || { record_skip clean "-" netpipe "NPopenmpi not installed (Debian netpipe-openmpi)"; return; }
    local cfg
    for cfg in ${CONFIGS//,/ }; do
        if [ -n "${CFG_SKIP[$cfg]:-}" ]; then record_skip clean "$cfg" netpipe "${CFG_SKIP[$cfg]}"; continue; fi
        local -a cargs; read -ra cargs <<<"${CFG_ARGS[$cfg]}"
        local npout="$RAW/clean/$cfg/netpipe.np.out"
        mkdir -p "${npout%/*}"
        run_job clean "$cfg" netpipe 1 "$JOB_TIMEOUT" "${LAUNCH[@]}" "${cargs[@]}" NPopenmpi -p 0 "${NP_ARGS[@]}" -u "$NP_MAX" -o "$npout"
    done
}

declare -A SCEN_SKIP SCEN_MCA
prepare_raw_stream
say "== MPI micro-benchmarks, clean network (binding: $BINDING), each repetition after the same repetition of"
say "   the raw floors: fi_pingpong -p udp -e dgram ($FPP_ITERS iterations, -S all and -S $DGRAM_SIZE) and raw streaming"
run_mpi_scenario clean "$CLEAN_BENCHES" "$JOB_TIMEOUT" floors_rep
say "== NetPIPE (NPopenmpi -p 0 -u $NP_MAX), one run per configuration"
run_netpipe

# The loss scenarios' settings, read by run_mpi_rep: on one host only usnic can lose datagrams (its own
# fault injection), so the clean reference runs only for the configurations that have loss runs.
loss_settings() {  # loss percentage, or "" for the clean reference
    local c
    SCEN_SKIP=() SCEN_MCA=()
    ((NETNS)) && return 0  # netem drops for every configuration (netem_on)
    for c in tcp rxd vader; do SCEN_SKIP[$c]="no loss injection on one host for peers (loopback has no netem here; use --netns)"; done
    if [ -z "$USNIC_LOSS_PARAM" ]; then
        SCEN_SKIP[usnic]="not available: USNIC_LOSS_PARAM (the BTL's fault-injection MCA parameter) is not set in bench/run.sh"
    elif [ -n "$1" ]; then
        SCEN_MCA[usnic]="--mca $USNIC_LOSS_PARAM $1"
    fi
}
netem_on() {  # lossP: h2's link drops P % both ways until netem_off
    NETEM_ON=1
    "$NETNS_CLUSTER" netem h2 --both "loss ${1#loss}%" >/dev/null
}
netem_off() {
    ((NETEM_ON)) || return 0
    "$NETNS_CLUSTER" netem h2 clear >/dev/null
    NETEM_ON=0
}

# Interleaved by repetition: repetition r of the clean reference, then of every loss level, back to back.
# This VM runs each bulk job in one of two speed modes about 3x apart, in streaks of several jobs: run as
# blocks minutes apart, the 1 % loss block met the slow mode and the clean block the fast one (0.43x;
# 1.37x in a run two hours before), so the fractions are paired per repetition as the clean ratios are.
if [ -n "$LOSS" ]; then
    say "== bandwidth under loss, as a fraction of a clean reference at the same sizes; by repetition: clean, then each loss level"
    for p in ${LOSS//,/ }; do
        if ((NETNS)); then
            say "   $p %: netns-cluster.sh netem h2 --both \"loss $p%\", cleared after the level's jobs of each repetition"
            echo "netem_loss$p: netns-cluster.sh netem h2 --both \"loss $p%\"" >> "$RAW/meta.txt"
        else
            loss_settings "$p"
            say "   $p %: on one host usnic only, through its fault injection (${USNIC_LOSS_PARAM:-parameter name not set})"
            echo "inject_loss$p: ${SCEN_MCA[usnic]:-none}" >> "$RAW/meta.txt"
        fi
    done
    echo "loss_interleaved: yes" >> "$RAW/meta.txt"
    on=""
    ((NETNS)) && on=netem_on
    for ((rep = 1; rep <= REPS + 2; rep++)); do
        ((rep <= REPS)) && say "   -- repetition $rep: clean, then loss ${LOSS//,/ %, } %"
        loss_settings ""
        run_mpi_rep clean bw_loss "$JOB_TIMEOUT" "$rep"
        for p in ${LOSS//,/ }; do
            loss_settings "$p"
            run_mpi_rep "loss$p" bw_loss "$JOB_TIMEOUT" "$rep" "$on"
            netem_off
        done
    done
    SCEN_SKIP=() SCEN_MCA=()
fi

echo "load_at_end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW/meta.txt"
echo "finished_utc: $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >> "$RAW/meta.txt"
say "== summary (also in ${OUT#$ROOT/}/summary.md)"
"$PY" "$BENCH/summarize.py" "$RAW" "$OUT"
# The raw files beside the summary (bench/results/raw/ is not committed), so that it can be made again:
# tar -xzf raw.tar.gz -C bench/results/raw && bench/summarize.py bench/results/raw/<stamp> <dir>.
rm -f "$OUT"/raw-*.tar.gz
tar -czf "$OUT/raw-${RAW##*/}.tar.gz" -C "${RAW%/*}" "${RAW##*/}"
