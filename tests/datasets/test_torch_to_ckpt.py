#!/usr/bin/env python3
"""datasets/torch_to_ckpt.py without PyTorch: its pickle reader on a file the
real torch.save wrote (tests/golden/state_dict_fixture.pth: fp32, fp16,
bf16, int64, a permuted view, strided views at storage offsets) gives
exactly the values gen_resnet34.py stored beside it; a converted ResNet-34
(.npz of resnet34_weights.py) holds resnet's names in its table order, the
filters in the suite's (out, kh, kw, in) layout and the BN statistics as
buffers; --layers leaves later stages out; and bad input (missing tensor,
wrong shape, unknown name, a pickle global outside the allow-list, a
truncated or foreign file) ends with one line naming the file and the
tensor, exit status 2, and nothing written. The forward of the converted
network against PyTorch is tests/models/test_resnet_import.c.

    python3 tests/datasets/test_torch_to_ckpt.py [BUILD_DIR]   (not used)
"""
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
CONVERTER = os.path.join(ROOT, "datasets", "torch_to_ckpt.py")
sys.path.insert(0, GOLDEN)
sys.path.insert(0, os.path.join(ROOT, "datasets"))
from convert_check import evil_pickle  # noqa: E402
import golden  # noqa: E402
import resnet34_weights  # noqa: E402
import torch_to_ckpt  # noqa: E402

failures = 0


def report(name, problem):
    global failures
    print("PASS %s" % name if not problem else "FAIL %s: %s" % (name, problem), flush=True)
    failures += bool(problem)


def convert(src, out, *flags):
    return subprocess.run([sys.executable, CONVERTER, "--in=" + src, "--out=" + out, *flags],
                          capture_output=True, text=True)


def read_checkpoint(path):
    """(params, buffers): name -> fp32 array (flat), by ckpt.h's layout,
    written here from the header's description, not from the converter."""
    data = open(path, "rb").read()
    assert struct.unpack("<I", data[-4:])[0] == zlib.crc32(data[:-4]), "checksum"
    assert data[:8] == b"MLSCKPT\0"
    version, n, n_state, _ = struct.unpack_from("<IIIi", data, 8)
    assert version == 3 and n_state == 0, (version, n_state)
    at = 24 + 24 + 24
    _scale, n_buffers = struct.unpack_from("<fI", data, at)
    at += 8 + 16
    (config_len,) = struct.unpack_from("<I", data, at)
    at += 4 + config_len
    tables = []
    for count in (n, n_buffers):
        rows = []
        for _ in range(count):
            (length,) = struct.unpack_from("<I", data, at)
            name = data[at + 4:at + 4 + length].decode()
            (numel,) = struct.unpack_from("<q", data, at + 4 + length)
            rows.append((name, numel))
            at += 4 + length + 8
        table = {}
        for name, numel in rows:
            table[name] = np.frombuffer(data, "<f4", numel, at)
            at += 4 * numel
        tables.append(table)
    assert at == len(data) - 4, "bytes left over"
    return tables


def fixture_reads_exactly():
    sd = torch_to_ckpt.read_state_dict(os.path.join(GOLDEN, "state_dict_fixture.pth"))
    _, want = golden.read(os.path.join(GOLDEN, "resnet34.gld"))
    want = {k[len("fixture."):]: v for k, v in want.items() if k.startswith("fixture.")}
    if list(sd) != list(want):
        return "names %s, want %s" % (list(sd), list(want))
    dtypes = {"bn1.num_batches_tracked": np.int64, "layer1.0.conv1.weight": np.float16}
    for name, value in sd.items():
        if value.dtype != dtypes.get(name, np.float32):
            return "%s: dtype %s" % (name, value.dtype)
        # golden files store a scalar as one element
        if value.shape != want[name].shape and not (value.shape == () and want[name].shape == (1,)):
            return "%s: shape %s, want %s" % (name, value.shape, want[name].shape)
        if not np.array_equal(value.astype(np.float32).ravel(), want[name].ravel()):
            return "%s: values differ from torch's" % name
    return None


def npz_conversion(weights, tmp):
    src, out = os.path.join(tmp, "w.npz"), os.path.join(tmp, "w.ckpt")
    p = convert(src, out)
    if p.returncode:
        return "status %d: %s" % (p.returncode, p.stderr.strip())
    params, buffers = read_checkpoint(out)
    names = list(params)
    # resnet.c's table: the stem, then per block a, b (and proj), 3 + 4 + 6
    # blocks, a projection in the first block of layer2 and layer3.
    if names[:3] != ["stem.conv.weight", "stem.bn.weight", "stem.bn.bias"] or \
            names[3:6] != ["layer1.0.a.conv.weight", "layer1.0.a.bn.weight", "layer1.0.a.bn.bias"]:
        return "table starts %s" % names[:6]
    if len(names) != 3 * (1 + 2 * 13 + 2) or len(buffers) != 2 * (1 + 2 * 13 + 2):
        return "%d parameter and %d buffer tensors" % (len(names), len(buffers))
    if names.index("layer2.0.proj.conv.weight") != names.index("layer2.0.b.bn.bias") + 1:
        return "the projection is not after the block's convolutions"
    for suite, tv in (("stem.conv.weight", "conv1.weight"),
                      ("layer2.0.a.conv.weight", "layer2.0.conv1.weight"),
                      ("layer3.0.proj.conv.weight", "layer3.0.downsample.0.weight")):
        if not np.array_equal(params[suite], weights[tv].transpose(0, 2, 3, 1).ravel()):
            return "%s is not %s as (out, kh, kw, in)" % (suite, tv)
    for suite, tv in (("layer1.2.b.bn.bias", "layer1.2.bn2.bias"),):
        if not np.array_equal(params[suite], weights[tv]):
            return "%s is not %s" % (suite, tv)
    for suite, tv in (("layer3.5.a.bn.running_var", "layer3.5.bn1.running_var"),
                      ("layer2.0.proj.bn.running_mean", "layer2.0.downsample.1.running_mean")):
        if not np.array_equal(buffers[suite], weights[tv]):
            return "buffer %s is not %s" % (suite, tv)
    if any("num_batches" in n for n in list(params) + list(buffers)):
        return "num_batches_tracked written"
    return None


