"""Writes conv.gld: PyTorch's results for the convolutional ops, in the
suite's layouts (activations NHWC, filters KRSC), for tests/ops/test_ops_conv.c,
test_ops_norm.c (batch norm) and test_ops_pool.c.

Each case stores its inputs, its geometry as a small tensor and PyTorch's
outputs and gradients (of sum(out * dy) for a stored random dy), so the C test
needs nothing from this script but the file. Run: python3 tests/golden/gen_conv.py
(or make goldens, which runs every generator).
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden  # noqa: E402


def nchw(t):
    return t.permute(0, 3, 1, 2)


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def grads_of(y, dy, *inputs):
    return torch.autograd.grad((y * dy).sum(), inputs)


# name: (N, H, W, C, K, R, S, stride (h, w), pad (h, w), dilation (h, w), bias)
CONV_CASES = {
    "conv3x3": (2, 7, 9, 3, 4, 3, 3, (1, 1), (1, 1), (1, 1), True),
    "conv3x3_s2": (2, 9, 8, 5, 6, 3, 3, (2, 2), (1, 1), (1, 1), False),
    "conv7x7_s2": (1, 11, 11, 3, 4, 7, 7, (2, 2), (3, 3), (1, 1), False),
    "conv1x1": (2, 5, 5, 6, 5, 1, 1, (1, 1), (0, 0), (1, 1), True),
    "conv1x1_s2": (2, 6, 7, 4, 3, 1, 1, (2, 2), (0, 0), (1, 1), False),
    "conv3x3_d2": (1, 9, 9, 3, 4, 3, 3, (1, 1), (2, 2), (2, 2), False),
    "conv1x3_rect": (2, 5, 8, 2, 3, 1, 3, (2, 1), (0, 1), (1, 1), False),
}

# Batch norm in training mode (batch statistics, running update), with and
# without the fused residual add + ReLU, and in inference mode.
MOMENTUM, EPS = 0.1, 1e-5
# name: (N, H, W, C), with the fused residual add + ReLU
BN_CASES = {"bn": ((2, 5, 3, 6), False), "bn_add_relu": ((2, 4, 5, 5), True)}

# Pooling: (N, H, W, C), window, stride, pad.
POOL_CASES = {
    "maxpool3x3_s2": ("max", (2, 9, 9, 3), 3, 2, 1),
    "maxpool2x2": ("max", (1, 6, 7, 5), 2, 2, 0),
    "avgpool3x3_s2": ("avg", (2, 9, 8, 3), 3, 2, 1),
    "avgpool2x2": ("avg", (1, 6, 6, 4), 2, 2, 0),
}


def make():
    """Every case's tensors, drawn in a fixed order from the seed."""
    torch.manual_seed(1234)
    out = {}
    for name, (n, h, w, c, k, r, s, stride, pad, dil, has_bias) in CONV_CASES.items():
        x = torch.randn(n, h, w, c, requires_grad=True)
        wt = torch.randn(k, r, s, c, requires_grad=True)
        b = torch.randn(k, requires_grad=True) if has_bias else None
        y = nhwc(F.conv2d(nchw(x), nchw(wt), b, stride=stride, padding=pad, dilation=dil))
        dy = torch.randn_like(y)
        dx, dw = grads_of(y, dy, x, wt)
        out[name + ".dims"] = [n, h, w, c, k, r, s]
        out[name + ".geom"] = [*stride, *pad, *dil]
        out[name + ".x"] = x
        out[name + ".w"] = wt
        if has_bias:
            out[name + ".b"] = b
        out[name + ".y"] = y
        out[name + ".dy"] = dy
        out[name + ".dx"] = dx
        out[name + ".dw"] = dw

    for name, (shape, fused) in BN_CASES.items():
        c = shape[-1]
        x = (torch.randn(*shape) * 2 + 0.5).requires_grad_()
        z = torch.randn(*shape, requires_grad=True)
        gamma = (torch.rand(c) + 0.5).requires_grad_()
        beta = torch.randn(c, requires_grad=True)
        rmean, rvar = torch.randn(c) * 0.1, torch.rand(c) + 0.5
        out[name + ".dims"] = list(shape)
        out[name + ".running_mean_in"] = rmean.clone()
        out[name + ".running_var_in"] = rvar.clone()
        v = nhwc(F.batch_norm(nchw(x), rmean, rvar, gamma, beta, True, MOMENTUM, EPS))
        y = F.relu(v + z) if fused else v
        dy = torch.randn_like(y)
        if fused:
            dx, dz, dgamma, dbeta = grads_of(y, dy, x, z, gamma, beta)
        else:
            dx, dgamma, dbeta = grads_of(y, dy, x, gamma, beta)
        for key, val in dict(x=x, z=z, gamma=gamma, beta=beta, y=y, dy=dy, dx=dx, dgamma=dgamma,
                             dbeta=dbeta, running_mean=rmean, running_var=rvar).items():
            if fused or key != "z":
                out["%s.%s" % (name, key)] = val
        if fused:
            out[name + ".dz"] = dz
        # Inference with the updated running statistics.
        y_inf = nhwc(F.batch_norm(nchw(x), rmean, rvar, gamma, beta, False, MOMENTUM, EPS))
        out[name + ".y_infer"] = F.relu(y_inf + z) if fused else y_inf

    for name, (kind, shape, window, stride, pad) in POOL_CASES.items():
        x = torch.randn(*shape, requires_grad=True)
        if kind == "max":
            y = nhwc(F.max_pool2d(nchw(x), window, stride, pad))
        else:
            y = nhwc(F.avg_pool2d(nchw(x), window, stride, pad, count_include_pad=True))
        dy = torch.randn_like(y)
        (dx,) = grads_of(y, dy, x)
        out[name + ".dims"] = list(shape)
        out[name + ".geom"] = [window, stride, pad]
        out[name + ".x"] = x
        out[name + ".y"] = y
        out[name + ".dy"] = dy
        out[name + ".dx"] = dx

    x = torch.randn(2, 5, 4, 7, requires_grad=True)
    y = x.mean(dim=(1, 2))
    dy = torch.randn_like(y)
    (dx,) = grads_of(y, dy, x)
    out.update({"gap.dims": list(x.shape), "gap.x": x, "gap.y": y, "gap.dy": dy, "gap.dx": dx})
    return out


def main(outdir=HERE):
    out = make()
    path = os.path.join(outdir, "conv.gld")
    golden.write(path, out, __file__)
    print("wrote %s (%d tensors, %d bytes)" % (path, len(out), os.path.getsize(path)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
