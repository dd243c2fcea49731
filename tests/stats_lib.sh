# shellcheck shell=bash
# Sourced by tests that read the usnic BTL's final statistics lines (btl_usnic_stats > 0; their
# form is in docs/operations.md): tests/suite/netns_lib.sh and its users, tests/hostile/run.sh.

# The final statistics lines of the usnic BTL found in the given logs (btl_usnic_stats > 0).
usnic_final_lines() {
    grep -hE 'btl:usnic: stats \(final\) ' "$@" 2>/dev/null
}

# Sum of counter $1 over the final statistics lines in the files $2...; empty when there is none.
usnic_final_sum() {
    local key=$1
    shift
    usnic_final_lines "$@" | grep -oE " $key=[0-9]+" | cut -d= -f2 |
        awk '{s += $1; n++} END {if (n) print s}'
}

# One line "TIMEOUT FAST DUP SPURIOUS" per final statistics line of the usnic BTL found in the
# given logs (resends_timeout, resends_fast, dup_recvs, spurious_resends); nothing when there
# is none.
usnic_final_resends() {
    usnic_final_lines "$@" |
        sed -nE 's/.* resends_timeout=([0-9]+) resends_fast=([0-9]+).* dup_recvs=([0-9]+) .* spurious_resends=([0-9]+) .*/\1 \2 \3 \4/p'
}
