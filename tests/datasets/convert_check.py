"""What the converter tests (test_coco_convert.py, test_wmt_convert.py)
share: the PASS/FAIL line, a shell command, an LMDB's records read back with
lmdb-utils' mdb_dump, and the check of a task's prepare_data.sh at a small
scale (run twice: the second run must keep the first's data set)."""
import subprocess


def report(name, problem):
    print(f"PASS {name}" if not problem else f"FAIL {name}: {problem}", flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw)


def records(lmdb_dir):
    """The values of an LMDB, in key order, from mdb_dump."""
    out = subprocess.run(["mdb_dump", str(lmdb_dir)], capture_output=True, text=True, check=True).stdout
    dumped = out.split("HEADER=END\n", 1)[1].split("\n")
    data = [bytes.fromhex(line.strip()) for line in dumped if line.startswith(" ")]
    return data[1::2]


def check_prepare(name, script, data, build, env, root, split, want_records):
    """prepare_data.sh small, twice: DATA/lmdb/<split> holds want_records
    records and the second run says the data set is ready."""
    p = run(f"bash {script} small {data} {build}", env=env, cwd=root)
    p2 = run(f"bash {script} small {data} {build}", env=env, cwd=root)
    n = len(records(data / "lmdb" / split)) if (data / "lmdb" / split).is_dir() else -1
    report(name, None if p.returncode == 0 and n == want_records and "is ready" in p2.stdout
           else f"status {p.returncode}, {n} {split} records: {p.stderr[-300:]}{p2.stdout[-200:]}")
