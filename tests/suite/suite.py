#!/usr/bin/python3
"""Run mpi4py's own unit-test suite over a BTL under test and over a reference BTL, in the same run,
and compare per test.

Used by tests/suite/mpi4py.sh (one host), tests/suite/netns.sh (ranks over netns hosts) and
tests/suite/faults.sh (under injected faults).  See docs/suite.md.

Counting rule: a test counts as *failed* only when it does not pass over the BTL under test but passes
over the reference BTL in the same run (pass = same np, same pass, same test id).  Tests that fail or
are skipped on both sides are listed, not counted.  A configuration that cannot run at all is a failure
of the whole run (exit 2), never a silent pass.
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's python3 carries python3-mpi4py; `python3` on PATH may not

# Passes: (name, extra mpirun args, runtests args, module filter or None)
RMA_MODULES = ["test_rma", "test_rma_nb", "test_win"]
PASSES = {
    # the suite's default: mpi4py initialises MPI_THREAD_MULTIPLE; osc left to Open MPI
    "main": ([], [], None),
    # osc pt2pt refuses MPI_THREAD_MULTIPLE in Open MPI 4.1 (help-osc-pt2pt.txt
    # mpi-thread-multiple-not-supported), so the RMA passes initialise MPI_THREAD_SINGLE
    "rma-pt2pt": (["--mca", "osc", "pt2pt"], ["--thread-level", "single"], RMA_MODULES),
    "rma-rdma": (["--mca", "osc", "rdma"], ["--thread-level", "single"], RMA_MODULES),
}

RESULT_RE = re.compile(r"(ok|FAIL|ERROR|skipped(?: '.*')?|expected failure|unexpected success)\s*$")
START_RE = re.compile(r"^(\w+) \((\w+)\.([\w.]+)\)")
FAILHDR_RE = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \((\w+)\.([\w.]+)\)")

FAILISH = {"FAIL", "ERROR", "HANG", "NOTRUN", "XPASS", "MISSING", "EXIT"}


def safe(label):
    return re.sub(r"[^\w.-]+", "_", label).strip("_")


def now():
    return time.monotonic()


def log(msg):
    print(msg, flush=True)


def parse_rank(text):
    """unittest -v output of one rank -> (ordered [(test_id, status, detail)], started_but_unfinished id,
    finished flag).  Open MPI or the test itself may write between '... ' and the result word, so the
    result is searched on the same line first, then at the start of the following lines."""
    results = []
    pending = None
    reasons = {}
    failed_hdr = {}
    lines = text.split("\n")
    finished = any(re.match(r"^Ran \d+ tests? in ", ln) for ln in lines)
    i = 0
    in_tracebacks = False
    cur_fail = None
    for ln in lines:
        if re.match(r"^={20,}$", ln):
            in_tracebacks = True
            cur_fail = None
            continue
        if in_tracebacks:
            m = FAILHDR_RE.match(ln)
            if m:
                cur_fail = "%s.%s" % (m.group(3), m.group(4))
                failed_hdr[cur_fail] = "XPASS" if m.group(1).startswith("UNEXPECTED") else m.group(1)
                continue
            if re.match(r"^Ran \d+ tests? in ", ln):
                in_tracebacks = False
                cur_fail = None
                continue
            if cur_fail and ln.strip() and not re.match(r"^-{20,}$", ln):
                reasons[cur_fail] = ln.strip()[:160]  # keeps the last line: the exception
            continue
        m = START_RE.match(ln)
        if m and " ... " in ln or (m and ln.rstrip().endswith("...")):
            if pending:
                results.append((pending, "MISSING", "no result word in output"))
            pending = "%s.%s" % (m.group(2), m.group(3))
            tail = ln.split(" ... ", 1)[1] if " ... " in ln else ""
            r = RESULT_RE.match(tail.strip()) if tail.strip() else None
            if r:
                results.append((pending, norm(r.group(1)), r.group(1)))
                pending = None
            continue
        if pending:
            r = RESULT_RE.match(ln.strip())
            if r and ln.strip() == r.group(0).strip():
                results.append((pending, norm(r.group(1)), r.group(1)))
                pending = None
        i += 1
    # a test named in the FAIL/ERROR sections failed, whatever its progress line said (a failing
    # subTest does not always print FAIL on the test's own line)
    out = []
    seen = set()
    for tid, st, det in results:
        if tid in failed_hdr and st not in FAILISH:
            st = failed_hdr[tid]
        if st in FAILISH and tid in reasons:
            det = reasons[tid]
        out.append((tid, st, det))
        seen.add(tid)
    for tid, st in failed_hdr.items():
        if tid not in seen:
            out.append((tid, st, reasons.get(tid, "")))
    return out, pending, finished


def norm(word):
    if word == "ok" or word == "expected failure":
        return "PASS"
    if word.startswith("skipped"):
        return "SKIP"
    if word == "unexpected success":
        return "XPASS"
    return word  # FAIL / ERROR


class Side:
    """One configuration (BTL list + its own MCA args) of one np and one pass."""

    def __init__(self, label, btl, extra):
        self.label, self.btl, self.extra = label, btl, extra


def kill_tree(proc, marker):
    """Stop an mpirun we started (its own session) and any rank it left behind.  Leftover ranks are found
    by the unique output directory in their command line and killed by PID."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", "--", marker], capture_output=True, text=True).stdout.split()
    for pid in left:
        if int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), signal.SIGKILL)
            log("    killed leftover process %s (%s)" % (pid, marker))
        except (ProcessLookupError, PermissionError):
            pass


