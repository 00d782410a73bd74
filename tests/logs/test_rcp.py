"""logs/summary.py's RCP check (logs/rcp.py, mlperf-logging's rcp_checker):
runs that converge faster than the reference convergence points allow fail,
runs at the reference's pace pass, a batch between two RCPs is interpolated
and one below the smallest is held to it; scaled runs and the benchmarks
without RCPs (bert_squad, the suite's SQuAD fine-tuning; the transformer;
ncf) say "no RCP" and fail nothing."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mllog_fixture import case, failures, resnet_log, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "logs", "summary.py")
sys.path.insert(0, os.path.join(ROOT, "logs"))
import rcp  # noqa: E402  (logs/rcp.py: the cases but two call it here, not through the summary)


def folder(tmp, name, bench, batch, epochs):
    """result_<i>.txt of runs reaching 0.77 (over resnet's 0.759 and ssd's
    0.23) at each of epochs, an eval every epoch; 0 is a run that missed."""
    path = os.path.join(tmp, name)
    os.makedirs(path)
    for i, epoch in enumerate(epochs):
        accuracies = [0.1] * ((epoch or 40) - 1) + [0.77 if epoch else 0.1]
        resnet_log(os.path.join(path, "result_%d.txt" % i), accuracies, 10.0 + i,
                   "success" if epoch else "aborted", batch, bench)
    return path


def rcp_line(out):
    lines = [l for l in out.splitlines() if l.startswith("rcp: ")]
    return lines[0] if len(lines) == 1 else "(%d rcp lines)" % len(lines)


def summary(*args):
    rc, out = run_tool(TOOL, "--no-check", *args)
    return rc, rcp_line(out), out


def verdict(path, bench):
    """As summary() gives it: (exit status 1 when the check fails, line)."""
    passed, line = rcp.verdict(path, bench, False)
    return (1 if passed is False else 0), line, line


with tempfile.TemporaryDirectory() as tmp:
    # ResNet at batch 3264: the RCP's runs took 34-37 epochs (mean 35.15
    # without the fastest and slowest); 20 is far too fast.
    rc, line, out = summary(folder(tmp, "fast", "resnet", 3264, [20] * 5))
    case("rcp_resnet_too_fast_fails",
         rc == 1 and line.startswith("rcp: FAIL") and "batch 3264, the RCP at batch 3264" in line
         and "mean epochs to converge 20.00" in line and "the RCP's 35.15" in line, out)
    rc, line, out = verdict(folder(tmp, "pace", "resnet", 3264, [34, 35, 35, 36, 35]), "resnet")
    case("rcp_resnet_reference_pace_passes",
         rc == 0 and line.startswith("rcp: PASS") and "mean epochs to converge 35.00" in line, out)
    # 2500 lies between the pruned RCPs at 1632 and 3264 (2048 is pruned:
    # slower than the line between its neighbours).
    rc, line, out = verdict(folder(tmp, "between", "resnet", 2500, [25] * 5), "resnet")
    case("rcp_interpolated_between_batches",
         rc == 1 and "interpolated between the RCPs at batch 1632 and 3264" in line, out)
    rc, line, out = verdict(folder(tmp, "below", "resnet", 408, [36] * 5), "resnet")
    case("rcp_batch_below_the_smallest_rcp",
         rc == 0 and line.startswith("rcp: PASS") and "the RCP of the smallest batch, 1632" in line, out)
    # SSD at 1024: every reference run took 50 epochs.
    rc, line, out = verdict(folder(tmp, "ssd_fast", "ssd", 1024, [45] * 5), "ssd")
    case("rcp_ssd_too_fast_fails", rc == 1 and line.startswith("rcp: FAIL") and "the RCP's 50.00" in line, out)
    rc, line, out = verdict(folder(tmp, "ssd_pace", "ssd", 1024, [50] * 5), "ssd")
    case("rcp_ssd_reference_pace_passes", rc == 0 and line.startswith("rcp: PASS"), out)
    rc, line, out = verdict(folder(tmp, "two_missed", "resnet", 3264, [35, 0, 35, 0, 35]), "resnet")
    case("rcp_two_runs_missed_fails", line == "rcp: FAIL (mlperf-logging rcp_checker, training 1.0.0 "
         "RCPs): Insufficient convergence", out)

    # No RCP: a scaled target, and the benchmarks that have none; however
    # fast the runs, nothing fails.
    fast = os.path.join(tmp, "fast")
    rc, line, out = summary("--target", "0.7", fast)  # the summary's --target is what says scaled
    case("rcp_none_for_scaled_target", rc == 0 and line.startswith("rcp: no RCP: a scaled target"), out)
    for bench, why in [("bert_squad", "pretraining"), ("transformer", "no transformer RCPs under ruleset 0.7.0"),
                       ("ncf", "had no RCPs")]:
        rc, line, out = verdict(folder(tmp, bench, bench, 256, [2] * 5), bench)
        case("rcp_none_for_" + bench, rc == 0 and line.startswith("rcp: no RCP") and why in line, out)

sys.exit(1 if failures() else 0)