def layers_option(weights, tmp):
    more = dict(weights)
    more["layer4.0.conv1.weight"] = np.zeros((512, 256, 3, 3), np.float32)
    more["fc.weight"] = np.zeros((10, 512), np.float32)
    more["fc.bias"] = np.zeros(10, np.float32)
    src, out = os.path.join(tmp, "l4.npz"), os.path.join(tmp, "l4.ckpt")
    np.savez(src, **more)
    p = convert(src, out)
    if p.returncode != 2 or "no tensor 'layer4.0.bn1.weight'" not in p.stderr:
        return "without --layers: status %d, %s" % (p.returncode, p.stderr.strip())
    p = convert(src, out, "--layers=3")
    if p.returncode:
        return "--layers=3: status %d: %s" % (p.returncode, p.stderr.strip())
    params, _ = read_checkpoint(out)
    if any(n.startswith(("layer4", "fc")) for n in params) or "and 3 other input tensors" not in p.stdout:
        return "layer4 or fc kept: %s" % p.stdout.strip()
    p = convert(src, out, "--layers=3", "--fc")
    if p.returncode != 2 or "--fc needs every stage" not in p.stderr:
        return "--fc with 3 layers: status %d, %s" % (p.returncode, p.stderr.strip())
    return None


def bad_input(weights, tmp):
    def variant(name, change):
        sd = dict(weights)
        change(sd)
        path = os.path.join(tmp, name + ".npz")
        np.savez(path, **sd)
        return path

    cut = os.path.join(tmp, "cut.pth")
    whole = open(os.path.join(GOLDEN, "state_dict_fixture.pth"), "rb").read()
    open(cut, "wb").write(whole[:len(whole) // 2])
    text = os.path.join(tmp, "notes.pth")
    open(text, "w").write("not a state dict\n")
    legacy = os.path.join(tmp, "plain_pickle.pth")
    open(legacy, "wb").write(pickle.dumps({"a": 1}, protocol=2))
    evil, marker = evil_pickle(tmp)
    cases = {
        "missing_tensor": (variant("missing", lambda sd: sd.pop("layer2.1.bn1.running_var")),
                           "no tensor 'layer2.1.bn1.running_var' (a resnet34 up to layer3 has one)"),
        "wrong_shape": (variant("shape", lambda sd: sd.update(
            {"layer1.0.conv2.weight": np.zeros((64, 64, 1, 3), np.float32)})),
            "tensor 'layer1.0.conv2.weight' has shape (64, 64, 1, 3); a resnet34's is (64, 64, 3, 3)"),
        "unknown_tensor": (variant("unknown", lambda sd: sd.update(
            {"layer1.0.conv3.weight": np.zeros(1, np.float32)})),
            "tensor 'layer1.0.conv3.weight' is not a name of torchvision's resnet34"),
        "disallowed_global": (evil, "the pickle names the global '%s.system'" % os.system.__module__),
        "truncated": (cut, "not what torch.save writes (a zip archive or a pickle stream): another "
                      "format, or a truncated file"),
        "not_a_state_dict": (text, "not what torch.save writes"),
        "pickle_not_torch_save": (legacy, "a pickle, but not what torch.save writes (no magic number"),
    }
    for name, (src, want) in cases.items():
        out = os.path.join(tmp, name + ".ckpt")
        p = convert(src, out)
        err = p.stderr
        problem = None
        if p.returncode != 2 or not err.startswith("error: %s: " % src) or want not in err:
            problem = "status %d, stderr %r; want %r" % (p.returncode, err, want)
        elif err.count("\n") != 1:
            problem = "not one line: %r" % err
        elif os.path.exists(out) or os.path.exists(out + ".tmp"):
            problem = "wrote %s" % out
        elif name == "disallowed_global" and os.path.exists(marker):
            problem = "the pickle's code ran"
        report("torch_to_ckpt_refuses_" + name, problem)


def main():
    report("torch_to_ckpt_reads_torch_save_exactly", fixture_reads_exactly())
    weights = resnet34_weights.state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(os.path.join(tmp, "w.npz"), **weights)
        report("torch_to_ckpt_maps_names_and_layout", npz_conversion(weights, tmp))
        report("torch_to_ckpt_layers_option", layers_option(weights, tmp))
        bad_input(weights, tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
