#!/usr/bin/env bash
# The connectivity checker the way an admin meets it: MPI jobs over `--mca btl usnic,self` across
# two netns-cluster.sh hosts (h1, h2; one rank each), with the freshly built plugin.
#   (a) healthy: the job passes and its whole output is the program's own line (and, at
#       btl_usnic_verbose 20, the checker did check the path);
#   (b) UDP from h1 dropped inside h2 (nftables): the job exits non-zero within
#       ack_timeout x retries (+ slack) with the exact "small bad, large bad" message, once:
#       both hosts' agents detect the failure, the one with the higher address (h2) waits
#       before reporting and the job is gone by then; the same without the help file next to
#       the plugin (the plugin renders the text itself);
#   (c) the bridge port of h2 (the "switch port") at MTU 1200 while both hosts keep 1500:
#       "small ok, large bad", once, from h1;
#   (c2) large datagrams from h2 dropped inside h1, with btl_usnic_peer_timeout 5000: only h2's
#       agent (the higher address, which waits before reporting) sees the break, and it must
#       still report "small ok, large bad" before the BTL's peer timeout ends the job naming a
#       dead peer (its wait is cut to end by 3/4 of the peer timeout after the check began);
#   (d) h2's own veth0 at MTU 1200: the BTL sends min(both MTUs), so the check passes; the job
#       passes, and its output is the program's line plus exactly one "MTU mismatch" warning
#       naming both hosts, addresses and datagram sizes (from h1: the lower address speaks);
#   (e) two ranks per host, both sending across: one agent per host checks the path once;
#   (f) btl_usnic_connectivity_check 0: no check at all (nothing logged even at verbosity 20);
#   (f2) btl_usnic_provider sockets, which carries the BTL's 65507-byte datagrams over TCP: no
#       check (a 65507-byte UDP probe never passes a 1500-byte path; every path was declared
#       broken and the job aborted), the job passes;
#   (g) btl_usnic_connectivity_map PREFIX: one file per process, named after host, pid, job and
#       rank, whose line says which local interface talks to which address of which peer.
# Root only; when it cannot run it says why and fails. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
NC=${NC:-$("$ROOT/scripts/find-netns-cluster.sh")}
export NC_NET=10.77.0
ACK_MS=100
RETRIES=10
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# This script names its own component directory; test.sh's staging variable (a deprecated name)
# would add a deprecation notice to every job's output.
unset OMPI_MCA_mca_component_path OMPI_MCA_mca_base_component_path
PASS=0
FAIL=0
WORK=$(mktemp -d /tmp/usnic-cc-netns.XXXXXX)

cannot() {
    echo "connectivity/netns: cannot run: $*"
    echo "0 passed, 1 failed"
    exit 1
}
ok() { echo "PASS $*"; PASS=$((PASS + 1)); }
ko() { echo "FAIL $*"; FAIL=$((FAIL + 1)); }

[ "$(id -u)" -eq 0 ] || cannot "must be run as root (network namespaces, nftables)"
[ -x "$NC" ] || cannot "netns-cluster.sh not found at $NC (set NC=...)"
command -v mpirun >/dev/null || cannot "mpirun not found (openmpi-bin)"
command -v mpicc >/dev/null || cannot "mpicc not found (libopenmpi-dev)"
command -v nft >/dev/null || cannot "nft not found (nftables)"
command -v python3 >/dev/null || cannot "python3 not found"

cargo build --release --quiet || cannot "cargo build --release failed"
mkdir -p "$WORK/components"
ln -sf "$ROOT/target/release/libusnic_rs.so" "$WORK/components/mca_btl_usnic.so"
ln -sf "$ROOT/help-mpi-btl-usnic-rs.txt" "$WORK/components/help-mpi-btl-usnic-rs.txt"
mpicc -O2 -o "$WORK/ring" tests/connectivity/ring.c || cannot "mpicc ring.c failed"
SYS=$(ompi_info --parsable --path pkglibdir | sed 's/^path:pkglibdir://')

# One user of the cluster at a time (the lock tests/run-netns.sh takes too).
exec 9>/run/lock/usnic-rs-netns.lock
flock -w "${LOCK_WAIT:-1800}" 9 || cannot "another user held /run/lock/usnic-rs-netns.lock for ${LOCK_WAIT:-1800} s (LOCK_WAIT=...)"
owned=0
if [ ! -s /run/netns-cluster/hosts ] || [ "$(wc -l </run/netns-cluster/hosts)" -lt 2 ]; then
    owned=1
    "$NC" up 2 >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; cannot "netns-cluster.sh up 2 failed"; }
