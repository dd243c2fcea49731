#!/usr/bin/python3
"""Instructions per message from callgrind profiles of two runs that differ only in iteration count.

usage: callgrind_split.py CONFIG N1 N2 OUT.md  cg.N1.rank0 cg.N1.rank1 -- cg.N2.rank0 cg.N2.rank1

Sums the self cost (Ir) of every shared object in each profile, subtracts the N1 run from the N2 run
(start-up, MPI_Init, warm-up and teardown cancel out) and divides by the messages of the extra iterations:
each ping-pong iteration carries 2 messages, so per message = delta / (2 * (N2 - N1)), counting both the
sending and the receiving side. Also counts calls of opal_progress per message, which shows how much of
the total is idle polling rather than message handling.
"""
import os
import re
import sys

GROUPS = [
    ("plugin under test", None),  # filled in per configuration
    ("libfabric", re.compile(r"libfabric\.so|/libfabric/")),
    ("PML (ob1 / cm)", re.compile(r"mca_pml_")),
    ("other Open MPI (libmpi, libopen-pal/rte, other mca_*)", re.compile(r"libmpi|libopen-pal|libopen-rte|mca_|libpmix|openmpi")),
    ("libc / libm / ld.so", re.compile(r"/libc\.so|/libm\.so|ld-linux|libpthread")),
    ("other (libevent, hwloc, the benchmark, ...)", re.compile(r".")),
]
PLUGIN = {
    "usnic": re.compile(r"mca_btl_usnic\.so"),
    "tcp": re.compile(r"mca_btl_tcp\.so"),
    "rxd": re.compile(r"mca_mtl_ofi\.so"),
    "vader": re.compile(r"mca_btl_vader\.so"),
}
PLUGIN_NAME = {"usnic": "mca_btl_usnic.so", "tcp": "mca_btl_tcp.so", "rxd": "mca_mtl_ofi.so", "vader": "mca_btl_vader.so"}


def parse(path):
    """Returns ({(object, function): self Ir}, totals, opal_progress calls)."""
    names = {"ob": {}, "fn": {}}
    ob = "???"
    fn = "???"
    cfn = None
    npos = 1
    self_cost = {}
    progress_calls = 0
    totals = None
    skip_next_cost = False

    def resolve(kind, val):
        m = re.match(r"\((\d+)\)(?: (.*))?$", val)
        if not m:
            return val
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
            return m.group(2)
        return names[kind].get(m.group(1), "?")

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if skip_next_cost:  # inclusive cost of a call: not this function's own work
                    skip_next_cost = False
                    continue
                parts = line.split()
                ev = parts[npos:]
                if ev:
                    self_cost[(ob, fn)] = self_cost.get((ob, fn), 0) + int(ev[0])
                continue
            key, _, val = line.partition("=")
            if key == "ob":
                ob = resolve("ob", val)
            elif key == "cob":
                resolve("ob", val)
            elif key == "fn":
                fn = resolve("fn", val)
            elif key == "cfn":
                cfn = resolve("fn", val)
            elif key == "calls":
                skip_next_cost = True
                if cfn == "opal_progress":
                    progress_calls += int(val.split()[0])
            elif line.startswith("positions:"):
                npos = len(line.split()[1:])
            elif line.startswith("totals:") or line.startswith("summary:"):
                totals = int(line.split()[1])
    return self_cost, totals, progress_calls


ROOMS = [
    ("protocol core (usnic_rs::proto)", re.compile(r"usnic_rs::proto")),
    ("fabric edge (usnic_rs::fabric)", re.compile(r"usnic_rs::fabric")),
    ("Open MPI edge (usnic_rs::ompi)", re.compile(r"usnic_rs::ompi")),
    ("Rust std/core/alloc, tracing, parking_lot", re.compile(r"^(<)?(std|core|alloc|tracing|parking_lot|hashbrown)")),
    ("C shim and the rest (mca_btl_usnic_*, inlined wrappers)", re.compile(r".")),
]


def room_of(fn):
    for name, rx in ROOMS:
        if rx.search(fn):
            return name
    return ROOMS[-1][0]


def group_of(obj, cfg):
    if PLUGIN[cfg].search(obj):
        return GROUPS[0][0]
    for name, rx in GROUPS[1:]:
        if rx.search(obj):
            return name
    return GROUPS[-1][0]


def main():
    a = sys.argv[1:]
    if len(a) < 7 or "--" not in a:
        sys.exit(__doc__)
    cfg, n1, n2, out = a[0], int(a[1]), int(a[2]), a[3]
    sep = a.index("--")
    first, second = a[4:sep], a[sep + 1:]
    if cfg not in PLUGIN or n2 <= n1 or len(first) != len(second):
        sys.exit("bad arguments: " + " ".join(a))

    rooms1, rooms2 = {}, {}

    def load(files, rooms):
        per_group, progress, objs = {}, 0, {}
        for p in files:
            cost, totals, pc = parse(p)
            s = sum(cost.values())
            if totals is not None and abs(s - totals) > max(1, totals // 1000):
                print("warning: %s: self costs sum to %d, totals line says %d" % (p, s, totals), file=sys.stderr)
            progress += pc
            for (ob, fn), v in cost.items():
                g = group_of(ob, cfg)
                per_group[g] = per_group.get(g, 0) + v
                objs[ob] = objs.get(ob, 0) + v
                if g == GROUPS[0][0]:
                    r = room_of(fn)
                    rooms[r] = rooms.get(r, 0) + v
        return per_group, progress, objs

    g1, p1, o1 = load(first, rooms1)
    g2, p2, o2 = load(second, rooms2)
    msgs = 2 * (n2 - n1)
    rows = []
    total = 0.0
    for name, _ in GROUPS:
        d = (g2.get(name, 0) - g1.get(name, 0)) / msgs
        total += d
        rows.append((name if name != GROUPS[0][0] else "%s (%s)" % (name, PLUGIN_NAME[cfg]), d))
    lines = [
        "# Instructions per message, 8-byte ping-pong, config `%s`" % cfg,
        "",
        "callgrind (valgrind --tool=callgrind), self cost Ir of both ranks, run with %d and %d iterations;" % (n1, n2),
        "per message = difference / (2 x %d) (each iteration is one ping and one pong; both the sending and" % (n2 - n1),
        "the receiving side of a message are counted).",
        "",
        "| part | instructions per message | share |",
        "|---|---|---|",
    ]
    for name, d in rows:
        lines.append("| %s | %.0f | %s |" % (name, d, ("%.0f %%" % (100 * d / total)) if total > 0 else "n/a"))
    lines.append("| **total** | **%.0f** | |" % total)
    lines.append("")
    lines.append("opal_progress calls per message: %.2f (idle polling shows up as calls beyond ~1-2 per message)." % ((p2 - p1) / msgs))
    lines.append("")
    top = sorted(((o2.get(k, 0) - o1.get(k, 0)) / msgs, k) for k in set(o1) | set(o2))
    top = [t for t in reversed(top) if t[0] >= 1][:10]
    if cfg == "usnic" and rooms2:
        lines.append("Inside %s, by the Rust room the function belongs to (symbol path):" % PLUGIN_NAME[cfg])
        lines.append("")
        lines.append("| room | instructions per message |")
        lines.append("|---|---|")
        for r in ROOMS:
            d = (rooms2.get(r[0], 0) - rooms1.get(r[0], 0)) / msgs
            lines.append("| %s | %.0f |" % (r[0], d))
        lines.append("")
    lines.append("Largest objects per message: " + ", ".join("%s %.0f" % (os.path.basename(k), v) for v, k in top))
    text = "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
