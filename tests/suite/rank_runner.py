"""One MPI rank of mpi4py's own test suite, run by tests/suite/suite.py.

It drives the sdist's unmodified test/runtests.py and only adds what the harness needs:
- the rank's unittest output goes to OUTDIR/rank.N (per-rank files, parsed afterwards);
- tests listed in argv[3] (comma list of module.Class.test or module.Class ids, or -) are removed from the
  loaded suite; the harness prints every excluded id with its reason, so nothing is dropped silently.
"""
import os
import sys


def main():
    testdir, outdir, excluded_csv = sys.argv[1], sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "x"))
    out = open(os.path.join(outdir, "rank.%s" % rank), "w", buffering=1)
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    sys.path.insert(0, testdir)
    sys.dont_write_bytecode = True
    import runtests  # the sdist's own runner

    excluded = {t for t in excluded_csv.split(",") if t and t != "-"}
    if excluded:
        original = runtests.load_tests

        def load_tests(options, a):
            import unittest

            kept = unittest.TestSuite()

            def walk(suite):
                for case in suite:
                    if isinstance(case, unittest.TestSuite):
                        walk(case)
                    elif not any(case.id() == x or case.id().startswith(x + ".") for x in excluded):
                        kept.addTest(case)

            walk(original(options, a))
            return kept

        runtests.load_tests = load_tests
    # harness self-test (SUITE_SELFTEST=1 in mpi4py.sh, BTL-under-test side only): make one test fail
    # or hang on purpose, to prove that failures and hangs are caught, counted and cut
    broken = os.environ.get("SUITE_BREAK", "")
    # SUITE_BREAK_ONCE=<path>: only in the first run, which leaves <path>.<rank> behind (a flaky
    # reference run); every rank breaks alike, else the others would wait for it and hang
    once = os.environ.get("SUITE_BREAK_ONCE", "")
    if once:
        mark = "%s.%s" % (once, rank)
        if os.path.exists(mark):
            broken = ""
        else:
            open(mark, "a").close()
    if broken:
        original_lt = runtests.load_tests

        def load_tests_broken(options, a):
            import time
            import unittest

            suite = original_lt(options, a)

            def walk(s):
                for case in s:
                    if isinstance(case, unittest.TestSuite):
                        walk(case)
                    elif case.id() in broken.split(","):
                        name = case.id().rsplit(".", 1)[1]
                        hang = os.environ.get("SUITE_BREAK_MODE") == "hang"

                        def sabotaged(*_a, **_k):
                            if hang and rank == "0":
                                time.sleep(10 ** 6)
                            raise AssertionError("SUITE_BREAK: deliberately broken by the harness self-test")

                        setattr(case, name, sabotaged)

            walk(suite)
            return suite

        runtests.load_tests = load_tests_broken
    sys.argv = [os.path.join(testdir, "runtests.py")] + args
    sys.exit(runtests.main(args))


if __name__ == "__main__":
    main()
