#!/usr/bin/env bash
# Prints the path of netns-cluster.sh, the multi-host tool the netns tests and benchmarks use.
# It is not part of this repository: it sits in ../shared/tools beside the clone, or, for a
# clone made elsewhere (a temporary directory), in the workspace's /work/shared/tools. NC or
# NETNS_CLUSTER in the environment override both (the callers check that). When neither exists
# the first is printed, so the caller's "not found" message names where it was expected.
root=$(cd "$(dirname "$0")/.." && pwd)
for c in "$root/../shared/tools/netns-cluster.sh" /work/shared/tools/netns-cluster.sh; do
    if [ -x "$c" ]; then
        echo "$c"
        exit 0
    fi
done
echo "$root/../shared/tools/netns-cluster.sh"
