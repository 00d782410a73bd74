#!/usr/bin/env python3
"""Result tool for the suite's MLPerf logs.

For each log: the official compliance checker's verdict, the run's status and
time to train (run_stop.time_ms - run_start.time_ms), and the last accuracy.
With several logs of one benchmark, the MLPerf score: drop the fastest and the
slowest run and average the rest.

  python3 logs/result.py LOG...                 official rules and targets
  python3 logs/result.py --target 0.85 LOG...   scaled run: the official rules
                                                with only the target changed
  python3 logs/result.py --no-check LOG...      times only

Exit status 0 when every log complies (and, with --require-success, every run
reached its target)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# The last ruleset that has each benchmark (MLPERF.md). NCF has none since
# v0.5, and MLPerf's BERT is pretraining, not SQuAD fine-tuning, which logs
# itself as bert_squad: their rules are the suite's own (logs/compliance/
# with the benchmark's folder), with the full-scale target where there is
# one (BERT-large's F1 90.5).
RULESETS = {"resnet": "1.0.0", "ssd": "1.0.0", "transformer": "0.7.0"}
SUITE_RULES = {"ncf": ("recommendation/compliance", None),
               "bert_squad": ("language/compliance", 0.905)}
SUITE_COMMON_RULES = "logs/compliance"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LogError(Exception):
    """Bad input: a missing or malformed log. Its text names the file (and
    line) and what is wrong, for a one-line message."""


def read_events(path):
    events = []
    try:
        with open(path, errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                at = line.find(":::MLLOG ")
                if at < 0:
                    continue
                try:
                    event = json.loads(line[at + 9:])
                except ValueError as e:
                    raise LogError("%s:%d: malformed MLLOG line (%s)" % (path, lineno, e)) from None
                if not isinstance(event, dict) or not {"key", "time_ms"} <= event.keys():
                    raise LogError("%s:%d: MLLOG line without key or time_ms" % (path, lineno))
                event["lineno"] = lineno
                events.append(event)
    except OSError as e:
        raise LogError("%s: cannot read: %s" % (path, e.strerror)) from None
    return events


RESULT_NAME = re.compile(r"result_(\d+)\.txt$")


def result_files(folder):
    """The logs of a folder in MLPerf's submission naming, result_0.txt ..
    result_<N-1>.txt, in index order; any other file, or a gap in the
    numbering, is a LogError."""
    if not os.path.isdir(folder):
        raise LogError("%s: no such folder" % folder)
    found = {}
    for name in sorted(os.listdir(folder)):
        m = RESULT_NAME.match(name)
        if not m:
            raise LogError("%s: not a result log name (result_<i>.txt)" % os.path.join(folder, name))
        found[int(m.group(1))] = os.path.join(folder, name)
    if not found:
        raise LogError("%s: no result_<i>.txt logs" % folder)
    for i in range(len(found)):
        if i not in found:
            raise LogError("%s: result_%d.txt is missing (found %d logs, up to result_%d.txt)"
                           % (folder, i, len(found), max(found)))
    return [found[i] for i in range(len(found))]


def summarize(path):
    events = read_events(path)
    first = lambda key: next((e for e in events if e["key"] == key), None)
    bench = first("submission_benchmark")
    start, stop = first("run_start"), first("run_stop")
    accs = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    # A throughput benchmark (--synthetic, --bench_steps) logs
    # benchmark_start/benchmark_stop instead: not a training run.
    status = (stop["metadata"].get("status") if stop
              else "benchmark" if first("benchmark_start") else "no run_stop")
    return {
        "benchmark": bench["value"] if bench else None,
        "division": (first("submission_division") or {}).get("value", "closed"),
        "seed": (first("seed") or {}).get("value"),
        "status": status,
        "minutes": (stop["time_ms"] - start["time_ms"]) / 60000.0 if start and stop else None,
        "accuracy": accs[-1] if accs else None,
        "evals": len(accs),
    }


def package_rules_dir():
    import mlperf_logging.compliance_checker as cc
    return os.path.dirname(cc.__file__)


def scaled_rules(ruleset, benchmark, division, target, out_dir):
    """Copies the ruleset's YAML files into out_dir with every enqueue made
    absolute and the eval_accuracy target of the benchmark's files replaced.
    Returns the path of the entry file."""
    src = os.path.join(package_rules_dir(), "training_" + ruleset)
    prefix = "training_%s/" % ruleset
    for name in os.listdir(src):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(src, name)) as f:
            text = f.read()
        text = text.replace("'" + prefix, "'" + out_dir + "/")
        if name.startswith("%s_%s" % (division, benchmark)):
            # Only the eval_accuracy rule's bounds: other keys' checks
            # (warmup_factor >= 0, bn_span >= 1) stay as they are.
            blocks = re.split(r"(?m)^(?=- KEY:)", text)
            for i, block in enumerate(blocks):
                if re.search(r"NAME:\s*eval_accuracy\b", block):
                    block = re.sub(r"(v\['value'\]\s*>=\s*)[0-9.]+", r"\g<1>%r" % target, block)
                    blocks[i] = re.sub(r"(v\['value'\]\s*<\s*)[0-9.]+",
                                       r"\g<1>%r" % max(1.0, target + 1e-9), block)
            text = "".join(blocks)
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(text)
    return os.path.join(out_dir, "common.yaml")


def suite_rules(rules_dir, target, out_dir):
    """The suite's own rules (benchmarks without an official ruleset): the
    shared files (SUITE_COMMON_RULES) and those in rules_dir, with TARGET and
    RULES_DIR filled in."""
    for folder in (os.path.join(ROOT, SUITE_COMMON_RULES), rules_dir):
        for name in os.listdir(folder):
            if name.endswith(".yaml"):
                with open(os.path.join(folder, name)) as f:
                    text = f.read()
                text = text.replace("RULES_DIR", out_dir).replace("TARGET", repr(target))
                with open(os.path.join(out_dir, name), "w") as f:
                    f.write(text)
    return os.path.join(out_dir, "common.yaml")


def check(path, info, target):
    """Runs the official checker; returns (ok, last lines of its output)."""
    bench = info["benchmark"]
    with tempfile.TemporaryDirectory() as tmp:
        if bench in SUITE_RULES:
            rules_dir, full_target = SUITE_RULES[bench]
            target = full_target if target is None else target
            if target is None:
                raise SystemExit("%s: %s has no official rules; pass --target" % (path, bench))
            ruleset = "1.0.0"
            config = suite_rules(os.path.join(ROOT, rules_dir), target, tmp)
        elif bench in RULESETS:
            ruleset = RULESETS[bench]
            config = None
            if target is not None:
                config = scaled_rules(ruleset, bench, info["division"], target, tmp)
        else:
            return False, "unknown submission_benchmark %r" % bench
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
               "--ruleset", ruleset, "--log_output", os.path.join(tmp, "checker.log")]
        if config:
            cmd += ["--config", config]
        proc = subprocess.run(cmd + [path], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip().splitlines()
    ok = proc.returncode == 0 and any("SUCCESS" in l for l in out)
    return ok, "\n".join(out[-8:])


def mlperf_score(minutes):
    """The MLPerf benchmark result of runs' times to train (None for a run
    that did not reach its target): drop the fastest and the slowest run and
    average the rest. One non-converging run counts as the slowest and is
    the one dropped; with more than one the result is invalid (the training
    rules, "Benchmark Results"). Returns (score or None, why not)."""
    failed = sum(m is None for m in minutes)
    if failed > 1:
        return None, "%d runs did not reach the target (the rules allow one)" % failed
    if len(minutes) < 3:
        return None, "%d runs: a score needs at least 3" % len(minutes)
    kept = sorted(m for m in minutes if m is not None)[1:len(minutes) - 1]
    return sum(kept) / len(kept), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--target", type=float, help="scaled target accuracy (log units)")
    ap.add_argument("--no-check", action="store_true", help="skip the compliance checker")
    ap.add_argument("--require-success", action="store_true", help="fail unless run_stop is success")
    args = ap.parse_args()
    all_ok = True
    minutes = []
    print("%-44s %-11s %-8s %10s %9s  %s" % ("log", "benchmark", "status", "minutes", "accuracy", "compliance"))
    for path in args.logs:
        if not os.path.isfile(path):
            print("error: %s: no such log file" % path, file=sys.stderr)
            return 2
        try:
            info = summarize(path)
        except LogError as e:
            print("error: %s" % e, file=sys.stderr)
            return 2
        verdict, detail = "skipped", ""
        if not args.no_check:
            ok, detail = check(path, info, args.target)
            verdict = "SUCCESS" if ok else "FAILED"
            all_ok &= ok
        if args.require_success and info["status"] != "success":
            all_ok = False
        mins = "%.2f" % info["minutes"] if info["minutes"] is not None else "-"
        acc = "%.4f" % info["accuracy"] if info["accuracy"] is not None else "-"
        print("%-44s %-11s %-8s %10s %9s  %s" % (os.path.relpath(path), info["benchmark"],
                                                 info["status"], mins, acc, verdict))
        if verdict == "FAILED":
            print("  " + detail.replace("\n", "\n  "))
        if info["status"] == "success" and info["minutes"] is not None:
            minutes.append(info["minutes"])
    score, _ = mlperf_score(minutes)
    if score is not None:
        print("score (mean of %d successful runs without the fastest and slowest): %.2f min"
              % (len(minutes), score))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
