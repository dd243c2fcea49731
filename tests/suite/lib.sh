# Shared by tests/suite/*.sh (sourced).  Fetches mpi4py's sdist test suite at the version Debian's
# python3-mpi4py has, into a cache outside the repository, and checks the interpreter.
MPI4PY_VERSION=3.1.4
SUITE_PY=/usr/bin/python3 # Debian's; `python3` on PATH may be a pyenv interpreter without mpi4py
SUITE_CACHE=${SUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/usnic-rs/mpi4py}
SUITE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

suite_die() {
    echo "suite: error: $*" >&2
    echo "0 passed, 1 failed"
    exit 2
}

# Prints the path of the sdist's test/ folder.
suite_testdir() {
    local have
    have=$("$SUITE_PY" -c 'import mpi4py; print(mpi4py.__version__)' 2>/dev/null) ||
        suite_die "$SUITE_PY has no mpi4py (Debian package python3-mpi4py; scripts/deps.sh installs it)"
    [ "$have" = "$MPI4PY_VERSION" ] ||
        suite_die "$SUITE_PY has mpi4py $have, the suite is pinned to $MPI4PY_VERSION (same version as Debian 12's)"
    local tgz="$SUITE_CACHE/mpi4py-$MPI4PY_VERSION.tar.gz" dir="$SUITE_CACHE/mpi4py-$MPI4PY_VERSION"
    mkdir -p "$SUITE_CACHE"
    if [ ! -s "$tgz" ]; then
        local pip
        if "$SUITE_PY" -m pip --version >/dev/null 2>&1; then pip=("$SUITE_PY" -m pip)
        elif command -v pip3 >/dev/null; then pip=(pip3)
        elif command -v pip >/dev/null; then pip=(pip)
        else suite_die "no pip to download the mpi4py $MPI4PY_VERSION sdist (apt-get install python3-pip)"; fi
        echo "suite: downloading mpi4py==$MPI4PY_VERSION sdist into $SUITE_CACHE" >&2
        "${pip[@]}" download --no-deps --no-binary :all: "mpi4py==$MPI4PY_VERSION" -d "$SUITE_CACHE" >&2 ||
            suite_die "pip download of the mpi4py $MPI4PY_VERSION sdist failed"
    fi
    if [ ! -f "$dir/test/runtests.py" ]; then
        tar -xzf "$tgz" -C "$SUITE_CACHE" "mpi4py-$MPI4PY_VERSION/test" ||
            suite_die "cannot extract test/ from $tgz"
    fi
    echo "$dir/test"
}

# Exclusions, each with its reason; printed by suite.py at the start of every run.  Keep docs/suite.md
# in step.  Format: module.Class.test=reason;...
SUITE_EXCLUDE_DEFAULT="\
test_spawn=MPI_Comm_spawn hangs intermittently on Open MPI 4.1.4 over btl tcp,self itself on this oversubscribed machine - seen over tcp,self: TestSpawnWorld.testArgsOnlyAtRoot stuck >5 min and testNoArgsMultiple ERROR, TestSpawnWorldMany.testArgsOnlyAtRoot stuck >10 min, TestSpawnSelfMany.testNoArgsMultiple silent 240 s, TestSpawnSelf.testCommSpawnMultipleDefaults2 silent 240 s at np 3 (test_dynproc still tests connect/accept between jobs)"

# Statistics of the usnic BTL (MCA args), added to the usnic side's mpirun when set; faults.sh sets a
# default (one line at finalize) to fill its retransmissions column.  The fault injector's MCA names are
# the hook USNIC_FAULT_DUP_MCA in faults.sh.
USNIC_STATS_MCA=${USNIC_STATS_MCA:-}

# 1 when the BTL under test is usnic (the MCA args that only usnic understands are then added)
suite_is_usnic() { case ",$1," in *,usnic,*) return 0 ;; esac; return 1; }

suite_check_btl() {
    local btl=$1 b
    for b in ${btl//,/ }; do
        ompi_info --parsable 2>/dev/null | grep -q "^mca:btl:$b:" && continue
        echo "suite: error: Open MPI has no 'btl $b' component (ompi_info lists none)." >&2
        [ "$b" = usnic ] && echo "suite: the usnic-rs plugin (mca_btl_usnic.so) is not installed: run ./install.sh first." >&2
        echo "0 passed, 1 failed"
        exit 2
    done
}
