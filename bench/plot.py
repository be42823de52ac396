#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Draws spillway-bench's JSON lines as one PNG (matplotlib; Debian:
python3-matplotlib), one panel per kind of bench found:

  pipeline  step time per mode x tier: spillway's step beside the serial
            schedule, DeepSpeed's after-backward schedule and the bound
            (and the step with the timeline on, when the line has it)
  adam      fused AdamW throughput beside the memory-only twin (roofline)
            and the unfused passes, min..max of the runs as error bars
  swap      the NVMe tier's write and read rates beside fio's, per page size

Usage:
  plot.py --out OUT.png [FILE ...]   lines from the files, or stdin
  plot.py --can BENCH                exit 0 when BENCH can be drawn here
                                     (known, matplotlib importable), else
                                     say why and exit 2

spillway-bench --plot runs it on its own output. Lines that do not start
with '{' are ignored (human text); a JSON line of a bench this script does
not draw is refused, naming the bench, with exit status 2.
"""
import json
import sys

BENCHES = ("pipeline", "adam", "swap")


class PlotError(Exception):
    pass


def read_lines(texts):
    """The JSON objects among texts' lines, grouped by bench, in order."""
    by_bench = {}
    for where, text in texts:
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise PlotError(f"{where}:{n}: not a JSON line ({e})")
            bench = row.get("bench") if isinstance(row, dict) else None
            if bench not in BENCHES:
                raise PlotError(f"{where}:{n}: no plot for bench {bench!r} lines "
                                f"(plot.py draws {', '.join(BENCHES)})")
            by_bench.setdefault(bench, []).append(row)
    if not by_bench:
        raise PlotError("no spillway-bench JSON lines to draw (run the bench with --json)")
    return by_bench


def need(row, *fields):
    missing = [f for f in fields if f not in row]
    if missing:
        raise PlotError(f"a {row['bench']} line lacks {', '.join(missing)}")
    return [row[f] for f in fields]


def bars(ax, labels, series, unit, errors=None):
    """Grouped bars: one group per label, one bar per series (name -> values)."""
    names = list(series)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(labels))]
        err = errors.get(name) if errors else None
        b = ax.bar(xs, series[name], width, label=name, yerr=err, capsize=3 if err else 0)
        ax.bar_label(b, fmt="%.3g", fontsize=6, padding=2)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(unit)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def draw_pipeline(ax, rows):
    labels, series = [], {"spillway": [], "after-backward (DeepSpeed)": [], "serial": [], "bound": []}
    traced = all("trace_step_s" in r for r in rows)
    if traced:
        series["spillway, timeline on"] = []
    for r in rows:
        mode, tier, step, after, serial, bound = need(r, "mode", "tier", "step_s", "after_backward_s",
                                                      "serial_s", "bound_s")
        labels.append(f"{mode}\n{tier}" + (f"\n{r['device']}" if r.get("device", "host") != "host" else ""))
        for name, v in zip(series, (step, after, serial, bound)):
            series[name].append(v * 1e3)
        if traced:
            series["spillway, timeline on"].append(r["trace_step_s"] * 1e3)
    bars(ax, labels, series, "ms per step")
    r = rows[0]
    ax.set_title(f"pipeline: step time, {r.get('layers', '?')} layers x {r.get('params', '?')} params "
                 f"(lower is better)", fontsize=9)


def draw_adam(ax, rows):
    kinds = (("fused", ""), ("memory twin (roofline)", "roofline_"), ("unfused", "unfused_"))
    labels = []
    series = {k: [] for k, _ in kinds}
    errors = {k: [[], []] for k, _ in kinds}
    for r in rows:
        p, t, g, c, variant = need(r, "params", "threads", "grad", "copy", "variant")
        labels.append(f"{p / 2**20:.0f}M {variant}\n{t} thr, {g}\u2192{c}")
        for name, prefix in kinds:
            mid, lo, hi = need(r, prefix + "params_per_s", prefix + "params_per_s_min",
                               prefix + "params_per_s_max")
            series[name].append(mid * 1e-9)
            errors[name][0].append(max(mid - lo, 0) * 1e-9)
            errors[name][1].append(max(hi - mid, 0) * 1e-9)
    bars(ax, labels, series, "Gparam/s", errors)
    ax.set_title("adam: fused AdamW vs its memory-only twin (higher is better)", fontsize=9)


def draw_swap(ax, rows):
    labels = []
    series = {"spillway write": [], "fio write": [], "spillway read": [], "fio read": []}
    for r in rows:
        page, sessions, w, fw, rd, fr = need(r, "page_bytes", "sessions", "write_gbytes_per_s",
                                             "fio_write_gbytes_per_s", "read_gbytes_per_s",
                                             "fio_read_gbytes_per_s")
        labels.append(f"{page >> 20} MiB pages" + (f"\n{sessions} sessions" if sessions > 1 else ""))
        for name, v in zip(series, (w, fw, rd, fr)):
            series[name].append(v)
    bars(ax, labels, series, "GB/s")
    ax.set_title("swap: the NVMe tier through spillwayd vs fio, same directory (higher is better)", fontsize=9)


DRAW = {"pipeline": draw_pipeline, "adam": draw_adam, "swap": draw_swap}


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")  # files only: no display is needed or opened
    import matplotlib.pyplot as plt
    return plt


def plot(by_bench, out):
    plt = load_matplotlib()
    kinds = [b for b in BENCHES if b in by_bench]
    fig, axes = plt.subplots(len(kinds), 1, squeeze=False,
                             figsize=(max(6.0, 1.6 * max(len(by_bench[b]) for b in kinds) + 2), 4.2 * len(kinds)))
    for ax, kind in zip(axes[:, 0], kinds):
        DRAW[kind](ax, by_bench[kind])
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)


def main(argv):
    out, files = None, []
    try:
        if len(argv) == 2 and argv[0] == "--can":
            if argv[1] not in BENCHES:
                raise PlotError(f"no plot for bench {argv[1]!r} (plot.py draws {', '.join(BENCHES)})")
            load_matplotlib()
            return 0
        it = iter(argv)
        for a in it:
            if a == "--out":
                out = next(it, None)
            elif a in ("-h", "--help"):
                print(__doc__)
                return 0
            else:
                files.append(a)
        if not out:
            raise PlotError("usage: plot.py --out OUT.png [FILE ...]")
        texts = [(f, open(f, encoding="utf-8").read()) for f in files] or [("stdin", sys.stdin.read())]
        rows = read_lines(texts)
        plot(rows, out)
    except (PlotError, OSError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    n = sum(len(v) for v in rows.values())
    print(f"plot.py: {out}: {n} result{'s' if n != 1 else ''} ({', '.join(rows)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
