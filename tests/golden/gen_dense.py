"""Golden values for the dense, sequence and loss op tests (tests/ops/test_ops_dense.c,
test_ops_norm.c, test_ops_activation.c, test_ops_attention.c, test_ops_loss.c), computed by PyTorch in float32 on the CPU.
Inputs are written beside the outputs so the C tests read both; gradients come
from autograd of the forward pass with the upstream gradient "<op>.dy".

Writes dense.gld, seq.gld, loss.gld, in that order from one seed (seq's
inputs follow dense's draws). Run: python3 tests/golden/gen_dense.py [OUTDIR]
(or make goldens, which runs every generator).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden  # noqa: E402


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def grads(out, dy, *inputs):
    """Autograd of out with upstream gradient dy, for each input."""
    return torch.autograd.grad(out, inputs, dy)


def dense():
    g = {}
    # c = 0.5 a bt^T + 2 c0 (batched, trans_b); c2 = at^T b (shared 2-D a, trans_a)
    a, bt, c0 = rand(2, 5, 7), rand(2, 3, 7), rand(2, 5, 3)
    at, b = rand(7, 5), rand(2, 7, 3)
    g.update({"gemm.a": a, "gemm.bt": bt, "gemm.c0": c0, "gemm.at": at, "gemm.b": b})
    g["gemm.c"] = 0.5 * a @ bt.transpose(1, 2) + 2.0 * c0
    g["gemm.c2"] = at.t() @ b
    # linear: x (2, 3, 9), w (6, 9), b (6)
    x = rand(2, 3, 9).requires_grad_()
    w = rand(6, 9).requires_grad_()
    bias = rand(6).requires_grad_()
    y = F.linear(x, w, bias)
    dy = rand(2, 3, 6)
    dx, dw, db = grads(y, dy, x, w, bias)
    g.update({"linear.x": x, "linear.w": w, "linear.b": bias, "linear.y": y,
              "linear.dy": dy, "linear.dx": dx, "linear.dw": dw, "linear.db": db})
    # embedding: 11 ids into an (8, 5) table, ids 2 and 5 repeated
    idx = torch.tensor([2, 5, 0, 2, 7, 5, 2, 1, 3, 5, 2])
    table = rand(8, 5).requires_grad_()
    out = F.embedding(idx, table)
    dout = rand(11, 5)
    (dtable,) = grads(out, dout, table)
    g.update({"emb.idx": idx, "emb.table": table, "emb.out": out, "emb.dy": dout,
              "emb.dtable": dtable})
    return g


def attention(q, k, v, key_len, causal):
    """softmax(q k^T / sqrt(d) + mask) v written out; q (B, Tq, H, D)."""
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    tq, tk = scores.shape[-2:]
    mask = torch.zeros(q.shape[0], 1, tq, tk)
    for bi, n in enumerate(key_len):
        mask[bi, :, :, n:] = float("-inf")
    if causal:
        mask = mask + torch.triu(torch.full((tq, tk), float("-inf")), diagonal=1)
    probs = torch.softmax(scores + mask, dim=-1)
    return probs, (probs @ vh).transpose(1, 2)


def seq():
    g = {}
    x = rand(7, 13).requires_grad_()
    gamma = rand(13).requires_grad_()
    beta = rand(13).requires_grad_()
    y = F.layer_norm(x, (13,), gamma, beta, eps=1e-5)
    var, mean = torch.var_mean(x.detach(), dim=-1, unbiased=False)
    dy = rand(7, 13)
    dx, dgamma, dbeta = grads(y, dy, x, gamma, beta)
    g.update({"ln.x": x, "ln.gamma": gamma, "ln.beta": beta, "ln.y": y, "ln.mean": mean,
              "ln.rstd": 1.0 / torch.sqrt(var + 1e-5), "ln.dy": dy, "ln.dx": dx,
              "ln.dgamma": dgamma, "ln.dbeta": dbeta})
    x = (3 * rand(50)).requires_grad_()
    y = F.gelu(x)  # the erf form
    dy = rand(50)
    (dx,) = grads(y, dy, x)
    g.update({"gelu.x": x, "gelu.y": y, "gelu.dy": dy, "gelu.dx": dx})
    x = (2 * rand(6, 17)).requires_grad_()
    y = torch.softmax(x, dim=-1)
    dy = rand(6, 17)
    (dx,) = grads(y, dy, x)
    g.update({"softmax.x": x, "softmax.y": y, "softmax.dy": dy, "softmax.dx": dx})
    # cross-attention with a key padding mask (Tq 5, Tk 6), and causal
    # self-attention with padding (T 5); B 2, H 3, D 4.
    for name, tq, tk, key_len, causal in (("attn_pad", 5, 6, [6, 3], False),
                                          ("attn_causal", 5, 5, [5, 2], True)):
        q, k, v = (rand(2, t, 3, 4).requires_grad_() for t in (tq, tk, tk))
        probs, out = attention(q, k, v, key_len, causal)
        dout = rand(2, tq, 3, 4)
        dq, dk, dv = grads(out, dout, q, k, v)
        g.update({f"{name}.{n}": t for n, t in (
            ("q", q), ("k", k), ("v", v), ("key_len", torch.tensor(key_len)),
            ("probs", probs), ("out", out), ("dy", dout), ("dq", dq), ("dk", dk),
            ("dv", dv))})
    return g


def loss():
    g = {}
    logits = (2 * rand(9, 7)).requires_grad_()
    labels = torch.tensor([3, -100, 0, 6, 2, -100, 1, 5, 3])
    g.update({"xent.logits": logits, "xent.labels": labels})
    for name, smoothing in (("xent", 0.0), ("xent_ls", 0.1)):
        value = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing)
        (d,) = torch.autograd.grad(value, logits)
        g.update({f"{name}.loss": value.reshape(1), f"{name}.dlogits": d})
    x = (3 * rand(4, 5)).requires_grad_()
    t = torch.rand(4, 5)
    value = F.binary_cross_entropy_with_logits(x, t)
    (d,) = torch.autograd.grad(value, x)
    g.update({"bce.x": x, "bce.t": t, "bce.loss": value.reshape(1), "bce.dx": d})
    p = (2 * rand(23)).requires_grad_()
    t = rand(23)
    value = F.smooth_l1_loss(p, t, beta=0.5)
    (d,) = torch.autograd.grad(value, p)
    g.update({"sl1.p": p, "sl1.t": t, "sl1.loss": value.reshape(1), "sl1.dp": d})
    return g


def main(outdir=HERE):
    torch.manual_seed(1234)
    for name, make in (("dense", dense), ("seq", seq), ("loss", loss)):
        golden.write(os.path.join(outdir, name + ".gld"), make(), __file__)
        print("wrote", os.path.join(outdir, name + ".gld"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
