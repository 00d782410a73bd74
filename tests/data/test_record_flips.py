#!/usr/bin/env python3
"""Single bit flips in a data set's records, end to end: 40 bits, each in a
record of the training split of a small converted ImageNet-layout set (a
fresh copy each), chosen at random (seed 1) over every byte of the records;
after each the trainer runs one epoch. Every flip must stop it with a
one-line error naming the split and the record (record.h's checksum; the
magic and version bytes have their own checks, which name it too). Before
records carried a checksum, 33 of 40 such flips were trained on without a
word (the JPEG still decoded).

    python3 tests/data/test_record_flips.py BUILD_DIR
"""
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLIPS = 40
HEADER_BYTES = 16  # common/data/record.h, layout version 2


def records(raw):
    """(offset, length) of each image+label record in an LMDB file's bytes:
    its magic, then the header, the label and the image's length."""
    found, at = [], raw.find(b"MLRC")
    while at >= 0:
        if at + HEADER_BYTES + 8 <= len(raw):
            (image_bytes,) = struct.unpack_from("<I", raw, at + HEADER_BYTES + 4)
            length = HEADER_BYTES + 8 + image_bytes
            if at + length <= len(raw):
                found.append((at, length))
        at = raw.find(b"MLRC", at + 1)
    return found


def main():
    build = Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve()
    tmp = Path(tempfile.mkdtemp(prefix="record_flips."))
    try:
        data = tmp / "data"
        p = subprocess.run(f"TRAIN_COUNT=512 VAL_COUNT=128 SIDE=32 bash datasets/prepare_fmnist_classification.sh "
                           f"small {data} {build}", shell=True, cwd=ROOT, capture_output=True, text=True)
        if p.returncode:
            print(f"FAIL record_flips_found: the data set was not made: {p.stderr[-400:]}")
            return 1
        train = data / "lmdb" / "train" / "data.mdb"
        clean = train.read_bytes()
        spans = records(clean)
        if len(spans) != 512:
            print(f"FAIL record_flips_found: {len(spans)} records found in data.mdb, want 512")
            return 1
        rng = random.Random(1)
        named, other, silent = 0, [], []
        for i in range(FLIPS):
            at, length = spans[rng.randrange(len(spans))]
            byte, bit = at + rng.randrange(length), rng.randrange(8)
            raw = bytearray(clean)
            raw[byte] ^= 1 << bit
            train.write_bytes(bytes(raw))
            cmd = [str(build / "bin" / "resnet"), f"--config={ROOT}/image_classification/configs/small.conf",
                   "--stages=1", "--width=8", "--device=cpu", "--max_epochs=1", "--eval_every=1",
                   "--loader_threads=2", f"--data_dir={data}", f"--log_file={tmp}/run.log"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            first = next((line for line in p.stderr.splitlines() if line.startswith("error:")), "")
            if p.returncode == 2 and re.match(r"error: .*/lmdb/train record \d+: ", first):
                named += 1
            elif p.returncode == 0:
                silent.append(f"byte {byte - at} of a {length}-byte record")
            else:
                other.append(f"status {p.returncode}: {first or p.stderr[-200:]}")
        train.write_bytes(clean)
        ok = named == FLIPS
        print(f"{'PASS' if ok else 'FAIL'} record_flips_found: {named} of {FLIPS} flips stopped the run "
              f"naming the record; {len(silent)} trained on {silent[:3]}; {len(other)} other {other[:3]}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
