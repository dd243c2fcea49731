#!/bin/bash
# Hostile datagrams against running jobs over `--mca pml ob1 --mca btl usnic,self` (issue 4,
# point 5). For each attack: start a 2-rank byte-checking job, let tests/hostile/hostile.py
# find its UDP ports, capture some of its datagrams on lo and send the attack to those ports,
# then check: the job's own byte checks PASS and it exits 0 within its timeout, nothing
# crashed, and the BTL's statistics (btl_usnic_stats, final lines) counted the drops.
# A counter the plugin does not print is a FAILED check with a message saying what is missing.
#
# Usage: tests/hostile/run.sh [attack ...]   (default: all; see ATTACKS below)
# Env:   KEEP=1 keeps the logs directory; JOB_TIMEOUT (s, default 120);
#        VALGRIND=1 runs every rank under valgrind (memcheck; any error fails the job).
# Root only (AF_PACKET capture). Ends with "N passed, N failed"; exit status 1 on any failure.
# Tests the plugin Open MPI loads: to test a build, stage it as test.sh's stage_plugin does
# (OMPI_MCA_mca_component_path=<pkglibdir>:<dir with mca_btl_usnic.so + help-mpi-btl-usnic-rs.txt>).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/stats_lib.sh
. "$ROOT/tests/stats_lib.sh"
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-28s %s\n' "$1" "$2"; }
fail() { FAILED=$((FAILED + 1)); printf 'FAIL  %-28s %s\n' "$1" "$2"; }
finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
    exit $?
}

if [ "$(id -u)" != 0 ]; then
    fail "root" "tests/hostile/run.sh needs root (AF_PACKET capture on lo, reading other processes' sockets); not run"
    finish
fi
for tool in mpirun mpicc ss python3; do
    command -v $tool >/dev/null || { fail "prerequisites" "$tool not found"; finish; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d /tmp/usnic-hostile.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
JOB_TIMEOUT=${JOB_TIMEOUT:-120}
MCA=(--mca pml ob1 --mca btl_usnic_stats 3600)

if ! make -s -C "$ROOT/tests/mpi" >"$WORK/build.log" 2>&1; then
    cat "$WORK/build.log"; fail "build" "make -C tests/mpi failed"; finish
fi
if ! mpicc -O2 -g -o "$WORK/slowcheck" "$HERE/slowcheck.c" >>"$WORK/build.log" 2>&1; then
    cat "$WORK/build.log"; fail "build" "mpicc slowcheck.c failed"; finish
fi
WRAP=()
if [ "${VALGRIND:-0}" = 1 ]; then
    command -v valgrind >/dev/null || { fail "prerequisites" "VALGRIND=1 but valgrind not found"; finish; }
    WRAP=(valgrind --error-exitcode=99 --num-callers=30)
    [ -f /usr/share/openmpi/openmpi-valgrind.supp ] && WRAP+=(--suppressions=/usr/share/openmpi/openmpi-valgrind.supp)
    JOB_TIMEOUT=$((JOB_TIMEOUT * 4))
fi
# pingpong at 8x its iterations, so that the tool captures and attacks while it runs: at 4x
# the job took 2.9 s (64 KiB datagrams on lo) and the chunk attack 2.2 s of it, and in one CI
# run of 2026-11-23 the job ended first ("the job ended before the attack did")
PINGPONG=("$ROOT/tests/mpi/bin/pingpong" -s 8 -t "$JOB_TIMEOUT")
PINGPONG_WRAP=("$ROOT/tests/mpi/bin/pingpong" -s 1 -t "$JOB_TIMEOUT")
SLOW=("$WORK/slowcheck" -T 7 -t "$JOB_TIMEOUT")

# The plugin that will be loaded (for the record).
if ! ompi_info --param btl usnic --level 9 2>/dev/null | grep -q btl_usnic_stats; then
    fail "plugin" "ompi_info shows no btl_usnic_stats parameter: is the usnic-rs plugin installed or staged (OMPI_MCA_mca_component_path)?"
    finish
fi

# descendants of a PID whose command name is $2
ranks_of() {
    local pid=$1 name=$2 kids k
    kids=$(ps -o pid= --ppid "$pid" 2>/dev/null)
    for k in $kids; do
        case "$(cat /proc/$k/comm 2>/dev/null)" in
            "${name:0:15}" | memcheck-*) echo "$k" ;;
        esac
        ranks_of "$k" "$name"
    done
}

# The plugin's statistics lines (docs/operations.md), one per module and rank, the last one
# marked "(final)":
#   [host:pid] btl:usnic: stats (final) rank=R module=M iface=NAME key=value key=value ...
# with every core Stats field by name (malformed_recvs, wrong_key_recvs, dup_recvs,
# oow_low_recvs, oow_high_recvs, bad_chunk_recvs, refused_writes, refused_gets, ...) and the
# edge's oversize_recvs.

