# shellcheck shell=bash
# Sourced by the single-purpose test scripts (deadpeer, fullsocket, pathmtu, bridges): their
# PASS/FAIL lines and the closing `N passed, N failed` that test.sh adds up.
pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
# Ends the script: exit status non-zero when any case failed.
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit $?
}
