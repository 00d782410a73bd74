"""logs/result.py: time to train, status, the MLPerf score over runs, and the
official compliance checker with only the target changed for scaled runs."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "logs", "result.py")
failures = 0


def case(name, ok, why=""):
    global failures
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failures += not ok


def event(t, etype, key, value=None, **meta):
    meta = dict({"file": "t.c", "lineno": 1}, **meta)
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": etype,
                                     "key": key, "value": value, "metadata": meta})


def resnet_log(path, accuracies, run_minutes, status="success"):
    """A log with every key the 1.0.0 resnet/lars rules require."""
    P, S, E = "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"
    t0 = 1_700_000_000_000
    lines = [event(t0, S, "init_start")]
    for key, value in [("submission_benchmark", "resnet"), ("submission_org", "x"),
                       ("submission_division", "closed"), ("submission_status", "research"),
                       ("submission_platform", "1xCPU"), ("cache_clear", True), ("seed", 1),
                       ("global_batch_size", 256), ("gradient_accumulation_steps", 1),
                       ("train_samples", 1000), ("eval_samples", 100), ("opt_name", "lars"),
                       ("lars_opt_base_learning_rate", 2.0), ("lars_opt_end_learning_rate", 0.0001),
                       ("lars_opt_learning_rate_decay_poly_power", 2.0),
                       ("lars_opt_learning_rate_decay_steps", 100), ("lars_epsilon", 0.0),
                       ("lars_opt_learning_rate_warmup_epochs", 1), ("lars_opt_momentum", 0.9),
                       ("lars_opt_weight_decay", 0.0001)]:
        lines.append(event(t0, P, key, value))
    lines += [event(t0 + 1, E, "init_stop"), event(t0 + 2, S, "run_start")]
    t = t0 + 2
    for i, acc in enumerate(accuracies):
        epoch = i + 1
        lines += [event(t, S, "block_start", first_epoch_num=epoch, epoch_count=1),
                  event(t, S, "epoch_start", epoch_num=epoch), event(t, E, "epoch_stop", epoch_num=epoch),
                  event(t, E, "block_stop", first_epoch_num=epoch),
                  event(t, S, "eval_start", epoch_num=epoch), event(t, E, "eval_stop", epoch_num=epoch),
                  event(t, P, "eval_accuracy", acc, epoch_num=epoch)]
    lines.append(event(t0 + 2 + int(run_minutes * 60000), E, "run_stop", status=status))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run(*args):
    proc = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


with tempfile.TemporaryDirectory() as tmp:
    good = os.path.join(tmp, "good.log")
    resnet_log(good, [0.5, 0.86], 2.5)
    rc, out = run("--target", "0.85", good)
    case("scaled_target_met_complies", rc == 0 and "SUCCESS" in out and "2.50" in out, out)
    rc, out = run("--target", "0.9", good)
    case("scaled_target_missed_fails", rc != 0 and "FAILED" in out and ">= 0.9" in out, out)
    rc, out = run(good)  # official target 0.759: met by 0.86
    case("official_target", rc == 0 and "SUCCESS" in out, out)
    low = os.path.join(tmp, "low.log")
    resnet_log(low, [0.5, 0.6], 1.0)
    rc, out = run(low)
    case("official_target_missed", rc != 0 and "FAILED" in out, out)

    # Score: 5 successful runs of 1..5 minutes -> mean of 2, 3, 4.
    logs = []
    for i, minutes in enumerate([5.0, 1.0, 3.0, 2.0, 4.0]):
        p = os.path.join(tmp, "run%d.log" % i)
        resnet_log(p, [0.9], minutes)
        logs.append(p)
    rc, out = run("--no-check", *logs)
    case("score_drops_fastest_and_slowest", rc == 0 and "of 5 successful runs" in out and ": 3.00 min" in out, out)

    aborted = os.path.join(tmp, "aborted.log")
    resnet_log(aborted, [0.4], 1.0, status="aborted")
    rc, out = run("--no-check", "--require-success", aborted)
    case("require_success_rejects_aborted", rc != 0 and "aborted" in out, out)

    # A throughput benchmark's log: benchmark_start/stop, no run_start/stop.
    bench = os.path.join(tmp, "bench.log")
    with open(bench, "w") as f:
        f.write("\n".join([event(1, "POINT_IN_TIME", "submission_benchmark", "resnet"),
                           event(2, "INTERVAL_START", "benchmark_start", what="synthetic data"),
                           event(9, "INTERVAL_END", "benchmark_stop", throughput=812.5)]) + "\n")
    rc, out = run("--no-check", "--require-success", bench)
    case("benchmark_log_is_a_benchmark", rc != 0 and "benchmark" in out and "no run_stop" not in out, out)

    rc, out = run(os.path.join(tmp, "missing.log"))
    case("missing_log_named", rc == 2 and "missing.log: no such log file" in out, out)

sys.exit(1 if failures else 0)
