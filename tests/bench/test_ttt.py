"""tests/bench/ttt.py, the time-to-train table beside the PyTorch references.

- A real call: NCF's small config, our side only, seeds 1 and 2, one thread.
  Each run's record must say what its MLPerf log says (read here on its own):
  the time to train is run_stop - run_start (to the 0.1 s the trainer
  prints), the last metric the last eval_accuracy, the compliance verdict
  SUCCESS, the status reached; the Markdown's mean is the records' mean.
- Our command on the CPU: fp32 where a GPU config says bf16.
- --scale smoke: the config both sides read (the medium one with the smoke
  keys, each once) and the data folder.
- The output readers on the lines each trainer (common/train/run.c) and each
  pytorch_reference.py print, with an epoch without an eval and a run that
  ends short of its target.
- The table: means over the seeds that reached the target only, the ratio
  PyTorch's mean over ours, no ratio when a side reached nothing.
- The budget: passes seed by seed over the benchmarks, a pair not started
  when its last one would not fit, a failed benchmark not tried again, a run
  stopped at the budget ending its pair (a fake clock, no training).
- --table over two calls' files, and bad input: one error line naming the
  flag or file."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "logs"))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
sys.path.insert(0, os.path.join(ROOT, "logs"))
from mllog_fixture import case, failures  # noqa: E402
import result  # noqa: E402
import ttt  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
TOOL = os.path.join(ROOT, "tests", "bench", "ttt.py")


def tool(*flags):
    proc = subprocess.run([sys.executable, TOOL, "--build", build] + list(flags), cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- a real call
with tempfile.TemporaryDirectory() as tmp:
    out, logs = os.path.join(tmp, "out"), os.path.join(tmp, "logs")
    rc, text = tool("--scale", "small", "--device", "cpu", "--benches", "ncf", "--sides", "ours",
                    "--seeds", "1,2", "--threads", "1", "--out", out, "--logs", logs)
    found = sorted(os.listdir(out)) if os.path.isdir(out) else []
    jsonl = [f for f in found if f.startswith("ttt_") and f.endswith(".jsonl")]
    md = [f for f in found if f.startswith("ttt_") and f.endswith(".md")]
    case("ttt_ncf_call_writes_its_files", rc == 0 and len(jsonl) == 1 and len(md) == 1,
         "exit %d, files %s: %s" % (rc, found, text[-800:]))
    if jsonl and md:
        runs = records(os.path.join(out, jsonl[0]))
        ok, why = len(runs) == 2 and [r["seed"] for r in runs] == [1, 2], "runs %s" % runs
        for r in runs if ok else []:
            log = os.path.join(logs, "ncf_small_seed%d.log" % r["seed"])
            info = result.summarize(log)
            seconds = info["minutes"] * 60
            good = (r["status"] == "reached" and info["status"] == "success" and
                    abs(r["seconds"] - seconds) <= 0.051 and r["metric"] == "HR@10 %.4f" % info["accuracy"]
                    and r["compliance"] == "SUCCESS" and r["target"] == 0.6 and r["side"] == "ours")
            ok = ok and good
            why += "; seed %d: log %.3f s, accuracy %s, %s" % (r["seed"], seconds, info["accuracy"], info["status"])
        case("ttt_records_are_what_the_logs_say", ok, why)
        text_md = open(os.path.join(out, md[0])).read()
        mean = sum(r["seconds"] for r in runs) / len(runs) if runs else float("nan")
        row = [l for l in text_md.splitlines() if l.startswith("| ncf | 2 of 2 |")]
        case("ttt_markdown_mean_is_the_runs_mean", len(row) == 1 and row[0].split("|")[3].strip().startswith(
            "%.1f " % mean), "mean %.3f, rows %s" % (mean, row))

# ---------------------------------------------------------------- the output readers
OURS = """bert: epoch 1: F1 49.4000 (target 50.0000), mean train loss 2.1000; train 85.2 s, eval 3.1 s
bert: epoch 2: F1 58.9000 (target 50.0000) reached, mean train loss 1.5000; train 84.8 s, eval 3.3 s
bert: target reached, time to train 180.4 s (3.01 min); log logs/bert/x.log
"""
got = ttt.parse_run(OURS, "bert")
case("ttt_parse_ours", got == dict(reached=True, seconds=180.4, epochs=2, metric="F1 58.9000", train_s=85.0,
                                   eval_s=3.2), got)
CADENCE = """pytorch: epoch 1: no eval (cadence), loss 1.2000; train 10.0 s
pytorch: epoch 2: top-1 0.8800 (target 0.9100), loss 0.9000; train 12.0 s, eval 2.0 s
pytorch: target NOT reached, time to train 30.5 s
"""
got = ttt.parse_run(CADENCE, "pytorch")
case("ttt_parse_reference_cadence_and_short", got == dict(reached=False, seconds=30.5, epochs=2, metric="top-1 0.8800",
                                                          train_s=11.0, eval_s=2.0), got)
NCF = """pytorch: epoch 1: HR@10 0.5800 NDCG@10 0.3300 (target 0.6000) loss 0.3000; train 1.5 s, eval 0.5 s
pytorch: epoch 2: HR@10 0.6400 NDCG@10 0.3800 (target 0.6000) loss 0.2000; train 1.5 s, eval 0.5 s
pytorch: target reached, time to train 4.9 s
"""
got = ttt.parse_run(NCF, "pytorch")
case("ttt_parse_reference_first_metric", got and got["metric"] == "HR@10 0.6400" and got["epochs"] == 2, got)
case("ttt_parse_needs_the_last_line", ttt.parse_run(OURS.splitlines()[0] + "\n", "bert") is None and
     ttt.parse_run(OURS, "pytorch") is None, "a run without its last line, or another program's lines, read")


# Ours on the CPU computes in fp32: a GPU config's bf16 is set aside there
# (the trainer refuses bf16 on the CPU), not on the GPU, and a config
# without a precision gets no flag.
def cmd(bench, scale, device):
    return ttt.command(bench, "ours", 1, argparse.Namespace(build="build", scale=scale, device=device, threads=None),
                       "x.log")


case("ttt_cpu_runs_gpu_configs_in_fp32", "--precision=fp32" in cmd("bert", "medium", "cpu") and
     "--precision=fp32" not in cmd("bert", "medium", "cuda") and "--precision=fp32" not in cmd("ncf", "small", "cpu"),
     [cmd("bert", "medium", "cpu"), cmd("bert", "medium", "cuda"), cmd("ncf", "small", "cpu")])

# --scale smoke: the medium config with SMOKE_KEYS and the benchmark's own
# keys, each once, every other medium key as it was; both sides read it,
# from data/<bench>/smoke; ours gets no precision flag (the file says fp32).
with tempfile.TemporaryDirectory() as tmp:
    smoke = argparse.Namespace(build="build", scale="smoke", device="cpu", threads=None, logs=tmp)
    path = ttt.conf_path("resnet", smoke)
    text = open(path).read()
    got, medium = ttt.read_conf(path), ttt.read_conf("image_classification/configs/medium.conf")
    want = dict(medium, **ttt.SMOKE_KEYS, **ttt.SMOKE["resnet"][2])
    once = all(sum(line.split("=", 1)[0].strip() == k for line in text.splitlines()) == 1 for k in want)
    ours = ttt.command("resnet", "ours", 1, smoke, "x.log")
    theirs = ttt.command("resnet", "pytorch", 1, smoke, "x.log")
    case("ttt_smoke_config", got == want and once and f"--config={path}" in ours and f"--config={path}" in theirs
         and "--data_dir=data/resnet/smoke" in ours and "--raw=data/resnet/smoke/raw" in theirs and
         not any(f.startswith("--precision") for f in ours), [got, want, ours, theirs])

# ---------------------------------------------------------------- the table
def rec(bench, side, seed, status, seconds, machine="m", scale="medium"):
    return dict(bench=bench, side=side, seed=seed, status=status, seconds=seconds, epochs=3, metric="x 1",
                target=0.5, scale=scale, device="cuda", machine=machine, date="2026-11-29")


runs = [rec("resnet", "ours", 1, "reached", 100.0), rec("resnet", "pytorch", 1, "reached", 80.0),
        rec("resnet", "ours", 2, "not reached", 300.0), rec("resnet", "pytorch", 2, "reached", 90.0),
        rec("resnet", "ours", 3, "reached", 110.0), rec("resnet", "pytorch", 3, "reached", 85.0),
        rec("bert", "ours", 1, "reached", 40.0), rec("bert", "pytorch", 1, "stopped at the budget", None)]
rows = {r["bench"]: r for r in ttt.summary(runs)}
res = rows.get("resnet", {})
case("ttt_mean_over_reached_seeds", res.get("ours", {}).get("mean") == 105.0 and
     res["ours"]["reached"] == 2 and res["ours"]["runs"] == 3 and res["pytorch"]["mean"] == 85.0 and
     abs(res["ratio"] - 85.0 / 105.0) < 1e-12, res)
case("ttt_no_ratio_without_a_reached_side", rows.get("bert", {}).get("ratio", 0) is None and
     rows["bert"]["pytorch"]["reached"] == 0 and "ssd" not in rows, rows.get("bert"))
md = ttt.table(runs)
case("ttt_table_rows", "| resnet | 2 of 3 | 105.0 (100.0-110.0) | 3 of 3 | 85.0 (80.0-90.0) | 0.81 |" in md and
     "| bert | 1 of 1 | 40.0 | 0 of 1 | - | - |" in md and "| resnet | 2 | ours | not reached | 300.0 |" in md,
     md)


# ---------------------------------------------------------------- the budget
class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def plan(budget, cost, seeds=(1, 2, 3), benches=("resnet", "ncf"), fail=(), stop=()):
    """plan_and_run with runs that take cost[bench] seconds of a fake clock
    each; (bench, seed) in fail fails, in stop is stopped at the budget."""
    clock, done = Clock(), []
    args = argparse.Namespace(budget=budget, seeds=list(seeds), benches=list(benches), sides=["ours", "pytorch"])

    def run(bench, side, seed, timeout):
        clock.t += cost[bench]
        status = "failed" if (bench, seed) in fail else "stopped at the budget" if (bench, seed) in stop else "reached"
        done.append((bench, side, seed))
        return dict(status=status)

    ttt.plan_and_run(args, run, lambda bench, timeout: True, clock=clock)
    return done


got = plan(None, {"resnet": 10, "ncf": 1})
want = [(b, s, seed) for seed in (1, 2, 3) for b in ("resnet", "ncf") for s in ("ours", "pytorch")]
case("ttt_passes_seed_by_seed", got == want, got)
# resnet's pair takes 20 s, ncf's 2: after the first pass 22 s of 45 are
# spent; the second resnet pair fits (23 left), the third does not (1 left),
# ncf's third does not either (1 < 2).
got = plan(45, {"resnet": 10, "ncf": 1})
want = [(b, s, seed) for seed in (1, 2) for b in ("resnet", "ncf") for s in ("ours", "pytorch")]
case("ttt_budget_skips_what_cannot_fit", got == want, got)
got = plan(None, {"resnet": 10, "ncf": 1}, fail={("resnet", 1)}, stop={("ncf", 2)})
want = [("resnet", "ours", 1), ("ncf", "ours", 1), ("ncf", "pytorch", 1), ("ncf", "ours", 2), ("ncf", "ours", 3),
        ("ncf", "pytorch", 3)]
case("ttt_failed_bench_dropped_stopped_run_ends_its_pair", got == want, got)

# ---------------------------------------------------------------- --table and bad input
with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
    with open(a, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs[:6])
    with open(b, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs[6:])
    rc, text = tool("--table", a, b, "--out", tmp)
    path = os.path.join(tmp, "ttt_2026-11-29_m.md")
    case("ttt_table_of_two_calls", rc == 0 and os.path.isfile(path) and open(path).read() == ttt.table(runs),
         "exit %d: %s" % (rc, text[-500:]))
    with open(b, "w") as f:
        f.write(json.dumps(rec("bert", "ours", 1, "reached", 40.0, machine="other")) + "\n")
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps(runs[0]) + "\n{not json\n")
    for name, flags, want in [
            ("ttt_table_mixed_machines", ["--table", a, b, "--out", tmp], "more than one scale and machine"),
            ("ttt_table_bad_line", ["--table", bad, "--out", tmp], "bad.jsonl:2: not a JSON line"),
            ("ttt_table_missing_file", ["--table", os.path.join(tmp, "none.jsonl"), "--out", tmp], "cannot read"),
            ("ttt_bad_bench", ["--benches", "resnet,gpt"], "--benches: 'gpt'"),
            ("ttt_bad_side", ["--sides", "theirs"], "--sides: 'theirs'"),
            ("ttt_bad_seeds", ["--seeds", "1,x"], "--seeds"),
            ("ttt_bad_budget", ["--budget", "0"], "--budget"),
            ("ttt_smoke_on_cuda", ["--scale", "smoke", "--device", "cuda"], "--scale smoke"),
            ("ttt_cuda_without_gpu", ["--device", "cuda"], "--device: cuda")]:
        if name == "ttt_cuda_without_gpu" and ttt.benchlib.gpu_names():
            print("SKIP %s: this machine has a GPU" % name)
            continue
        rc, text = tool(*flags)
        lines = [l for l in text.strip().splitlines() if "error" in l]
        case(name, rc in (1, 2) and len(lines) == 1 and want in lines[0] and "Traceback" not in text,
             "exit %d: %s" % (rc, text.strip()[-300:]))

sys.exit(1 if failures() else 0)
