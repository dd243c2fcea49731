#!/usr/bin/python3
"""Self-test of bench/summarize.py on a committed run's raw files (no benchmark is run).

usage: summarize_selftest.py [RESULT_DIR]   (default bench/results/netns)

1. The committed summary.md is made again, byte for byte, from the raw-<stamp>.tar.gz beside it.
2. The verdict rules hold on that data changed three ways: the subject's lossy jobs failing in 4 of
   5 repetitions make its loss row NOT met (the successful one alone would read met); one repetition
   of its latency jobs removed leaves the latency rows without a verdict; a size removed from its
   bandwidth jobs leaves the bandwidth row without one.
Plots are not drawn (a stub stands in for plot.py, which needs matplotlib).
Ends with `N passed, M failed`; exit status 1 on any failure.
"""
import csv
import glob
import io
import os
import shutil
import sys
import tarfile
import tempfile
import types
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
stub = types.ModuleType("plot")
stub.draw = lambda *a, **k: None
sys.modules["plot"] = stub
sys.path.insert(0, HERE)
import summarize  # noqa: E402

passed, failed = 0, 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print("PASS " + what)
    else:
        failed += 1
        print("FAIL " + what)


def summary_of(raw):
    out = tempfile.mkdtemp(prefix="summarize-selftest-out.")
    try:
        argv, sys.argv = sys.argv, ["summarize.py", raw, out]
        try:
            with redirect_stdout(io.StringIO()):
                summarize.main()
        finally:
            sys.argv = argv
        with open(os.path.join(out, "summary.md")) as f:
            return f.read()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def row(text, name):
    """The cells of the target table's row whose first cell starts with name."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].startswith(name):
            return cells
    return None


def edit_jobs(raw, change):
    path = os.path.join(raw, "jobs.tsv")
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    fields = list(rows[0].keys())
    rows = [r for r in (change(dict(r)) for r in rows) if r is not None]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main():
    result = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results", "netns")
    tars = glob.glob(os.path.join(result, "raw-*.tar.gz"))
    if len(tars) != 1:
        check(False, "%s holds one raw-<stamp>.tar.gz (found %d)" % (result, len(tars)))
        return
    work = tempfile.mkdtemp(prefix="summarize-selftest.")
    try:
        # <dir>/raw/<stamp>, as bench/results/raw/<stamp>: the summary names it relative to <dir>.
        with tarfile.open(tars[0]) as t:
            t.extractall(os.path.join(work, "raw"))
        (stamp,) = os.listdir(os.path.join(work, "raw"))
        base = os.path.join(work, "raw", stamp)
        with open(os.path.join(result, "summary.md")) as f:
            committed = f.read()
        subj = summarize.Run(base).subject
        clean = summary_of(base)
        check(clean == committed, "the committed %s/summary.md is made again from its raw files"
              % os.path.basename(result))

        def variant(name, change):
            d = os.path.join(work, name, "raw", stamp)
            shutil.copytree(base, d)
            edit_jobs(d, change)
            return summary_of(d)

        loss = [l for l in (row(clean, "bandwidth with 5 % loss"),) if l]
        if loss:
            col = summarize.Run(base).configs.index(subj) + 2

            def fail_loss(j):
                if j["scenario"] == "loss5" and j["config"] == subj and j["rep"] in ("1", "2", "3", "4"):
                    j.update(status="failed", rc="124", note="timeout after 180 s")
                return j

            r = row(variant("loss", fail_loss), "bandwidth with 5 % loss")
            check("**met**" in loss[0][col] and r is not None and "**NOT met** (4 jobs failed" in r[col],
                  "lossy jobs failing in 4 of 5 repetitions fail the loss row (was: %s; now: %s)"
                  % (loss[0][col], r[col] if r else None))
        else:
            check(False, "the run has a 5 % loss row")

        def drop_latency_rep(j):
            keep = not (j["scenario"] == "clean" and j["config"] == subj and j["bench"] == "latency" and j["rep"] == "2")
            return j if keep else None

        text = variant("latency", drop_latency_rep)
        r = row(text, "latency 0–64 B vs udp;ofi_rxd")
        col = summarize.Run(base).configs.index(subj) + 2
        check(r is not None and "no verdict: 4 of 5 repetitions" in r[col],
              "4 repetitions leave no verdict (%s)" % (r[col] if r else None))

        def drop_size(j):
            if j["scenario"] == "clean" and j["config"] == subj and j["bench"] == "bw" and j["status"] == "ok":
                f = os.path.join(work, "size", "raw", stamp, j["file"])
                with open(f) as fh:
                    lines = [l for l in fh if not l.split()[:1] == ["1048576"]]
                with open(f, "w") as fh:
                    fh.writelines(lines)
            return j

        d = os.path.join(work, "size", "raw", stamp)
        shutil.copytree(base, d)
        edit_jobs(d, drop_size)
        r = row(summary_of(d), "bidirectional / unidirectional bandwidth")
        check(r is not None and "no verdict: no value at 1M" in r[col],
              "a size without values leaves no verdict (%s)" % (r[col] if r else None))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
