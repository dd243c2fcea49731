#!/usr/bin/python3
"""Turns one bench/run.sh run (a raw directory) into ratio tables and plots.

usage: summarize.py RAW_DIR OUT_DIR

Reads RAW_DIR/meta.txt and RAW_DIR/jobs.tsv (every job with its exit status and raw output file), takes the
median over the successful repetitions of every (scenario, configuration, benchmark, size), and writes
OUT_DIR/summary.md (also printed) plus latency.png, bandwidth.png and, with loss runs, loss.png.
Ratios of the clean scenario are paired: the median over the repetitions of subject(r) / reference(r), both
measured in repetition r (the VM drifts between a fast and a slow state over minutes, and the jobs of one
repetition run within a minute or two of each other). The loss fractions are paired the same way when
meta.txt says `loss_interleaved: yes` (each repetition ran its clean job and its lossy jobs back to back);
older runs ran the lossy and the clean blocks minutes apart, and their loss fractions stay one median over
another. With fewer than MIN_PAIRED pairs a ratio is one median over another from the same run too.
Targets are those of issue 5.
"""
import csv
import os
import re
import statistics
import sys

import plot

SMALL = [0, 1, 2, 4, 8, 16, 32, 64]
BIG_LO, BIG_HI = 64 * 1024, 4 * 1024 * 1024
# Keys of the raw streaming series that are not message sizes: full datagrams one way, both ways.
RAW_FULL, RAW_BIDIR = -1, -2
LOSS_THRESHOLDS = {1.0: 0.7, 5.0: 0.4}
# Fewest repetitions measured on both sides for a paired ratio; below it the ratio of medians stands in.
MIN_PAIRED = 3
# Issue 5 judges medians of at least 5 repetitions: with fewer at any size of a target's range (a quick
# run, or a reference job that failed) the cell shows its ratio but no verdict.
VERDICT_REPS = 5
CFG_ORDER = ["usnic", "tcp", "rxd", "vader"]
CFG_LABEL = {
    "usnic": "usnic (ob1+btl usnic)",
    "tcp": "tcp (ob1+btl tcp)",
    "rxd": "rxd (cm+ofi udp;ofi_rxd)",
    "vader": "vader (ob1+btl vader)",
}


def read_meta(raw):
    meta = {}
    with open(os.path.join(raw, "meta.txt")) as f:
        for line in f:
            if ": " in line:
                k, v = line.rstrip("\n").split(": ", 1)
                meta[k] = v
    return meta


