#!/usr/bin/env bash
# The README's test command: installs what is missing, then runs every check CI runs, in order from the
# protocol core outwards. Each step's own pass/fail counts are added up into the closing line
# `N passed, N failed`; a step that cannot run counts as failed and says why. Exit status is non-zero
# when anything failed.
#
#   ./test.sh               everything
#   ONLY="core mpi" ./test.sh   only the named steps (see the list at the bottom)
set -uo pipefail
cd "$(dirname "$0")" || exit 1
# rustup's cargo first, also for deps.sh, where a non-login shell has no ~/.cargo/bin on its PATH.
export PATH="$HOME/.cargo/bin:$PATH"
scripts/deps.sh || { echo "deps: installation failed"; echo "0 passed, 1 failed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A snapshot test rewrites its snapshot and passes when this is set: never in the test command.
unset UPDATE_SNAPSHOTS

logdir=$(mktemp -d /tmp/usnic-test.XXXXXX)
total_pass=0
total_fail=0
summary=()

# Runs one step, captures its output, and adds its counts: the last `N passed, N failed` line it printed,
# else cargo's `test result:` lines, else 1 passed or 1 failed from its exit status alone. A step that
# counted nothing at all (0 passed, 0 failed) failed: it checked nothing.
step() {
    local name=$1
    shift
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
        return
    fi
    printf '\n=== %s: %s\n' "$name" "$*"
    local log="$logdir/$name.log" start rc p f
    start=$(date +%s)
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    read -r p f < <(count "$log")
    if [ -z "${p:-}" ]; then
        p=$((rc == 0)) f=$((rc != 0))
    elif [ $((p + f)) -eq 0 ]; then
        echo "FAIL: step $name counted no check at all"
        f=1
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    summary+=("$(printf '%-10s %5d passed %4d failed  %4ds  exit %d' "$name" "$p" "$f" $(($(date +%s) - start)) "$rc")")
}

count() {
    local plain
    plain=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -n "$plain" ]; then
        echo "$plain" | sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2 \3/'
    elif grep -q '^test result:' "$1"; then
        grep '^test result:' "$1" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' |
            awk '{p += $1; f += $2} END {print p + 0, f + 0}'
    fi
}

# Static checks: formatting, lints, and the committed C header against what cbindgen generates now.
static_checks() {
    local ok=0 bad=0 tmp
    if cargo fmt --check; then ok=$((ok + 1)); else echo "FAIL: cargo fmt --check"; bad=$((bad + 1)); fi
    if cargo clippy --all-targets --release -- -D warnings; then ok=$((ok + 1)); else
        echo "FAIL: clippy"; bad=$((bad + 1)); fi
    if [ -f cbindgen.toml ]; then
        tmp=$(mktemp)
        if cbindgen --quiet --config cbindgen.toml --crate usnic_rs -o "$tmp" && cmp -s "$tmp" include/usnic_rs.h; then
            ok=$((ok + 1))
        else
            echo "FAIL: include/usnic_rs.h differs from cbindgen's output; regenerate it:"
            echo "      cbindgen --config cbindgen.toml --crate usnic_rs -o include/usnic_rs.h"
            bad=$((bad + 1))
        fi
        rm -f "$tmp"
    fi
    # The benchmark summarizer's verdict rules, on the committed netns run's raw files.
    if /usr/bin/python3 bench/summarize_selftest.py; then ok=$((ok + 1)); else
        echo "FAIL: bench/summarize_selftest.py"; bad=$((bad + 1)); fi
    echo "$ok passed, $bad failed"
}

# The plugin tests dlopen and mpirun target/release/libusnic_rs.so, which `cargo test` alone does not build;
# --no-fail-fast so one failing test binary does not hide the others' results.
core_tests() {
    cargo build --release && cargo test --release --no-fail-fast
}

# The MPI-level steps load the plugin built from this tree, never an installed copy: a private component
# directory holds it and its help file, and Open MPI's component path points there.
stage_plugin() {
    cargo build --release --quiet || return 1
    local comp="$logdir/components" sys
    mkdir -p "$comp"
    install -m 0755 target/release/libusnic_rs.so "$comp/mca_btl_usnic.so"
    install -m 0644 help-mpi-btl-usnic-rs.txt "$comp/help-mpi-btl-usnic-rs.txt"
    sys=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
    export OMPI_MCA_mca_component_path="$sys:$comp"
    ompi_info | grep 'MCA btl: usnic' || { echo "FAIL: ompi_info does not list the staged plugin"; return 1; }
}

step static static_checks
step core core_tests
if ! stage_plugin; then
    echo "cannot stage the plugin: the MPI steps cannot run"
    total_fail=$((total_fail + 1))
    # Open MPI's own components only, so those steps fail rather than pass on an installed copy.
    OMPI_MCA_mca_component_path=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
    export OMPI_MCA_mca_component_path
fi
step mca scripts/mca-table.sh --check README.md
step mpi tests/run-mpi.sh
# The udp provider's sockets are read by the channels themselves by default; this is the path
# of every other provider: buffers posted to the provider, completions read from its CQ.
step mpi-provider env MPI_ARGS="--mca btl_usnic_gro 0 --mca btl_usnic_gso 0 --mca btl_usnic_verbose 5" \
    EXPECT_LINE="data channel read through the provider, sent through the provider, batches of 0" NPS=2 tests/run-mpi.sh pingpong anysource collectives
# The checkers themselves: a corrupted byte must fail every program, and a failed send must end
# the job at once with its own FAIL line rather than a hang until the watchdog.
step mpi-selftest env SELFTEST=1 NPS=2 tests/run-mpi.sh
step mpi-failtest env FAILTEST=1 NPS=2 tests/run-mpi.sh pingpong datatypes anysource manyreq threads demo_pingpong
step suite env SUITE_QUICK=1 tests/suite/mpi4py.sh
step suite-selftest tests/suite/selftest.sh
step netns tests/run-netns.sh
step suite-netns env SUITE_QUICK=1 SUITE_PROGRAMS=0 tests/suite/netns.sh
step connectivity tests/connectivity/netns.sh
step deadpeer tests/deadpeer.sh
step fullsocket tests/fullsocket.sh
# A route narrower than the interface: batched sends refused for their size (EMSGSIZE).
step pathmtu tests/pathmtu.sh
# A bridge with the same address on every host (docker0, virbr0): never paired across hosts.
step bridges tests/bridges.sh
step faults tests/suite/faults.sh
# Three ranks on three hosts: every rank serves two peers at once (the data channel's turns) while
# datagrams are lost, or dropped, duplicated and delayed by the injector on every side.
step faults-3 env FAULT_NP=3 FAULT_HOSTS=3 FAULT_ONLY="loss5 mixed" tests/suite/faults.sh
step apps tests/apps/hpcc.sh
step hostile tests/hostile/run.sh

echo
echo "=== summary (logs in $logdir)"
printf '%s\n' "${summary[@]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
