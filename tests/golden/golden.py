"""Golden files (format: tests/harness/test.h): named float32 tensors that the C op
tests compare against, each file stamped with what made it (script, torch,
numpy, python). The gen_*.py scripts beside this file compute them with
PyTorch; CI only reads the committed .gld files.

    python3 tests/golden/golden.py [OUTDIR]    (make goldens) regenerates every
                                               file, into OUTDIR or beside this file
"""
import importlib
import os
import platform
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"GLD2"
# Each generator module (main(outdir) writes its files) and the files it writes.
GENERATORS = {
    "gen_conv": ["conv.gld"],
    "gen_dense": ["dense.gld", "seq.gld", "loss.gld"],
    "gen_optim": ["optim.gld"],
    "gen_resnet34": ["resnet34.gld"],
    "gen_ssd": ["ssd.gld"],
    "gen_nmt": ["nmt.gld"],
    "gen_bert": ["bert.gld"],
}
# What generators write beside their .gld files: torch.save's files, whose
# values the .gld files hold (gen_resnet34, gen_bert).
FIXTURES = ["state_dict_fixture.pth", "bert_state_dict_fixture.bin", "bert_state_dict_fixture_legacy.pt"]


def tile_rows(a, b, rows):
    """(rows, ...) float32: row r is a[r % len(a)] + b[r % len(b)] (one fp32
    add, so numpy and torch give the same bits). A large input stored as two
    small tables: with len(a), len(b) coprime, the first len(a) * len(b) rows
    are all different."""
    r = np.arange(rows)
    return np.asarray(a, np.float32)[r % len(a)] + np.asarray(b, np.float32)[r % len(b)]


def metadata(script):
    """One line of key=value pairs: the generator, the versions that ran it and
    the two things that move the last bits (PyTorch's CPU kernels, threads)."""
    import torch  # only generators write, and they have torch

    return "generator=tests/golden/%s torch=%s numpy=%s python=%s cpu=%s threads=%d" % (
        os.path.basename(script), torch.__version__, np.__version__, platform.python_version(),
        torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())


def write(path, tensors, script):
    """tensors: dict name -> array-like (torch tensors are converted);
    script: the generator's __file__, recorded in the file."""
    meta = metadata(script).encode()
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", len(meta)))
        f.write(meta)
        f.write(struct.pack("<I", len(tensors)))
        for name, value in tensors.items():
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            arr = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)))
            f.write(raw)
            f.write(struct.pack("<I", arr.ndim))
            f.write(struct.pack("<%dq" % arr.ndim, *arr.shape))
            f.write(arr.astype("<f4").tobytes())


def read(path):
    """(metadata dict, dict name -> float32 array) of one golden file."""
    tensors = {}
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise ValueError("%s: not a %s file" % (path, MAGIC.decode()))
        (meta_bytes,) = struct.unpack("<I", f.read(4))
        meta = dict(kv.split("=", 1) for kv in f.read(meta_bytes).decode().split())
        (count,) = struct.unpack("<I", f.read(4))
        for _ in range(count):
            (n,) = struct.unpack("<I", f.read(4))
            name = f.read(n).decode()
            (ndim,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack("<%dq" % ndim, f.read(8 * ndim))
            numel = int(np.prod(shape)) if ndim else 1
            tensors[name] = np.frombuffer(f.read(4 * numel), "<f4").reshape(shape)
    return meta, tensors


def regenerate(outdir):
    """Runs every generator into outdir; returns the file names written. One
    thread, so that machines with the same CPU kernels write the same bits."""
    import torch

    torch.set_num_threads(1)
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    written = []
    for module, files in GENERATORS.items():
        importlib.import_module(module).main(outdir)
        written += files
    return written


if __name__ == "__main__":
    regenerate(sys.argv[1] if len(sys.argv) > 1 else HERE)
