"""Time to train beside the PyTorch references: each benchmark's config of one
scale (small on the CPU, medium on a GPU) trained from the same seeds to its
target by our trainer and by its task folder's pytorch_reference.py (the same
data files, model, initialisation rules, optimizer, schedule, batch and eval
cadence, the clock from the run's start with data loading included), seed by
seed, ours then PyTorch.

Runs go in passes: the first seed of every benchmark, then the second of
every benchmark, and so on, so that a time budget (--budget, the seconds
this invocation may take) cuts seeds evenly across benchmarks. A pass starts
a benchmark's pair only when its last pair's time fits in what is left; a
run still going when the budget ends is stopped and shown as such. Each
benchmark's data is made first when missing (prepare_data.sh SCALE
data/<bench>/<scale>; the time it takes is not in the table).

Our trainer's MLPerf log of each run is checked by the compliance checker
(logs/result.py, the config's target). Each run is appended to
OUT/ttt_<date>_<machine>.jsonl as it ends, and OUT/ttt_<date>_<machine>.md is
written again from all the runs in that file: per seed the time to train,
epochs, last metric and the log's verdict; per benchmark the means over the
seeds that reached the target and ours / PyTorch: the speed ratio, PyTorch's
mean time over ours (above 1: ours trains to the target sooner).

    python3 tests/bench/ttt.py [--build build] [--scale small|medium]
        [--device cpu|cuda] [--benches resnet,ssd,transformer,ncf,bert]
        [--seeds 1,2,3] [--sides ours,pytorch] [--budget SECONDS]
        [--threads N] [--out DIR] [--logs DIR]
    python3 tests/bench/ttt.py --scale smoke --device cpu [--seeds 1] ...
        (each medium config, both sides, one epoch and its eval in fp32 on
        a few records of the medium set's kind, data/<bench>/smoke: that
        the configs and references run, before a GPU call; `make
        bench-cpu` runs it; the table goes to the --logs folder)
    python3 tests/bench/ttt.py --table RUNS.jsonl... [--out DIR]
        (the table again from the runs of one or more calls; the files
        must be of one scale and machine)

Defaults: medium on cuda when nvidia-smi finds a GPU, else small on cpu;
seeds 1,2,3; no budget; OUT tests/bench/results.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT

NAME = "ttt"
sys.path.insert(0, os.path.join(ROOT, "logs"))
import result  # noqa: E402  (logs/result.py: the log's summary and the compliance checker)

# Per benchmark: its task folder and the reference's flags besides --config,
# --device, --threads and --seed ({data}: the data folder, {build}: the
# build folder).
BENCHES = {
    "resnet": ("image_classification", ["--raw={data}/raw"]),
    "ssd": ("object_detection", ["--data_dir={data}", "--coco_eval={build}/bin/coco_eval"]),
    # PyTorch's own dropout, not the trainer's Philox masks (which cost the
    # reference a pass of tensor ops per mask): the same rates, its fastest way.
    "transformer": ("translation", ["--data_dir={data}", "--torch_dropout"]),
    "ncf": ("recommendation", ["--data_dir={data}"]),
    "bert": ("language", ["--data_dir={data}", "--dropout_rng=torch"]),
}
SIDES = ("ours", "pytorch")

# --scale smoke: each benchmark's medium config, both sides, one epoch and its
# eval in fp32 on a few records of the medium set's kind (NCF: the small
# set, the medium one's shape being its size) - a check on the CPU that the
# configs and the references run before a GPU call spends minutes on them,
# not a time to train. Per benchmark: the scale whose prepare_data.sh makes
# the data, the sizes it takes from the environment, and keys set besides
# SMOKE_KEYS (ResNet's warmup epoch would be the whole schedule; the
# Transformer's eval buffers are sized by eval_batch).
SMOKE = {
    "resnet": ("medium", {"TRAIN_COUNT": "512", "VAL_COUNT": "128"},
               {"warmup_epochs": "0", "loader_threads": "2"}),
    "ssd": ("medium", {"TRAIN_COUNT": "128", "VAL_COUNT": "32"}, {"loader_threads": "2"}),
    "transformer": ("medium", {"TRAIN_PAIRS": "512", "EVAL_PAIRS": "32"}, {"eval_batch": "32"}),
    "ncf": ("small", {}, {}),
    "bert": ("medium", {"TRAIN_QUESTIONS": "64", "DEV_QUESTIONS": "16"}, {}),
}
SMOKE_KEYS = {"max_epochs": "1", "eval_every": "1", "eval_offset": "0", "precision": "fp32"}


def data_dir(bench, scale):
    return f"data/{bench}/{scale}"


def conf_path(bench, args):
    """The config both sides read: the scale's own, or for smoke the medium
    one with SMOKE's keys, written into args.logs."""
    folder = BENCHES[bench][0]
    if args.scale != "smoke":
        return f"{folder}/configs/{args.scale}.conf"
    keys = dict(SMOKE_KEYS, **SMOKE[bench][2])
    path = os.path.join(args.logs, f"{bench}_smoke.conf")
    with open(os.path.join(ROOT, folder, "configs", "medium.conf")) as f:
        lines = [line for line in f if line.split("=", 1)[0].strip() not in keys]
    with open(path, "w") as f:
        f.writelines(lines + [f"{k} = {v}\n" for k, v in keys.items()])
    return path


