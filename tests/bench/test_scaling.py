"""tests/bench/scaling.py, a tiny sweep: the Transformer's small config on 1
and 2 MPI ranks, 2 timed steps each. Each row's rate must be the
benchmark_stop throughput of that run's log (read here independently); the
2-rank run must have run as 2 ranks (its logged global batch twice the
1-rank run's: each rank adds its max_tokens); speed-up = rate_R / rate_1 and
efficiency = rate_R / (R x rate_1) in the JSON, and the printed table and
the Markdown file show the same numbers; the PNG has the pixel size asked for
and is not blank. Bad flags are errors naming the flag."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "logs"))
from mllog_fixture import case, colours, failures, png_size, require_mpi_program  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
TOOL = os.path.join(ROOT, "tests", "bench", "scaling.py")
TRAINER = os.path.join(ROOT, build, "bin", "transformer")


def sweep(*flags):
    proc = subprocess.run([sys.executable, TOOL, "--build", build] + list(flags), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def logged(path, key, field=None):
    """The value (or metadata field) of the log's first event with key."""
    with open(path) as f:
        for line in f:
            if ":::MLLOG " in line:
                e = json.loads(line[line.index(":::MLLOG ") + 9:])
                if e["key"] == key:
                    return e["metadata"][field] if field else e["value"]
    return None


def table_rows(text):
    """The rows of the printed table: {ranks: (rate, speed-up, efficiency)}."""
    rows = {}
    for m in re.finditer(r"^\| transformer \| fp32 \| (\d+) \| \d+ \| ([0-9.]+) tokens/s \| ([0-9.]+) \| "
                         r"([0-9.]+) \|", text, re.M):
        rows[int(m.group(1))] = tuple(float(m.group(i)) for i in (2, 3, 4))
    return rows


require_mpi_program("scaling_sweep", TRAINER)

with tempfile.TemporaryDirectory() as tmp:
    out, logs = os.path.join(tmp, "out"), os.path.join(tmp, "logs")
    rc, text = sweep("--trainers", "transformer", "--ranks", "1,2", "--steps", "2", "--device", "cpu",
                     "--out", out, "--logs", logs, "--size", "640x360")
    found = {ext: glob.glob(os.path.join(out, "scaling_*." + ext)) for ext in ("json", "md", "png")}
    ok = rc == 0 and all(len(v) == 1 for v in found.values())
    case("scaling_sweep_writes_results", ok, "exit %d, files %s: %s" % (rc, found, text[-600:]))
    if not ok:
        sys.exit(1)
    record = json.load(open(found["json"][0]))
    rows = {r["ranks"]: r for r in record["rows"]}
    log = {r: os.path.join(logs, "transformer_fp32_%dranks.log" % r) for r in (1, 2)}

    want = {r: logged(log[r], "benchmark_stop", "throughput") if os.path.exists(log[r]) else None
            for r in (1, 2)}
    case("scaling_rates_are_the_logs", sorted(rows) == [1, 2] and all(
        want[r] is not None and rows[r]["rate"] == want[r] for r in (1, 2)),
        "rows %s, logs %s" % ({r: rows[r]["rate"] for r in rows}, want))

    batch = {r: logged(log[r], "global_batch_size") if os.path.exists(log[r]) else None for r in (1, 2)}
    case("scaling_two_ranks_ran_as_two", batch[1] and batch[2] == 2 * batch[1] and
         all(rows[r]["global_batch"] == batch[r] for r in (1, 2)),
         "logged global batch %s, rows %s" % (batch, {r: rows[r]["global_batch"] for r in rows}))

    rate1 = rows[1]["rate"]
    ok = all(abs(rows[r]["speedup"] - rows[r]["rate"] / rate1) <= 1e-12 * rows[r]["speedup"] and
             abs(rows[r]["efficiency"] - rows[r]["rate"] / (r * rate1)) <= 1e-12 * rows[r]["efficiency"]
             for r in (1, 2)) and rows[1]["efficiency"] == 1.0
    case("scaling_efficiency_is_rate_over_ranks_times_one_rank", ok, json.dumps(record["rows"])[:500])

    # The printed and written tables: the JSON's numbers, rounded as printed
    # (rate to 0.1, ratios to 0.001).
    md = open(found["md"][0]).read()
    ok = True
    for shown in (table_rows(text), table_rows(md)):
        ok = ok and sorted(shown) == [1, 2] and all(
            abs(shown[r][0] - rows[r]["rate"]) <= 0.051 and abs(shown[r][1] - rows[r]["speedup"]) <= 5.1e-4 and
            abs(shown[r][2] - rows[r]["efficiency"]) <= 5.1e-4 for r in (1, 2))
    case("scaling_tables_show_the_results", ok and os.path.basename(found["png"][0]) in md,
         "printed %s, markdown %s" % (table_rows(text), table_rows(md)))

    png = found["png"][0]
    case("scaling_png", png_size(png) == (640, 360) and colours(png) > 20,
         "size %s, %d colours" % (png_size(png), colours(png)))

# Bad flags: refused before any run, naming the flag.
for name, flags, want in [
        ("scaling_bad_ranks", ["--ranks", "0,2"], "--ranks"),
        ("scaling_ranks_without_one", ["--ranks", "2", "--trainers", "transformer"], "--ranks: the sweep needs 1 rank"),
        ("scaling_bad_trainer", ["--trainers", "resnet,gpt"], "--trainers"),
        ("scaling_lowp_on_cpu", ["--device", "cpu", "--precisions", "bf16", "--trainers", "transformer"],
         "--precisions: the CPU computes in fp32 only")]:
    rc, text = sweep(*flags)
    lines = [l for l in text.splitlines() if "error:" in l]
    case(name, rc == 2 and len(lines) == 1 and want in lines[0], "exit %d: %s" % (rc, text.strip()[-300:]))

sys.exit(1 if failures() else 0)
