#!/usr/bin/env python3
"""The MLPerf result of one benchmark from a folder of its run logs.

  python3 logs/summary.py [--target T] [--no-check] FOLDER

FOLDER holds result_0.txt .. result_<N-1>.txt, as an MLPerf submission names
them (results/<system>/<benchmark>/, written by `make seeds`). Prints each
run's seed, status, time to train, last accuracy and compliance verdict (the
checks of logs/result.py), which runs reached the target, the score (the mean
without the fastest and the slowest run; one run that missed the target
counts as the slowest, two or more make the result invalid), the spread, and
the RCP check (logs/rcp.py: mlperf-logging's reference convergence points,
for resnet and ssd at the official target; "no RCP" for the others and for a
scaled --target).
The rules ask for 5 runs of resnet and ssd, 10 of the others: fewer is
reported, not refused.

Exit status: 0 when every log complies, the runs give a score and the RCP
check does not fail, 1 when not, 2 on bad input (a missing folder, a file not named result_<i>.txt, a
malformed log)."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcp  # noqa: E402  (logs/rcp.py)
import result  # noqa: E402  (logs/result.py)

# Runs per benchmark result (the training rules; MLPERF.md).
RUNS = {"resnet": 5, "ssd": 5}
RUNS_DEFAULT = 10


def read_runs(folder):
    """[(path, summary)] of the folder's logs, all of one benchmark."""
    runs = [(path, result.summarize(path)) for path in result.result_files(folder)]
    bench = runs[0][1]["benchmark"]
    for path, info in runs:
        if info["benchmark"] is None:
            raise result.LogError("%s: no submission_benchmark in the log" % path)
        if info["benchmark"] != bench:
            raise result.LogError("%s: benchmark %s, but %s is %s" % (
                path, info["benchmark"], os.path.basename(runs[0][0]), bench))
    return runs


def first_complaint(checker_output):
    """The checker's first line that says what failed."""
    lines = checker_output.splitlines()
    said = [l for l in lines if ("Failed" in l or "ERROR" in l) and l.strip() != "ERROR - FAILED"]
    return (said or lines or ["(no output)"])[0].strip()


def spread(times):
    """(fastest, slowest, sample standard deviation) of a list of times."""
    mean = sum(times) / len(times)
    sd = math.sqrt(sum((t - mean) ** 2 for t in times) / (len(times) - 1)) if len(times) > 1 else 0.0
    return min(times), max(times), sd, mean


def report(folder, target, check):
    runs = read_runs(folder)
    bench = runs[0][1]["benchmark"]
    wanted = RUNS.get(bench, RUNS_DEFAULT)
    print("%s: %s, %d runs (the rules ask for %d)" % (folder, bench, len(runs), wanted))
    print("%-14s %6s %-10s %10s %9s  %s" % ("log", "seed", "status", "seconds", "accuracy", "compliance"))
    all_ok = True
    minutes = []
    for path, info in runs:
        verdict = "skipped"
        if check:
            ok, detail = result.check(path, info, target)
            verdict = "SUCCESS" if ok else "FAILED"
            all_ok &= ok
        success = info["status"] == "success" and info["minutes"] is not None
        minutes.append(info["minutes"] if success else None)
        secs = "%.2f" % (info["minutes"] * 60) if info["minutes"] is not None else "-"
        acc = "%.4f" % info["accuracy"] if info["accuracy"] is not None else "-"
        seed = info["seed"] if info["seed"] is not None else "-"
        print("%-14s %6s %-10s %10s %9s  %s" % (os.path.basename(path), seed, info["status"], secs,
                                                acc, verdict))
        if verdict == "FAILED":
            print("    " + first_complaint(detail))
    reached = [os.path.basename(p) for (p, _), m in zip(runs, minutes) if m is not None]
    print("reached the target: %d of %d%s" % (len(reached), len(runs),
                                              (" (" + ", ".join(reached) + ")") if reached else ""))
    score, why = result.mlperf_score(minutes)
    if score is None:
        print("score: none: %s" % why)
    else:
        kept = len(runs) - 2
        print("score: %.3f min (%.1f s): the mean of %d run%s without the fastest and the slowest%s"
              % (score, score * 60, kept, "" if kept == 1 else "s",
                 "; the run that missed the target counts as the slowest" if None in minutes else ""))
    done = [m for m in minutes if m is not None]
    if done:
        fastest, slowest, sd, mean = spread(done)
        print("spread: fastest %.1f s, slowest %.1f s, standard deviation %.1f s (%.1f%% of the mean)"
              % (fastest * 60, slowest * 60, sd * 60, 100 * sd / mean if mean else 0.0))
    converged, line = rcp.verdict(folder, bench, target is not None)
    print(line)
    return 0 if all_ok and score is not None and converged is not False else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--target", type=float, help="scaled target accuracy (log units)")
    ap.add_argument("--no-check", action="store_true", help="skip the compliance checker")
    args = ap.parse_args()
    try:
        return report(args.folder.rstrip("/") or "/", args.target, not args.no_check)
    except result.LogError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