def read_conf(path):
    """A config file's keys (the trainers' key = value lines, # comments)."""
    conf = {}
    with open(os.path.join(ROOT, path)) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" in line:
                k, v = (s.strip() for s in line.split("=", 1))
                conf[k] = v
    return conf


def parse_run(out, name):
    """What a run to target printed, ours ("resnet: ...") or a reference's
    ("pytorch: ..."): the epoch lines ("NAME: epoch N: METRIC VALUE ...
    (target T) ...; train T s ..., eval E s"; an epoch without an eval says
    "no eval") and the last line ("NAME: target reached, time to train S s"
    or "target NOT reached ..."). None when the last line is missing."""
    epochs = re.findall(rf"^{name}: epoch (\d+): (.*)$", out, re.M)
    end = re.search(rf"^{name}: (target reached|target NOT reached).*?time to train ([0-9.]+) s", out, re.M)
    if not end or not epochs:
        return None
    metric, train, evals = None, [], []
    for _, rest in epochs:
        m = re.search(r"; train ([0-9.]+) s", rest)
        if m:
            train.append(float(m.group(1)))
        m = re.search(r", eval ([0-9.]+) s", rest)
        if m:
            evals.append(float(m.group(1)))
        m = re.match(r"([^(;]*?) (-?[0-9.]+|nan)\b.*\(target ", rest)
        if m and not rest.startswith("no eval"):
            metric = f"{m.group(1).split()[0]} {m.group(2)}"
    return dict(reached=end.group(1) == "target reached", seconds=float(end.group(2)),
                epochs=int(epochs[-1][0]), metric=metric,
                train_s=statistics.mean(train) if train else None,
                eval_s=statistics.mean(evals) if evals else None)


def compliance(log, target):
    """The checker's verdict on our log: 'SUCCESS', or 'FAILED: <its last
    line>', or why it could not run."""
    try:
        ok, detail = result.check(log, result.summarize(log), target)
    except result.LogError as e:
        return f"FAILED: {e}"
    except ImportError:
        return "not checked: mlperf_logging is not installed (make deps)"
    return "SUCCESS" if ok else "FAILED: " + (detail.splitlines() or ["no output"])[-1][:200]


def command(bench, side, seed, args, log):
    folder, ref_flags = BENCHES[bench]
    conf = conf_path(bench, args)
    data = data_dir(bench, args.scale)
    common = [f"--config={conf}", f"--device={args.device}", f"--seed={seed}"]
    if args.threads:
        common.append(f"--threads={args.threads}")
    if side == "ours":
        # The CPU computes in fp32 (the references do too there): a GPU
        # config's bf16 or fp16 is set aside.
        lowp = args.device == "cpu" and read_conf(conf).get("precision", "fp32") != "fp32"
        return ([os.path.join(args.build, "bin", bench), f"--data_dir={data}", f"--log_file={log}"] + common +
                (["--precision=fp32"] if lowp else []))
    return ([sys.executable, os.path.join(folder, "pytorch_reference.py")] + common +
            [f.format(data=data, build=args.build) for f in ref_flags])


