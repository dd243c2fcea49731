"""PNG plots of one run (imported by summarize.py): latency.png, bandwidth.png and, with loss runs, loss.png.

Each line is the median over the repetitions with a min–max band; the raw datagram floor, the raw
message ping-pong and the raw streaming test are drawn where the run has them.
"""
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "usnic": dict(color="tab:red", marker="o", lw=2.2),
    "tcp": dict(color="tab:blue", marker="s"),
    "rxd": dict(color="tab:green", marker="^"),
    "vader": dict(color="tab:gray", marker="d", ls="--"),
}


def _line(ax, run, scen, cfg, bench, label, xs_zero=0.5):
    d = run.values.get((scen, cfg, bench), {})
    if not d:
        return False
    sizes = sorted(d)
    x = [s if s > 0 else xs_zero for s in sizes]
    med = [statistics.median(d[s]) for s in sizes]
    ax.plot(x, med, label=label, ms=4, **STYLE.get(cfg, {}))
    if any(len(d[s]) > 1 for s in sizes):
        ax.fill_between(x, [min(d[s]) for s in sizes], [max(d[s]) for s in sizes],
                        color=STYLE.get(cfg, {}).get("color", "k"), alpha=0.15)
    return True


def _title(run, what):
    m = run.meta
    return "%s — %s, %s reps, %s\n%s" % (what, m.get("mode"), m.get("reps"), m.get("date_utc"), m.get("cpu", "")[:70])


def _na_note(ax, run, bench):
    missing = [c for c in run.configs if not run.values.get(("clean", c, bench))]
    if missing:
        ax.text(0.01, 0.01, "not available: " + ", ".join(missing), transform=ax.transAxes, fontsize=8,
                color="tab:red", va="bottom")


def draw(run, out):
    # Latency
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for c in run.configs:
        _line(ax, run, "clean", c, "latency", c)
    fl = run.floor()
    if fl:
        ax.plot([s if s > 0 else 0.5 for s in fl], list(fl.values()), "k:", marker=".",
                label="raw floor (fi_pingpong udp dgram)")
    for batched, style, label in ((False, "k--", "raw message ping-pong"),
                                  (True, "k-.", "raw message ping-pong, batched")):
        pp = {s: statistics.median(r.values()) for s, r in run.raw_pingpong_reps(batched).items()}
        if pp:
            ax.plot(list(pp), list(pp.values()), style, marker=".", lw=1, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes; 0 B drawn at 0.5)")
    ax.set_ylabel("one-way latency (µs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _na_note(ax, run, "latency")
    ax.set_title(_title(run, "Latency (lower is better)"), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency.png"), dpi=110)
    plt.close(fig)

    # Bandwidth: unidirectional and bidirectional side by side
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    for ax, bench, what in ((axes[0], "bw", "unidirectional"), (axes[1], "bibw", "bidirectional")):
        for c in run.configs:
            _line(ax, run, "clean", c, bench, c)
        rs = run.raw_stream() if bench == "bw" else {}
        if rs:
            if -1 in rs:
                ax.axhline(rs[-1], color="k", ls=":", label="raw datagram streaming")
            else:
                ax.plot(list(rs), list(rs.values()), "k:", marker=".", label="raw datagram streaming")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        _na_note(ax, run, bench)
        ax.set_title(_title(run, "Bandwidth, %s, window 64" % what), fontsize=10)
    axes[0].set_ylabel("MB/s (10^6 B/s)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bandwidth.png"), dpi=110)
    plt.close(fig)

    if run.loss:
        fig, ax = plt.subplots(figsize=(9, 5.5))
        for c in run.configs:
            for p, ls in zip(run.loss, ["-", "--", ":", "-."]):
                # The summary table's fraction: paired by repetition where the run interleaved them.
                fr = run.loss_fraction(p, c)
                sizes = list(fr)
                if sizes:
                    ax.plot(sizes, [fr[s].value for s in sizes], ls=ls, marker="o",
                            color=STYLE.get(c, {}).get("color"), label="%s, %g %% loss" % (c, p))
        for p, thr in ((1.0, 0.7), (5.0, 0.4)):
            if p in run.loss:
                ax.axhline(thr, color="k", lw=0.8, ls=":")
                # x in axes fractions, y in data: the label stays at the left edge whatever the sizes.
                ax.text(0.01, thr, "target %g %%: %.1f" % (p, thr), fontsize=8, va="bottom",
                        transform=ax.get_yaxis_transform())
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bandwidth under loss / clean bandwidth")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        ax.set_title(_title(run, "Bandwidth under loss"), fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "loss.png"), dpi=110)
        plt.close(fig)
