#!/usr/bin/env python3
"""PNG plots of runs from their MLPerf logs.

  python3 logs/plot.py KIND [--out FILE.png] [--size 800x500] [--target T]
                       [--data FILE.json] INPUT...

KIND:
  quality       eval accuracy against epoch, one line per run
  quality-time  eval accuracy against minutes since run_start
  throughput    training samples/s of each epoch (train_samples over the
                epoch_start .. epoch_stop interval)
  loss          mean training loss of each evaluated epoch (the line the
                trainer prints with each eval: in a result_<i>.txt of
                `make seeds`, not in a --log_file log)
  compare       two folders (two systems): accuracy against minutes, coloured
                by system, and each run's time to train beside the score
INPUT: a log, or a folder of result_<i>.txt (each log one run). The target
line is --target, else the target the trainer printed ("(target X)").
--data writes the series plotted, as JSON, for checking them.

Exit status 0, or 2 on bad input (a missing file or folder, a malformed log,
a log without what the plot needs) with a one-line error."""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import result  # noqa: E402  (logs/result.py)
from result import LogError  # noqa: E402

DPI = 100
EPOCH_LINE = re.compile(r"^\w+: epoch (\d+): .*\(target ([0-9.]+)\).*mean train loss ([-+0-9.eE]+|nan|inf)")


def runs_of(inputs):
    """Every run's log path: the files given, and each folder's result_<i>.txt."""
    paths = []
    for item in inputs:
        if os.path.isdir(item):
            paths += result.result_files(item)
        elif os.path.isfile(item):
            paths.append(item)
        else:
            raise LogError("%s: no such log file or folder" % item)
    return paths


def label(path):
    name = os.path.basename(path)
    seed = next((e["value"] for e in result.read_events(path) if e["key"] == "seed"), None)
    return "%s (seed %s)" % (os.path.splitext(name)[0], seed) if seed is not None else name


def run_start_ms(path, events):
    start = next((e for e in events if e["key"] == "run_start"), None)
    if start is None:
        raise LogError("%s: no run_start in the log" % path)
    return start["time_ms"]


def quality(path, by_time=False):
    """(x, y): eval_accuracy against epoch_num, or minutes since run_start."""
    events = result.read_events(path)
    evals = [e for e in events if e["key"] == "eval_accuracy"]
    if not evals:
        raise LogError("%s: no eval_accuracy in the log" % path)
    if by_time:
        t0 = run_start_ms(path, events)
        x = [(e["time_ms"] - t0) / 60000.0 for e in evals]
    else:
        x = [e.get("metadata", {}).get("epoch_num") for e in evals]
        if None in x:
            raise LogError("%s: an eval_accuracy without metadata epoch_num" % path)
    return x, [e["value"] for e in evals]


def throughput(path):
    """(epochs, samples/s): train_samples over each epoch's interval."""
    events = result.read_events(path)
    samples = next((e["value"] for e in events if e["key"] == "train_samples"), None)
    if not samples:
        raise LogError("%s: no train_samples in the log" % path)
    starts = {e["metadata"].get("epoch_num"): e["time_ms"] for e in events
              if e["key"] == "epoch_start" and "metadata" in e}
    x, y = [], []
    for e in events:
        epoch = e.get("metadata", {}).get("epoch_num")
        if e["key"] == "epoch_stop" and epoch in starts and e["time_ms"] > starts[epoch]:
            x.append(epoch)
            y.append(samples / ((e["time_ms"] - starts[epoch]) / 1000.0))
    if not x:
        raise LogError("%s: no epoch_start/epoch_stop pair in the log" % path)
    return x, y


def epoch_lines(path):
    """[(epoch, target, mean train loss)] of the trainer's epoch lines."""
    found = []
    with open(path, errors="replace") as f:
        for line in f:
            m = EPOCH_LINE.match(line)
            if m:
                found.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    return found


def loss(path):
    found = epoch_lines(path)
    if not found:
        raise LogError("%s: no epoch lines with a mean train loss (the trainer's output has them, "
                       "as make seeds' result_<i>.txt; a --log_file log does not)" % path)
    return [f[0] for f in found], [f[2] for f in found]


def printed_target(paths):
    for path in paths:
        found = epoch_lines(path)
        if found:
            return found[0][1]
    return None


def system_of(folder):
    """results/<system>/<benchmark>: the system's name; else the folder's."""
    folder = os.path.abspath(folder)
    parent = os.path.basename(os.path.dirname(folder))
    return parent if os.path.basename(os.path.dirname(os.path.dirname(folder))) == "results" \
        else os.path.basename(folder)


def figure(size):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt, plt.figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI)


def draw_runs(ax, series, target, xlabel, ylabel, title, target_label="target %g", xticks=None):
    """One line per series ({"x", "y", "label"[, "color"]}), the target as a
    dashed red line (labelled target_label % target), integer ticks on an
    epoch axis or xticks where given."""
    for s in series:
        ax.plot(s["x"], s["y"], marker="o", markersize=3, label=s["label"], color=s.get("color"))
    if target is not None:
        ax.axhline(target, color="red", linestyle="--", linewidth=1, label=target_label % target)
    ax.set_xlabel(xlabel)
    if xticks is not None:
        ax.set_xticks(xticks)
    elif xlabel == "epoch":
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


