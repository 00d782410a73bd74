"""The weights of resnet34.gld's networks, drawn with numpy alone, so that a
test without PyTorch rebuilds exactly what gen_resnet34.py ran: a
torchvision ResNet-34 state dict (torchvision's names, PyTorch's layouts)
up to layer3, SSD's backbone, BN running statistics randomised so that the
running statistics, not 0 and 1, decide the result.

    python3 tests/golden/resnet34_weights.py OUT.npz    writes them as an .npz
"""
import sys

import numpy as np

SEED = 34
BLOCKS = (3, 4, 6)  # layer1..layer3 of ResNet-34
WIDTH = 64


def state_dict(seed=SEED):
    """name -> array, in torchvision's order: convolutions He-normal over
    fan-in (activations keep their scale through the blocks), BN gamma, beta,
    running mean and variance uniform around PyTorch's defaults, and each
    BN's num_batches_tracked (int64) as torchvision's state dicts hold it."""
    rng = np.random.default_rng(seed)
    sd = {}

    def conv(name, out_c, in_c, k):
        std = np.sqrt(2.0 / (in_c * k * k))
        sd[name + ".weight"] = (rng.standard_normal((out_c, in_c, k, k)) * std).astype(np.float32)

    def bn(name, c):
        sd[name + ".weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        sd[name + ".bias"] = rng.uniform(-0.3, 0.3, c).astype(np.float32)
        sd[name + ".running_mean"] = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        sd[name + ".running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
        sd[name + ".num_batches_tracked"] = np.array(rng.integers(1, 500000), np.int64)

    conv("conv1", WIDTH, 3, 7)
    bn("bn1", WIDTH)
    c = WIDTH
    for s, n in enumerate(BLOCKS):
        width = WIDTH << s
        for i in range(n):
            pre = "layer%d.%d" % (s + 1, i)
            conv(pre + ".conv1", width, c, 3)
            bn(pre + ".bn1", width)
            conv(pre + ".conv2", width, width, 3)
            bn(pre + ".bn2", width)
            if i == 0 and s > 0:
                conv(pre + ".downsample.0", width, c, 1)
                bn(pre + ".downsample.1", width)
            c = width
    return sd


if __name__ == "__main__":
    np.savez(sys.argv[1], **state_dict())