# stat LOG NAME: sum of counter NAME over the ranks' final statistics lines, or "missing"
stat() {
    local n
    n=$(usnic_final_sum "$2" "$1")
    echo "${n:-missing}"
}

# per_module LOG NAME: counter NAME per module (interface), summed over ranks
per_module() {
    awk -v want="$2" '/btl:usnic: stats \(final\)/ {
            m = ""
            for (i = 1; i <= NF; i++) {
                eq = index($i, "=")
                if (!eq) continue
                k = substr($i, 1, eq - 1); v = substr($i, eq + 1)
                if (k == "iface") m = v
                if (k == want && v ~ /^[0-9]+$/) s[m] += v
            }
        } END { for (m in s) printf "%s%s=%d", (n++ ? " " : ""), m, s[m] }' "$1"
}

# seq_sent_min LOG: the fewest new sequenced segments (frag_sends + chunk_sends, resends not
# included) one rank sent, over all its modules: how far its sequence space advanced
seq_sent_min() {
    awk '/btl:usnic: stats \(final\)/ {
            r = ""
            for (i = 1; i <= NF; i++) {
                eq = index($i, "=")
                if (!eq) continue
                k = substr($i, 1, eq - 1); v = substr($i, eq + 1)
                if (k == "rank") r = v
                if (k == "frag_sends" || k == "chunk_sends") n[r] += v
            }
        } END { m = -1; for (r in n) if (m < 0 || n[r] < m) m = n[r]; print (m < 0 ? "missing" : m) }' "$1"
}

# field of the tool's HOSTILE line
hfield() { sed -n "s/^HOSTILE .*\b$2=\([0-9]*\).*/\1/p" "$1" | head -1; }

# run_job NAME ATTACK(or -) SECONDS PROG ARGS...: sets LOG, TOOLLOG, JOBRC, TOOLRC
run_job() {
    local name=$1 attack=$2 secs=$3
    shift 3
    LOG=$WORK/$name.log
    TOOLLOG=$WORK/$name.tool.log
    : >"$TOOLLOG"
    timeout -k 5 $((JOB_TIMEOUT + 30)) mpirun -np 2 "${MCA[@]}" --mca btl "${BTLS:-usnic,self}" \
        ${EXTRA_MCA:-} "${WRAP[@]}" "$@" >"$LOG" 2>&1 &
    local job=$! pids="" t=0
    TOOLRC=0
    if [ "$attack" != - ]; then
        while [ $t -lt 100 ]; do
            pids=$(ranks_of "$job" "$(basename "$1")" | sort -u | paste -sd, -)
            [ "$(echo "$pids" | tr ',' '\n' | grep -c .)" -ge 2 ] && break
            sleep 0.2
            t=$((t + 1))
        done
        if [ -z "$pids" ]; then
            echo "no rank processes found" >"$TOOLLOG"
            TOOLRC=2
        else
            python3 "$HERE/hostile.py" --attack "$attack" --pids "$pids" --seconds "$secs" ${TOOL_ARGS:-} >"$TOOLLOG" 2>&1
            TOOLRC=$?
        fi
    fi
    wait "$job"
    JOBRC=$?
}

# verdicts every job gets
check_job() {
    local name=$1 prog=$2
    if [ "$JOBRC" -eq 0 ] && grep -q "^PASS $prog " "$LOG" && ! grep -q "^FAIL " "$LOG"; then
        pass "$name: job" "$(grep -m1 "^PASS $prog " "$LOG" | cut -c1-90)"
    else
        fail "$name: job" "exit $JOBRC ($([ $JOBRC -eq 124 ] && echo 'timed out, hang?')) $(grep -m1 -E '^(PASS|FAIL) ' "$LOG" | cut -c1-150)"
    fi
    if grep -qE '== ERROR SUMMARY: [1-9]' "$LOG"; then
        fail "$name: valgrind" "$(grep -m1 -E '== (Invalid|Conditional|Syscall param|Mismatched)' "$LOG") ($(grep -m1 -E '== ERROR SUMMARY: [1-9]' "$LOG"))"
    elif [ "${VALGRIND:-0}" = 1 ]; then
        pass "$name: valgrind" "$(grep -c '== ERROR SUMMARY: 0 errors' "$LOG") rank(s) with 0 errors"
    fi
    if grep -qE 'Segmentation|SIGSEGV|SIGBUS|SIGABRT|core dumped|panicked|AddressSanitizer|exited on signal' "$LOG"; then
        fail "$name: no crash" "$(grep -m1 -E 'Segmentation|SIGSEGV|SIGBUS|SIGABRT|core dumped|panicked|AddressSanitizer|exited on signal' "$LOG")"
    else
        pass "$name: no crash" ""
    fi
    if [ "$(stat "$LOG" malformed_recvs)" = missing ]; then
        fail "$name: statistics" "no 'btl:usnic: stats (final)' lines in the job output (btl_usnic_stats 3600 given)"
    fi
}

