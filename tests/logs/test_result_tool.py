"""logs/result.py: time to train, status, the MLPerf score over runs, and the
official compliance checker with only the target changed for scaled runs."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mllog_fixture import case, event, failures, resnet_log, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "logs", "result.py")


def run(*args):
    return run_tool(TOOL, *args)


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

    bad = os.path.join(tmp, "bad.log")
    with open(bad, "w") as f:
        f.write(event(1, "POINT_IN_TIME", "submission_benchmark", "resnet") + "\n:::MLLOG {\"key\": \n")
    rc, out = run("--no-check", bad)
    case("malformed_log_named", rc == 2 and "bad.log:2: malformed MLLOG line" in out
         and "Traceback" not in out, out)

sys.exit(1 if failures() else 0)
