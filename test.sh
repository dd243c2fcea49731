#!/usr/bin/env bash
# The README's test command: installs what is missing, then runs every check CI runs.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step() { printf '\n=== %s\n' "$*"; }

step "format"
cargo fmt --check
step "clippy"
cargo clippy --all-targets --release -- -D warnings
step "unit, scenario and simulation tests"
cargo test --release
