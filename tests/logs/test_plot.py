"""logs/plot.py on real logs: three seeds of the small NCF config (make seeds),
plotted as accuracy against epoch and time, throughput, loss and a
comparison of two systems' folders. Each PNG must exist with the pixel size
asked for and not be blank, and the series it plotted (--data) must be the
logs' own values, read here independently: eval_accuracy and its epoch_num,
minutes since run_start, train_samples over each epoch's interval, the
trainer's printed loss, and each folder's times and score. Bad inputs give
one-line errors."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mllog_fixture import case, colours, failures, png_size, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "logs", "plot.py")
build = sys.argv[1] if len(sys.argv) > 1 else "build"


def events(path):
    with open(path) as f:
        return [json.loads(l[l.index(":::MLLOG ") + 9:]) for l in f if ":::MLLOG " in l]


def close(a, b, tol=1e-9):
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b))


def plot(tmp, kind, *inputs, size=None):
    out, data = os.path.join(tmp, kind + ".png"), os.path.join(tmp, kind + ".json")
    args = [kind, *inputs, "--out", out, "--data", data] + (["--size", size] if size else [])
    rc, text = run_tool(TOOL, *args)
    series = json.load(open(data)) if rc == 0 and os.path.exists(data) else None
    return rc, text, out, series


def picture_ok(name, rc, text, out, size):
    got = png_size(out) if os.path.exists(out) else None
    case(name + "_png", rc == 0 and got == size and colours(out) > 20,
         "exit %d, size %s (want %s): %s" % (rc, got, size, text.strip()))


with tempfile.TemporaryDirectory() as tmp:
    sub = os.path.join(tmp, "sub")
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "seeds.sh"), "ncf", "recommendation",
                           "small", "cpu", build, "3", "sysa", sub, "1"], cwd=ROOT,
                          capture_output=True, text=True)
    folder = os.path.join(sub, "results", "sysa", "ncf")
    if proc.returncode != 0 or not os.path.exists(os.path.join(folder, "result_2.txt")):
        print("FAIL plot_runs: make seeds failed: %s" % (proc.stdout + proc.stderr)[-400:])
        sys.exit(1)
    logs = [os.path.join(folder, "result_%d.txt" % i) for i in range(3)]
    ev = [events(p) for p in logs]
    evals = [[e for e in run if e["key"] == "eval_accuracy"] for run in ev]

    rc, text, out, data = plot(tmp, "quality", folder)
    picture_ok("quality", rc, text, out, (800, 500))
    ok = data is not None and len(data["series"]) == 3 and data["target"] == 0.6 and all(
        s["x"] == [e["metadata"]["epoch_num"] for e in run] and s["y"] == [e["value"] for e in run]
        for s, run in zip(data["series"], evals))
    case("quality_series_are_the_logs", ok, json.dumps(data)[:300])

    rc, text, out, data = plot(tmp, "quality-time", *logs, size="640x480")
    picture_ok("quality_time", rc, text, out, (640, 480))
    ok = data is not None
    for s, run, run_evals in zip(data["series"] if data else [], ev, evals):
        t0 = next(e["time_ms"] for e in run if e["key"] == "run_start")
        ok &= close(s["x"], [(e["time_ms"] - t0) / 60000 for e in run_evals])
    case("quality_time_minutes_since_run_start", ok, json.dumps(data)[:300])

    rc, text, out, data = plot(tmp, "throughput", folder)
    picture_ok("throughput", rc, text, out, (800, 500))
    ok = data is not None
    for s, run in zip(data["series"] if data else [], ev):
        samples = next(e["value"] for e in run if e["key"] == "train_samples")
        start = {e["metadata"]["epoch_num"]: e["time_ms"] for e in run if e["key"] == "epoch_start"}
        stop = {e["metadata"]["epoch_num"]: e["time_ms"] for e in run if e["key"] == "epoch_stop"}
        ok &= s["x"] == sorted(stop) and close(s["y"], [samples * 1000 / (stop[k] - start[k])
                                                        for k in sorted(stop)])
    case("throughput_is_samples_over_epoch_time", ok, json.dumps(data)[:300])

    rc, text, out, data = plot(tmp, "loss", folder)
    picture_ok("loss", rc, text, out, (800, 500))
    ok = data is not None
    for s, path in zip(data["series"] if data else [], logs):
        printed = [float(l.split("mean train loss ")[1].split(";")[0]) for l in open(path)
                   if l.startswith("ncf: epoch ")]
        ok &= len(printed) > 0 and s["y"] == printed
    case("loss_is_the_printed_loss", ok, json.dumps(data)[:300])

    # A second system: the same runs, the second one's time doubled by
    # moving its run_stop, so the two folders' times differ.
    other = os.path.join(sub, "results", "sysb", "ncf")
    shutil.copytree(folder, other)
    slow = os.path.join(other, "result_1.txt")
    lines = open(slow).read().splitlines(keepends=True)
    start = next(e["time_ms"] for e in ev[1] if e["key"] == "run_start")
    stop = next(e["time_ms"] for e in ev[1] if e["key"] == "run_stop")
    with open(slow, "w") as f:
        for l in lines:
            f.write(l.replace('"time_ms": %d, "event_type": "INTERVAL_END", "key": "run_stop"' % stop,
                              '"time_ms": %d, "event_type": "INTERVAL_END", "key": "run_stop"'
                              % (2 * stop - start)))
    rc, text, out, data = plot(tmp, "compare", folder, other, size="1200x500")
    picture_ok("compare", rc, text, out, (1200, 500))
    want_a = [(next(e["time_ms"] for e in run if e["key"] == "run_stop") - next(
        e["time_ms"] for e in run if e["key"] == "run_start")) / 60000 for run in ev]
    want_b = [want_a[0], 2 * want_a[1], want_a[2]]
    # Three runs: the score is the middle one.
    ok = data is not None and sorted(data["times"]) == ["sysa", "sysb"] and close(
        data["times"]["sysa"], want_a) and close(data["times"]["sysb"], want_b) and close(
        [data["scores"]["sysa"], data["scores"]["sysb"]], [sorted(want_a)[1], sorted(want_b)[1]])
    case("compare_times_per_system", ok, json.dumps(data and data.get("times")))

    rc, text = run_tool(TOOL, "quality", os.path.join(tmp, "nowhere"))
    case("missing_input", rc == 2 and text.strip() == "error: %s: no such log file or folder"
         % os.path.join(tmp, "nowhere"), text)
    bare = os.path.join(tmp, "bare.log")
    with open(bare, "w") as f:
        f.writelines(l for l in open(logs[0]) if ":::MLLOG" in l)
    rc, text = run_tool(TOOL, "loss", bare)
    case("loss_needs_trainer_output", rc == 2 and len(text.strip().splitlines()) == 1
         and "bare.log: no epoch lines with a mean train loss" in text, text)
    rc, text = run_tool(TOOL, "compare", folder)
    case("compare_needs_two_folders", rc == 2 and "compare takes two folders" in text, text)

sys.exit(1 if failures() else 0)
