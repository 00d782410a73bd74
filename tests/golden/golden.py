"""Writes golden files (see tests/test.h): named float32 tensors that the C
op tests compare against. Used by the gen_*.py scripts beside this file, which
need PyTorch (pip install torch); CI only reads the committed .gld files."""
import struct

import numpy as np


def write(path, tensors):
    """tensors: dict name -> array-like (torch tensors are converted)."""
    with open(path, "wb") as f:
        f.write(b"GLD1")
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
    out = {}
    with open(path, "rb") as f:
        assert f.read(4) == b"GLD1", path
        (count,) = struct.unpack("<I", f.read(4))
        for _ in range(count):
            (n,) = struct.unpack("<I", f.read(4))
            name = f.read(n).decode()
            (ndim,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack("<%dq" % ndim, f.read(8 * ndim))
            numel = int(np.prod(shape)) if ndim else 1
            out[name] = np.frombuffer(f.read(4 * numel), "<f4").reshape(shape)
    return out