check_tool() {
    local name=$1 need_alive=${2:-1}
    if [ "$TOOLRC" -eq 0 ] && grep -q '^HOSTILE ' "$TOOLLOG" &&
        { [ "$need_alive" = 0 ] || [ "$(hfield "$TOOLLOG" alive)" = 1 ]; }; then
        pass "$name: attack sent" "$(grep '^HOSTILE ' "$TOOLLOG")"
        return 0
    fi
    if [ "$TOOLRC" -eq 0 ] && grep -q '^HOSTILE ' "$TOOLLOG"; then
        fail "$name: attack sent" "the job ended before the attack did: $(grep '^HOSTILE ' "$TOOLLOG")"
    else
        fail "$name: attack sent" "tool failed (rc $TOOLRC): $(tail -2 "$TOOLLOG" | tr '\n' ' ')"
    fi
    return 1
}

# counter_at_least NAME LABEL VALUE MIN WHY
counter_at_least() {
    local name=$1 label=$2 v=$3 min=$4 note=${5:-} pm
    pm=$(per_module "$LOG" "$label")
    pm=${pm:+; per module: $pm}
    if [ "$v" = missing ]; then
        fail "$name: $label" "btl_usnic_stats prints no '$label' counter"
    elif [ "$v" -ge "$min" ]; then
        pass "$name: $label" "$v (needed >= $min$pm)$note"
    else
        fail "$name: $label" "$v, needed >= $min$pm$note"
    fi
}

# a counter the plugin should print; missing = loud failure naming it
needs_counter() {
    local name=$1 label=$2 what=$3 v
    v=$(stat "$LOG" "$label")
    if [ "$v" = missing ]; then
        fail "$name: $label counted" "btl_usnic_stats prints no '$label' counter: $what"
    elif [ "$v" -gt 0 ]; then
        pass "$name: $label counted" "$v"
    else
        fail "$name: $label counted" "0: $what"
    fi
}

dups() { # sequenced datagrams dropped as already received / outside the window
    local a b c
    a=$(stat "$1" dup_recvs); b=$(stat "$1" oow_low_recvs); c=$(stat "$1" oow_high_recvs)
    if [ "$a" = missing ] || [ "$b" = missing ] || [ "$c" = missing ]; then echo missing; else echo $((a + b + c)); fi
}

ATTACKS=${*:-"garbage truncated wrongkey chunk replay flood putget putget_rdma replay_wrapped"}

# A clean run of the slow target: the baseline for the duplicate counters, and proof that
# nothing is counted as hostile without an attacker.
run_job clean - 0 "${SLOW[@]}"
check_job clean slowcheck
BASE_DUPS=$(dups "$LOG")
for c in malformed_recvs wrong_key_recvs bad_chunk_recvs refused_writes refused_gets oversize_recvs; do
    v=$(stat "$LOG" $c)
    if [ "$v" = 0 ]; then pass "clean: $c" "0"; else fail "clean: $c" "$v without any attacker"; fi
done
# Not a check: real datagrams that arrive before the receiver has added their sender (slow
# start, e.g. under valgrind) are counted here too, and repaired by retransmission.
echo "info  clean: unknown_sender_recvs $(stat "$LOG" unknown_sender_recvs) (early datagrams of not yet added peers)"