def run_side(bench, side, seed, args, timeout, logs):
    """One run to target; its record (status reached, not reached, failed or
    stopped at the budget)."""
    conf = read_conf(conf_path(bench, args))
    log = os.path.join(logs, f"{bench}_{args.scale}_seed{seed}.log")
    cmd = command(bench, side, seed, args, log)
    print(f"{NAME}: {bench} seed {seed}, {'ours' if side == 'ours' else 'PyTorch'} ...", flush=True)
    t0 = time.monotonic()
    rec = dict(bench=bench, scale=args.scale, device=args.device, machine=args.machine, side=side, seed=seed,
               target=float(conf["target_accuracy"]), date=benchlib.utc_stamp(), command=" ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        out, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = None
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    parsed = parse_run(out, bench if side == "ours" else "pytorch")
    if code is None:
        rec["status"] = "stopped at the budget"
    elif parsed is None or code != 0:
        rec["status"] = "failed"
        tail = (out + (proc.stderr or ""))[-1500:]
        print(f"{NAME}: {bench} seed {seed} {side} failed (exit status {code}):\n{tail}", file=sys.stderr)
    else:
        rec["status"] = "reached" if parsed["reached"] else "not reached"
    if parsed:
        rec.update({k: parsed[k] for k in ("seconds", "epochs", "metric", "train_s", "eval_s")})
    if side == "ours" and code is not None and os.path.isfile(log) and args.scale != "smoke":
        rec["compliance"] = compliance(log, rec["target"])
    return rec


def mean_or_none(values):
    return statistics.mean(values) if values else None


def summary(runs):
    """Per benchmark (in BENCHES' order): each side's seeds, how many reached
    the target, their mean time and range, and the speed ratio."""
    rows = []
    for bench in BENCHES:
        row = dict(bench=bench)
        for side in SIDES:
            mine = [r for r in runs if r["bench"] == bench and r["side"] == side]
            times = [r["seconds"] for r in mine if r["status"] == "reached"]
            row[side] = dict(runs=len(mine), reached=len(times), mean=mean_or_none(times),
                             low=min(times) if times else None, high=max(times) if times else None)
        if row["ours"]["runs"] or row["pytorch"]["runs"]:
            o, t = row["ours"]["mean"], row["pytorch"]["mean"]
            row["ratio"] = t / o if o and t else None
            rows.append(row)
    return rows


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def table(runs):
    """The Markdown of a set of runs (one scale and machine)."""
    first = runs[0]
    dates = sorted({r["date"] for r in runs})
    md = [f"# Time to train, the {first['scale']} configs, {', '.join(dates)}, {first['machine']}", "",
          f"Each benchmark's `{'medium.conf` with the smoke keys' if first['scale'] == 'smoke' else first['scale'] + '.conf`'}"
          " from the same seeds, ours (the trainer, on {first['device']}) "
          "then PyTorch (its task folder's `pytorch_reference.py`), the clock from run_start with data "
          "loading included (`tests/bench/ttt.py`). Means over the seeds that reached the target; "
          "ours / PyTorch is PyTorch's mean time over ours (above 1: ours trains to the target sooner).", "",
          "| benchmark | ours: seeds reached | ours: mean s (range) | PyTorch: seeds reached | "
          "PyTorch: mean s (range) | ours / PyTorch |", "|---|---:|---:|---:|---:|---:|"]
    for row in summary(runs):
        cells = []
        for side in SIDES:
            s = row[side]
            rng = f" ({s['low']:.1f}-{s['high']:.1f})" if s["reached"] > 1 else ""
            cells += [f"{s['reached']} of {s['runs']}", fmt(s["mean"]) + rng]
        md.append(f"| {row['bench']} | " + " | ".join(cells) + f" | {fmt(row['ratio'], '.2f')} |")
    md += ["", "Every run:", "",
           "| benchmark | seed | side | status | time to train s | epochs | last metric (target) | "
           "mean epoch: train s | mean eval s | our log |", "|---|---:|---|---|---:|---:|---|---:|---:|---|"]
    order = {b: i for i, b in enumerate(BENCHES)}
    for r in sorted(runs, key=lambda r: (order[r["bench"]], r["seed"], SIDES.index(r["side"]))):
        metric = f"{target_scale(r.get('metric'), r['target'])} ({r['target']:g})"
        md.append(f"| {r['bench']} | {r['seed']} | {'ours' if r['side'] == 'ours' else 'PyTorch'} | "
                  f"{r['status']} | {fmt(r.get('seconds'))} | {r.get('epochs', '-')} | {metric} | "
                  f"{fmt(r.get('train_s'))} | {fmt(r.get('eval_s'), '.2f')} | {r.get('compliance', '-')} |")
    return "\n".join(md) + "\n"


def target_scale(metric, target):
    """A run's "NAME VALUE" on its target's scale: a reference that prints
    BLEU or F1 in percent (4.06) beside a target in [0, 1] (0.03) shows it
    as a fraction (0.0406), marked with the % it came from."""
    m = re.fullmatch(r"(\S+) (-?[0-9.]+)", metric or "")
    if not m or target > 1 or float(m.group(2)) <= 1:
        return metric or "-"
    return f"{m.group(1)} {float(m.group(2)) / 100:.4f} (from {m.group(2)}%)"


def read_runs(paths):
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                for lineno, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            runs.append(json.loads(line))
                        except ValueError as e:
                            sys.exit(f"{NAME}: error: {path}:{lineno}: not a JSON line ({e})")
        except OSError as e:
            sys.exit(f"{NAME}: error: {path}: cannot read: {e.strerror}")
    kinds = {(r.get("scale"), r.get("machine")) for r in runs}
    if not runs:
        sys.exit(f"{NAME}: error: {', '.join(paths)}: no runs")
    if len(kinds) > 1:
        sys.exit(f"{NAME}: error: --table: the runs are of more than one scale and machine: {sorted(kinds)}")
    return runs


def write_table(runs, out, base):
    text = table(runs)
    with open(os.path.join(out, base + ".md"), "w") as f:
        f.write(text)
    return text


def prepare(bench, args, timeout):
    """The scale's data made when missing (prepare_data.sh skips a finished
    set); False when it could not be."""
    folder = BENCHES[bench][0]
    print(f"{NAME}: {bench}: the {args.scale} data ...", flush=True)
    scale, env = (SMOKE[bench][0], dict(os.environ, **SMOKE[bench][1])) if args.scale == "smoke" \
        else (args.scale, None)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(["bash", os.path.join(folder, "prepare_data.sh"), scale,
                               data_dir(bench, args.scale), args.build],
                              capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"{NAME}: {bench}: preparing the data ran past the budget", file=sys.stderr)
        return False
    if proc.returncode != 0:
        print(f"{NAME}: {bench}: prepare_data.sh {args.scale} failed:\n{(proc.stdout + proc.stderr)[-1500:]}",
              file=sys.stderr)
        return False
    print(f"{NAME}: {bench}: data ready ({time.monotonic() - t0:.0f} s)", flush=True)
    return True


def plan_and_run(args, run, prep, clock=time.monotonic):
    """The passes over seeds and benchmarks under the budget: run(bench,
    side, seed, timeout) returns a run's record, prep(bench, timeout) makes
    its data. Returns the records in the order they ran."""
    deadline = clock() + args.budget if args.budget else None
    left = (lambda: deadline - clock()) if deadline else (lambda: None)
    runs, last_pair, broken = [], {}, set()
    for i, seed in enumerate(args.seeds):
        for bench in args.benches:
            if bench in broken:
                continue
            if deadline and left() <= 0:
                print(f"{NAME}: {bench} seed {seed}: not started, the budget is spent", flush=True)
                continue
            if i == 0 and not prep(bench, left()):
                broken.add(bench)
                continue
            if deadline and bench in last_pair and last_pair[bench] > left():
                print(f"{NAME}: {bench} seed {seed}: not started, {left():.0f} s left of the budget "
                      f"and its last seed took {last_pair[bench]:.0f} s", flush=True)
                continue
            t0 = clock()
            for side in args.sides:
                rec = run(bench, side, seed, left())
                runs.append(rec)
                if rec["status"] == "failed":
                    broken.add(bench)
                if rec["status"] in ("failed", "stopped at the budget"):
                    break
            last_pair[bench] = clock() - t0
    return runs


def main():
    p = benchlib.arg_parser(__doc__)
    gpu = bool(benchlib.gpu_names())
    p.add_argument("--scale", choices=("small", "medium", "smoke"), default="medium" if gpu else "small")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if gpu else "cpu")
    p.add_argument("--benches", default=",".join(BENCHES))
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--budget", type=float, help="seconds this call may take (default: no limit)")
    p.add_argument("--threads", type=int, help="both sides' CPU threads (default: their own choice)")
    p.add_argument("--out", help="where the .jsonl and .md files go (default tests/bench/results; "
                   "smoke: the --logs folder)")
    p.add_argument("--logs", help="keep our MLPerf logs here (default: a temporary folder)")
    p.add_argument("--table", nargs="+", metavar="RUNS.jsonl", help="only write the table of these runs")
    args = p.parse_args()
    if args.scale == "smoke" and args.device != "cpu":
        p.error("--scale smoke: a CPU check (--device cpu)")
    if not args.table:
        args.logs = args.logs or tempfile.mkdtemp(prefix="ttt_logs_")
    args.out = args.out or (args.logs if args.scale == "smoke" and not args.table else benchlib.RESULTS)
    os.makedirs(args.out, exist_ok=True)
    if args.table:
        runs = read_runs(args.table)
        base = f"ttt_{min(r['date'] for r in runs)}_{benchlib.gpu_slug(runs[0]['machine'])}"
        print(write_table(runs, args.out, base))
        print(f"wrote {os.path.join(args.out, base + '.md')}")
        return 0
    for flag, value, known in (("--benches", args.benches, BENCHES), ("--sides", args.sides, SIDES)):
        bad = [v for v in value.split(",") if v not in known]
        if bad or not value:
            p.error(f"{flag}: '{','.join(bad)}' is not among {', '.join(known)}")
    args.benches, args.sides = args.benches.split(","), args.sides.split(",")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: '{args.seeds}' is not a comma-separated list of integers")
    if args.budget is not None and args.budget <= 0:
        p.error(f"--budget: {args.budget:g} is not a positive number of seconds")
    if args.device == "cuda" and not gpu:
        p.error("--device: cuda, but nvidia-smi finds no GPU")
    args.machine = benchlib.machine_name(args.device)
    base = f"ttt_{benchlib.utc_stamp()}_{benchlib.gpu_slug(args.machine)}"
    runs_path = os.path.join(args.out, base + ".jsonl")
    logs = args.logs
    os.makedirs(logs, exist_ok=True)

    def run(bench, side, seed, timeout):
        rec = run_side(bench, side, seed, args, timeout, logs)
        print(f"{NAME}: {bench} seed {seed} {side}: {rec['status']}, {fmt(rec.get('seconds'))} s, "
              f"{rec.get('metric')}, log {rec.get('compliance', '-')}", flush=True)
        with open(runs_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        write_table(read_runs([runs_path]), args.out, base)
        return rec

    runs = plan_and_run(args, run, lambda bench, timeout: prepare(bench, args, timeout))
    if runs:
        print(table(read_runs([runs_path])))
        print(f"wrote {runs_path} and {base}.md")
    return 0 if runs and all(r["status"] != "failed" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