def read_jobs(raw):
    with open(os.path.join(raw, "jobs.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def parse_size_token(tok):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)", tok)
    if not m:
        return None
    mult = {"": 1, "k": 1024, "m": 1 << 20, "g": 1 << 30}[m.group(2)]
    return int(round(float(m.group(1)) * mult))


RAW_INFO = {}  # what the raw streaming test said about its datagram sizes, per device section
RAW_BIDIR_HOW = ["two threads, window 64 each, full datagrams"]  # how the both-ways stream ran


def parse_raw_datagram(lines, section_wanted, pingpong=None):
    """Output of `cargo bench --bench raw_datagram` (branch fabric): device sections
    '== <label>: <dev> <ip> (interface MTU M, data datagram D B, priority P B)' with streaming rows
    'window 64 (D B)  <MB/s> <kdgram/s> <delivered>%'. Also accepts the documented contract lines
    'raw_datagram dgram=D [size=S] MB/s=X'. Returns {size or -1: MB/s} for the wanted section; its
    message ping-pong rows 'ping-pong, S B in K datagrams  <p50> <p99> <mean>' go into `pingpong` as
    {S: mean one-way µs}."""
    out = {}
    section = None
    for line in lines:
        m = re.match(r"ping-pong, (\d+) B in (\d+) datagrams?\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", line)
        if m and section == section_wanted and pingpong is not None:
            pingpong[int(m.group(1))] = float(m.group(5))
            continue
        m = re.match(r"== (.+?): (\S+) (\S+) \(interface MTU (\d+), data datagram (\d+) B, priority (\d+) B(?:, [^)]*)?\)", line)
        if m:
            section = m.group(1)
            RAW_INFO[section] = "device %s, interface MTU %s, data datagram %s B, priority %s B" % (
                m.group(2), m.group(4), m.group(5), m.group(6))
            continue
        m = re.match(r"(window \d+|stream across hosts) \((\d+) B\)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%", line)
        if m and section == section_wanted:
            out[RAW_FULL] = float(m.group(3))
            RAW_INFO[section] += "; %s stream delivered %s %%" % (m.group(1), m.group(5))
            continue
        m = re.match(r"bidirectional, (window \d+|blast) \((\d+) B\)\s+([0-9.]+)", line)
        if m and section == section_wanted:
            out[RAW_BIDIR] = float(m.group(3))
            RAW_BIDIR_HOW[0] = (
                "two threads, window 64 each, full datagrams" if m.group(1).startswith("window")
                else "one process per host, each sending full datagrams as fast as it can post them "
                "while it reads the other's")
            continue
        m = re.match(r"messages of (\d+) B \((\d+) datagrams\)\s+([0-9.]+)", line)
        if m and section == section_wanted:
            out[int(m.group(1))] = float(m.group(3))
            continue
        m = re.search(r"MB/s=([0-9.]+)", line)
        if m and line.startswith("raw_datagram"):
            sz = re.search(r"size=(\d+)", line)
            out[int(sz.group(1)) if sz else -1] = float(m.group(1))
    return out


def parse_job(raw, job, meta):
    """Returns {bench: {size: value}} for one successful job (its own bench; the raw datagram test's
    message ping-pong too, as bench raw_pingpong), or {} when nothing parsable is in it."""
    if job["bench"] != "raw_datagram":
        out = parse_job_bench(raw, job, meta)
        return {job["bench"]: out} if out else {}
    pp = {}
    with open(os.path.join(raw, job["file"]), errors="replace") as f:
        out = parse_raw_datagram(f.readlines(), meta.get("raw_stream_section", "BTL default device"), pp)
    return {b: v for b, v in (("raw_datagram", out), ("raw_pingpong", pp)) if v}


def parse_job_bench(raw, job, meta):
    """Returns {size: value} of one successful job's own bench, or {} when nothing parsable is in it."""
    path = os.path.join(raw, job["file"])
    bench = job["bench"]
    out = {}
    with open(path, errors="replace") as f:
        lines = f.readlines()
    if bench.startswith("fi_pingpong_S"):
        sarg = bench[len("fi_pingpong_S"):]
        for line in lines:
            parts = line.split()
            if len(parts) >= 8 and parts[0] != "bytes" and not line.startswith("#"):
                size = parse_size_token(parts[0]) if sarg == "all" else int(sarg)
                try:
                    out[size] = float(parts[6])  # usec/xfer: one-way time
                except ValueError:
                    pass
        return out
    if bench == "netpipe":
        npout = os.path.join(raw, os.path.dirname(job["file"]), "netpipe.np.out")
        if os.path.exists(npout):
            with open(npout) as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 3:
                        out[int(p[0])] = (float(p[2]) * 1e6, float(p[1]) / 8)  # (one-way µs, MB/s)
        return out
    for line in lines:
        if line.startswith("#") or not line.strip():
            continue
        p = line.split()
        try:
            size = int(p[0])
            out[size] = float(p[1])  # latency µs, bw MB/s, or mr messages/s
        except (ValueError, IndexError):
            continue
    return out


def floors_paired_in_time(jobs):
    """Whether repetition r of the raw floors ran right before repetition r of the MPI jobs (bench/run.sh
    since 1c3fb43). Older runs measured every floor repetition in one block first, so their repetition
    numbers pair nothing in time. jobs.tsv lists the jobs in the order they ran."""
    mpi_rep = 0  # highest repetition of a clean MPI job so far
    for j in jobs:
        if j["scenario"] != "clean" or not j["rep"].isdigit():
            continue
        rep = int(j["rep"])
        if j["config"] in ("raw_floor", "raw_stream", "raw_stream_batched"):
            if rep > 1 and mpi_rep < rep - 1:
                return False
        else:
            mpi_rep = max(mpi_rep, rep)
    return True


class Run:
    def __init__(self, raw):
        self.raw = raw
        self.meta = read_meta(raw)
        self.jobs = read_jobs(raw)
        # (scen, cfg, bench) -> {size: {rep: value}}: which repetition measured each value, for paired
        # ratios. bench/run.sh numbers every job of a (scen, cfg, bench) differently (reruns count on
        # above --reps), so a repetition has at most one value per size.
        self.by_rep = {}
        self.status = {}  # (scen, cfg, bench) -> {"ok": n, "failed": [notes], "unavailable": reason}
        for j in self.jobs:
            key = (j["scenario"], j["config"], j["bench"])
            st = self.status.setdefault(key, {"ok": 0, "failed": [], "unavailable": None, "others": []})
            if j["status"] == "unavailable":
                st["unavailable"] = j["note"]
                continue
            if j["status"] != "ok":
                st["failed"].append("rc=%s %s" % (j["rc"], j["note"]))
                continue
            vals = parse_job(raw, j, self.meta)
            if not vals:
                st["failed"].append("rc=0 but no result lines")
                continue
            st["ok"] += 1
            try:
                st["others"].append(float(j["others_cores"]))
            except ValueError:
                pass
            for bench, sized in vals.items():
                for size, v in sized.items():
                    self.by_rep.setdefault(key[:2] + (bench,), {}).setdefault(size, {})[int(j["rep"])] = v
        # (scen, cfg, bench) -> {size: [values]}: what medians, spreads and plots pool, in job order.
        self.values = {k: {s: list(r.values()) for s, r in d.items()} for k, d in self.by_rep.items()}
        # Why ratios to the raw floors cannot be paired in this run (None: they can).
        self.floor_unpaired = None
        if not floors_paired_in_time(self.jobs):
            self.floor_unpaired = "floors ran in one block before the MPI jobs"
        self.subject = self.meta.get("subject", "usnic")
        self.configs = [c for c in CFG_ORDER if c in self.meta.get("configs", "").split(",")]
        self.loss = [] if self.meta.get("loss", "none") == "none" else [float(x) for x in self.meta["loss"].split(",")]
        # Why the loss fractions cannot be paired (None: they can). bench/run.sh interleaves repetition r of
        # the clean reference and of every loss level since it writes loss_interleaved; before, each ran as a
        # block of its own, minutes apart.
        self.loss_unpaired = None
        if self.meta.get("loss_interleaved") != "yes":
            self.loss_unpaired = "lossy and clean blocks ran at different times"

    def med(self, scen, cfg, bench, size):
        v = self.values.get((scen, cfg, bench), {}).get(size)
        return statistics.median(v) if v else None

    def series(self, scen, cfg, bench):
        d = self.values.get((scen, cfg, bench), {})
        return {s: statistics.median(v) for s, v in sorted(d.items())}

    def sizes(self, scen, bench, lo=0, hi=float("inf")):
        """Every size in [lo, hi] that some configuration measured for (scen, bench): what a target over
        "every size" of a range judges, so that a size one configuration lacks shows as missing."""
        out = set()
        for (s, _, b), d in self.by_rep.items():
            if s == scen and b == bench:
                out.update(x for x in d if lo <= x <= hi)
        return sorted(out)

    def reps(self, scen, cfg, bench):
        """{size: {rep: value}}, sizes ascending."""
        return dict(sorted(self.by_rep.get((scen, cfg, bench), {}).items()))

    def spread(self, scen, cfg, bench, size):
        v = self.values.get((scen, cfg, bench), {}).get(size)
        return (min(v), max(v), len(v)) if v else None

    def why_missing(self, scen, cfg, bench):
        """Reason a (scen, cfg, bench) has no numbers, or None when it has some."""
        if self.values.get((scen, cfg, bench)):
            return None
        st = self.status.get((scen, cfg, bench))
        if st is None:
            return "not run"
        if st["unavailable"]:
            return st["unavailable"]
        if st["failed"]:
            return "job failed (%d run(s)): %s" % (len(st["failed"]), st["failed"][-1])
        return "no results"

    def floor_reps(self):
        """Raw datagram floor per repetition: {size: {rep: one-way µs}}, fi_pingpong -S all and -S <dgram>
        of the same repetition merged; a size both of them measured (--dgram-size in -S all's list) gets
        the mean of the two."""
        both = {}
        for (scen, cfg, bench), d in self.by_rep.items():
            if scen == "clean" and cfg == "raw_floor":
                for s, reps in d.items():
                    for r, v in reps.items():
                        both.setdefault(s, {}).setdefault(r, []).append(v)
        return {s: {r: statistics.mean(v) for r, v in sorted(reps.items())} for s, reps in sorted(both.items())}

    def floor(self):
        """Raw datagram floor: one-way µs per size, the median over the repetitions of floor_reps."""
        return {s: statistics.median(reps.values()) for s, reps in self.floor_reps().items()}

    def loss_fraction(self, p, cfg):
        """{size: Ratio} of bandwidth under p % loss over the clean reference at the sizes both measured:
        paired by repetition, or a ratio of medians where loss_unpaired says why not."""
        return {r.size: r for r in self.loss_ratios(p, cfg)}

    def loss_ratios(self, p, cfg):
        """loss_fraction's Ratios, with the sizes only one side measured as missing."""
        lossy, clean = self.reps("loss%g" % p, cfg, "bw_loss"), self.reps("clean", cfg, "bw_loss")
        return ratios(lossy, clean, sorted(set(lossy) | set(clean)), self.loss_unpaired)

    def raw_stream(self, batched=False):
        return self.series("clean", raw_stream_job(batched), "raw_datagram")

    def raw_stream_reps(self, batched=False):
        return self.reps("clean", raw_stream_job(batched), "raw_datagram")

    def raw_pingpong_reps(self, batched=False):
        """The raw test's message ping-pong (1 KiB-4 MiB): {size: {rep: one-way µs}}."""
        return self.reps("clean", raw_stream_job(batched), "raw_pingpong")


def raw_stream_job(batched):
    """The raw stream's job: one datagram per send (the floor), or runs sent and read as btl_usnic_gso and btl_usnic_gro do."""
    return "raw_stream_batched" if batched else "raw_stream"


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if abs(v) >= 1000:
        s = "%.0f" % v
    elif abs(v) >= 100:
        s = "%.1f" % v
    else:
        s = "%.2f" % v
    return s + unit


def fmt_size(s):
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return "%dM" % (s >> 20)
    if s >= 1024 and s % 1024 == 0:
        return "%dK" % (s >> 10)
    return str(s)


class Ratio:
    """Subject / reference at one size. per_rep: {rep: ratio} over the repetitions both sides measured;
    of_medians: subject median / reference median. value is the median of per_rep, the paired ratio,
    unless the repetitions do not pair (unpaired says why): then it is of_medians."""

    def __init__(self, size, per_rep, of_medians, unpaired=None):
        self.size, self.per_rep, self.of_medians = size, per_rep, of_medians
        self.forced = unpaired  # a reason that holds whatever the count, passed on by over()
        if unpaired is None and len(per_rep) < MIN_PAIRED:
            unpaired = "only %d repetition%s measured on both sides" % (len(per_rep), "" if len(per_rep) == 1 else "s")
        self.unpaired = unpaired
        self.value = of_medians if unpaired else statistics.median(per_rep.values())

    def over(self, other, unpaired=None):
        """This ratio divided by another one, repetition by repetition (a ratio of ratios)."""
        per = {r: v / other.per_rep[r] for r, v in self.per_rep.items() if other.per_rep.get(r)}
        return Ratio(self.size, per, self.of_medians / other.of_medians, unpaired or self.forced or other.forced)

    def spread(self):
        """(min, max) of the per-repetition ratios, or None when they do not pair."""
        return None if self.unpaired else (min(self.per_rep.values()), max(self.per_rep.values()))


def ratio_at(size, num, den, unpaired=None):
    """num, den: {rep: value} at one size, or None. A Ratio, or None when either side has no value."""
    if not num or not den:
        return None
    dm = statistics.median(den.values())
    if dm <= 0:
        return None
    per = {r: v / den[r] for r, v in num.items() if den.get(r, 0) > 0}
    return Ratio(size, per, statistics.median(num.values()) / dm, unpaired)


class Ratios(list):
    """[Ratio], and the sizes asked for that one side or both had no value at (`missing`)."""

    def __init__(self, items, missing=()):
        super().__init__(items)
        self.missing = list(missing)


def ratios(num, den, sizes, unpaired=None):
    """num, den: {size: {rep: value}}. Ratios at the sizes both sides have; the others in .missing."""
    out = [(s, ratio_at(s, num.get(s), den.get(s), unpaired)) for s in sizes]
    return Ratios([r for _, r in out if r is not None], [s for s, r in out if r is None])


def judge(rs, threshold, le, strict=False, key=lambda r: r.value):
    """rs: [Ratio], judged on key (the paired value, or of_medians). Returns (worst Ratio, met) with
    'worst' in the threshold's sense."""
    if not rs:
        return None, None
    worst = max(rs, key=key) if le else min(rs, key=key)
    if le:
        met = all(key(r) <= threshold for r in rs)
    elif strict:
        met = all(key(r) > threshold for r in rs)
    else:
        met = all(key(r) >= threshold for r in rs)
    return worst, met


class Target:
    def __init__(self, name, threshold, le, strict=False, report=False, paired=True):
        self.name, self.threshold, self.le, self.strict = name, threshold, le, strict
        self.report = report  # shown for context, not one of issue 5's targets
        self.paired = paired  # False: a ratio of medians by design (old runs' loss fractions)

    def rule(self):
        if self.report:
            return "(report only)"
        if self.le:
            return "≤ %.2f×" % self.threshold
        return ("> %.2f×" if self.strict else "≥ %.2f×") % self.threshold


def evaluate(run, cfg, target_id):
    """Returns ([Ratio], missing_reason) for one target and one configuration acting as the subject."""
    lat = lambda c: run.reps("clean", c, "latency")
    miss = lambda c, b: run.why_missing("clean", c, b)
    if target_id == "lat_floor":
        if miss(cfg, "latency"):
            return None, miss(cfg, "latency")
        fl = run.floor_reps()
        if not fl:
            return None, "raw floor (fi_pingpong) has no results"
        return ratios(lat(cfg), fl, SMALL, run.floor_unpaired), None
    if target_id in ("lat_rxd", "lat_tcp"):
        peer = "rxd" if target_id == "lat_rxd" else "tcp"
        if cfg == peer:
            return None, "(itself)"
        if miss(cfg, "latency"):
            return None, miss(cfg, "latency")
        if miss(peer, "latency"):
            return None, "%s: %s" % (peer, miss(peer, "latency"))
        sizes = SMALL if target_id == "lat_rxd" else run.sizes("clean", "latency")
        return ratios(lat(cfg), lat(peer), sizes), None
    if target_id in ("lat_raw_msg", "lat_raw_msg_batched"):
        if miss(cfg, "latency"):
            return None, miss(cfg, "latency")
        pp = run.raw_pingpong_reps(target_id == "lat_raw_msg_batched")
        if not pp:
            return None, "raw message ping-pong: no results"
        return ratios(lat(cfg), pp, sorted(pp), run.floor_unpaired), None
    if target_id in ("bw_raw", "bw_raw_batched"):
        if miss(cfg, "bw"):
            return None, miss(cfg, "bw")
        batched = target_id == "bw_raw_batched"
        rs = run.raw_stream_reps(batched)
        if not rs:
            return None, "raw streaming: " + (run.why_missing("clean", raw_stream_job(batched), "raw_datagram")
                                              or "no results")
        bw = run.reps("clean", cfg, "bw")
        big = run.sizes("clean", "bw", BIG_LO, BIG_HI)
        # Per message size where the raw test cut messages of that size into datagrams, as the
        # BTL must (65536 bytes are a full datagram and a short one); else its full-datagram stream.
        den = {s: rs.get(s, rs.get(RAW_FULL)) for s in big}
        return ratios(bw, den, big, run.floor_unpaired), None
    if target_id == "bw_raw_full":
        if miss(cfg, "bw"):
            return None, miss(cfg, "bw")
        rs = run.raw_stream_reps()
        if RAW_FULL not in rs:
            return None, "raw streaming: no full-datagram stream"
        bw = run.reps("clean", cfg, "bw")
        big = run.sizes("clean", "bw", BIG_LO, BIG_HI)
        return ratios(bw, {s: rs[RAW_FULL] for s in big}, big, run.floor_unpaired), None
    if target_id in ("bibw_cores", "bibw_cores_batched"):
        rs = run.raw_stream_reps(target_id == "bibw_cores_batched")
        if RAW_BIDIR not in rs or RAW_FULL not in rs:
            return None, "raw streaming: no bidirectional stream"
        pairs, why = evaluate(run, cfg, "bibw")
        if why:
            return None, why
        # Both ways over one way of the same raw job, then bibw/bw of repetition r over that of raw job r.
        allowed = ratio_at(RAW_BIDIR, rs[RAW_BIDIR], rs[RAW_FULL])
        if allowed is None:
            return None, "raw streaming: no one-way stream"
        return [r.over(allowed, run.floor_unpaired) for r in pairs], None
    if target_id == "bibw":
        for b in ("bw", "bibw"):
            if miss(cfg, b):
                return None, miss(cfg, b)
        bw, bibw = run.reps("clean", cfg, "bw"), run.reps("clean", cfg, "bibw")
        big = sorted(set(run.sizes("clean", "bw", BIG_LO, BIG_HI)) | set(run.sizes("clean", "bibw", BIG_LO, BIG_HI)))
        return ratios(bibw, bw, big), None
    if target_id in ("mr_tcp", "mr_rxd"):
        peer = target_id[3:]
        if cfg == peer:
            return None, "(itself)"
        if miss(cfg, "mr"):
            return None, miss(cfg, "mr")
        if miss(peer, "mr"):
            return None, "%s: %s" % (peer, miss(peer, "mr"))
        return ratios(run.reps("clean", cfg, "mr"), run.reps("clean", peer, "mr"), [8]), None
    if target_id.startswith("loss"):
        scen = target_id
        for s in (scen, "clean"):
            r = run.why_missing(s, cfg, "bw_loss")
            if r:
                return None, ("%s: " % s) + r
        return run.loss_ratios(float(scen[len("loss"):]), cfg), None
    raise KeyError(target_id)


def targets(run):
    t = [
        ("lat_floor", Target("latency 0–64 B vs raw datagram floor (fi_pingpong -p udp -e dgram)", 1.15, True)),
        ("lat_rxd", Target("latency 0–64 B vs udp;ofi_rxd", 0.7, True)),
        ("lat_tcp", Target("latency at every size 0 B–4 MiB vs btl tcp", 1.0, True)),
        ("bw_raw", Target("bandwidth 64 KiB–4 MiB vs raw datagram streaming of the same message size", 0.9, False)),
        ("bw_raw_full", Target("bandwidth 64 KiB–4 MiB vs raw streaming of full datagrams", 0.9, False, report=True)),
        ("bibw", Target("bidirectional / unidirectional bandwidth, 64 KiB–4 MiB", 1.6, False)),
        ("bibw_cores", Target("bidirectional / unidirectional, over the raw stream's both-ways / one-way ratio (what the cores allow)", 1.0, False, report=True)),
        ("mr_tcp", Target("8 B message rate vs btl tcp", 1.0, False, strict=True)),
        ("mr_rxd", Target("8 B message rate vs udp;ofi_rxd", 1.0, False, strict=True)),
    ]
    if run.raw_pingpong_reps():
        # Above one datagram fi_pingpong has no size to compare with: how much of the latency there the
        # datagram path itself takes (runs before this measurement have no such rows).
        after_tcp = [tid for tid, _ in t].index("lat_tcp") + 1
        t[after_tcp:after_tcp] = [
            ("lat_raw_msg", Target("latency 1 KiB–4 MiB vs the raw message ping-pong of the same size (datagrams only)", 1.0, True, report=True)),
        ]
    if run.raw_stream_reps(True):
        # Across hosts the BTL sends runs of datagrams with one system call (btl_usnic_gso); the
        # raw stream sending the same way shows what that path allows (bench/raw-across-hosts.sh).
        after_raw = [tid for tid, _ in t].index("bw_raw_full") + 1
        t[after_raw:after_raw] = [
            ("bw_raw_batched", Target("bandwidth 64 KiB–4 MiB vs raw streaming of the same message size, sends and reads batched as btl_usnic_gso and btl_usnic_gro do", 0.9, False, report=True)),
            ("bibw_cores_batched", Target("bidirectional / unidirectional, over the batched raw stream's both-ways / one-way ratio", 1.0, False, report=True)),
        ]
        if run.raw_pingpong_reps(True) and run.raw_pingpong_reps():
            after_msg = [tid for tid, _ in t].index("lat_raw_msg") + 1
            t[after_msg:after_msg] = [
                ("lat_raw_msg_batched", Target("latency 1 KiB–4 MiB vs the raw message ping-pong, sends and reads batched as btl_usnic_gso and btl_usnic_gro do", 1.0, True, report=True)),
            ]
    for p in run.loss:
        thr = LOSS_THRESHOLDS.get(p)
        paired = run.loss_unpaired is None
        name = "bandwidth with %g %% loss / clean bandwidth%s" % (p, "" if paired else " (ratio of medians)")
        t.append(("loss%g" % p, Target(name, thr if thr is not None else 0.0, False, paired=paired)))
    return t


def no_target(tid, tgt):
    return tgt.report or (tid.startswith("loss") and tgt.threshold == 0.0)


def pairing_note(r, notes):
    """The spread of a paired ratio's per-repetition ratios, or a mark that it is a ratio of medians (the
    reason goes to notes, printed once under the table)."""
    sp = r.spread()
    if sp:
        return "[%.2f–%.2f]" % sp
    notes.add(r.unpaired)
    return "(unpaired)"


def own_jobs(tid):
    """The (scenario, benchmark)s of the configuration judged by target tid: a failed or timed-out one
    fails the target, since successful repetitions alone would hide a configuration that hangs or
    errs in some runs."""
    if tid.startswith("lat_"):
        return [("clean", "latency")]
    if tid.startswith("bw_raw"):
        return [("clean", "bw")]
    if tid.startswith("bibw"):
        return [("clean", "bw"), ("clean", "bibw")]
    if tid.startswith("mr_"):
        return [("clean", "mr")]
    if tid.startswith("loss"):
        return [(tid, "bw_loss"), ("clean", "bw_loss")]
    raise KeyError("own_jobs: target %s reads which benchmarks?" % tid)


def cell(run, cfg, tid, tgt, notes, medians=False):
    """(text, met) of one target cell: judged on the paired ratios, or with medians=True on the ratios of
    medians (that row is for comparison: plain verdict, n/a shown as a dash). A failed job of the
    configuration fails it; a size of the range without values, or fewer than VERDICT_REPS repetitions
    at one, leaves it without a verdict."""
    rs, why = evaluate(run, cfg, tid)
    if why:
        return ("–" if medians else "n/a: " + (why if len(why) <= 90 else why[:87] + "...")), None
    key = (lambda r: r.of_medians) if medians else (lambda r: r.value)
    free = no_target(tid, tgt)
    worst, met = judge(rs, 0.0 if free else tgt.threshold, tgt.le, tgt.strict, key)
    if worst is None:
        return "n/a: no common sizes", None
    text = "%.2f× @%s" % (key(worst), fmt_size(worst.size))
    if tgt.paired and not medians:
        text += " " + pairing_note(worst, notes)
    if free:
        return text + ", no target", None
    failed = [n for scen, b in own_jobs(tid) for n in run.status.get((scen, cfg, b), {}).get("failed", [])]
    missing = getattr(rs, "missing", [])
    fewest = min(rs, key=lambda r: len(r.per_rep))
    if failed:
        why = "%d job%s failed: %s" % (len(failed), "" if len(failed) == 1 else "s", failed[-1][:60])
        return text + (" NOT met (%s)" % why if medians else " **NOT met** (%s)" % why), False
    if missing:
        return text + ", no verdict: no value at %s" % ", ".join(fmt_size(s) for s in missing), None
    if len(fewest.per_rep) < VERDICT_REPS:
        return text + ", no verdict: %d of %d repetitions at @%s" % (
            len(fewest.per_rep), VERDICT_REPS, fmt_size(fewest.size)), None
    verdict = "met" if met else "NOT met"
    return text + (" " + verdict if medians else " **%s**" % verdict), met


def row_pairs(run, tid):
    """Whether any configuration's ratio for this target is paired at some size (then the ratio of
    medians differs from it and gets a row of its own)."""
    for c in run.configs:
        rs, _ = evaluate(run, c, tid)
        if any(r.unpaired is None for r in rs or []):
            return True
    return False


def ratio_cell(r, notes):
    """A detail table's ratio: the paired one, or the ratio of medians marked † (its reason goes to notes)."""
    if r is None:
        return "n/a"
    if r.unpaired:
        notes.add(r.unpaired)
        return "%.2f†" % r.value
    return "%.2f" % r.value


def notes_line(mark, notes):
    """The legend of a table's unpaired mark, with every reason once."""
    return "%s = ratio of medians, as the repetitions do not pair there: %s." % (mark, "; ".join(sorted(notes)))


def peer_ratio_table(run, subj, bench, sizes, peers):
    """Lines of a table of `bench` per size: every configuration's median, then the subject's paired
    ratio to each of `peers`, and the footnote when a ratio could not pair."""
    header = ["size"] + list(run.configs) + ["%s/%s, paired" % (subj, p) for p in peers]
    rows = []
    notes = set()
    for s in sizes:
        sv = run.reps("clean", subj, bench).get(s)
        rows.append([fmt_size(s)] + [med_cell(run, "clean", c, bench, s) for c in run.configs] +
                    [ratio_cell(ratio_at(s, sv, run.reps("clean", p, bench).get(s)), notes) for p in peers])
    out = [md_table(header, rows), ""]
    if notes:
        out += [notes_line("†", notes), ""]
    return out


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def med_cell(run, scen, cfg, bench, size):
    sp = run.spread(scen, cfg, bench, size)
    if not sp:
        return "–"
    m = run.med(scen, cfg, bench, size)
    lo, hi, n = sp
    return "%s [%s–%s]" % (fmt(m), fmt(lo), fmt(hi)) if n > 1 else fmt(m)


def summary(run):
    m = run.meta
    subj = run.subject
    L = []
    L.append("# usnic-rs benchmarks: %s (%s)" % (m.get("mode"), m.get("date_utc")))
    L.append("")
    L.append("Produced by `%s`; raw files: `%s`." % (m.get("invocation", "").strip(), os.path.relpath(run.raw, os.path.dirname(os.path.dirname(run.raw)))))
    L.append("")
    L.append(md_table(["item", "value"], [
        ["date", m.get("date_utc", "?") + " – " + m.get("finished_utc", "?")],
        ["machine", "%s; %s; %s; kernel %s" % (m.get("host"), m.get("cpu"), m.get("memory"), m.get("kernel"))],
        ["software", "%s; Open MPI %s; libfabric %s; %s" % (m.get("os"), m.get("open_mpi"), m.get("libfabric"), m.get("compiler"))],
        ["plugin", m.get("usnic_plugin", "?")],
        ["load average", "start %s, end %s" % (m.get("load_at_start"), m.get("load_at_end"))],
        ["CPU binding", m.get("binding")],
        ["priority", m.get("priority")],
        ["repetitions", "%s per measurement (cells are medians [min–max]); adaptive timed loop of %s s per size" % (m.get("reps"), m.get("target_time_s"))],
        ["datagram size", "%s; usnic datagram-size parameter: %s" % (m.get("dgram_rule"), m.get("usnic_dgram_param"))],
        ["launcher", "`%s <config> bench/bin/<program> <sizes> -t %s -i 3`" % (m.get("launcher"), m.get("target_time_s"))],
        ["raw streaming", "%s%s" % (m.get("raw_stream"), ("; section '%s': %s" % (m.get("raw_stream_section"), RAW_INFO.get(m.get("raw_stream_section"), "not in its output"))) if RAW_INFO else "")],
    ]))
    L.append("")
    L.append("Configurations (`<config>` above):")
    L.append("")
    rows = []
    for c in run.configs:
        desc, _, args = m.get("config_" + c, "|").partition(" | ")
        jobs = [j for j in run.jobs if j["config"] == c and j["scenario"] == "clean"]
        ok = sum(1 for j in jobs if j["status"] == "ok")
        failed = [j for j in jobs if j["status"] == "failed"]
        skip = m.get("skip_" + c)
        if skip:
            state = "**not available**: " + skip
        elif ok == 0:
            state = "**not available**: job failed: rc=%s %s" % (failed[-1]["rc"], failed[-1]["note"]) if failed else "not run"
        else:
            others = [float(j["others_cores"]) for j in jobs if j["status"] == "ok" and j["others_cores"] not in ("", "-")]
            state = "%d jobs ok, %d failed%s; other processes used a median of %.2f cores" % (
                ok, len(failed), (" (last: %s)" % failed[-1]["note"]) if failed else "",
                statistics.median(others) if others else 0.0)
        rows.append([CFG_LABEL[c] + (" — subject" if c == subj else ""), "`%s`" % args.strip(), state])
    L.append(md_table(["configuration", "MCA arguments", "status in this run"], rows))
    L.append("")
    L.append("Exact commands (each MPI one is `<launcher> <config> <program>`; every raw file starts with its full command line):")
    L.append("")
    for k in ("cmd_latency", "cmd_bw", "cmd_bibw", "cmd_mr", "cmd_sendloop", "cmd_sendrecv", "cmd_halo", "cmd_bw_loss",
              "cmd_floor", "cmd_netpipe", "raw_stream"):
        if k in m:
            L.append("- %s: `%s`" % (k.replace("cmd_", ""), m[k]))
    L.append("")
    others_all = [float(j["others_cores"]) for j in run.jobs if j["status"] == "ok" and j["others_cores"] not in ("", "-")]
    if others_all and statistics.median(others_all) > 0.3:
        L.append("**Warning:** other processes used a median of %.2f cores during the jobs (machine shared); "
                 "treat the numbers as harness validation, not as measurements." % statistics.median(others_all))
        L.append("")

    L.append("## Targets (issue 5), judged for `%s`; the other columns show where each peer would stand" % subj)
    L.append("")
    L.append("Ratio = paired ratio: at each size, the median over the repetitions r of subject(r) / reference(r), "
             "both measured in repetition r (the raw floors and the raw stream of repetition r run right before its "
             "MPI jobs; the VM drifts between a fast and a slow state over minutes). `@` gives the worst size of the "
             "range (largest for ≤ rules, smallest for ≥ rules), `[min–max]` the spread of that size's "
             "per-repetition ratios; met only if every size in the range meets the rule. A size where fewer than "
             "%d repetitions pair is judged on subject median / reference median instead, marked "
             "\"(unpaired)\". The row \"↳ ratio of medians\" under a target gives subject median / reference "
             "median at its own worst size, for comparison only (no verdict counts from it). A failed or "
             "timed-out job of a configuration in a target's own benchmarks makes it NOT met; fewer than %d "
             "repetitions at a size of the range, or a size without values, leaves the ratio without a "
             "verdict. %s" % (
                 MIN_PAIRED, VERDICT_REPS, "The loss rows are ratios of medians: the lossy and the clean blocks ran at different "
                 "times, so their repetitions do not pair." if run.loss_unpaired else
                 "The loss rows are paired by repetition too: each repetition ran its clean job and its lossy jobs "
                 "back to back."))
    L.append("")
    header = ["target", "rule"] + [("**%s** (subject)" % c) if c == subj else c for c in run.configs]
    rows = []
    verdicts = []  # (target, met on paired ratios, met on ratios of medians) of the subject
    compared = False
    notes = set()
    for tid, tgt in targets(run):
        cells, rom_cells = [], []
        for c in run.configs:
            text, met = cell(run, c, tid, tgt, notes)
            cells.append(text)
            rom_text, rom_met = cell(run, c, tid, tgt, notes, medians=True)
            rom_cells.append(rom_text)
            if c == subj and not tgt.report:
                verdicts.append((tgt.name, met, rom_met if tgt.paired else met))
        rule = tgt.rule() if not no_target(tid, tgt) else "(report only)"
        rows.append([tgt.name, rule] + cells)
        if tgt.paired and row_pairs(run, tid):
            rows.append(["↳ ratio of medians (comparison only)", ""] + rom_cells)
            compared = True
    L.append(md_table(header, rows))
    L.append("")
    if notes:
        L.append(notes_line("(unpaired)", notes))
        L.append("")
    count = lambda i, v: sum(1 for vd in verdicts if vd[i] is v)
    L.append("Subject `%s`: %d met, %d not met, %d not available." % (subj, count(1, True), count(1, False), count(1, None)))
    if compared:
        same = all(vd[1] is vd[2] for vd in verdicts)
        L.append("Judged on ratios of medians instead: %d met, %d not met%s." % (
            count(2, True), count(2, False), " (the same verdicts)" if same else ""))
    L.append("")

    # Detail tables with every size and the subject's ratios (paired, as in the target table).
    fl = run.floor()
    fl_reps = run.floor_reps()
    L.append("## Latency, one-way µs (lower is better); ratios paired per repetition")
    L.append("")
    lat_sizes = sorted(set().union(*[set(run.series("clean", c, "latency")) for c in run.configs] + [set()]))
    # The raw message ping-pong (one by one, and batched where the run has that stream).
    pps = [(b, run.raw_pingpong_reps(b)) for b in (False, True)]
    pps = [(b, pp) for b, pp in pps if pp]
    pp_names = {False: "raw message", True: "raw message, batched"}
    header = ["size"] + [c for c in run.configs] + ["raw floor"] + [pp_names[b] for b, _ in pps] + [
        "%s/%s, paired" % (subj, p) for p in ["floor"] + [pp_names[b] for b, _ in pps] + ["rxd", "tcp"]]
    rows = []
    notes = set()
    subj_lat = run.reps("clean", subj, "latency")
    for s in lat_sizes:
        r = lambda den, unpaired=None: ratio_cell(ratio_at(s, subj_lat.get(s), den.get(s), unpaired), notes)
        pp_med = [fmt(statistics.median(pp[s].values())) if s in pp else "–" for _, pp in pps]
        pp_ratio = [r(pp, run.floor_unpaired) if s in pp else "–" for _, pp in pps]
        rows.append([fmt_size(s)] + [med_cell(run, "clean", c, "latency", s) for c in run.configs] +
                    [fmt(fl.get(s))] + pp_med + [r(fl_reps, run.floor_unpaired) if s <= 64 else "–"] + pp_ratio +
                    [r(run.reps("clean", "rxd", "latency")) if s <= 64 else "–", r(run.reps("clean", "tcp", "latency"))])
    L.append(md_table(header, rows))
    L.append("")
    if notes:
        L.append(notes_line("†", notes))
        L.append("")
    if fl:
        L.append("Raw datagram floor, all sizes measured (fi_pingpong -p udp -e dgram, usec/xfer = one-way): " +
                 ", ".join("%s B %s µs" % (s, fmt(v)) for s, v in fl.items()))
        L.append("")
    if pps:
        L.append("Raw message: the raw datagram test's ping-pong of a whole message cut into the BTL's datagrams "
                 "(mean one-way µs, no reliability, no copy in user space; `benches/raw_datagram/message_pingpong.rs`)"
                 + (", and the same with sends and reads batched as btl_usnic_gso and btl_usnic_gro do"
                    if len(pps) > 1 else "") + ".")
        L.append("")

    for bench, title in (("bw", "Unidirectional bandwidth, MB/s (window 64; higher is better)"),
                         ("bibw", "Bidirectional bandwidth, MB/s (window 64, both directions counted)")):
        L.append("## " + title + "; ratios paired per repetition")
        L.append("")
        sizes = sorted(set().union(*[set(run.series("clean", c, bench)) for c in run.configs] + [set()]))
        rs, rs_reps = run.raw_stream(), run.raw_stream_reps()
        bt, bt_reps = run.raw_stream(True), run.raw_stream_reps(True)
        header = ["size"] + list(run.configs)
        if bench == "bw":
            header += ["raw, same message size", "%s/raw, paired" % subj, "raw, full datagrams", "%s/raw full, paired" % subj]
            if bt_reps:
                header += ["raw batched, same message size", "%s/raw batched, paired" % subj]
        else:
            header += ["bibw/bw %s, paired" % c for c in run.configs]
        rows = []
        notes = set()
        for s in sizes:
            row = [fmt_size(s)] + [med_cell(run, "clean", c, bench, s) for c in run.configs]
            if bench == "bw":
                raw_v = rs.get(s, rs.get(RAW_FULL)) if rs else None
                full = rs.get(RAW_FULL) if rs else None
                sv = run.reps("clean", subj, "bw").get(s)
                same, one_dgram = rs_reps.get(s, rs_reps.get(RAW_FULL)), rs_reps.get(RAW_FULL)
                row += [fmt(raw_v), ratio_cell(ratio_at(s, sv, same, run.floor_unpaired), notes),
                        fmt(full), ratio_cell(ratio_at(s, sv, one_dgram, run.floor_unpaired), notes)]
                if bt_reps:
                    row += [fmt(bt.get(s, bt.get(RAW_FULL))),
                            ratio_cell(ratio_at(s, sv, bt_reps.get(s, bt_reps.get(RAW_FULL)), run.floor_unpaired), notes)]
            else:
                for c in run.configs:
                    a, b = run.reps("clean", c, "bibw").get(s), run.reps("clean", c, "bw").get(s)
                    row.append(ratio_cell(ratio_at(s, a, b), notes))
            rows.append(row)
        L.append(md_table(header, rows))
        L.append("")
        if notes:
            L.append(notes_line("†", notes))
            L.append("")
        if bench == "bibw" and rs and RAW_BIDIR in rs and RAW_FULL in rs:
            L.append("The raw datagram stream both ways at once (%s): "
                     "%s MB/s, %.2f× its one-way %s MB/s. That is what these cores allow a bidirectional test "
                     "before any reliability; issue 5's 1.6× holds only where the cores allow it."
                     % (RAW_BIDIR_HOW[0], fmt(rs[RAW_BIDIR]), rs[RAW_BIDIR] / rs[RAW_FULL], fmt(rs[RAW_FULL])))
            L.append("")
        if bench == "bibw" and RAW_BIDIR in bt and RAW_FULL in bt:
            L.append("The same with runs of datagrams sent and read in one system call, as btl_usnic_gso and btl_usnic_gro do: "
                     "%s MB/s both ways, %.2f× its one-way %s MB/s."
                     % (fmt(bt[RAW_BIDIR]), bt[RAW_BIDIR] / bt[RAW_FULL], fmt(bt[RAW_FULL])))
            L.append("")

    L.append("## Message rate, messages/s (1 pair, window 64); ratios paired per repetition")
    L.append("")
    sizes = sorted(set().union(*[set(run.series("clean", c, "mr")) for c in run.configs] + [set()]))
    L.extend(peer_ratio_table(run, subj, "mr", sizes, ["tcp", "rxd"]))

    # No target in issue 5. The blocking sends show what the windowed and ping-pong programs cannot,
    # a send that completes only when the peer acknowledges it; the halo is the one program in which
    # a rank has two peers with data at once, and runs with a launcher of its own.
    halo_how = "Layout: %s. Launcher: `%s <config> bench/bin/bench_halo <sizes> -t %s -i 3`." % (
        m.get("halo_layout", "?"), m.get("launcher_halo", "?"), m.get("target_time_s"))
    for bench, title, how in (
            ("sendloop", "Blocking sends: rank 0's `MPI_Send` loop into rank 1's `MPI_Recv` loop, µs per message",
             None),
            ("sendrecv", "Blocking sends: `MPI_Sendrecv` both ways at once, µs per step", None),
            ("halo", "Halo exchange: every rank sends one message to each ring neighbour and receives one from "
                     "each at once, µs per step", halo_how)):
        sizes = sorted(set().union(*[set(run.series("clean", c, bench)) for c in run.configs] + [set()]))
        if not sizes:
            continue
        L.append("## %s (lower is better; no target); ratios paired per repetition" % title)
        L.append("")
        if how:
            L += [how, ""]
        peers = [p for p in ("tcp", "rxd") if p in run.configs and p != subj]
        L.extend(peer_ratio_table(run, subj, bench, sizes, peers))

    if run.loss:
        L.append("## Bandwidth under loss, MB/s (window 64), as a fraction of the clean run at the same sizes")
        L.append("")
        if run.loss_unpaired:
            L.append("Fraction = median under loss / clean median, a ratio of medians: each loss level and the clean "
                     "reference ran as blocks of their own, minutes apart, so their repetitions do not pair.")
        else:
            L.append("Fraction = at each size, the median over the repetitions r of loss(r) / clean(r), paired by "
                     "repetition: each repetition ran its clean job and its lossy jobs back to back (the VM drifts "
                     "between a fast and a slow state over minutes, and a median of each could come from different "
                     "states).")
        L.append("")
        for p in run.loss:
            how = m.get("netem_loss%g" % p) or ("fault injection: " + m.get("inject_loss%g" % p, "?"))
            L.append("- %g %%: %s" % (p, how))
        L.append("")
        header = ["config", "size", "clean"] + ["%g %% loss" % p for p in run.loss] + [
            "fraction %g %%%s" % (p, "" if run.loss_unpaired else ", paired") for p in run.loss]
        rows = []
        notes = set()
        for c in run.configs:
            clean = run.series("clean", c, "bw_loss")
            reasons = [run.why_missing("loss%g" % p, c, "bw_loss") for p in run.loss]
            if not clean and all(reasons):
                rows.append([c, "–", "n/a"] + ["n/a: " + (r or "") for r in reasons] + ["n/a"] * len(run.loss))
                continue
            sizes = sorted(set(clean) | set().union(*[set(run.series("loss%g" % p, c, "bw_loss")) for p in run.loss]))
            for s in sizes:
                row = [c, fmt_size(s), med_cell(run, "clean", c, "bw_loss", s)]
                fr = []
                for p in run.loss:
                    v = run.med("loss%g" % p, c, "bw_loss", s)
                    row.append(med_cell(run, "loss%g" % p, c, "bw_loss", s) if v is not None else
                               "n/a: " + (run.why_missing("loss%g" % p, c, "bw_loss") or "no value"))
                    r = run.loss_fraction(p, c).get(s)
                    if v is not None and r is not None:
                        thr = LOSS_THRESHOLDS.get(p)
                        verdict = "" if thr is None else (" met" if r.value >= thr else " NOT met")
                        # Old runs' fractions are all ratios of medians, as the text above says: no mark.
                        fr.append(("%.2f" % r.value if run.loss_unpaired else ratio_cell(r, notes)) + verdict)
                    else:
                        fr.append("n/a")
                rows.append(row + fr)
        L.append(md_table(header, rows))
        L.append("")
        if notes:
            L.append(notes_line("†", notes))
            L.append("")

    np_rows = []
    np_sizes = set()
    for c in run.configs:
        np_sizes |= set(run.values.get(("clean", c, "netpipe"), {}))
    if np_sizes:
        L.append("## NetPIPE (NPopenmpi -p 0), one run per configuration: one-way µs / MB/s (Mbps/8)")
        L.append("")
        pick = [s for s in sorted(np_sizes) if s in (1, 8, 64, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)]
        for s in pick:
            row = [fmt_size(s)]
            for c in run.configs:
                v = run.values.get(("clean", c, "netpipe"), {}).get(s)
                row.append("%s µs / %s MB/s" % (fmt(v[0][0]), fmt(v[0][1])) if v else "–")
            np_rows.append(row)
        L.append(md_table(["size"] + list(run.configs), np_rows))
        L.append("")
        for c in run.configs:
            why = run.why_missing("clean", c, "netpipe")
            if why:
                L.append("- NetPIPE %s: n/a: %s" % (c, why))
        L.append("")

    L.append("## Plots")
    L.append("")
    L.append("![latency](latency.png)")
    L.append("")
    L.append("![bandwidth](bandwidth.png)")
    if run.loss:
        L.append("")
        L.append("![loss](loss.png)")
    L.append("")
    return "\n".join(L)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: summarize.py RAW_DIR OUT_DIR")
    raw, out = sys.argv[1], sys.argv[2]
    run = Run(raw)
    os.makedirs(out, exist_ok=True)
    text = summary(run)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    plot.draw(run, out)
    print(text)


if __name__ == "__main__":
    main()
