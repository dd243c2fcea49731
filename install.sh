#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the plugin in release mode, installs
# mca_btl_usnic.so where Open MPI finds it, and runs an MPI ping-pong over it.
#
#   ./install.sh                 installs into ~/.openmpi/components (Open MPI's per-user component dir)
#   PREFIX=/some/dir ./install.sh   installs into /some/dir (add it to mca_component_path yourself)
#   PREFIX=system ./install.sh   installs into Open MPI's own component dir (ompi_info --path pkglibdir)
#   DESTDIR=/stage ./install.sh  prefixes the install path, for packaging (the demo run is then skipped)
set -euo pipefail
cd "$(dirname "$0")"
# rustup's cargo, also where a non-login shell has no ~/.cargo/bin on its PATH.
export PATH="$HOME/.cargo/bin:$PATH"
scripts/deps.sh

prefix=${PREFIX:-$HOME/.openmpi/components}
if [ "$prefix" = system ]; then
    prefix=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
fi
dest="${DESTDIR:-}$prefix"

cargo build --release --quiet
install -D -m 0755 target/release/libusnic_rs.so "$dest/mca_btl_usnic.so"
install -m 0644 help-mpi-btl-usnic-rs.txt "$dest/help-mpi-btl-usnic-rs.txt"
# The name this file had before: left from an earlier install, it is no longer read.
rm -f "$dest/help-mpi-btl-usnic.txt"
echo "installed $dest/mca_btl_usnic.so and help-mpi-btl-usnic-rs.txt"

if [ -n "${DESTDIR:-}" ]; then
    echo "DESTDIR set: skipping the demo run"
    exit 0
fi
case ":$(ompi_info --parsable --all | sed -n 's/^mca:mca:base:param:mca_component_path:value:"\(.*\)"/\1/p'):" in
    *":$prefix:"*) ;;
    *) export OMPI_MCA_mca_component_path="$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://'):$prefix" ;;
esac
ompi_info | grep 'MCA btl: usnic'
exec tests/demo.sh
