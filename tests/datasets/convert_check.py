"""What the converter tests (test_coco_convert.py, test_wmt_convert.py,
test_torch_to_ckpt.py, test_bert_to_safetensors.py) share: the PASS/FAIL
line, a shell command, an LMDB's records read back with lmdb-utils'
mdb_dump and their header and checksum checked (with the xxhash package, not
the suite's code), the check of a task's prepare_data.sh at a small scale (run twice:
the second run must keep the first's data set), and a hostile pickle."""
import os
import pickle
import struct
import subprocess
import zipfile

import xxhash


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


def payload(value, kind):
    """A record's fields after its 16-byte header (common/data/record.h,
    layout version 2), once its magic, version, kind and XXH3-64 checksum
    (seeded with the header's first 8 bytes) are checked; and its image
    format byte."""
    magic, version, got_kind, fmt, checksum = struct.unpack_from("<4sHBBQ", value, 0)
    assert magic == b"MLRC" and version == 2 and got_kind == kind, (magic, version, got_kind)
    seed = int.from_bytes(value[:8], "little")
    assert checksum == xxhash.xxh3_64_intdigest(value[16:], seed=seed), "record checksum"
    return value[16:], fmt


def check_prepare(name, script, data, build, env, root, split, want_records):
    """prepare_data.sh small, twice: DATA/lmdb/<split> holds want_records
    records and the second run says the data set is ready."""
    p = run(f"bash {script} small {data} {build}", env=env, cwd=root)
    p2 = run(f"bash {script} small {data} {build}", env=env, cwd=root)
    n = len(records(data / "lmdb" / split)) if (data / "lmdb" / split).is_dir() else -1
    report(name, None if p.returncode == 0 and n == want_records and "is ready" in p2.stdout
           else f"status {p.returncode}, {n} {split} records: {p.stderr[-300:]}{p2.stdout[-200:]}")


def evil_pickle(tmp):
    """(path, marker): a zip laid out like torch.save's whose pickle calls
    os.system to create the file marker."""
    marker = os.path.join(tmp, "pwned")

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + marker,))

    path = os.path.join(tmp, "evil.pth")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"conv1.weight": Evil()}, protocol=2))
        z.writestr("evil/byteorder", "little")
    return path, marker
