#!/usr/bin/env bash
# Instructions per message of the 8-byte MPI ping-pong, split by shared object (the plugin under test,
# libfabric, the PML, the rest of Open MPI, libc, other), with valgrind --tool=callgrind.
#
#   bench/ipm.sh                 config usnic (our mca_btl_usnic.so)
#   bench/ipm.sh --config tcp    any of usnic, tcp, rxd, vader (tcp validates the script without the plugin)
#   options: --iters N1,N2 (default 2000,12000)  --pin one|two  --out DIR (default bench/results/ipm)
#            --keep DIR (keep the callgrind profiles there, for callgrind_annotate)
#
# Why callgrind: perf stat has no hardware counters in this VM ("instructions:u <not supported>"), and
# callgrind counts instructions exactly, whatever else the machine runs. Two runs that differ only in the
# iteration count are subtracted, so MPI_Init, warm-up and teardown cancel out.
# --pin one (default) puts both ranks on CPU 0 with mpi_yield_when_idle, so a waiting rank gives the CPU
# to its peer after an empty poll instead of spinning: the count is the message path plus about one idle
# poll, and it repeats from run to run. --pin two binds one rank per core (busy polling counted too).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
CFG=usnic ITERS=2000,12000 PIN=one OUT=$BENCH/results/ipm KEEP=""
while (($#)); do
    case $1 in
        --config) CFG=${2:?}; shift ;;
        --iters) ITERS=${2:?}; shift ;;
        --pin) PIN=${2:?}; shift ;;
        --out) OUT=${2:?}; shift ;;
        --keep) KEEP=${2:?}; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "ipm.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "ipm.sh: error: $*" >&2; exit 1; }
[[ $ITERS =~ ^([0-9]+),([0-9]+)$ ]] && ((BASH_REMATCH[1] < BASH_REMATCH[2])) || die "--iters wants N1,N2 with N1 < N2"
N1=${BASH_REMATCH[1]} N2=${BASH_REMATCH[2]}
case $CFG in
    usnic) MCA=(--mca pml ob1 --mca btl usnic,self) ;;
    tcp) MCA=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo) ;;
    rxd) MCA=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "udp;ofi_rxd" --mca btl ^usnic) ;;
    vader) MCA=(--mca pml ob1 --mca btl vader,self) ;;
    *) die "unknown --config $CFG (usnic, tcp, rxd, vader)" ;;
esac
case $PIN in
    one) PIN_CMD=(taskset -c 0); BIND=(--bind-to none --mca mpi_yield_when_idle 1) ;;
    two) PIN_CMD=(); BIND=(--bind-to core --map-by core) ;;
    *) die "--pin wants one or two" ;;
esac
if ! command -v valgrind >/dev/null; then
    echo "installing the Debian package valgrind"
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends valgrind >/dev/null ||
        die "valgrind is not installed and could not be installed (Debian package valgrind)"
fi
[ -x /usr/bin/python3 ] || die "needs Debian's /usr/bin/python3"
if [ "$CFG" = usnic ] && ! ompi_info 2>/dev/null | grep -q 'MCA btl: usnic'; then
    die "config usnic: plugin missing (ompi_info lists no 'MCA btl: usnic'; run ./install.sh first)"
fi
make -s -C "$BENCH" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"; WORK=$(cd "$KEEP" && pwd)
else
    WORK=$(mktemp -d /tmp/ipm.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$OUT"
for n in "$N1" "$N2"; do
    cmd=("${PIN_CMD[@]}" mpirun --allow-run-as-root -np 2 "${BIND[@]}" --mca oob_tcp_if_include lo
         -x FI_UDP_IFACE=lo "${MCA[@]}"
         valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$n.%q{OMPI_COMM_WORLD_RANK}"
         "$BENCH/bin/bench_latency" -s 8 -n "$n" -w 200 -C)
    echo "+ ${cmd[*]}"
    timeout -k 10 900 "${cmd[@]}" > "$WORK/out.$n" 2> "$WORK/err.$n" || { tail -20 "$WORK/err.$n" >&2; die "run with $n iterations failed"; }
    grep -v '^#' "$WORK/out.$n" | sed 's/^/  size latency_us iters: /'
done
/usr/bin/python3 "$BENCH/callgrind_split.py" "$CFG" "$N1" "$N2" "$OUT/$CFG.md" \
    "$WORK/cg.$N1.0" "$WORK/cg.$N1.1" -- "$WORK/cg.$N2.0" "$WORK/cg.$N2.1"
{ echo; echo "Command (date $(date -u '+%F %T UTC'), pin $PIN): bench/ipm.sh --config $CFG --iters $N1,$N2 --pin $PIN"; } >> "$OUT/$CFG.md"
echo "written: ${OUT#$ROOT/}/$CFG.md"
