#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, only when something is missing.
set -euo pipefail
pkgs=(openmpi-bin libopenmpi-dev libfabric-dev libfabric-bin libclang-dev clang pkg-config
      valgrind iproute2 nftables iptables iputils-ping libnetfilter-queue-dev gcc make
      python3-mpi4py python3-numpy python3-pip python3-matplotlib netpipe-openmpi util-linux hpcc)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "deps: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "deps: cargo not found; install Rust (rustup) first" >&2; exit 1; }
if ! command -v cbindgen >/dev/null; then
    echo "deps: installing cbindgen"
    cargo install --locked --quiet cbindgen@0.27.0
fi