fi
P2_MTU=$(ip -n ncbr -o link show p2 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
V2_MTU=$(ip -n h2 -o link show veth0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
[ -n "$P2_MTU" ] && [ -n "$V2_MTU" ] || cannot "cluster has no h2 (p2/veth0 not found)"
# h2 drops every UDP datagram from h1 (its own nftables table, so removing it touches
# nothing else)
block_udp_from_h1() {
    ip netns exec h2 nft -f - <<'NFT' || cannot "nft rule in h2 failed"
table inet usnicrs_cc {
    chain input {
        type filter hook input priority 0; policy accept;
        ip saddr 10.77.0.1 meta l4proto udp drop
    }
}
NFT
}
unblock_udp_from_h1() {
    ip netns exec h2 nft delete table inet usnicrs_cc
}
# Large UDP datagrams from h2 dropped inside h1: a break in one direction and size, which only
# h2's agent (the higher address) sees.
block_large_udp_from_h2() {
    ip netns exec h1 nft -f - <<'NFT' || cannot "nft rule in h1 failed"
table inet usnicrs_cc {
    chain input {
        type filter hook input priority 0; policy accept;
        ip saddr 10.77.0.2 udp length > 200 drop
    }
}
NFT
}
unblock_large_udp_from_h2() {
    ip netns exec h1 nft delete table inet usnicrs_cc
}
cleanup() {
    unblock_udp_from_h1 2>/dev/null
    unblock_large_udp_from_h2 2>/dev/null
    ip -n ncbr link set p2 mtu "$P2_MTU" 2>/dev/null
    ip -n h2 link set veth0 mtu "$V2_MTU" 2>/dev/null
    [ "$owned" = 1 ] && "$NC" down >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
"$NC" status

# run NAME [extra mpirun args...]: output in $WORK/NAME.log, status in RC, seconds in SECS,
# and in MSG_AT the seconds from the start to the first line of a checker message (or "none").
run() {
    local name=$1
    shift
    local t0=$EPOCHREALTIME line
    : >"$WORK/$name.log"
    MSG_AT=none
    "$NC" exec h1 timeout -k 5 90 mpirun -np "${NP:-2}" --host "${HOSTS:-h1,h2}" --bind-to none \
        --mca plm_rsh_agent "$NC rsh-agent" --mca oob_tcp_if_include "$NC_NET.0/24" \
        --mca mca_base_component_path "$SYS:${COMPONENTS:-$WORK/components}" \
        --mca pml ob1 --mca btl usnic,self --mca btl_usnic_if_include "$NC_NET.0/24" \
        --mca btl_usnic_connectivity_ack_timeout $ACK_MS \
        --mca btl_usnic_connectivity_error_num_retries $RETRIES \
        "$@" "$WORK/ring" 2>&1 | {
        while IFS= read -r line; do
            printf '%s\n' "$line" >>"$WORK/$name.log"
            if [ "$MSG_AT" = none ] && [[ "$line" == *"Local host:"* ]]; then
                MSG_AT=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
                echo "$MSG_AT" >"$WORK/$name.msg_at"
            fi
        done
    }
    RC=${PIPESTATUS[0]}
    SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
    MSG_AT=$(cat "$WORK/$name.msg_at" 2>/dev/null || echo none)
    echo "--- $name: rc=$RC ${SECS}s, first checker message at: $MSG_AT"
    sed 's/^/    | /' "$WORK/$name.log" | head -40
}

# blocks LOG TOPIC VALUE...: how many times the help topic, rendered with VALUEs for its %s/%d
# in order and framed as show_help frames it, appears verbatim (contiguous) in LOG.
blocks() {
    python3 - "$@" <<'PY'
import sys, re
log, topic, *vals = sys.argv[1:]
help_text = open("help-mpi-btl-usnic-rs.txt").read()
m = re.search(r"^\[" + re.escape(topic) + r"\]\n(.*?)^[#\[]", help_text, re.S | re.M)
if not m:
    sys.exit("topic %r missing from help-mpi-btl-usnic-rs.txt" % topic)
it = iter(vals)
body = re.sub(r"%[sd]", lambda _: next(it), m.group(1))
rule = "-" * 74
want = rule + "\n" + body + rule + "\n"
print(open(log).read().count(want))
PY
}
# expect_block LOG TOPIC LOCAL_HOST LOCAL_ADDR REMOTE_HOST REMOTE_ADDR LARGE: a connectivity topic
# naming that path appears at least once.
expect_block() {
    local n
    n=$(blocks "$1" "$2" "$3" veth0 "$4" "$5" "$6" 40 "$7") && [ "$n" -ge 1 ]
}
# The text of a help topic's first line (to count its appearances whatever the values).
first_line() { sed -n "/^\[$1\]\$/{n;p;q}" help-mpi-btl-usnic-rs.txt; }
# The lines of LOG that are neither the program's PASS line, nor a framed help block of TOPIC
# (any other framed block is reported whole), nor mpirun's count of repeated help messages.
other_lines() {
    python3 - "$@" <<'PY'
import sys, re
log, topic = sys.argv[1:3]
help_text = open("help-mpi-btl-usnic-rs.txt").read()
first = re.search(r"^\[" + re.escape(topic) + r"\]\n(.*)$", help_text, re.M).group(1)
rule = "-" * 74
out, block = [], None
for line in open(log).read().splitlines():
    if line == rule:
        if block is None:
            block = []
        else:
            if not block or block[0] != first:
                out.extend([rule] + block + [rule])
            block = None
        continue
    if block is not None:
        block.append(line)
        continue
    if re.match(r"^PASS ring np=\d+$", line):
        continue
    out.append(line)
if block is not None:
    out.extend([rule] + block)
print("\n".join(out))
PY
}

# (a) healthy
run healthy
if [ $RC -eq 0 ] && [ "$(cat "$WORK/healthy.log")" = "PASS ring np=2" ]; then
    ok "(a) healthy job passes, its output is exactly 'PASS ring np=2' (${SECS}s)"
else
    ko "(a) healthy job: rc=$RC or unexpected output (log above)"
fi
BASE=$SECS
run healthy-verbose --mca btl_usnic_verbose 20
if [ $RC -eq 0 ] && grep -q "usnic connectivity GOOD between h1 veth0 10.77.0.1 and h2 10.77.0.2 (sizes 40 and 1472" "$WORK/healthy-verbose.log" &&
    grep -q "usnic connectivity GOOD between h2 veth0 10.77.0.2 and h1 10.77.0.1 (sizes 40 and 1472" "$WORK/healthy-verbose.log"; then
    ok "(a) at verbosity 20 both agents report the path GOOD (so (a) really checked)"
else
    ko "(a) verbose: the GOOD lines are missing (rc=$RC)"
fi

# (b) UDP from h1 dropped inside h2
block_udp_from_h1
run udp-blocked
unblock_udp_from_h1
# The message within launch time (the healthy job's whole run) + ack_timeout x retries + 5 s;
# the job gone within 10 s more (mpirun's own teardown). The 5 s: on a loaded host mpirun
# forwards a process's stderr up to about 4 s late (measured with the code before this test's
# last change too: one host's text 1 to 2 s after the other's, same check timing).
msg_limit=$(awk -v b="$BASE" -v a=$ACK_MS -v r=$RETRIES 'BEGIN{printf "%.1f", b + a * r / 1000 + 5}')
end_limit=$(awk -v m="$msg_limit" 'BEGIN{printf "%.1f", m + 10}')
within() { [ "$1" != none ] && awk -v s="$1" -v l="$2" 'BEGIN{exit !(s <= l)}'; }
if [ $RC -ne 0 ] && within "$MSG_AT" "$msg_limit" && within "$SECS" "$end_limit"; then
    ok "(b) blocked UDP: message at ${MSG_AT}s <= ${msg_limit}s (healthy run ${BASE}s + ${ACK_MS}ms x $RETRIES + 5s), job ended rc=$RC at ${SECS}s <= ${end_limit}s"
else
    ko "(b) blocked UDP: rc=$RC, message at ${MSG_AT}s (limit ${msg_limit}s), end at ${SECS}s (limit ${end_limit}s)"
fi
if expect_block "$WORK/udp-blocked.log" "connectivity error: small bad, large bad" h1 10.77.0.1/24 h2 10.77.0.2 1472 ||
    expect_block "$WORK/udp-blocked.log" "connectivity error: small bad, large bad" h2 10.77.0.2/24 h1 10.77.0.1 1472; then
    ok "(b) blocked UDP: exact 'small bad, large bad' message naming both hosts and addresses"
else
    ko "(b) blocked UDP: message missing or different"
fi
grep -q "aborting the MPI job" "$WORK/udp-blocked.log" && ok "(b) abort line printed" || ko "(b) abort line missing"
walls=$(grep -cF "$(first_line "connectivity error: small bad, large bad")" "$WORK/udp-blocked.log")
h1view=$(blocks "$WORK/udp-blocked.log" "connectivity error: small bad, large bad" h1 veth0 10.77.0.1/24 h2 10.77.0.2 40 1472)
if [ "$walls" = 1 ] && [ "$h1view" = 1 ]; then
    ok "(b) the message appears once, from h1 (h2, the higher address, waits and is ended first)"
else
    ko "(b) the message appears $walls times, $h1view of them h1's (want once, h1's)"
fi

# (b2) the same without the help file beside the plugin: each process prints the text itself
mkdir -p "$WORK/components-nohelp"
ln -sf "$ROOT/target/release/libusnic_rs.so" "$WORK/components-nohelp/mca_btl_usnic.so"
block_udp_from_h1
COMPONENTS=$WORK/components-nohelp run udp-blocked-nohelp
unblock_udp_from_h1
if [ $RC -ne 0 ] && { expect_block "$WORK/udp-blocked-nohelp.log" "connectivity error: small bad, large bad" h1 10.77.0.1/24 h2 10.77.0.2 1472 ||
    expect_block "$WORK/udp-blocked-nohelp.log" "connectivity error: small bad, large bad" h2 10.77.0.2/24 h1 10.77.0.1 1472; } &&
    [ "$(grep -cF "$(first_line "connectivity error: small bad, large bad")" "$WORK/udp-blocked-nohelp.log")" = 1 ]; then
    ok "(b2) no help file installed: rc=$RC, the same exact text, once"
else
    ko "(b2) no help file installed: rc=$RC, text missing or not the fallback"
fi

# (c) the switch port of h2 at a smaller MTU than both hosts
ip -n ncbr link set p2 mtu 1200 || cannot "cannot set p2 mtu"
run small-switch-mtu
ip -n ncbr link set p2 mtu "$P2_MTU"
n=$(blocks "$WORK/small-switch-mtu.log" "connectivity error: small ok, large bad" h1 veth0 10.77.0.1/24 h2 10.77.0.2 40 1472)
walls=$(grep -cF "$(first_line "connectivity error: small ok, large bad")" "$WORK/small-switch-mtu.log")
if [ $RC -ne 0 ] && within "$MSG_AT" "$msg_limit" && [ "$n" = 1 ] && [ "$walls" = 1 ]; then
    ok "(c) switch port MTU 1200: rc=$RC, exact 'small ok, large bad' message, once, from h1, at ${MSG_AT}s <= ${msg_limit}s"
else
    ko "(c) switch port MTU 1200: rc=$RC, message at ${MSG_AT}s (limit ${msg_limit}s), h1's text $n times, $walls texts (want 1 and 1)"
fi

# (c2) a one-way break only the higher address sees, reported before the peer timeout
block_large_udp_from_h2
run one-way-large --mca btl_usnic_peer_timeout 5000
unblock_large_udp_from_h2
n=$(blocks "$WORK/one-way-large.log" "connectivity error: small ok, large bad" h2 veth0 10.77.0.2/24 h1 10.77.0.1 40 1472)
if [ $RC -ne 0 ] && [ "$n" = 1 ] && ! grep -qF "$(first_line "peer unreachable")" "$WORK/one-way-large.log"; then
    ok "(c2) one-way break seen by h2 only: rc=$RC, h2's exact 'small ok, large bad' message at ${MSG_AT}s, before any peer timeout"
else
    ko "(c2) one-way break seen by h2 only: rc=$RC, h2's text $n times (want 1), peer-timeout text $(grep -cF "$(first_line "peer unreachable")" "$WORK/one-way-large.log") times (want 0)"
fi

# (d) h2's own interface at MTU 1200: both ends agree on 1172-byte datagrams, and say so once
ip -n h2 link set veth0 mtu 1200 || cannot "cannot set h2 veth0 mtu"
run small-host-mtu
run small-host-mtu-verbose --mca btl_usnic_verbose 20
ip -n h2 link set veth0 mtu "$V2_MTU"
if [ $RC -eq 0 ] && grep -q "^PASS ring np=2" "$WORK/small-host-mtu-verbose.log" &&
    grep -q "usnic connectivity GOOD between h1 veth0 10.77.0.1 and h2 10.77.0.2 (sizes 40 and 1172" "$WORK/small-host-mtu-verbose.log"; then
    ok "(d) h2 MTU 1200: path checked with 1172-byte probes"
else
    ko "(d) h2 MTU 1200: rc=$RC or GOOD line with size 1172 missing"
fi
n1=$(blocks "$WORK/small-host-mtu.log" "MTU mismatch" h1 veth0 10.77.0.1/24 1472 h2 10.77.0.2 1172 1172)
n2=$(blocks "$WORK/small-host-mtu.log" "MTU mismatch" h2 veth0 10.77.0.2/24 1172 h1 10.77.0.1 1472 1172)
walls=$(grep -cF "$(first_line "MTU mismatch")" "$WORK/small-host-mtu.log")
rest=$(other_lines "$WORK/small-host-mtu.log" "MTU mismatch")
if grep -q "^PASS ring np=2" "$WORK/small-host-mtu.log" && [ "$n1" = 1 ] && [ "$walls" = 1 ] && [ -z "$rest" ]; then
    ok "(d) h2 MTU 1200: job passes; output = PASS line + one exact 'MTU mismatch' warning, h1's (the lower address speaks for the pair)"
else
    ko "(d) h2 MTU 1200: exact warning h1-view $n1, h2-view $n2, warnings $walls (want 1), other lines: '$rest'"
fi

# (e) 2 ranks per host (--map-by node: ranks 0,2 on h1 and 1,3 on h2; pairs 0-1 and 2-3 cross)
NP=4 HOSTS=h1:2,h2:2 run two-per-host --map-by node --mca mpi_yield_when_idle 1 --mca btl_usnic_verbose 20
n12=$(grep -c "usnic connectivity GOOD between h1 veth0 10.77.0.1 and h2 10.77.0.2 " "$WORK/two-per-host.log")
n21=$(grep -c "usnic connectivity GOOD between h2 veth0 10.77.0.2 and h1 10.77.0.1 " "$WORK/two-per-host.log")
if [ $RC -eq 0 ] && grep -q "^PASS ring np=4" "$WORK/two-per-host.log" && [ "$n12" = 1 ] && [ "$n21" = 1 ]; then
    ok "(e) 2 ranks per host: job passes, each host's agent checked the path exactly once"
else
    ko "(e) 2 ranks per host: rc=$RC, GOOD lines h1->h2 $n12, h2->h1 $n21 (want 1 and 1)"
fi

# (f) checker off
run check-off --mca btl_usnic_connectivity_check 0 --mca btl_usnic_verbose 20
if [ $RC -eq 0 ] && grep -q "^PASS ring np=2" "$WORK/check-off.log" && ! grep -q "connectivity" "$WORK/check-off.log"; then
    ok "(f) connectivity_check 0: job passes, no checker activity at verbosity 20"
else
    ko "(f) connectivity_check 0: rc=$RC or checker output present"
fi

# (f2) a provider whose datagrams are not UDP datagrams
run sockets --mca btl_usnic_provider sockets --mca btl_usnic_verbose 20
if [ $RC -eq 0 ] && grep -q "^PASS ring np=2" "$WORK/sockets.log" &&
    grep -q "connectivity checker off: provider sockets" "$WORK/sockets.log" &&
    ! grep -q "Local host:" "$WORK/sockets.log"; then
    ok "(f2) provider sockets: job passes, the checker is off and says why at verbosity 20"
else
    ko "(f2) provider sockets: rc=$RC, or no 'checker off' line, or a checker message (log: $WORK/sockets.log)"
fi

# (g) connectivity map files
run map --mca btl_usnic_connectivity_map "$WORK/cmap"
m0=$(cat "$WORK"/cmap-h1.pid*.job*.mcwrank0.txt 2>/dev/null)
m1=$(cat "$WORK"/cmap-h2.pid*.job*.mcwrank1.txt 2>/dev/null)
nfiles=$(find "$WORK" -maxdepth 1 -name 'cmap-*' | wc -l)
if [ $RC -eq 0 ] && [ "$nfiles" = 2 ] && [ "$m0" = "rank 1 h2 via veth0 10.77.0.1 -> 10.77.0.2" ] &&
    [ "$m1" = "rank 0 h1 via veth0 10.77.0.2 -> 10.77.0.1" ]; then
    ok "(g) connectivity_map: one file per process; h1 rank 0: '$m0'; h2 rank 1: '$m1'"
else
    ko "(g) connectivity_map: rc=$RC, $nfiles files, rank 0 '$m0', rank 1 '$m1'"
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
