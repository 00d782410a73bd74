#!/usr/bin/env python3
"""torch_to_ckpt: a torchvision ResNet's weights (a PyTorch state dict) as a
checkpoint of this suite, for a trainer's --backbone (ckpt_read_named in
common/train/ckpt.h loads it by name).

    python3 datasets/torch_to_ckpt.py --in=resnet34.pth --out=resnet34.ckpt
        [--arch=resnet34] [--layers=3] [--fc]

Input: what torch.save writes of a state dict (read without PyTorch by
torch_reader.py: the zip format and the legacy one; fp32, fp16, bf16, fp64
or integer tensors, views with a storage offset or other strides), or an
.npz of the same names. Every value is written as fp32.

Names: torchvision's (conv1, bn1, layer<L>.<B>.conv<k>/bn<k>,
layer<L>.<B>.downsample.0/.1, fc) become resnet's (common/models/resnet.c:
stem.conv, stem.bn, layer<L>.<B>.{a,b,c}.conv/.bn, layer<L>.<B>.proj.conv/.bn,
fc). Convolution weights go from PyTorch's (out, in, kh, kw) to the suite's
(out, kh, kw, in). BatchNorm's num_batches_tracked has no place in the suite
and is dropped.

What is written: the stem and stages 1..--layers (default: every stage the
input holds), each checked complete and of the shapes of --arch, in the
order of resnet's table; the BN running statistics as the buffers table;
the classifier only with --fc (then every stage must be there). Tensors of
later stages and fc are left out otherwise, so that a full ResNet-34 gives
SSD's backbone (--layers=3).

Security: a pickle from an untrusted source can run code when unpickled;
torch_reader.py reads through an allow-list of the globals a state dict
names, and any other stops the conversion with an error naming it.

Bad input (not a zip or pickle, a truncated file, an unknown or missing
tensor, a wrong shape, a global outside the allow-list) ends with one line,
"error: FILE: what (tensor NAME)", and exit status 2.
"""
import argparse
import os
import struct
import sys
import zlib

import numpy as np

from torch_reader import InputError, read_state_dict

CKPT_VERSION = 3  # common/train/ckpt.h
MAGIC = b"MLSCKPT\0"

# Architectures: block kind and residual blocks per stage (torchvision's).
ARCHS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
WIDTH = 64

# ------------------------------------------------------------ names

def suite_tensors(block, blocks, fc_classes):
    """resnet's tables for this architecture, in resnet.c's order: a list of
    (suite name, torchvision name, torchvision shape, is buffer, stage), the
    stem's stage 0 and fc's len(blocks) + 1."""
    out = []

    def conv_bn(stage, suite, torch_conv, torch_bn, out_c, in_c, k):
        out.append((suite + ".conv.weight", torch_conv + ".weight", (out_c, in_c, k, k), False, stage))
        for p in ("weight", "bias"):
            out.append((suite + ".bn." + p, torch_bn + "." + p, (out_c,), False, stage))
        for b in ("running_mean", "running_var"):
            out.append((suite + ".bn." + b, torch_bn + "." + b, (out_c,), True, stage))

    conv_bn(0, "stem", "conv1", "bn1", WIDTH, 3, 7)
    c = WIDTH
    for s, n in enumerate(blocks):
        width = WIDTH << s
        for i in range(n):
            pre = "layer%d.%d" % (s + 1, i)
            if block == "basic":
                units = [("a", width, c, 3), ("b", width, width, 3)]
                out_c = width
            else:
                units = [("a", width, c, 1), ("b", width, width, 3), ("c", 4 * width, width, 1)]
                out_c = 4 * width
            for k, (unit, uo, ui, ks) in enumerate(units, 1):
                conv_bn(s + 1, "%s.%s" % (pre, unit), "%s.conv%d" % (pre, k), "%s.bn%d" % (pre, k),
                        uo, ui, ks)
            # torchvision projects the shortcut in each stage's first block
            # but layer1's of a basic network (64 -> 64 at stride 1).
            if i == 0 and (s > 0 or block == "bottleneck"):
                conv_bn(s + 1, pre + ".proj", pre + ".downsample.0", pre + ".downsample.1", out_c, c, 1)
            c = out_c
    if fc_classes:
        out.append(("fc.weight", "fc.weight", (fc_classes, c), False, len(blocks) + 1))
        out.append(("fc.bias", "fc.bias", (fc_classes,), False, len(blocks) + 1))
    return out


