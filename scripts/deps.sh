#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, only when something is missing.
set -euo pipefail
pkgs=(openmpi-bin libopenmpi-dev libfabric-dev libfabric-bin libclang-dev clang pkg-config
      valgrind iproute2 nftables iptables iputils-ping libnetfilter-queue-dev gcc make
      python3-mpi4py python3-numpy python3-pip python3-matplotlib netpipe-openmpi util-linux hpcc procps)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "deps: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 update -qq
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "deps: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# The static checks need clippy and rustfmt, which rustup's minimal profile leaves out.
if command -v rustup >/dev/null && ! { cargo clippy --version && cargo fmt --version; } >/dev/null 2>&1; then
    echo "deps: adding clippy and rustfmt"
    rustup component add clippy rustfmt
fi
# The committed header is cbindgen 0.27.0's output; another version may write it differently.
if ! cbindgen --version 2>/dev/null | grep -qx 'cbindgen 0.27.0'; then
    echo "deps: installing cbindgen 0.27.0"
    cargo install --locked --quiet --force cbindgen@0.27.0
fi
