"""The RCP check of a folder of runs (logs/summary.py prints it).

MLPerf compares a result's convergence with reference convergence points
(RCPs): for a benchmark and global batch size, how many epochs the reference
took to reach the target over many seeds. A result whose runs converge in
significantly fewer epochs than that (a one-sided t-test) fails the check.
mlperf-logging ships the RCPs and the checker (mlperf_logging.rcp_checker);
this module calls its check_directory, as the package checker does, and
reads the RCP it compared against from the records it logs.

Which benchmarks have RCPs: those with an official ruleset here
(logs/result.py RULESETS) for which the package has an RCP file under that
ruleset: resnet and ssd at 1.0.0 (SSD-ResNet34; from 2.0.0 on, MLPerf's
"ssd" is another model, RetinaNet). The transformer's last ruleset, 0.7.0,
came before RCPs; NCF had none; the package's bert RCPs are for MLPerf's
pretraining benchmark, which the suite's SQuAD fine-tuning (bert_squad in
its logs) is not. A run
with a scaled target (--target) is not the benchmark the RCPs measured."""
import contextlib
import logging
import os

import result  # logs/result.py

WHY_NONE = {
    "bert_squad": "the package's bert RCPs are for MLPerf's BERT pretraining; "
                  "SQuAD fine-tuning has none",
    "ncf": "MLPerf's NCF (v0.5-v0.7) had no RCPs",
}


def rcp_ruleset(bench):
    """(ruleset, None) whose RCPs the benchmark is checked against, or
    (None, why there are none)."""
    ruleset = result.RULESETS.get(bench)
    if bench in WHY_NONE or ruleset is None:
        return None, WHY_NONE.get(bench, "no official ruleset for %s" % bench)
    from mlperf_logging.rcp_checker import rcp_checker
    path = os.path.join(os.path.dirname(rcp_checker.__file__), "training_" + ruleset,
                        "rcps_%s.json" % bench)
    if not os.path.isfile(path):
        return None, "mlperf-logging has no %s RCPs under ruleset %s (its training_%s)" % (
            bench, ruleset, ruleset)
    return ruleset, None


class _Records(logging.Handler):
    """Keeps the checker's log records (it reports through logging)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def _captured_logging():
    root = logging.getLogger()
    records, level = _Records(), root.level
    root.addHandler(records)
    root.setLevel(logging.INFO)
    try:
        yield records.records
    finally:
        root.removeHandler(records)
        root.setLevel(level)


def _logged(records, message):
    """The argument of the checker's last record with this message (a
    record of one dict keeps the dict itself as its args)."""
    found = [r.args if isinstance(r.args, dict) else r.args[0]
             for r in records if r.msg == message and r.args]
    return found[-1] if found else None


def _neighbours(ruleset, bench, bs):
    """The batch sizes of the (pruned) RCPs just below and above bs."""
    from mlperf_logging.rcp_checker import rcp_checker
    checker = rcp_checker.RCP_Checker("training", ruleset, bench, False)
    sizes = sorted(r["BS"] for r in checker.pruned_rcp_data.values())
    below = [s for s in sizes if s < bs]
    above = [s for s in sizes if s > bs]
    return (below[-1] if below else None), (above[0] if above else None)


def _which_rcp(message, ruleset, bench, bs):
    """What the checker compared with, in words."""
    if message == "RCP found":
        return "the RCP at batch %d" % bs
    below, above = _neighbours(ruleset, bench, bs)
    if message == "RCP Interpolation":
        return "interpolated between the RCPs at batch %d and %d" % (below, above)
    if below is None and above is not None:
        return "the RCP of the smallest batch, %d (none at %d)" % (above, bs)
    return "none: %s" % message


def verdict(folder, bench, scaled):
    """(passed: True, False, or None where no RCP applies; one line)."""
    if scaled:
        return None, "rcp: no RCP: a scaled target; the RCPs are for the full data set and target"
    ruleset, why = rcp_ruleset(bench)
    if ruleset is None:
        return None, "rcp: no RCP: %s" % why
    from mlperf_logging.rcp_checker import rcp_checker
    with _captured_logging() as records:
        passed, message, _ = rcp_checker.check_directory(folder, "training", ruleset, False, False,
                                                         rcp_pass="pruned_rcps")
        bs = rcp_checker.get_submission_epochs(result.result_files(folder), ruleset, False)[0]
    record = _logged(records, " RCP Record: %s")
    mean = _logged(records, " Submission mean epochs: %.4f")
    head = "rcp: %s (mlperf-logging rcp_checker, training %s RCPs)" % (
        "PASS" if passed else "FAIL", ruleset)
    if record is None or mean is None:  # it stopped before comparing: no batch size, too few converged
        return passed, "%s: %s" % (head, message)
    return passed, ("%s: batch %d, %s: mean epochs to converge %.2f (without the fastest and the "
                    "slowest run), the RCP's %.2f, the fewest it allows %.2f"
                    % (head, bs, _which_rcp(message, ruleset, bench, bs),
                       mean, record["RCP Mean"], record["Min Epochs"]))