def known_names(arch):
    """torchvision name -> stage, for every tensor a state dict of arch may
    hold (num_batches_tracked included)."""
    block, blocks = ARCHS[arch]
    known = {}
    for _, tname, _, is_buffer, stage in suite_tensors(block, blocks, 1):
        known[tname] = stage
        if is_buffer:  # running_mean: its BN also counts batches
            known[tname.rsplit(".", 1)[0] + ".num_batches_tracked"] = stage
    return known


def convert(sd, arch, layers=None, fc=False):
    """(params, buffers, dropped): lists of (suite name, fp32 array in the
    suite's layout) and the input names left out. Raises InputError naming
    the tensor."""
    block, blocks = ARCHS[arch]
    known = known_names(arch)
    for name in sd:
        if name not in known:
            raise InputError("tensor '%s' is not a name of torchvision's %s" % (name, arch))
    present = max([known[n] for n in sd if known[n] <= len(blocks)] or [0])
    layers = present if layers is None else layers
    if not 1 <= layers <= len(blocks):
        raise InputError("--layers=%d: a %s has stages 1..%d" % (layers, arch, len(blocks))
                         if layers else "holds no stage (layer1..) of a %s" % arch)
    if fc and layers != len(blocks):
        raise InputError("--fc needs every stage (layer1..layer%d), not %d" % (len(blocks), layers))
    if fc and "fc.weight" not in sd:
        raise InputError("no tensor 'fc.weight' (--fc keeps the classifier)")
    wanted = suite_tensors(block, blocks[:layers], sd["fc.weight"].shape[0] if fc else 0)
    params, buffers, used = [], [], set()
    for suite, tname, shape, is_buffer, _ in wanted:
        if tname not in sd:
            raise InputError("no tensor '%s' (a %s up to layer%d has one)" % (tname, arch, layers))
        value = sd[tname]
        if tuple(value.shape) != shape:
            raise InputError("tensor '%s' has shape %s; a %s's is %s"
                             % (tname, tuple(value.shape), arch, shape))
        value = np.asarray(value, np.float32)
        if value.ndim == 4:
            value = value.transpose(0, 2, 3, 1)  # (out, in, kh, kw) -> (out, kh, kw, in)
        (buffers if is_buffer else params).append((suite, np.ascontiguousarray(value)))
        used.add(tname)
    return params, buffers, [n for n in sd if n not in used]


# ------------------------------------------------------------ writing

def checkpoint_bytes(params, buffers):
    """A checkpoint in ckpt.h's layout: no optimizer state, step 0, scale 1."""
    out = bytearray(MAGIC)
    # version, n_tensors, n_state, opt_kind; epoch, step, data_position;
    # rng seed, stream, counter; loss_scale, n_buffer_tensors; scaler good
    # and skipped steps; run config length (no config).
    out += struct.pack("<IIIi", CKPT_VERSION, len(params), 0, 0)
    out += struct.pack("<qqq", 0, 0, 0)
    out += struct.pack("<QQQ", 0, 0, 0)
    out += struct.pack("<fI", 1.0, len(buffers))
    out += struct.pack("<qqI", 0, 0, 0)
    for table in (params, buffers):
        for name, value in table:
            raw = name.encode()
            out += struct.pack("<I", len(raw)) + raw + struct.pack("<q", value.size)
        for _, value in table:
            out += value.astype("<f4").tobytes()
    out += struct.pack("<I", zlib.crc32(out))
    return bytes(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="src", required=True, help="torch.save state dict (.pth) or .npz")
    ap.add_argument("--out", required=True, help="the checkpoint to write")
    ap.add_argument("--arch", default="resnet34", choices=sorted(ARCHS),
                    help="the architecture the names and shapes are checked against")
    ap.add_argument("--layers", type=int, help="stages to keep (default: those in the input)")
    ap.add_argument("--fc", action="store_true", help="keep the classifier (needs every stage)")
    args = ap.parse_args(argv)
    try:
        params, buffers, dropped = convert(read_state_dict(args.src), args.arch, args.layers, args.fc)
    except InputError as e:
        print("error: %s: %s" % (args.src, e), file=sys.stderr)
        return 2
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(checkpoint_bytes(params, buffers))
    os.replace(tmp, args.out)
    counters = [n for n in dropped if n.endswith(".num_batches_tracked")]
    others = [n for n in dropped if n not in counters]
    print("wrote %s: %d parameter tensors (%d values), %d buffer tensors; left out %d "
          "num_batches_tracked and %d other input tensors%s"
          % (args.out, len(params), sum(v.size for _, v in params), len(buffers), len(counters),
             len(others), " (%s)" % ", ".join(others[:4] + ["..."] * (len(others) > 4)) if others else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
