#!/usr/bin/env bash
# Demo run of the installed plugin: an MPI ping-pong over `--mca pml ob1 --mca btl usnic,self` on this
# host, next to the raw libfabric datagram floor (fi_pingpong -p udp -e dgram) measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s -C tests/mpi bin/demo_pingpong >/dev/null

floor_port=$((20000 + RANDOM % 20000))
timeout 60 fi_pingpong -p udp -e dgram -B "$floor_port" -S 8 -I 20000 >/dev/null 2>&1 &
server=$!
sleep 0.3
floor=$(timeout 60 fi_pingpong -p udp -e dgram -P "$floor_port" -S 8 -I 20000 127.0.0.1 | awk '$1 == 8 {print $7}')
wait "$server" || true

echo "mpirun -np 2 --mca pml ob1 --mca btl usnic,self tests/mpi/bin/demo_pingpong"
out=$(timeout 120 mpirun -np 2 --bind-to none --mca pml ob1 --mca btl usnic,self tests/mpi/bin/demo_pingpong 2>&1) || { echo "$out"; echo "demo FAILED"; exit 1; }
echo "$out"
lat=$(echo "$out" | sed -n 's/.*8-byte one-way latency: median \([0-9.]*\) us.*/\1/p' | head -1)
[ -n "$lat" ] || { echo "demo FAILED: no latency line"; exit 1; }
printf 'raw datagram floor (fi_pingpong -p udp -e dgram, 8 B): %s us one-way\n' "$floor"
awk -v a="$lat" -v b="$floor" 'BEGIN { printf "usnic,self 8-byte latency / raw floor = %.2fx\n", a / b }'
