"""logs/summary.py: a folder of result_<i>.txt logs gives each run's time and
compliance, the MLPerf score (fastest and slowest dropped, one run that
missed the target counted as the slowest, two making it invalid), the
spread, and a one-line error for each kind of bad input."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mllog_fixture import case, event, failures, resnet_log, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "logs", "summary.py")


def run(*args):
    return run_tool(TOOL, *args)


def folder(tmp, name, runs):
    """runs: (minutes, status) per result_<i>.txt."""
    path = os.path.join(tmp, name)
    os.makedirs(path)
    for i, (minutes, status) in enumerate(runs):
        acc = 0.9 if status == "success" else 0.5
        resnet_log(os.path.join(path, "result_%d.txt" % i), [0.5, acc], minutes, status)
    return path


def one_error_line(rc, out, text):
    lines = out.strip().splitlines()
    return rc == 2 and len(lines) == 1 and text in lines[0] and "Traceback" not in out


with tempfile.TemporaryDirectory() as tmp:
    ok5 = folder(tmp, "ok5", [(m, "success") for m in (5.0, 1.0, 3.0, 2.0, 4.0)])
    rc, out = run("--target", "0.85", ok5)
    case("five_runs_score_and_compliance",
         rc == 0 and "score: 3.000 min (180.0 s)" in out and "reached the target: 5 of 5" in out
         and out.count("SUCCESS") == 5 and "the rules ask for 5" in out, out)
    # Sample standard deviation of 1..5 minutes: 1.5811 min = 94.9 s.
    case("spread", "fastest 60.0 s, slowest 300.0 s, standard deviation 94.9 s" in out, out)
    rc, out = run("--target", "0.95", ok5)
    case("noncompliant_log_fails", rc == 1 and out.count("  FAILED\n") == 5
         and out.count("Failed checks for eval_accuracy : v['value'] >= 0.95") == 5, out)

    # One aborted run is the slowest: 1 (fastest) and it are dropped -> 2, 3, 4.
    # (The runs' two epochs are a scaled run's, --target: no RCP applies.)
    one = folder(tmp, "one_failed", [(1.0, "success"), (2.0, "success"), (0.5, "aborted"),
                                     (3.0, "success"), (4.0, "success")])
    rc, out = run("--no-check", "--target", "0.85", one)
    case("one_missed_target_counts_as_slowest",
         rc == 0 and "score: 3.000 min" in out and "reached the target: 4 of 5" in out
         and "result_2.txt" not in out.split("reached the target")[1].splitlines()[0], out)
    two = folder(tmp, "two_failed", [(1.0, "success"), (2.0, "aborted"), (0.5, "aborted"),
                                     (3.0, "success"), (4.0, "success")])
    rc, out = run("--no-check", "--target", "0.85", two)
    case("two_missed_targets_no_score",
         rc == 1 and "score: none: 2 runs did not reach the target" in out, out)

    rc, out = run(os.path.join(tmp, "nowhere"))
    case("missing_folder", one_error_line(rc, out, "nowhere: no such folder"), out)
    wrong = folder(tmp, "wrong_name", [(1.0, "success")] * 3)
    shutil.copy(os.path.join(wrong, "result_0.txt"), os.path.join(wrong, "run3.log"))
    rc, out = run("--no-check", wrong)
    case("wrong_file_name", one_error_line(rc, out, "wrong_name/run3.log: not a result log name"), out)
    gap = folder(tmp, "gap", [(1.0, "success")] * 3)
    os.rename(os.path.join(gap, "result_1.txt"), os.path.join(gap, "result_7.txt"))
    rc, out = run("--no-check", gap)
    case("numbering_gap", one_error_line(rc, out, "gap: result_1.txt is missing"), out)
    bad = folder(tmp, "malformed", [(1.0, "success")] * 3)
    with open(os.path.join(bad, "result_1.txt"), "a") as f:
        f.write(':::MLLOG {"namespace": "", "time_ms": 1, "key": "x"\n')
    rc, out = run("--no-check", bad)
    case("malformed_log", one_error_line(rc, out, "malformed/result_1.txt:"), out)
    mixed = folder(tmp, "mixed", [(1.0, "success")] * 3)
    with open(os.path.join(mixed, "result_2.txt"), "w") as f:
        f.write(event(1, "POINT_IN_TIME", "submission_benchmark", "ssd") + "\n")
    rc, out = run("--no-check", mixed)
    case("mixed_benchmarks", one_error_line(rc, out, "result_2.txt: benchmark ssd, but result_0.txt is resnet"), out)

sys.exit(1 if failures() else 0)