KINDS = {
    # kind: (series of a run, x label, y label, draws the target)
    "quality": (lambda p: quality(p), "epoch", "eval accuracy", True),
    "quality-time": (lambda p: quality(p, by_time=True), "minutes since run_start", "eval accuracy", True),
    "throughput": (throughput, "epoch", "training samples/s", False),
    "loss": (loss, "epoch", "mean training loss", False),
}


def plot_runs(kind, inputs, target, size, out):
    fn, xlabel, ylabel, with_target = KINDS[kind]
    paths = runs_of(inputs)
    series = []
    for p in paths:
        x, y = fn(p)
        series.append({"file": p, "label": label(p), "x": x, "y": y})
    if with_target and target is None:
        target = printed_target(paths)
    bench = result.summarize(paths[0])["benchmark"] or ""
    plt, fig = figure(size)
    draw_runs(fig.add_subplot(1, 1, 1), series, target if with_target else None, xlabel, ylabel,
              "%s: %s, %d run%s" % (bench, ylabel, len(series), "" if len(series) == 1 else "s"))
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return {"kind": kind, "target": target if with_target else None, "series": series}


def plot_compare(folders, target, size, out):
    if len(folders) != 2:
        raise LogError("compare takes two folders of result_<i>.txt, got %d inputs" % len(folders))
    series, times, scores = [], {}, {}
    colors = ["tab:blue", "tab:orange"]
    for folder, color in zip(folders, colors):
        system = system_of(folder)
        paths = runs_of([folder])
        minutes = []
        for p in paths:
            x, y = quality(p, by_time=True)
            series.append({"file": p, "label": "%s %s" % (system, os.path.basename(p)), "x": x, "y": y,
                           "color": color, "system": system})
            info = result.summarize(p)
            minutes.append(info["minutes"] if info["status"] == "success" else None)
        times[system] = minutes
        scores[system] = result.mlperf_score(minutes)[0]
        if target is None:
            target = printed_target(paths)
    if len(times) != 2:
        raise LogError("%s and %s: both folders name the system %s" % (folders[0], folders[1],
                                                                      system_of(folders[0])))
    plt, fig = figure(size)
    ax = fig.add_subplot(1, 2, 1)
    draw_runs(ax, [], target, "minutes since run_start", "eval accuracy", "accuracy against time")
    for s in series:
        ax.plot(s["x"], s["y"], marker="o", markersize=3, color=s["color"], alpha=0.8)
    for system, color in zip(times, colors):
        ax.plot([], [], color=color, label=system)
    ax.legend(fontsize="small")
    ax = fig.add_subplot(1, 2, 2)
    for i, (system, color) in enumerate(zip(times, colors)):
        done = [m for m in times[system] if m is not None]
        ax.scatter([i] * len(done), done, color=color, zorder=3, label="runs that reached the target")
        if scores[system] is not None:
            ax.hlines(scores[system], i - 0.3, i + 0.3, color="black", zorder=4)
            ax.annotate("%.3g min" % scores[system], (i + 0.32, scores[system]), va="center",
                        fontsize="small")
    ax.set_xticks(range(len(times)))
    ax.set_xticklabels(list(times))
    ax.set_xlim(-0.6, len(times) - 0.2)
    ax.set_ylabel("time to train (minutes)")
    ax.set_title("time to train: runs (dots), score (bar)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return {"kind": "compare", "target": target, "series": series, "times": times, "scores": scores}


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or not (100 <= int(m.group(1)) <= 10000 and 100 <= int(m.group(2)) <= 10000):
        raise argparse.ArgumentTypeError("%r: want WIDTHxHEIGHT in pixels, 100 to 10000 each" % text)
    return int(m.group(1)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=list(KINDS) + ["compare"])
    ap.add_argument("inputs", nargs="+", metavar="INPUT")
    ap.add_argument("--out", help="the PNG to write (default: KIND.png)")
    ap.add_argument("--size", type=parse_size, default=(800, 500), help="WIDTHxHEIGHT in pixels")
    ap.add_argument("--target", type=float, help="the target line (log units)")
    ap.add_argument("--data", help="write the series plotted to this JSON file")
    args = ap.parse_args()
    out = args.out or args.kind + ".png"
    try:
        if args.kind == "compare":
            data = plot_compare(args.inputs, args.target, args.size, out)
        else:
            data = plot_runs(args.kind, args.inputs, args.target, args.size, out)
        if args.data:
            with open(args.data, "w") as f:
                json.dump(data, f, indent=1)
    except LogError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("error: %s: %s" % (e.filename, e.strerror), file=sys.stderr)
        return 2
    print("plot: wrote %s (%s, %d run%s)" % (out, args.kind, len(data["series"]),
                                            "" if len(data["series"]) == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
