"""bench_allreduce on CPU ranks over MPI: every message size from 8 B to the
--max_bytes cap, doubling, with correct sums; algbw = bytes / time and
busbw = algbw * 2 (n - 1) / n on 2 and 3 ranks (the JSON it writes, against
the table it prints); a corrupted element (--fault) is caught; bad sizes
are one-line errors."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "logs"))
from mllog_fixture import case, failures, require_mpi_program  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
BIN = os.path.join(ROOT, build, "bench", "bench_allreduce")
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np"]


def run(ranks, *flags, timeout=120):
    argv = (MPI + [str(ranks)] if ranks else []) + [BIN, "--device=cpu"] + list(flags)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def table(stdout):
    """The printed rows: (bytes, time_us, algbw, busbw, check)."""
    rows = []
    for line in stdout.splitlines():
        f = line.split()
        if len(f) == 6 and f[0].isdigit():
            rows.append((int(f[0]), float(f[2]), float(f[3]), float(f[4]), f[5]))
    return rows


def rel_close(a, b, tol):
    return abs(a - b) <= tol * max(abs(b), 1e-12)


def bandwidths_ok(rows, ranks):
    """algbw = bytes / time (GB/s), busbw = algbw * 2 (n - 1) / n."""
    return all(rel_close(r["algbw_gbps"], r["bytes"] / (r["time_us"] * 1e3), 1e-6) and
               rel_close(r["busbw_gbps"], r["algbw_gbps"] * 2 * (ranks - 1) / ranks, 1e-6)
               for r in rows)


require_mpi_program("allreduce_bench", BIN)

with tempfile.TemporaryDirectory() as tmp:
    js = os.path.join(tmp, "two.json")
    cap = 1 << 20
    rc, out, err = run(2, "--max_bytes=%d" % cap, "--iters=3", "--warmup=1", "--json=" + js)
    rows = table(out)
    sizes = [8 << i for i in range(18)]  # 8 B .. 1 MiB
    case("allreduce_two_ranks_every_size_correct",
         rc == 0 and [r[0] for r in rows] == sizes and all(r[4] == "ok" for r in rows)
         and "2 ranks" in out, "exit %d: %s %s" % (rc, out[-600:], err[-300:]))
    data = json.load(open(js)) if os.path.exists(js) else {"rows": []}
    printed_match = len(data["rows"]) == len(rows) and all(
        rel_close(j["algbw_gbps"], p[2], 1e-3) or abs(j["algbw_gbps"] - p[2]) < 1e-4
        for j, p in zip(data["rows"], rows))
    case("allreduce_bus_bandwidth_two_ranks",
         data.get("ranks") == 2 and len(data["rows"]) == 18 and bandwidths_ok(data["rows"], 2)
         and all(r["wrong"] == 0 for r in data["rows"]) and printed_match, json.dumps(data)[:400])

    js3 = os.path.join(tmp, "three.json")
    rc, out, err = run(3, "--max_bytes=4096", "--iters=3", "--warmup=1", "--json=" + js3)
    data = json.load(open(js3)) if os.path.exists(js3) else {"rows": []}
    case("allreduce_bus_bandwidth_three_ranks",
         rc == 0 and data.get("ranks") == 3 and [r["bytes"] for r in data["rows"]] == sizes[:10]
         and bandwidths_ok(data["rows"], 3) and all(r["wrong"] == 0 for r in data["rows"]),
         "exit %d: %s %s" % (rc, out[-400:], err[-300:]))

    rc, out, err = run(2, "--max_bytes=64", "--iters=1", "--warmup=0", "--fault=true")
    rows = table(out)
    case("allreduce_check_catches_a_wrong_sum",
         rc != 0 and len(rows) == 4 and all(r[4] == "WRONG" for r in rows)
         and "8 bytes: 1 wrong sums, the first element 1: 3.5, want 3" in err,
         "exit %d: %s %s" % (rc, out[-400:], err[-400:]))

    for name, flags, want in [("odd_size", ["--min_bytes=6"], "error: --min_bytes/--max_bytes: must be multiples of 4"),
                              ("cap_below_min", ["--min_bytes=64", "--max_bytes=32"], "error: --max_bytes: is below --min_bytes")]:
        rc, out, err = run(0, *flags)
        lines = (out + err).strip().splitlines()
        case("allreduce_bad_" + name, rc == 2 and len(lines) == 1 and lines[0].startswith(want),
             "exit %d: %s" % (rc, out + err))

sys.exit(1 if failures() else 0)
