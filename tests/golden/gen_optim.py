"""Golden values for tests/train/test_optim.c: three optimizer steps of each kind on a
small three-tensor model, computed by PyTorch (torch.optim.SGD, Adam, AdamW) or,
for the two optimizers PyTorch does not ship (LARS in the MLPerf form, LAMB),
by the formulas written out here in torch operations.

The model: "w" (4, 6) and "e" (10, 3) take weight decay, "b" (6,) is a bias
(PARAM_NO_DECAY: no decay, no trust ratio). Written: init.<t>, grad<k>.<t>
(k = 0..2), lr (3,), and <case>.step<k>.<t>, the parameters after step k.

Run: python3 tests/golden/gen_optim.py [OUTDIR] (or make goldens, which runs every
generator).
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden  # noqa: E402

TENSORS = [("w", (4, 6), True), ("b", (6,), False), ("e", (10, 3), True)]
STEPS = 3
LRS = [0.1, 0.05, 0.02]

CASES = {
    "sgd": dict(kind="sgd", momentum=0.9, nesterov=False, wd=0.01),
    "sgd_nesterov": dict(kind="sgd", momentum=0.9, nesterov=True, wd=0.01),
    "lars": dict(kind="lars", momentum=0.9, nesterov=False, wd=0.05, eta=0.02, eps=0.0),
    "adam": dict(kind="adam", wd=0.01, betas=(0.9, 0.999), eps=1e-8),
    "adamw": dict(kind="adamw", wd=0.05, betas=(0.9, 0.999), eps=1e-8),
    "lamb": dict(kind="lamb", wd=0.01, betas=(0.9, 0.999), eps=1e-6),
}
# LARS multiplies its tiny trust ratio in, so it runs on larger rates.
LARS_LR_SCALE = 50.0


def torch_optimizer(case, params, decays):
    groups = [
        {"params": [p for p, d in zip(params, decays) if d], "weight_decay": case["wd"]},
        {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0},
    ]
    if case["kind"] == "sgd":
        return torch.optim.SGD(groups, lr=LRS[0], momentum=case["momentum"],
                               nesterov=case["nesterov"])
    cls = torch.optim.Adam if case["kind"] == "adam" else torch.optim.AdamW
    return cls(groups, lr=LRS[0], betas=case["betas"], eps=case["eps"])


def lars_step(case, params, grads, bufs, decays, lr):
    """MLPerf reference LARS: trust ratio eta ||w|| / (||g|| + wd ||w|| + eps)."""
    for p, g, buf, decay in zip(params, grads, bufs, decays):
        wd = case["wd"] if decay else 0.0
        ratio = 1.0
        if decay:
            wn, gn = p.norm().item(), g.norm().item()
            if wn > 0 and gn > 0:
                ratio = case["eta"] * wn / (gn + wd * wn + case["eps"])
        step = lr * ratio * (g + wd * p)
        buf.mul_(case["momentum"]).add_(step)
        p.sub_(buf)


def lamb_step(case, params, grads, ms, vs, decays, lr, t):
    b1, b2 = case["betas"]
    for p, g, m, v, decay in zip(params, grads, ms, vs, decays):
        wd = case["wd"] if decay else 0.0
        m.mul_(b1).add_((1 - b1) * g)
        v.mul_(b2).add_((1 - b2) * g * g)
        u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + case["eps"]) + wd * p
        ratio = 1.0
        if decay:
            wn, un = p.norm().item(), u.norm().item()
            if wn > 0 and un > 0:
                ratio = wn / un
        p.sub_(lr * ratio * u)


def run_case(name, case, init, grads, out):
    params = [torch.tensor(x, dtype=torch.float32) for x in init]
    decays = [d for _, _, d in TENSORS]
    opt = None
    state = [torch.zeros_like(p) for p in params]
    state2 = [torch.zeros_like(p) for p in params]
    if case["kind"] in ("sgd", "adam", "adamw"):
        opt = torch_optimizer(case, params, decays)
    for k in range(STEPS):
        g = [torch.tensor(x, dtype=torch.float32) for x in grads[k]]
        with torch.no_grad():
            if opt is not None:
                for p, gk in zip(params, g):
                    p.grad = gk
                for group in opt.param_groups:
                    group["lr"] = LRS[k]
                opt.step()
            elif case["kind"] == "lars":
                lars_step(case, params, g, state, decays, LRS[k] * LARS_LR_SCALE)
            else:
                lamb_step(case, params, g, state, state2, decays, LRS[k], k + 1)
        for (tname, _, _), p in zip(TENSORS, params):
            out["%s.step%d.%s" % (name, k, tname)] = p.detach().clone()


def main(outdir=HERE):
    rng = np.random.default_rng(20240611)
    init = [rng.uniform(-1, 1, shape).astype(np.float32) for _, shape, _ in TENSORS]
    grads = [[rng.normal(0, 0.5, shape).astype(np.float32) for _, shape, _ in TENSORS]
             for _ in range(STEPS)]
    out = {"lr": np.array(LRS, np.float32)}
    for (tname, _, _), x in zip(TENSORS, init):
        out["init." + tname] = x
    for k in range(STEPS):
        for (tname, _, _), x in zip(TENSORS, grads[k]):
            out["grad%d.%s" % (k, tname)] = x
    for name, case in CASES.items():
        run_case(name, case, init, grads, out)
    path = os.path.join(outdir, "optim.gld")
    golden.write(path, out, __file__)
    print("wrote", path, len(out), "tensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