for attack in $ATTACKS; do
    case $attack in
        garbage | truncated | wrongkey | chunk)
            run_job "$attack" "$attack" 3 "${PINGPONG[@]}"
            check_job "$attack" pingpong ;;
        replay | flood)
            run_job "$attack" "$attack" 4 "${SLOW[@]}"
            check_job "$attack" slowcheck ;;
        putget)
            # vader loaded too (below usnic, which carries the job), so that its private
            # handler is in Open MPI's callback table for the forged tag 0x23 to find
            BTLS=usnic,vader,self EXTRA_MCA="--mca btl_vader_exclusivity 0" \
                run_job "$attack" "$attack" 4 "${SLOW[@]}"
            check_job "$attack" slowcheck ;;
        putget_rdma)
            # the same with emulated PUT/GET offered to the PML: the target's edge now maps
            # region ids to registered memory, and must refuse every forged one
            if ! ompi_info --param btl usnic --level 9 | grep -q '"btl_usnic_rdma"'; then
                fail "$attack" "the installed plugin has no btl_usnic_rdma parameter"
                continue
            fi
            EXTRA_MCA="--mca btl_usnic_rdma put,get" run_job "$attack" putget 4 "${SLOW[@]}"
            check_job "$attack" slowcheck ;;
        replay_wrapped)
            # old datagrams replayed while pingpong's 16-bit sequence numbers wrap around
            # (every 50 ms, so some round meets the receive window when it sweeps past the
            # captured sequence numbers again, 65536 segments later)
            # (datagrams capped at 1400 bytes so ~150 000 segments per direction wrap the
            # 16-bit sequence numbers twice; with 64 KiB datagrams they would not wrap)
            EXTRA_MCA="--mca btl_usnic_mtu 1400" TOOL_ARGS="--interval 0.05 --capture 3" \
                run_job "$attack" replay 60 "${PINGPONG_WRAP[@]}"
            check_job "$attack" pingpong ;;
        *) fail "$attack" "unknown attack"; continue ;;
    esac
    # replays go on until the job ends; every other attack must be over before it does
    check_tool "$attack" "$([ $attack = replay_wrapped ] && echo 0 || echo 1)" || continue
    sent=$(hfield "$TOOLLOG" sent)
    case $attack in
        garbage)
            over=$(hfield "$TOOLLOG" oversize)
            counter_at_least garbage malformed_recvs "$(stat "$LOG" malformed_recvs)" $(((sent - over) / 2))
            needs_counter garbage oversize_recvs "datagrams longer than the channel MTU (Completion::Error(FI_ETRUNC) at the edge) must be counted" ;;
        truncated)
            counter_at_least truncated malformed_recvs "$(stat "$LOG" malformed_recvs)" $((sent / 2)) ;;
        wrongkey)
            counter_at_least wrongkey wrong_key_recvs "$(stat "$LOG" wrong_key_recvs)" $((sent / 2)) ;;
        chunk)
            cons=$(hfield "$TOOLLOG" consistent_mutations)
            counter_at_least chunk malformed_recvs "$(stat "$LOG" malformed_recvs)" $(((sent - cons) / 2))
            needs_counter chunk bad_chunk_recvs "chunks that contradict their fragment's total must be dropped as BadChunk and counted (Stats::bad_chunk_recvs)" ;;
        replay | flood | replay_wrapped)
            if [ $attack = replay_wrapped ]; then
                # vacuous unless both directions' 16-bit numbers wrapped after the capture
                w=$(seq_sent_min "$LOG")
                if [ "$w" = missing ]; then
                    fail "$attack: wrapped" "frag_sends/chunk_sends not printed"
                else
                    counter_at_least "$attack" "wrapped (segments/rank)" "$w" $((65536 + 4096))
                fi
            fi
            if [ $attack != flood ]; then
                n=$(( $(hfield "$TOOLLOG" rounds) * $(hfield "$TOOLLOG" sequenced_per_round) ))
            else
                n=$(hfield "$TOOLLOG" sequenced_copies)
            fi
            # copies the kernel dropped for want of socket buffer (the slow target polls
            # between 10 ms sleeps) never reached the plugin: it cannot count them. (Not for
            # replay_wrapped: against the fast pingpong the job's own drops would dominate.)
            kd=
            [ $attack = replay_wrapped ] || kd=$(hfield "$TOOLLOG" kernel_drops)
            n=$((n - ${kd:-0}))
            d=$(dups "$LOG")
            # Drops of the job's own datagrams on that socket count in too: too few copies left
            # and the check below could not fail.
            if [ "$n" -lt 100 ]; then
                fail "$attack: duplicates counted" "tested nothing: $n copies can have reached the plugin (kernel dropped ${kd:-0})"
            elif [ "$d" = missing ] || [ "$BASE_DUPS" = missing ]; then
                fail "$attack: duplicates counted" "dup_recvs/oow_low/oow_high not printed"
            else
                counter_at_least "$attack" "dup+oow rise" $((d - BASE_DUPS)) $((n / 4)) "${kd:+ (kernel dropped $kd)}"
            fi ;;
        putget | putget_rdma)
            inw=$(hfield "$TOOLLOG" in_window)
            counter_at_least $attack malformed_recvs "$(stat "$LOG" malformed_recvs)" 1
            # half of the in-window forgeries are PUTs: every one must be refused and counted
            counter_at_least $attack refused_writes "$(stat "$LOG" refused_writes)" $((inw / 2))
            needs_counter $attack refused_gets "forged GET requests outside registered memory must be answered with GetRefuse and counted (Stats::refused_gets)"
            # Tag 255 indexed past Open MPI's callback table, and 0x23 reached vader's handler
            # (both crashes); they must be dropped.
            for t in 0xff 0x23; do
                if grep -q "fragment with tag $t: no callback" "$LOG"; then
                    pass "$attack: tag $t dropped" "$(hfield "$TOOLLOG" bad_tags) bad tags sent"
                else
                    fail "$attack: tag $t dropped" "no 'fragment with tag $t' drop in the job's output"
                fi
            done ;;
    esac
done

[ "${KEEP:-0}" = 1 ] && echo "logs kept in $WORK"
finish