CURRENT = {}  # the mpirun running now, so that SIGTERM/SIGINT on the harness stops it too


def on_signal(signum, frame):
    proc, marker = CURRENT.get("proc"), CURRENT.get("marker")
    if proc is not None and proc.poll() is None:
        kill_tree(proc, marker)
    log("suite: interrupted by signal %d; the running mpirun was stopped" % signum)
    log("0 passed, 1 failed")
    sys.exit(124 if signum == signal.SIGTERM else 130)


class Runner:
    def __init__(self, a):
        self.a = a
        self.launcher = shlex.split(a.launcher) if a.launcher else []
        self.common = shlex.split(a.mpirun_args) if a.mpirun_args else []
        self.timeout, self.stall = a.timeout, a.stall
        self.excluded = parse_excludes(a.exclude)
        self.log_runs = []

    def mpirun_cmd(self, side, np, pass_args, rundir, rt_args, modules):
        cmd = list(self.launcher) + [
            "mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none",
            "--mca", "pml", "ob1", "--mca", "btl", side.btl,
        ] + self.common + side.extra + pass_args
        inc = ["-i", "^(%s)$" % "|".join(modules)]
        excl = ",".join(sorted(self.excluded)) or "-"
        cmd += [PY, os.path.join(HERE, "rank_runner.py"), self.a.testdir, rundir, excl,
                "-v", "--no-builddir"] + rt_args + inc
        return cmd

    def run_side(self, side, np, pname, modules, outroot):
        """Run `modules` until each one has either finished or been cut at a hung/crashed test.
        Returns (results {test_id: (status, detail)}, seconds, notes)."""
        pass_args, rt_args, _ = PASSES[pname]
        remaining = list(modules)
        results, notes, seconds, attempt = {}, [], 0.0, 0
        exit_problem = None
        while remaining:
            attempt += 1
            rundir = os.path.join(outroot, "%s-np%d-%s-%d" % (safe(side.label), np, pname, attempt))
            os.makedirs(rundir, exist_ok=True)
            cmd = self.mpirun_cmd(side, np, pass_args, rundir, rt_args, remaining)
            with open(os.path.join(rundir, "cmd"), "w") as f:
                f.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
            mlog = open(os.path.join(rundir, "mpirun.log"), "w")
            t0 = now()
            proc = subprocess.Popen(cmd, stdout=mlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            CURRENT.update(proc=proc, marker=rundir)
            last_size, last_change, why = -1, t0, None
            while proc.poll() is None:
                time.sleep(1)
                size = sum(os.path.getsize(os.path.join(rundir, f)) for f in os.listdir(rundir))
                if size != last_size:
                    last_size, last_change = size, now()
                if now() - t0 > self.timeout:
                    why = "hard timeout %ds" % self.timeout
                elif now() - last_change > self.stall:
                    why = "no output for %ds" % self.stall
                if why:
                    kill_tree(proc, rundir)
                    break
            rc = proc.returncode
            el = now() - t0
            seconds += el
            mlog.close()
            self.log_runs.append({"side": side.label, "np": np, "pass": pname, "attempt": attempt,
                                  "rc": rc, "seconds": round(el, 1), "why": why, "dir": rundir})
            ranks = {}
            for r in range(np):
                p = os.path.join(rundir, "rank.%d" % r)
                ranks[r] = parse_rank(open(p, errors="replace").read()) if os.path.exists(p) else ([], None, False)
            order = []  # test ids in the order rank 0 (or the longest rank) ran them
            for r in sorted(ranks, key=lambda r: -len(ranks[r][0])):
                order = [t for t, _, _ in ranks[r][0]]
                break
            per = {r: {t: (s, d) for t, s, d in ranks[r][0]} for r in ranks}
            all_finished = all(ranks[r][2] for r in ranks)
            # the cut point: the first test (in run order) some rank did not complete
            cut = None
            for t in order:
                if any(t not in per[r] for r in per):
                    cut = t
                    break
            if cut is None:
                pend = [ranks[r][1] for r in ranks if ranks[r][1]]
                if pend:
                    cut = pend[0]
            for t in order:
                if t == cut:
                    break
                sts = [per[r][t] for r in per]
                bad = [s for s in sts if s[0] in FAILISH]
                if bad:
                    results[t] = bad[0]
                elif all(s[0] == "SKIP" for s in sts):
                    results[t] = sts[0]
                elif any(s[0] == "SKIP" for s in sts):
                    results[t] = ("SKIP", "skipped on some ranks: " + sts[0][1])
                else:
                    results[t] = ("PASS", "")
            if all_finished and cut is None:
                if rc != 0 and not any(results.get(t, ("",))[0] in FAILISH for t in order):
                    exit_problem = "mpirun exit status %s with no failing test (%s)" % (rc, rundir)
                remaining = []
                if not order:
                    notes.append("%s np%d %s: no test ran (%s)" % (side.label, np, pname, rundir))
                    exit_problem = exit_problem or "no test ran, see %s/mpirun.log" % rundir
                break
            # the run ended early: hang, crash or abort
            how = why or ("mpirun exited with status %s before every rank finished" % rc)
            if cut is None:
                # nothing started or every started test finished: the job died between tests or at start
                done_mods = {t.split(".")[0] for t in order}
                nxt = [m for m in remaining if m not in done_mods]
                last_mod = order[-1].split(".")[0] if order else None
                if last_mod:
                    nxt = [m for m in remaining if remaining.index(m) > remaining.index(last_mod)]
                    results["%s.(rest of module)" % last_mod] = ("HANG" if why else "ERROR", how)
                else:
                    results["%s.(module start)" % remaining[0]] = ("HANG" if why else "ERROR", how)
                    nxt = remaining[1:]
                notes.append("%s np%d %s attempt %d: %s; resuming after %s" % (
                    side.label, np, pname, attempt, how, last_mod or remaining[0]))
                remaining = nxt
                continue
            results[cut] = ("HANG" if why else "ERROR", how)
            cmod = cut.split(".")[0]
            # tests of the cut module after the cut point never ran on every rank
            seen_after = False
            for t in order:
                if t == cut:
                    seen_after = True
                    continue
                if seen_after and t.split(".")[0] == cmod and t not in results:
                    results[t] = ("NOTRUN", "module cut at %s" % cut)
            notes.append("%s np%d %s attempt %d: %s at %s; resuming after module %s" % (
                side.label, np, pname, attempt, how, cut, cmod))
            remaining = remaining[remaining.index(cmod) + 1:] if cmod in remaining else remaining[1:]
        if exit_problem:
            results["(mpirun exit status)"] = ("EXIT", exit_problem)
        else:
            results["(mpirun exit status)"] = ("PASS", "")
        return results, seconds, notes


def all_skipped(results):
    """Whether a side ran tests and skipped every one (pseudo-tests such as the exit status aside)."""
    real = [v for k, v in results.items() if not k.startswith("(")]
    return bool(real) and all(v[0] == "SKIP" for v in real)


def osc_reason(outroot, label, np, pname):
    """The first Open MPI help/error line of an RMA pass whose windows could not be created."""
    import glob
    for p in sorted(glob.glob(os.path.join(outroot, "%s-np%d-%s-*" % (safe(label), np, pname)))):
        for f in ["mpirun.log"] + sorted(x for x in os.listdir(p) if x.startswith("rank.")):
            try:
                for ln in open(os.path.join(p, f), errors="replace"):
                    if re.search(r"osc|one.sided|MPI_THREAD|not support|No .*component|unable", ln, re.I) \
                            and not re.match(r"^test\w+ \(", ln):
                        return ln.strip()[:140]
            except OSError:
                pass
    return "no Open MPI message; mpi4py skips RMA tests when MPI.Win.Create fails"


def parse_excludes(spec):
    """SUITE_EXCLUDE format: 'test.id=reason;test.id=reason'."""
    out = {}
    for item in (spec or "").split(";"):
        item = item.strip()
        if not item:
            continue
        tid, _, why = item.partition("=")
        out[tid.strip()] = why.strip() or "no reason given"
    return out


def preflight(runner, side, np, outroot):
    """A tiny mpi4py job (allreduce + a ring of sendrecv of 1 MiB) must run before the suite does."""
    d = os.path.join(outroot, "preflight-%s-np%d" % (safe(side.label), np))
    os.makedirs(d, exist_ok=True)
    code = ("from mpi4py import MPI; c=MPI.COMM_WORLD; r=c.rank; n=c.size; "
            "import array; b=array.array('b',[r%7])*(1<<20); o=array.array('b',[0])*(1<<20); "
            "c.Sendrecv(b,(r+1)%n,0,o,(r-1)%n,0); assert o[12345]==((r-1)%n)%7; "
            "assert c.allreduce(1)==n; print('preflight-ok', r)")
    cmd = list(runner.launcher) + ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none",
                                   "--mca", "pml", "ob1", "--mca", "btl", side.btl] + runner.common + side.extra + [
        PY, "-c", code]
    with open(os.path.join(d, "cmd"), "w") as f:
        f.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
    t0 = now()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    CURRENT.update(proc=proc, marker=d)
    try:
        out, _ = proc.communicate(timeout=min(120, runner.timeout))
    except subprocess.TimeoutExpired:
        kill_tree(proc, d)
        out = "preflight timed out after %ds" % min(120, runner.timeout)
    open(os.path.join(d, "log"), "w").write(out or "")
    ok = proc.returncode == 0 and (out or "").count("preflight-ok") == np
    return ok, out or "", now() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--btl", default="usnic,self", help="BTL list under test")
    ap.add_argument("--btl-args", default="", help="MCA args only for the BTL under test")
    ap.add_argument("--ref-btl", default="tcp,self")
    ap.add_argument("--ref-args", default="")
    ap.add_argument("--np", default="2,3")
    ap.add_argument("--passes", default="main,rma-pt2pt,rma-rdma")
    ap.add_argument("--modules", default="", help="regex on module names (default: all)")
    ap.add_argument("--launcher", default="", help="command prefix for mpirun (e.g. netns exec)")
    ap.add_argument("--mpirun-args", default="")
    ap.add_argument("--timeout", type=int, default=1800, help="hard limit per mpirun, seconds")
    ap.add_argument("--stall", type=int, default=600, help="kill an mpirun whose ranks print nothing for this long")
    ap.add_argument("--exclude", default="", help="'module.Class.test=reason;...'")
    ap.add_argument("--summary-json", default="")
    ap.add_argument("--title", default="mpi4py 3.1.4 test suite")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    os.makedirs(a.out, exist_ok=True)
    runner = Runner(a)
    label_t = a.btl.replace(",self", "").replace("self,", "")
    label_r = a.ref_btl.replace(",self", "").replace("self,", "") if a.ref_btl != "none" else "(none)"
    if label_t == label_r:
        label_t, label_r = label_t + "(under test)", label_r + "(reference)"
    test = Side(label_t, a.btl, shlex.split(a.btl_args))
    ref = None if a.ref_btl == "none" else Side(label_r, a.ref_btl, shlex.split(a.ref_args))
    refl = ref or Side("(none)", "none", [])
    if ref is None:
        log("   single-side mode (--ref-btl none): every test that does not PASS or SKIP counts as failed")
    nps = [int(x) for x in a.np.split(",") if x]
    passes = [p for p in a.passes.split(",") if p]
    for p in passes:
        if p not in PASSES:
            sys.exit("suite: unknown pass %r (known: %s)" % (p, ", ".join(PASSES)))
    allmods = sorted(f[:-3] for f in os.listdir(a.testdir) if f.startswith("test_") and f.endswith(".py"))
    if a.modules:
        mods = [m for m in allmods if re.search(a.modules, m)]
        log("module selection %r: %d of %d modules: %s" % (a.modules, len(mods), len(allmods), " ".join(mods)))
        log("not selected: %s" % " ".join(m for m in allmods if m not in mods))
    else:
        mods = allmods
    log("== %s: BTL under test %r vs reference %r, np %s, passes %s" % (a.title, a.btl, a.ref_btl, a.np, a.passes))
    log("   mpirun prefix: %s" % (a.launcher or "(none)"))
    log("   common args: %s | under test: %s | reference: %s" % (a.mpirun_args, a.btl_args, a.ref_args))
    log("   per-mpirun hard timeout %ds, stall timeout %ds, output in %s" % (a.timeout, a.stall, a.out))
    if runner.excluded:
        log("   EXCLUDED tests (not run on either side):")
        for t, why in sorted(runner.excluded.items()):
            log("     - %s: %s" % (t, why))

    summary = {"title": a.title, "btl": a.btl, "ref_btl": a.ref_btl, "configs": [], "passed": 0, "failed": 0,
               "excluded": runner.excluded}
    t_start = now()
    # preflight: both configurations must be able to run a trivial job at every np
    pre_fail = []
    for np in nps:
        for side in [s for s in (test, ref) if s]:
            ok, out, el = preflight(runner, side, np, a.out)
            log("   preflight %-22s np %d: %s (%.1fs)" % (side.label, np, "ok" if ok else "FAILED", el))
            if not ok:
                pre_fail.append((side, np, out))
    if pre_fail:
        for side, np, out in pre_fail:
            log("\nCONFIGURATION COULD NOT RUN: --mca btl %s, np %d. Output (last 25 lines):" % (side.btl, np))
            for ln in out.strip().split("\n")[-25:]:
                log("   | " + ln)
        log("\nThe suite was not run: a configuration could not run at all (this is a failure, not a skip).")
        summary["error"] = "preflight failed: " + ", ".join("%s np%d" % (s.btl, n) for s, n, _ in pre_fail)
        summary["failed"] = len(pre_fail)
        if a.summary_json:
            json.dump(summary, open(a.summary_json, "w"), indent=1)
        log("0 passed, %d failed" % len(pre_fail))
        return 2

    passed = failed = 0
    listed = []
    notes_all = []
    side_by_side = open(os.path.join(a.out, "side-by-side.txt"), "w")
    for np in nps:
        for pname in passes:
            pmods = [m for m in mods if PASSES[pname][2] is None or m in PASSES[pname][2]]
            if not pmods:
                continue
            log("\n-- np %d, pass %s (%d modules) --" % (np, pname, len(pmods)))
            rt, st, nt = runner.run_side(test, np, pname, pmods, a.out)
            log("   %-22s %7.1fs" % (test.label, st))
            if ref:
                rr, sr, nr = runner.run_side(ref, np, pname, pmods, a.out)
                log("   %-22s %7.1fs" % (refl.label, sr))
                # A test that did not pass over the BTL under test is excused only when the reference
                # fails it too, twice: one flaky or hung reference run (a hang also cuts the rest of its
                # module) must not hide a failure. Its modules run over the reference once more.
                again = sorted({t.split(".")[0] for t in set(rt) | set(rr) if not t.startswith("(")
                                and rt.get(t, ("ABSENT",))[0] not in ("PASS", "SKIP")
                                and rr.get(t, ("ABSENT",))[0] not in ("PASS", "SKIP")})
                if again:
                    log("   %s again for %s: %s" % (refl.label, "tests that passed on neither side", " ".join(again)))
                    # Its own directory: the first run's outputs are the evidence of its failure.
                    rr2, sr2, nr2 = runner.run_side(ref, np, pname, again, os.path.join(a.out, "again"))
                    sr += sr2
                    nr = nr + nr2
                    for t, v in rr2.items():
                        if not t.startswith("(") and v[0] == "PASS" and rr.get(t, ("ABSENT",))[0] != "PASS":
                            rr[t] = ("PASS", "passed over the reference when run again")
            else:
                # no reference: a test "passes over the reference" unless the BTL under test skipped it
                rr = {t: (("PASS", "") if v[0] != "SKIP" else v) for t, v in rt.items()}
                sr, nr = 0.0, []
            for n in nt + nr:
                log("   note: " + n)
            if pname.startswith("rma"):
                for side, res in [x for x in ((test, rt), (ref, rr)) if x[0]]:
                    if all_skipped(res):
                        why = osc_reason(a.out, side.label, np, pname)
                        log("   note: %s: every RMA test skipped over %s (window creation failed: %s)" % (
                            pname, side.label, why))
            notes_all += nt + nr
            cfg = {"np": np, "pass": pname, "seconds_test": round(st, 1), "seconds_ref": round(sr, 1)}
            ids = sorted(set(rt) | set(rr))
            # per-module side-by-side summary
            permod = {}
            cp = cf = 0
            for t in ids:
                s1 = rt.get(t, ("ABSENT", "not run over this BTL"))
                s2 = rr.get(t, ("ABSENT", "not run over the reference BTL"))
                mod = t.split(".")[0]
                pm = permod.setdefault(mod, [{}, {}])
                pm[0][s1[0]] = pm[0].get(s1[0], 0) + 1
                pm[1][s2[0]] = pm[1].get(s2[0], 0) + 1
                if s1[0] == "PASS":
                    verdict = "passed"
                    # The exit-status row is a check when it fails, not a test when it passes: a pass
                    # whose every test was skipped must not count one.
                    cp += not t.startswith("(")
                    if s2[0] != "PASS":
                        listed.append((np, pname, t, s1, s2, "passes over %s only (reference %s)" % (test.label, s2[0])))
                elif s2[0] == "PASS" or (s2[0] == "SKIP" and s1[0] != "SKIP"):
                    # Failed, or did not run, where the reference passed or skipped it.
                    verdict = "FAILED"
                    cf += 1
                    listed.append((np, pname, t, s1, s2, "FAILED: %s over %s, %s over %s" % (s1[0], test.label, s2[0], refl.label)))
                else:
                    verdict = "listed"
                    listed.append((np, pname, t, s1, s2, "not counted: %s over %s, %s over %s" % (s1[0], test.label, s2[0], refl.label)))
                side_by_side.write("np%d %-9s %-70s %-6s %-6s %s\n" % (np, pname, t, s1[0], s2[0], verdict))
            f = lambda d: " ".join("%s=%d" % (k, v) for k, v in sorted(d.items()))
            if ref:
                log("   %-24s | %-34s | %-34s" % ("module", test.label, refl.label))
                for mod in sorted(permod):
                    mark = "" if permod[mod][0] == permod[mod][1] else "   <-- differs"
                    log("   %-24s | %-34s | %-34s%s" % (mod, f(permod[mod][0]), f(permod[mod][1]), mark))
                log("   np %d %s: %d passed, %d failed (counted); %s %.1fs vs %s %.1fs" % (
                    np, pname, cp, cf, test.label, st, refl.label, sr))
            else:
                log("   %-24s | %-34s" % ("module", test.label))
                for mod in sorted(permod):
                    log("   %-24s | %-34s" % (mod, f(permod[mod][0])))
                log("   np %d %s: %d passed, %d failed; %s %.1fs" % (np, pname, cp, cf, test.label, st))
            if all_skipped(rt):
                # Every test skipped over the BTL under test (RMA windows that could not be created,
                # say): the pass tested nothing, which is not a pass.
                cf += 1
                log("   FAILED: every test of np %d %s was skipped over %s: the pass tested nothing" % (
                    np, pname, test.label))
            cfg.update(passed=cp, failed=cf)
            summary["configs"].append(cfg)
            passed += cp
            failed += cf
    side_by_side.close()

    fails = [x for x in listed if x[5].startswith("FAILED")]
    others = [x for x in listed if not x[5].startswith("FAILED")]
    if others:
        log("\nListed, not counted (%d): tests that did not pass on both sides, or passed only over %s:" % (len(others), test.label))
        agg = {}
        for np, pname, t, s1, s2, why in others:
            key = (t, s1[0], s2[0], s1[1] if s1[0] != "PASS" else s2[1])
            agg.setdefault(key, []).append("np%d/%s" % (np, pname))
        # fold tests of one class with identical outcome into one line
        fold = {}
        for (t, a1, a2, det), where in agg.items():
            cls = t.rsplit(".", 1)[0] if t.count(".") >= 2 else t
            fold.setdefault((cls, a1, a2, det, ",".join(where)), []).append(t)
        for (cls, a1, a2, det, where), ts in sorted(fold.items()):
            name = ts[0] if len(ts) == 1 else "%s.* (%d tests)" % (cls, len(ts))
            log("   %-60s %-6s %-6s [%s] %s" % (name, a1, a2, where, det[:90]))
    if fails:
        log("\nFAILED over %s while passing over %s (%d):" % (test.label, refl.label, len(fails)))
        for np, pname, t, s1, s2, why in fails:
            log("   np%d %-9s %-60s %s: %s" % (np, pname, t, s1[0], s1[1][:120]))
    total = now() - t_start
    summary.update(passed=passed, failed=failed, seconds_total=round(total, 1), notes=notes_all,
                   runs=runner.log_runs,
                   seconds_test=round(sum(c["seconds_test"] for c in summary["configs"]), 1),
                   seconds_ref=round(sum(c["seconds_ref"] for c in summary["configs"]), 1))
    log("\nper-test side-by-side table: %s" % os.path.join(a.out, "side-by-side.txt"))
    log("runtime: %.0fs total (%s %.0fs, %s %.0fs, rest = preflight/launch)" % (
        total, test.label, summary["seconds_test"], refl.label, summary["seconds_ref"]))
    if a.summary_json:
        json.dump(summary, open(a.summary_json, "w"), indent=1)
    log("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
