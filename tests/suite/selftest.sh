#!/usr/bin/env bash
# The suite harness's own checks: each case below breaks something on purpose, and the suite must
# report it (a counted failure, exit status non-zero). A case passes only when the break is caught.
#   fail      one test fails over the BTL under test only;
#   hang      the same test hangs on rank 0 over it (the stall timeout cuts it);
#   flakyref  it fails over the BTL under test, and over the reference in its first run only: the
#             reference runs that module again, passes, and the failure counts;
#   skipped   a pass whose every test is skipped (osc rdma creates no window over either BTL): it
#             tested nothing, which must not count as passed.
# One module (test_p2p_buf, or the RMA modules), np 2. Ends with `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
passed=0 failed=0
LOGDIR=$(mktemp -d /tmp/usnic-suite-selftest.XXXXXX)

# case name, a line the log must also have (the break took the path it names; "" for none), then
# the environment for tests/suite/mpi4py.sh
expect_caught() {
    local name=$1 must=$2 log=$LOGDIR/$1.log rc counted
    shift 2
    env SUITE_QUICK=1 SUITE_STALL=30 SUITE_TIMEOUT=300 "$@" tests/suite/mpi4py.sh >"$log" 2>&1
    rc=$?
    counted=$(tail -n1 "$log" | sed -nE 's/^[0-9]+ passed, ([0-9]+) failed$/\1/p')
    if [ -n "$must" ] && ! grep -qF -- "$must" "$log"; then
        echo "FAIL $name: no line '$must': the case did not take its path (log: $log)"
        failed=$((failed + 1))
    elif [ "$rc" -ne 0 ] && [ "${counted:-0}" -ge 1 ]; then
        echo "PASS $name: caught ($(tail -n1 "$log"), exit $rc)"
        passed=$((passed + 1))
    else
        echo "FAIL $name: not caught (exit $rc, last line: $(tail -n1 "$log"); log: $log)"
        failed=$((failed + 1))
    fi
}

P2P=(SUITE_MODULES='^test_p2p_buf$' SUITE_PASSES=main)
expect_caught fail "" "${P2P[@]}" SUITE_SELFTEST=1
expect_caught hang "no output for 30s" "${P2P[@]}" SUITE_SELFTEST=hang
expect_caught flakyref "again for tests that passed on neither side" "${P2P[@]}" SUITE_SELFTEST=flakyref
expect_caught skipped "the pass tested nothing" SUITE_MODULES='^test_rma$' SUITE_PASSES=rma-rdma
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
