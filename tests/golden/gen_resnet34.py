"""Writes resnet34.gld and state_dict_fixture.pth, for the backbone import
(datasets/torch_to_ckpt.py, ckpt_read_named):

- PyTorch's features after layer3 of a torchvision ResNet-34 in eval mode,
  with the weights of resnet34_weights.py (numpy, so tests rebuild them
  without torch), for a fixed 2x3x64x64 input: the plain network
  (resnet34.*) and SSD's backbone (resnet34_ssd.*: layer3's first block at
  stride 1 in conv1 and downsample.0, as the MLPerf SSD reference changes
  torchvision's). Inputs and features NHWC, the suite's layout. Read by
  tests/models/test_resnet_import.c.
- state_dict_fixture.pth, written by the real torch.save: a few tensors with
  torchvision's names in the dtypes and memory layouts a state dict may hold
  (fp32, fp16, bf16, int64 num_batches_tracked, a permuted view, views with
  a storage offset and a stride sharing one storage), and their values as
  fixture.<name> in resnet34.gld. Read by tests/datasets/test_torch_to_ckpt.py.

The network is torchvision's ResNet written out here up to layer3 (the same
module names, so the same state-dict names); when torchvision is installed
the features are also checked against torchvision.models.resnet34 itself.
Run: python3 tests/golden/gen_resnet34.py (or make goldens).
"""
import collections
import os
import sys

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden  # noqa: E402
import resnet34_weights  # noqa: E402

FIXTURE = "state_dict_fixture.pth"


class BasicBlock(nn.Module):
    def __init__(self, in_c, out_c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_c, out_c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_c)
        self.conv2 = nn.Conv2d(out_c, out_c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_c)
        self.downsample = None
        if stride != 1 or in_c != out_c:
            self.downsample = nn.Sequential(nn.Conv2d(in_c, out_c, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_c))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + shortcut)


class ResNet34Trunk(nn.Module):
    """torchvision's ResNet-34 up to layer3."""

    def __init__(self):
        super().__init__()
        w = resnet34_weights.WIDTH
        self.conv1 = nn.Conv2d(3, w, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c = w
        for s, n in enumerate(resnet34_weights.BLOCKS):
            out_c = w << s
            blocks = [BasicBlock(c if i == 0 else out_c, out_c, 2 if i == 0 and s > 0 else 1)
                      for i in range(n)]
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*blocks))
            c = out_c

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        return self.layer3(self.layer2(self.layer1(x)))


def ssd_variant(net):
    """SSD's backbone: layer3 keeps the resolution (the MLPerf reference sets
    these two strides to 1 on torchvision's network)."""
    net.layer3[0].conv1.stride = (1, 1)
    net.layer3[0].downsample[0].stride = (1, 1)
    return net


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def load(net, sd):
    net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    return net.eval()


def check_against_torchvision(sd, x, features):
    """torchvision's own resnet34 with these weights gives the same features
    (its layer4 and fc stay unused)."""
    try:
        import torchvision
    except ImportError:
        print("torchvision not installed: the written-out network is not checked against it")
        return
    for name, feats in features.items():
        tv = torchvision.models.resnet34()
        missing, unexpected = tv.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()},
                                                 strict=False)
        assert not unexpected and all(k.startswith(("layer4.", "fc.")) for k in missing), (
            unexpected, missing)
        tv.eval()
        if name == "resnet34_ssd":
            ssd_variant(tv)
        with torch.no_grad():
            y = tv.maxpool(tv.relu(tv.bn1(tv.conv1(x))))
            y = tv.layer3(tv.layer2(tv.layer1(y)))
        assert torch.equal(y, feats), name + ": torchvision's features differ"
    print("checked against torchvision %s" % torchvision.__version__)


def fixture():
    """The state dict of state_dict_fixture.pth."""
    rng = np.random.default_rng(7)

    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    shared = randn(13)  # one storage, two strided views at offsets
    sd = collections.OrderedDict()
    sd["conv1.weight"] = randn(4, 3, 3, 3)
    sd["bn1.weight"] = randn(4)
    sd["bn1.bias"] = randn(4)
    sd["bn1.running_mean"] = randn(4)
    sd["bn1.running_var"] = randn(4).abs()
    sd["bn1.num_batches_tracked"] = torch.tensor(450360, dtype=torch.int64)
    sd["layer1.0.conv1.weight"] = randn(4, 4, 3, 3).half()
    sd["layer1.0.bn1.weight"] = randn(4).bfloat16()
    sd["layer1.0.conv2.weight"] = randn(3, 3, 4, 4).permute(2, 3, 0, 1)
    sd["layer1.0.bn2.running_mean"] = shared[3:7]
    sd["layer1.0.bn2.running_var"] = shared[1::3]
    assert not sd["layer1.0.conv2.weight"].is_contiguous()
    assert sd["layer1.0.bn2.running_var"].storage_offset() == 1
    return sd


def main(outdir=HERE):
    sd = resnet34_weights.state_dict()
    rng = np.random.default_rng(resnet34_weights.SEED + 1)
    x = torch.from_numpy(rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    out = {"resnet34.x": nhwc(x)}
    features = {}
    with torch.no_grad():
        features["resnet34"] = load(ResNet34Trunk(), sd)(x)
        features["resnet34_ssd"] = load(ssd_variant(ResNet34Trunk()), sd)(x)
    check_against_torchvision(sd, x, features)
    for name, feats in features.items():
        out[name + ".layer3"] = nhwc(feats)
    fix = fixture()
    torch.save(fix, os.path.join(outdir, FIXTURE))
    for name, t in fix.items():
        out["fixture." + name] = t.to(torch.float32)
    path = os.path.join(outdir, "resnet34.gld")
    golden.write(path, out, __file__)
    print("wrote %s (%d tensors, %d bytes) and %s" % (path, len(out), os.path.getsize(path), FIXTURE))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
