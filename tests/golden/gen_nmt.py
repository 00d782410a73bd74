"""Golden values for tests/translation/test_nmt_model.c: the translation
Transformer (translation/nmt_model.h) written out here in plain PyTorch
(torch.nn.functional; not nn.Transformer) from its description, on a tiny
model and one padded batch: the training loss (label smoothing 0.1, pad 0
ignored, dropout 0), the logits, the evaluation loss (no smoothing) and the
gradient of every parameter.

The model: one embedding E (V, D) for the encoder input, the decoder input
and the output projection (logits = y E^T), lookups scaled by sqrt(D);
sinusoidal positions, channel c < D/2 sin(pos w_c), D/2 + c cos(pos w_c),
w_c = 10000^(-c / (D/2 - 1)); pre-norm layers x + f(LN(x)) (self-attention,
in the decoder causal self-attention then cross-attention over the
encoder's output, then a ReLU feed-forward block with biases; no biases on
the Q/K/V/output projections); a final layer norm per stack; every layer
norm eps 1e-6. Encoder self-attention and cross-attention mask the source
keys past src_len.

Written: batch.src (B, S), batch.tgt_in, batch.tgt_out (B, T), batch.src_len
(B); param.<name> for each parameter, named and shaped as the C ParamSet
(tfm_layer_specs, nmt_build_specs; weights (out, in) as torch's Linear);
loss (1), eval_loss (1), logits (B, T, V) and grad.<name>.

Run: python3 tests/golden/gen_nmt.py [OUTDIR] (or make goldens, which runs
every generator).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden  # noqa: E402

V, D, FF, HEADS, ENC, DEC = 23, 16, 24, 2, 2, 2
SMOOTHING, EPS, PAD, EOS = 0.1, 1e-6, 0, 1
SRC_LEN = [5, 3, 4]   # with the EOS; S = 5
TGT_LEN = [4, 6, 2]   # with the EOS; T = 6

ATTN = ["wq", "wk", "wv", "wo"]


def layer_params(prefix, cross):
    """(name, shape) of a layer's parameters in the ParamSet's order."""
    out = [(prefix + ".ln1_g", (D,)), (prefix + ".ln1_b", (D,))]
    out += [(prefix + "." + w, (D, D)) for w in ATTN]
    if cross:
        out += [(prefix + ".lnc_g", (D,)), (prefix + ".lnc_b", (D,))]
        out += [(prefix + "." + w + "c", (D, D)) for w in ATTN]
    out += [(prefix + ".ln2_g", (D,)), (prefix + ".ln2_b", (D,)), (prefix + ".w1", (FF, D)),
            (prefix + ".b1", (FF,)), (prefix + ".w2", (D, FF)), (prefix + ".b2", (D,))]
    return out


def param_specs():
    specs = [("embedding", (V, D))]
    for i in range(ENC):
        specs += layer_params("enc%d" % i, False)
    specs += [("enc_ln_g", (D,)), ("enc_ln_b", (D,))]
    for i in range(DEC):
        specs += layer_params("dec%d" % i, True)
    specs += [("dec_ln_g", (D,)), ("dec_ln_b", (D,))]
    return specs


def draw(name, shape):
    """Values away from the initialisation's special cases (gammas not 1,
    biases not 0), so a role mixed up with another shows."""
    if name == "embedding":
        return torch.randn(shape) * D ** -0.5
    if name.endswith("_g"):
        return 1.0 + 0.3 * torch.randn(shape)
    if len(shape) == 1:
        return 0.2 * torch.randn(shape)
    limit = math.sqrt(6.0 / sum(shape))
    return (2 * torch.rand(shape) - 1) * 1.5 * limit


def batch():
    """Sources of SRC_LEN tokens (ids 2..V-1, then the EOS) padded with 0;
    targets of TGT_LEN likewise, tgt_in the target shifted right after a pad."""
    b, s, t = len(SRC_LEN), max(SRC_LEN), max(TGT_LEN)
    src = torch.zeros(b, s, dtype=torch.long)
    tgt_in = torch.zeros(b, t, dtype=torch.long)
    tgt_out = torch.zeros(b, t, dtype=torch.long)
    for i, (ls, lt) in enumerate(zip(SRC_LEN, TGT_LEN)):
        src[i, :ls - 1] = torch.randint(2, V, (ls - 1,))
        src[i, ls - 1] = EOS
        tgt_out[i, :lt - 1] = torch.randint(2, V, (lt - 1,))
        tgt_out[i, lt - 1] = EOS
        tgt_in[i, 1:lt] = tgt_out[i, :lt - 1]
    return src, tgt_in, tgt_out, torch.tensor(SRC_LEN)


def positions(n):
    half = D // 2
    w = torch.exp(-torch.arange(half, dtype=torch.float64) * math.log(10000.0) / (half - 1))
    angle = torch.arange(n, dtype=torch.float64)[:, None] * w[None, :]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()  # (n, D)


def embed(p, ids):
    # Pad ids embed as zeros (the reference masks their lookups).
    kept = (ids != 0).unsqueeze(-1).to(p["embedding"].dtype)
    return F.embedding(ids, p["embedding"]) * kept * math.sqrt(D) + positions(ids.shape[1])


def attention(p, layer, suffix, x, mem, key_mask, causal):
    """Multi-head attention of layer's weights wq, wk, wv, wo + suffix,
    queries from x (B, T, D), keys and values from mem (B, Tk, D); key_mask
    (B, Tk) True where masked."""
    w = {k: p["%s.w%s%s" % (layer, k, suffix)] for k in "qkvo"}
    b, t, _ = x.shape
    tk = mem.shape[1]
    split = lambda y, n: y.view(b, n, HEADS, D // HEADS).transpose(1, 2)  # (B, H, n, Dh)
    q = split(F.linear(x, w["q"]), t)
    k = split(F.linear(mem, w["k"]), tk)
    v = split(F.linear(mem, w["v"]), tk)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // HEADS)  # (B, H, T, Tk)
    mask = torch.zeros(b, 1, t, tk, dtype=torch.bool)
    if key_mask is not None:
        mask = mask | key_mask[:, None, None, :]
    if causal:
        mask = mask | torch.ones(t, tk, dtype=torch.bool).triu(1)
    att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
    return F.linear(att.transpose(1, 2).reshape(b, t, D), w["o"])


def layer_norm(p, prefix, x):
    return F.layer_norm(x, (D,), p[prefix + "_g"], p[prefix + "_b"], eps=EPS)


def ffn(p, prefix, x):
    h = F.relu(F.linear(x, p[prefix + ".w1"], p[prefix + ".b1"]))
    return F.linear(h, p[prefix + ".w2"], p[prefix + ".b2"])


def forward(p, src, tgt_in, src_len):
    src_mask = torch.arange(src.shape[1])[None, :] >= src_len[:, None]  # (B, S)
    x = embed(p, src)
    for i in range(ENC):
        n = "enc%d" % i
        h = layer_norm(p, n + ".ln1", x)
        x = x + attention(p, n, "", h, h, src_mask, False)
        x = x + ffn(p, n, layer_norm(p, n + ".ln2", x))
    mem = layer_norm(p, "enc_ln", x)
    y = embed(p, tgt_in)
    for i in range(DEC):
        n = "dec%d" % i
        h = layer_norm(p, n + ".ln1", y)
        y = y + attention(p, n, "", h, h, None, True)
        y = y + attention(p, n, "c", layer_norm(p, n + ".lnc", y), mem, src_mask, False)
        y = y + ffn(p, n, layer_norm(p, n + ".ln2", y))
    return F.linear(layer_norm(p, "dec_ln", y), p["embedding"])  # (B, T, V)


def main(outdir=HERE):
    torch.manual_seed(18)
    specs = param_specs()
    params = {name: draw(name, shape).requires_grad_() for name, shape in specs}
    src, tgt_in, tgt_out, src_len = batch()
    logits = forward(params, src, tgt_in, src_len)
    flat, labels = logits.reshape(-1, V), tgt_out.reshape(-1)
    loss = F.cross_entropy(flat, labels, ignore_index=PAD, label_smoothing=SMOOTHING)
    eval_loss = F.cross_entropy(flat, labels, ignore_index=PAD)
    grads = torch.autograd.grad(loss, [params[n] for n, _ in specs])
    g = {"batch.src": src, "batch.tgt_in": tgt_in, "batch.tgt_out": tgt_out,
         "batch.src_len": src_len}
    g.update({"param." + n: params[n] for n, _ in specs})
    g.update({"loss": loss.reshape(1), "eval_loss": eval_loss.reshape(1), "logits": logits})
    g.update({"grad." + n: d for (n, _), d in zip(specs, grads)})
    path = os.path.join(outdir, "nmt.gld")
    golden.write(path, g, __file__)
    print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
