#!/usr/bin/env bash
# The raw datagram floor across two netns-cluster hosts: the raw_datagram bench receives in h2
# (--serve) and blasts from h1 (--stream-to), so its datagrams take the same path as the BTL's
# (veth, bridge, veth). Two threads of one process on one host would take the cheaper local path.
# usage: bench/raw-across-hosts.sh NETNS_CLUSTER RAW_DATAGRAM_EXECUTABLE   (the receiver's table on stdout)
set -euo pipefail
nc=${1:?netns-cluster.sh path} exe=${2:?raw_datagram bench executable}
addr=$(mktemp -u /tmp/usnic-raw-addr.XXXXXX)
trap 'rm -f "$addr" "$addr.tmp"' EXIT
NC_PIN=1 "$nc" exec h2 "$exe" --serve "$addr" &
server=$!
NC_PIN=1 "$nc" exec h1 "$exe" --stream-to "$addr" >&2
wait "$server"
