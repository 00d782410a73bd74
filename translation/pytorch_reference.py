#!/usr/bin/env python3
"""The same Transformer training in PyTorch, for comparison with
build/bin/transformer (translation/train.c):
- the same model (translation/nmt_model.c, common/models/transformer.c):
  pre-norm encoder and decoder layers, each stack ending in a layer norm
  (epsilon 1e-6); no bias on the Q/K/V and output projections, biases on the
  ReLU feed-forward block; one embedding shared by the encoder input, the
  decoder input and the output projection, looked up times sqrt(d_model)
  with the pad id's rows zeroed; the reference's sinusoids (sines in the
  first half of the channels, cosines in the second); the same parameter
  table (1,184,384 parameters on the small config);
- the same initialisation, number for number: the trainer's Philox4x32-10
  streams re-implemented here (embedding N(0, d_model^-1/2) from stream
  300, each weight matrix Glorot-uniform from stream 300 + 32 (layer + 1) +
  its role, biases 0, layer norms 1 and 0);
- the same data: the raw text the converter read (DATA_DIR/raw, or --raw:
  train.en/.de, newstest2014.en/.de), tokenised again here with the
  converter's vocabulary (DATA_DIR/lmdb/vocab.subwords) by the trainer's
  subword rules (translation/subword.c), an EOS after each side, pairs with
  a blank side skipped; training pairs longer than max_length dropped (or
  cut: length_method), eval sources cut to max_positions;
- the same batches, in the same order: length buckets (8, then x1.1),
  max_tokens // bucket bound pairs a batch, each bucket and then the list of
  batches shuffled per epoch by the trainer's Philox streams
  (translation/wmt_data.c), so every step sees the trainer's batch;
- the same dropout masks by default: each mask drawn from the trainer's
  stream for that tensor and step (embedded inputs, attention
  probabilities, sub-layer outputs, after the ReLU); --torch_dropout uses
  torch's generator instead (the same rates, other draws; faster on CPU);
- the same loss (label-smoothed cross-entropy over all vocabulary columns,
  pad targets ignored, mean over the batch's target tokens), Adam (betas,
  epsilon, bias correction, no weight decay), learning rate (linear warmup
  to learning_rate over warmup_steps, then lr sqrt(warmup / step));
- the same eval every epoch: sources sorted by length, eval_batch at a
  time, beam search as translation/beam.c (beam 4, length penalty
  ((5 + len) / 6)^0.6, up to source length + extra_decode_length tokens and
  at most max_positions, the same stop rule and tie order), detokenised by
  the trainer's rules and scored by a re-implementation of
  translation/bleu.c (the MLPerf reference's uncased BLEU);
- the same stop rule (BLEU / 100 >= target_accuracy, or max_epochs) and
  the same clock: from the point the trainer logs run_start (model and
  optimizer built, data not yet read) to the eval that reaches the target,
  the tokenisation of the raw text included (the trainer's was done by its
  converter, before).
Differences that stay:
- float rounding: other kernels and summation orders (matmuls, softmax,
  layer norm, the loss), so the losses agree to about four digits through
  the first epoch (small config, seed 1: step 103 6.5196 here, 6.5194 in
  the trainer; epoch 1 mean 6.2969 both) and then drift apart slowly, as
  two runs of this reference whose initial weights differ by one ulp do;
  an early model's beam search turns such differences into other
  translations of many sentences (on the same weights both give the same
  500 translations);
- numpy's fp32 log and cos in the Box-Muller draws of the embedding's
  initialisation may differ from glibc's in the last bit;
- Python's Unicode tables (unicodedata) stand in for libutf8proc's in the
  tokeniser, detokeniser and BLEU (the same ids, text and score on this
  data set's text);
- speed, not the procedure: the trainer's dropout masks cost this
  reference a Philox pass in int64 tensor ops per dropped tensor
  (--torch_dropout avoids it), and the beam search's bookkeeping runs on
  the host in Python;
- low precision through PyTorch's autocast: the `precision` key as the
  trainer reads it (bf16 or fp16 products over fp32 master weights, fp16
  with a GradScaler; TF32 for tf32; fp32 on the CPU), rounded elsewhere
  than the trainer rounds; Adam fused on CUDA.
Prints the trainer's epoch lines ("pytorch: epoch N: BLEU X (target Y)
...; train T s, eval E s") and its last line ("pytorch: target reached,
time to train S s"), which `make bench-cpu` reads (with --torch_dropout:
the time a PyTorch user's training takes).

  python3 translation/pytorch_reference.py --config=translation/configs/small.conf \\
      --data_dir=data/transformer/small [--raw=DIR] [--device=cpu|cuda] [--threads=N] \\
      [--max_epochs=N] [--seed=N] [--torch_dropout] [--translations_out=PATH] [--json=PATH] \\
      [--KEY=VALUE]
"""
import argparse
import json
import math
import os
import time
import unicodedata
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, EOS = 0, 1

# The trainer's defaults (translation/train.c kKeys, common/train/run.c)
# for the keys a config may leave out.
DEFAULTS = dict(d_model="1024", d_ff="4096", heads="16", enc_layers="6", dec_layers="6",
                dropout="0.1", attention_dropout="0.1", label_smoothing="0.1",
                max_positions="512", max_length="256", length_method="discard",
                max_tokens="5120", learning_rate="0.0019", warmup_steps="750",
                adam_beta1="0.9", adam_beta2="0.997", adam_eps="1e-9", beam="4", alpha="0.6",
                extra_decode_length="50", eval_batch="64", max_epochs="30",
                target_accuracy="0.25", eval_every="1", eval_offset="0")


def read_conf(path):
    """The trainer's `key = value` config (comments after #) over its defaults."""
    conf = dict(DEFAULTS)
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "=" in line:
                k, v = line.split("=", 1)
                conf[k.strip()] = v.strip()
    return conf


# ---------------------------------------------------------------- Philox
# common/core/rng.h: number i of (seed, stream) is word i % 4 of the block
# philox(counter = (i / 4 lo, hi, stream lo, hi), key = seed lo, hi), ten
# rounds. Done in int64 tensors: a product of two 32-bit words has the bits
# of the unsigned one (it wraps), and masking after the shift drops the sign.

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
LO32 = 0xFFFFFFFF


def philox_words(seed, stream, n, device="cpu", first_block=0):
    """u32 numbers 4 first_block .. + n - 1 of (seed, stream), as int64 values."""
    lo = torch.arange((n + 3) // 4, dtype=torch.int64, device=device) + (first_block & LO32)
    c0, c1 = lo & LO32, ((lo >> 32) + (first_block >> 32)) & LO32  # the block's two words
    c2 = torch.full_like(lo, stream & LO32)
    c3 = torch.full_like(lo, (stream >> 32) & LO32)
    k0, k1 = seed & LO32, (seed >> 32) & LO32
    for _ in range(10):
        p0, p1 = c0 * M0, c2 * M1
        c0, c1, c2, c3 = ((p1 >> 32) & LO32) ^ c1 ^ k0, p1 & LO32, ((p0 >> 32) & LO32) ^ c3 ^ k1, p0 & LO32
        k0, k1 = (k0 + W0) & LO32, (k1 + W1) & LO32
    return torch.stack([c0, c1, c2, c3], 1).reshape(-1)[:n]


def words_to_unit(words):
    """rng_u32_to_unit: the top 24 bits, uniform on [0, 1), exact in fp32."""
    return (words >> 8).to(torch.float32) * (1.0 / 16777216.0)


def philox_uniform(seed, stream, n, lo, hi):
    """rng_fill_uniform_cpu: lo + (hi - lo) u, in fp32."""
    u = words_to_unit(philox_words(seed, stream, n)).numpy()
    lo, hi = np.float32(lo), np.float32(hi)
    return lo + (hi - lo) * u


def philox_normal(seed, stream, n, mean, std):
    """rng_fill_normal_cpu: Box-Muller over u32 numbers 2i and 2i + 1, fp32."""
    u = words_to_unit(philox_words(seed, stream, 2 * n)).numpy().reshape(n, 2)
    u1, u2 = np.float32(1.0) - u[:, 0], u[:, 1]
    x = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(6.283185307179586) * u2)
    return np.float32(mean) + np.float32(std) * x


class HostRng:
    """The trainer's sequential draws (rng_next_u32 and what is built on it),
    a block of numbers at a time."""

    def __init__(self, seed, stream):
        self.seed, self.stream, self.counter = seed, stream, 0
        self.buf, self.buf_first = [], 0

    def next_u32(self):
        i = self.counter - self.buf_first
        if i >= len(self.buf):
            # The next 4096 numbers, from the block that holds the counter's.
            first_block = self.counter // 4
            self.buf = philox_words(self.seed, self.stream, 4096, first_block=first_block).tolist()
            self.buf_first = 4 * first_block
            i = self.counter - self.buf_first
        self.counter += 1
        return self.buf[i]

    def next_below(self, n):
        """rng_next_below: unbiased, the top sliver of the u32 range rejected."""
        limit = (2**32 - n) % n
        while True:
            u = self.next_u32()
            if u >= limit:
                return u % n

    def shuffle(self, items):
        """rng_shuffle_u32: Fisher-Yates from the end, in place."""
        for i in range(len(items), 1, -1):
            j = self.next_below(i)
            items[i - 1], items[j] = items[j], items[i - 1]


# ---------------------------------------------------------------- subwords
# translation/subword.c: tensor2tensor's SubwordTextEncoder.

ESCAPE_CHARS = "\\_u;0123456789"
UNDEFINED_CHAR, MAX_CHAR = 0x3013, 0x10FFFF


def is_alnum(ch):
    """Unicode categories L* and N*."""
    return unicodedata.category(ch)[0] in "LN"


class Subwords:
    """A vocabulary file: one entry a line in single quotes; id = line index."""

    def __init__(self, path):
        text = open(path, "rb").read().decode("utf-8")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        self.entries = []
        for n, line in enumerate(lines, 1):
            line = line.strip(" \t\n\v\f\r")
            if len(line) < 3 or line[0] != "'" or line[-1] != "'":
                raise SystemExit(f"{path}:{n}: expected an entry in single quotes, as 'the_'")
            self.entries.append(line[1:-1])
        if self.entries[:2] != ["<pad>", "<EOS>"]:
            raise SystemExit(f"{path}: the first two entries must be '<pad>' and '<EOS>'")
        self.ids = {e: i for i, e in enumerate(self.entries)}
        self.max_chars = max(len(e) for e in self.entries)
        self.alphabet = set(ESCAPE_CHARS).union(*self.entries)

    def tokens(self, text):
        """Maximal runs of alphanumeric characters or of the rest; a run that
        is one space is dropped unless it starts or ends the text."""
        out, pos, n = [], 0, len(text)
        while pos < n:
            start, alnum = pos, is_alnum(text[pos])
            pos += 1
            while pos < n and is_alnum(text[pos]) == alnum:
                pos += 1
            if not (text[start:pos] == " " and start > 0 and pos < n):
                out.append(text[start:pos])
        return out

    def escape(self, token):
        """"\\" -> "\\\\", "_" -> "\\u", outside the alphabet (and newline)
        -> "\\<decimal>;", then the closing "_"."""
        out = []
        for ch in token:
            if ch == "\\":
                out.append("\\\\")
            elif ch == "_":
                out.append("\\u")
            elif ch != "\n" and ch in self.alphabet:
                out.append(ch)
            else:
                out.append(f"\\{ord(ch)};")
        return "".join(out) + "_"

    def encode(self, text):
        """Ids of text, the longest entry that prefixes the rest each time."""
        ids = []
        for token in self.tokens(text):
            e = self.escape(token)
            start = 0
            while start < len(e):
                for end in range(min(len(e), start + self.max_chars), start, -1):
                    found = self.ids.get(e[start:end])
                    if found is not None:
                        ids.append(found)
                        start = end
                        break
                else:
                    raise SystemExit(f"subword: no entry matches '{e}' at character {start}")
        return ids

    def decode(self, ids):
        """Text of ids (pad, EOS and ids outside the vocabulary skipped): the
        entries' characters as one stream, unescaped token by token, a space
        put back between two alphanumeric tokens (subword_decode)."""
        s = "".join(self.entries[i] for i in ids if EOS < i < len(self.entries))
        pos = 0
        END, TOKEN_END = -2, -1

        def next_char():
            nonlocal pos
            if pos >= len(s):
                return END
            pos += 1
            return s[pos - 1]

        def unescape_number(first):
            value = int(first)
            while True:
                ch = next_char()
                if ch == ";":
                    break
                if ch == END or not "0" <= ch <= "9":
                    return -1
                value = value if value > MAX_CHAR else 10 * value + int(ch)
            bad = value > MAX_CHAR or 0xD800 <= value <= 0xDFFF
            return UNDEFINED_CHAR if bad else value

        def unescape_next():
            nonlocal pos
            ch = next_char()
            if ch == "_":
                return TOKEN_END
            if ch != "\\":
                return ch
            after_backslash = pos
            x = next_char()
            if x == "u":
                return "_"
            if x == "\\":
                return "\\"
            number = unescape_number(x) if x != END and "0" <= x <= "9" else -1
            if number >= 0:
                return chr(number)
            pos = after_backslash
            return "\\"

        out, first, prev_alnum = [], True, False
        while True:
            ch = unescape_next()
            if ch == END:
                break
            if ch == TOKEN_END:
                continue  # "__": an empty token
            alnum = is_alnum(ch)
            if not first and prev_alnum and alnum:
                out.append(" ")
            first, prev_alnum = False, alnum
            while ch not in (END, TOKEN_END):
                out.append(ch)
                ch = unescape_next()
            if ch == END:
                break
        return "".join(out)


# ---------------------------------------------------------------- data


def read_lines(path):
    """A text file's lines as the converter reads them: a leading BOM and
    each line's CR dropped; a last line without its LF counts."""
    data = open(path, "rb").read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    return [(ln[:-1] if ln.endswith(b"\r") else ln).decode("utf-8") for ln in lines]


def is_blank(line):
    return all(ch in " \t\v\f" for ch in line)


def cut(ids, max_len):
    """The first max_len - 1 ids, then EOS (wmt_split_read's truncation)."""
    return ids if len(ids) <= max_len else ids[:max_len - 1] + [EOS]


def read_split(vocab, src_path, tgt_path, max_len, discard):
    """(source ids, target ids) of the pairs kept, each side ending in EOS,
    and how many were dropped; pairs with a blank side are skipped as the
    converter skips them."""
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise SystemExit(f"{tgt_path}: {len(tgt_lines)} lines, {src_path} has {len(src_lines)}")
    pairs, dropped = [], 0
    for s, t in zip(src_lines, tgt_lines):
        if is_blank(s) or is_blank(t):
            continue
        s, t = vocab.encode(s) + [EOS], vocab.encode(t) + [EOS]
        if len(s) > max_len or len(t) > max_len:
            if discard:
                dropped += 1
                continue
            s, t = cut(s, max_len), cut(t, max_len)
        pairs.append((s, t))
    return pairs, dropped


def bucket_bounds(max_len):
    """wmt_bucket_bounds: 8, then x -> max(x + 1, floor(1.1 x)) below
    max_len, the last bucket's upper bound max_len + 1."""
    upper, x = [], 8
    while x < max_len:
        upper.append(x)
        x = max(x + 1, int(x * 1.1))
    return upper + [max_len + 1]


PLAN_STREAM = 3 << 62


def plan_epoch(pairs, max_len, max_tokens, seed, epoch):
    """wmt_batches_plan for one rank: lists of pair indices. Pairs go to the
    bucket of their longer side (stable), each bucket is shuffled and cut
    into batches of max_tokens // upper pairs, then the batches shuffled,
    all from one stream of (seed, epoch)."""
    upper = bucket_bounds(max_len)
    buckets = [[] for _ in upper]
    for p, (s, t) in enumerate(pairs):
        n = max(len(s), len(t))
        buckets[next(b for b, u in enumerate(upper) if n < u)].append(p)
    rng = HostRng(seed, PLAN_STREAM | epoch)
    for members in buckets:
        rng.shuffle(members)
    batches = []
    for members, bound in zip(buckets, upper):
        per = max_tokens // bound
        batches += [members[at:at + per] for at in range(0, len(members), per)]
    order = list(range(len(batches)))
    rng.shuffle(order)
    return [batches[g] for g in order]


def make_batch(pairs, members, device):
    """wmt_batch_fill: (src, tgt_in, tgt_out, src_len), padded with PAD;
    tgt_in is pad (the start) then target[k - 1] for k <= its length."""
    S = max(len(pairs[p][0]) for p in members)
    T = max(len(pairs[p][1]) for p in members)
    src = torch.zeros(len(members), S, dtype=torch.int64)
    tgt_in = torch.zeros(len(members), T, dtype=torch.int64)
    tgt_out = torch.zeros(len(members), T, dtype=torch.int64)
    for j, p in enumerate(members):
        s, t = pairs[p]
        src[j, :len(s)] = torch.tensor(s)
        tgt_out[j, :len(t)] = torch.tensor(t)
        n_in = min(len(t), T - 1)
        tgt_in[j, 1:1 + n_in] = torch.tensor(t[:n_in])
    src_len = torch.tensor([len(pairs[p][0]) for p in members])
    return src.to(device), tgt_in.to(device), tgt_out.to(device), src_len.to(device)


# ---------------------------------------------------------------- model

# common/models/transformer.h's roles, in its parameter order, and their
# offsets from a layer's first init stream.
SELF_ROLES = (("ln1_g", 0), ("ln1_b", 1), ("wq", 2), ("wk", 3), ("wv", 4), ("wo", 5))
CROSS_ROLES = (("lnc_g", 6), ("lnc_b", 7), ("wqc", 8), ("wkc", 9), ("wvc", 10), ("woc", 11))
FFN_ROLES = (("ln2_g", 12), ("ln2_b", 13), ("w1", 14), ("b1", 15), ("w2", 16), ("b2", 17))
INIT_STREAM = 300  # nmt_model.c: the embedding's, then 32 per layer
# Dropout streams of step s (epoch << 24 + batch): from base = s << 10, the
# embedded source, the embedded target, then 6 per layer (encoder layers
# first), in the order of DROP_*.
STREAM_BITS = 10
DROP_SRC, DROP_TGT, DROP_LAYERS, LAYER_STREAMS = 0, 1, 2, 6
DROP_SELF, DROP_CROSS, DROP_RELU, DROP_FFN, DROP_SELF_PROBS, DROP_CROSS_PROBS = range(LAYER_STREAMS)
LN_EPS = 1e-6


class Dropout:
    """Dropout of one training step, keep probability `keep` (`attn_keep`
    on attention probabilities). Trainer mode: element i of a tensor
    (row-major) is kept when number i of (seed, base + stream) is below the
    keep probability, as op_dropout_fwd; torch mode: F.dropout. In eval
    (keep 1) it does nothing. Streams are the model's, relative to base."""

    def __init__(self, keep, attn_keep, seed=0, base=0, trainer=True):
        self.keep, self.attn_keep, self.seed, self.base, self.trainer = keep, attn_keep, seed, base, trainer

    def __call__(self, x, stream, attn=False):
        keep = self.attn_keep if attn else self.keep
        if keep >= 1.0:
            return x
        if not self.trainer:
            return F.dropout(x, 1.0 - keep, True)
        u = words_to_unit(philox_words(self.seed, self.base + stream, x.numel(), x.device))
        scale = torch.where(u < float(keep), float(np.float32(1.0) / np.float32(keep)), 0.0)
        return x * scale.view(x.shape)


def layer_norm(x, p, name):
    return F.layer_norm(x, x.shape[-1:], p[name + "_g"], p[name + "_b"], LN_EPS)


def split_heads(x, heads):
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)  # (B, H, T, Dh)


def attention(q, k, v, allowed, drop, stream):
    """softmax(Q K^T / sqrt(Dh)) over the allowed keys, dropped, times V;
    q (B, H, T, Dh), k and v (B, H, Tk, Dh), allowed broadcast to (B, H, T, Tk)."""
    scores = q @ k.transpose(-1, -2) * np.float32(1.0 / math.sqrt(q.shape[-1]))
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    probs = drop(probs, stream, attn=True)
    b, h, t, dh = q.shape
    return (probs @ v).transpose(1, 2).reshape(b, t, h * dh)


class NmtTransformer(nn.Module):
    """translation/nmt_model.c's model; parameters in the trainer's order."""

    def __init__(self, vocab, d_model, d_ff, heads, enc_layers, dec_layers, max_positions, seed):
        super().__init__()
        self.d_model, self.heads = d_model, heads
        self.embedding = nn.Parameter(torch.empty(vocab, d_model))
        shapes = dict(ln1_g=(d_model,), ln1_b=(d_model,), lnc_g=(d_model,), lnc_b=(d_model,),
                      ln2_g=(d_model,), ln2_b=(d_model,), w1=(d_ff, d_model), b1=(d_ff,),
                      w2=(d_model, d_ff), b2=(d_model,))
        shapes.update({w: (d_model, d_model) for w in ("wq", "wk", "wv", "wo", "wqc", "wkc", "wvc", "woc")})

        def layer(cross):
            roles = SELF_ROLES + (CROSS_ROLES if cross else ()) + FFN_ROLES
            return nn.ParameterDict({n: nn.Parameter(torch.empty(shapes[n])) for n, _ in roles})
        self.enc = nn.ModuleList(layer(False) for _ in range(enc_layers))
        self.enc_ln = nn.ParameterDict({"enc_ln_g": nn.Parameter(torch.ones(d_model)),
                                        "enc_ln_b": nn.Parameter(torch.zeros(d_model))})
        self.dec = nn.ModuleList(layer(True) for _ in range(dec_layers))
        self.dec_ln = nn.ParameterDict({"dec_ln_g": nn.Parameter(torch.ones(d_model)),
                                        "dec_ln_b": nn.Parameter(torch.zeros(d_model))})
        self.init_params(seed)
        # Position c < D/2: sin(pos w_c), D/2 + c: cos(pos w_c), w_c =
        # 10000^(-c / (D/2 - 1)), in double then fp32.
        half = d_model // 2
        step = math.log(10000.0) / max(half - 1, 1)
        angle = torch.arange(max_positions, dtype=torch.float64)[:, None] * \
            torch.exp(-torch.arange(half, dtype=torch.float64) * step)[None, :]
        self.register_buffer("positions", torch.cat([angle.sin(), angle.cos()], 1).float())

    @torch.no_grad()
    def init_params(self, seed):
        """nmt_init_params: the embedding N(0, D^-1/2), each layer's weight
        matrices Glorot-uniform from stream 300 + 32 (layer + 1) + role
        (decoder layers after the encoder's), biases 0, layer norms 1, 0."""
        emb = philox_normal(seed, INIT_STREAM, self.embedding.numel(), 0.0, 1.0 / math.sqrt(self.d_model))
        self.embedding.copy_(torch.from_numpy(emb).view(self.embedding.shape))
        for i, p in enumerate(list(self.enc) + list(self.dec)):
            first = INIT_STREAM + 32 * (1 + i)
            for name, role in SELF_ROLES + CROSS_ROLES + FFN_ROLES:
                if name not in p:
                    continue
                w = p[name]
                if w.dim() == 2:
                    limit = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
                    vals = philox_uniform(seed, first + role, w.numel(), -limit, limit)
                    w.copy_(torch.from_numpy(vals).view(w.shape))
                else:
                    w.fill_(1.0 if name.endswith("_g") else 0.0)

    def embed(self, ids, positions, drop, stream):
        """dropout(E[ids] (ids != pad) sqrt(D) + P[positions])."""
        e = self.embedding[ids] * (ids != PAD).unsqueeze(-1).to(torch.float32)
        x = e * np.float32(math.sqrt(self.d_model)) + self.positions[positions]
        return drop(x, stream)

    def self_block(self, p, x, allowed, drop, stream):
        h = layer_norm(x, p, "ln1")
        q, k, v = (split_heads(F.linear(h, p[w]), self.heads) for w in ("wq", "wk", "wv"))
        a = attention(q, k, v, allowed, drop, stream + DROP_SELF_PROBS)
        return x + drop(F.linear(a, p["wo"]), stream + DROP_SELF)

    def cross_block(self, p, x, mem_k, mem_v, allowed, drop, stream):
        h = layer_norm(x, p, "lnc")
        q = split_heads(F.linear(h, p["wqc"]), self.heads)
        a = attention(q, mem_k, mem_v, allowed, drop, stream + DROP_CROSS_PROBS)
        return x + drop(F.linear(a, p["woc"]), stream + DROP_CROSS)

    def ffn_block(self, p, x, drop, stream):
        f = drop(F.relu(F.linear(layer_norm(x, p, "ln2"), p["w1"], p["b1"])), stream + DROP_RELU)
        return x + drop(F.linear(f, p["w2"], p["b2"]), stream + DROP_FFN)

    def memory(self, p, mem):
        """A decoder layer's cross-attention keys and values of mem."""
        return (split_heads(F.linear(mem, p["wkc"]), self.heads),
                split_heads(F.linear(mem, p["wvc"]), self.heads))

    def layer_stream(self, layer):
        return DROP_LAYERS + LAYER_STREAMS * layer

    def encode(self, src, src_len, drop):
        """The encoder stack's final norm, (B, S, D); key mask (B, 1, 1, S)."""
        S = src.shape[1]
        key_ok = (torch.arange(S, device=src.device)[None, :] < src_len[:, None])[:, None, None, :]
        x = self.embed(src, torch.arange(S, device=src.device), drop, DROP_SRC)
        for i, p in enumerate(self.enc):
            stream = self.layer_stream(i)
            x = self.ffn_block(p, self.self_block(p, x, key_ok, drop, stream), drop, stream)
        return F.layer_norm(x, x.shape[-1:], self.enc_ln["enc_ln_g"], self.enc_ln["enc_ln_b"], LN_EPS), key_ok

    def forward(self, src, src_len, tgt_in, drop):
        """Training logits (B, T, V)."""
        mem, key_ok = self.encode(src, src_len, drop)
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).tril()
        x = self.embed(tgt_in, torch.arange(T, device=src.device), drop, DROP_TGT)
        for i, p in enumerate(self.dec):
            stream = self.layer_stream(len(self.enc) + i)
            x = self.self_block(p, x, causal, drop, stream)
            x = self.cross_block(p, x, *self.memory(p, mem), key_ok, drop, stream)
            x = self.ffn_block(p, x, drop, stream)
        return self.logits(x)

    def logits(self, x):
        x = F.layer_norm(x, x.shape[-1:], self.dec_ln["dec_ln_g"], self.dec_ln["dec_ln_b"], LN_EPS)
        return F.linear(x, self.embedding)

    def decode_step(self, ids, t, state, drop):
        """One position of incremental decoding (tfm_layer_step): ids (N,) at
        position t; state holds each decoder layer's self-attention keys and
        values (N, H, max positions, Dh), positions 0..t-1 filled (this step
        writes t), its memory keys and values and the key mask. Returns the
        logits (N, V)."""
        x = self.embed(ids[:, None], torch.tensor([t], device=ids.device), drop, 0)
        everything = torch.ones(1, dtype=torch.bool, device=ids.device)
        for i, p in enumerate(self.dec):
            h = layer_norm(x, p, "ln1")
            q, k, v = (split_heads(F.linear(h, p[w]), self.heads) for w in ("wq", "wk", "wv"))
            keys, values = state["self"][i]
            keys[:, :, t], values[:, :, t] = k[:, :, 0], v[:, :, 0]
            a = attention(q, keys[:, :, :t + 1], values[:, :, :t + 1], everything, drop, 0)
            x = x + F.linear(a, p["wo"])
            x = self.cross_block(p, x, *state["mem"][i], state["key_ok"], drop, 0)
            x = self.ffn_block(p, x, drop, 0)
        return self.logits(x)[:, 0]


# ---------------------------------------------------------------- beam search
# translation/beam.c.


def length_penalty(alpha, n):
    return ((5.0 + n) / 6.0) ** alpha


class Sentence:
    """One source's search: its alive and finished hypotheses."""

    def __init__(self, beam, max_len):
        self.alive = [[] for _ in range(beam)]
        self.alive_lp = [0.0] + [-math.inf] * (beam - 1)
        self.fin, self.fin_score = [], []  # best first, at most beam
        self.max_len, self.done = max_len, False

    def finish(self, beam, tokens, score):
        """Keeps the beam best finished ones; ties keep the earlier."""
        if len(self.fin) == beam and not score > self.fin_score[-1]:
            return
        i = len(self.fin) if len(self.fin) < beam else beam - 1
        while i > 0 and score > self.fin_score[i - 1]:
            i -= 1
        self.fin.insert(i, tokens)
        self.fin_score.insert(i, score)
        del self.fin[beam:], self.fin_score[beam:]

    def advance(self, beam, alpha, eos, cands, t):
        """The best extensions (lp, parent, token), best first, become the
        alive and finished hypotheses; returns (parents, next ids)."""
        old = self.alive
        alive, alive_lp, parents, nxt = [], [], [], []
        for lp, parent, token in cands:
            if token == eos:
                self.finish(beam, old[parent] + [token], lp / length_penalty(alpha, t + 1))
            elif len(alive) < beam:
                alive.append(old[parent] + [token])
                alive_lp.append(lp)
                parents.append(parent)
                nxt.append(token)
        self.alive, self.alive_lp = alive, alive_lp
        if t + 1 >= self.max_len:
            self.done = True
        best_possible = alive_lp[0] / length_penalty(alpha, self.max_len)
        if self.fin and self.fin_score[-1] > best_possible:
            self.done = True
        return parents, nxt

    def result(self, eos):
        tokens = self.fin[0] if self.fin else self.alive[0][:self.max_len]
        return tokens[:tokens.index(eos)] if eos in tokens else tokens


@torch.no_grad()
def beam_search(model, src, src_len, beam, alpha, extra_len, width, drop):
    """The ids (without EOS) of each source's best translation."""
    b = src.shape[0]
    mem, key_ok = model.encode(src, src_len, drop)
    mem, key_ok = mem.repeat_interleave(beam, 0), key_ok.repeat_interleave(beam, 0)
    cache_shape = (b * beam, model.heads, width, model.d_model // model.heads)
    state = dict(self=[(mem.new_empty(cache_shape), mem.new_empty(cache_shape)) for _ in model.dec],
                 key_ok=key_ok, mem=[model.memory(p, mem) for p in model.dec])
    lens = src_len.tolist()
    sents = [Sentence(beam, min(n + extra_len, width)) for n in lens]
    ids = torch.zeros(b * beam, dtype=torch.int64)  # every hypothesis starts from pad
    for t in range(width):
        if all(s.done for s in sents):
            break
        logits = model.decode_step(ids.to(src.device), t, state, drop).double().cpu()
        lp = torch.log_softmax(logits, -1).view(b, beam, -1)
        vocab = lp.shape[-1]
        alive_lp = torch.tensor([s.alive_lp for s in sents], dtype=torch.float64)
        total = (alive_lp[:, :, None] + lp).view(b, -1).numpy()
        # Each row's 2 beam-th best value: the candidates at or above it hold
        # the 2 beam best whatever the ties.
        floor = torch.from_numpy(total).topk(2 * beam, 1).values[:, -1].numpy()
        parent, nxt_ids = list(range(b * beam)), ids.tolist()
        for i, s in enumerate(sents):
            if s.done:
                continue
            # The 2 beam best extensions of the alive hypotheses, hypothesis-
            # major order, ties keeping the earlier (beam.c's keep_best).
            above = np.flatnonzero(total[i] >= floor[i])
            best = above[np.argsort(-total[i, above], kind="stable")][:2 * beam]
            cands = [(total[i, c], int(c) // vocab, int(c) % vocab) for c in best
                     if not math.isinf(s.alive_lp[int(c) // vocab])]
            parents, nxt = s.advance(beam, alpha, EOS, cands, t)
            parent[i * beam:(i + 1) * beam] = [k + i * beam for k in parents]
            nxt_ids[i * beam:(i + 1) * beam] = nxt
        ids = torch.tensor(nxt_ids)
        index = torch.tensor(parent, device=src.device)
        for keys, values in state["self"]:  # nmt_model_reorder
            keys[:, :, :t + 1] = keys[index, :, :t + 1]
            values[:, :, :t + 1] = values[index, :, :t + 1]
    return [s.result(EOS) for s in sents]


# ---------------------------------------------------------------- BLEU
# translation/bleu.c: the MLPerf reference's uncased BLEU.


def is_punct(ch):
    return ch != "\\" and unicodedata.category(ch)[0] == "P"


def bleu_tokens(text):
    """lower(), the reference's three left-to-right passes (punctuation
    after a non-digit, punctuation before a non-digit, every symbol split
    off), then split at whitespace."""
    chars = list(text.lower())
    for pas in range(3):
        out, i = [], 0
        while i < len(chars):
            c = chars[i]
            nxt = chars[i + 1] if i + 1 < len(chars) else None
            if pas == 0 and nxt is not None and unicodedata.category(c) != "Nd" and is_punct(nxt):
                out += [c, " ", nxt, " "]
                i += 1
            elif pas == 1 and nxt is not None and is_punct(c) and unicodedata.category(nxt) != "Nd":
                out += [" ", c, " ", nxt]
                i += 1
            elif pas == 2 and unicodedata.category(c)[0] == "S":
                out += [" ", c, " "]
            else:
                out.append(c)
            i += 1
        chars = out
    return "".join(chars).split()


def bleu(hyps, refs, max_order=4):
    """Corpus BLEU in 0..100 (bleu_add and bleu_score)."""
    matches, possible = [0] * max_order, [0] * max_order
    hyp_len = ref_len = 0
    for hyp, ref in zip(hyps, refs):
        h, r = bleu_tokens(hyp), bleu_tokens(ref)
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, max_order + 1):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            possible[n - 1] += max(len(h) - n + 1, 0)
    smooth, log_sum, any_order = 1.0, 0.0, False
    for m, p in zip(matches, possible):
        if p <= 0:
            continue  # left out of the sum, which is still divided by max_order
        prec = m / p
        if m <= 0:
            smooth *= 2
            prec = 1.0 / (smooth * p)
        log_sum += math.log(prec)
        any_order = True
    if not any_order:
        return 0.0
    bp = math.exp(1.0 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    return 100.0 * math.exp(log_sum / max_order) * bp


def evaluate(model, vocab, eval_pairs, refs, conf, device):
    """BLEU of the eval set: sources sorted by length (ties by index),
    eval_batch at a time, as nmt_translate."""
    model.eval()
    order = sorted(range(len(eval_pairs)), key=lambda p: (len(eval_pairs[p][0]), p))
    hyps = [None] * len(eval_pairs)
    chunk, drop = int(conf["eval_batch"]), Dropout(1.0, 1.0)
    for at in range(0, len(order), chunk):
        members = order[at:at + chunk]
        src, _, _, src_len = make_batch(eval_pairs, members, device)
        out = beam_search(model, src, src_len, int(conf["beam"]), float(conf["alpha"]),
                          int(conf["extra_decode_length"]), int(conf["max_positions"]), drop)
        for p, ids in zip(members, out):
            hyps[p] = vocab.decode(ids)
    model.train()
    return bleu(hyps, refs), hyps


# ---------------------------------------------------------------- training


def rsqrt_lr(conf, step):
    """schedule_lr (rsqrt): linear warmup to the peak over warmup_steps,
    then peak sqrt(warmup / (step + 1)); step counts updates from 0."""
    base, warmup = float(conf["learning_rate"]), int(conf["warmup_steps"])
    if step < warmup:
        return base * (step + 1) / warmup
    return base * math.sqrt(warmup / (step + 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--data_dir", required=True, help="the prepared data set (its lmdb/vocab.subwords)")
    p.add_argument("--raw", help="the raw text (default: DATA_DIR/raw)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: its own choice)")
    p.add_argument("--max_epochs", type=int)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--torch_dropout", action="store_true",
                   help="torch's dropout draws instead of the trainer's Philox masks")
    p.add_argument("--translations_out", help="write the last eval's translations here")
    p.add_argument("--json", help="write the epochs and the time to train here")
    args, overrides = p.parse_known_args()
    conf = read_conf(args.config)
    for flag in overrides:
        key, _, value = flag[2:].partition("=")
        if not flag.startswith("--") or key not in conf or not value:
            p.error(f"{flag}: want --KEY=VALUE with a key of the trainer's config")
        conf[key] = value
    if args.max_epochs:
        conf["max_epochs"] = str(args.max_epochs)
    if args.threads:
        torch.set_num_threads(args.threads)
    precision = conf.get("precision", "fp32")
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        p.error(f"precision '{precision}' is not fp32, tf32, bf16 or fp16")
    if precision != "fp32" and args.device == "cpu":
        p.error(f"precision '{precision}' needs a GPU (the CPU run is fp32)")
    dev, seed = args.device, args.seed
    torch.manual_seed(seed)
    raw = args.raw or os.path.join(args.data_dir, "raw")
    vocab = Subwords(os.path.join(args.data_dir, "lmdb", "vocab.subwords"))
    sizes = {k: int(conf[k]) for k in ("d_model", "d_ff", "heads", "enc_layers", "dec_layers",
                                       "max_positions", "max_length", "max_tokens")}
    max_tokens, max_length, max_positions = sizes["max_tokens"], sizes["max_length"], sizes["max_positions"]
    if max_length >= max_tokens or max_length > max_positions:  # train.c's checks
        p.error(f"max_length {max_length} needs max_tokens above it and max_positions at least it")
    model = NmtTransformer(len(vocab.entries), sizes["d_model"], sizes["d_ff"], sizes["heads"],
                           sizes["enc_layers"], sizes["dec_layers"], max_positions, seed).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=float(conf["learning_rate"]),
                           betas=(float(conf["adam_beta1"]), float(conf["adam_beta2"])),
                           eps=float(conf["adam_eps"]), fused=dev == "cuda")
    # The trainer's precision: bf16 or fp16 autocast over fp32 master weights
    # (fp16 with a GradScaler), TF32 for tf32; the loss in fp32.
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def autocast():
        return torch.autocast(dev, dtype=lowp or torch.float32, enabled=lowp is not None)

    # Keep probabilities in fp32, as the trainer holds them.
    keep = np.float32(1.0) - np.float32(conf["dropout"])
    attn_keep = np.float32(1.0) - np.float32(conf["attention_dropout"])

    start = time.perf_counter()  # run_start: the data is read after it
    train_pairs, dropped = read_split(vocab, f"{raw}/train.en", f"{raw}/train.de", max_length,
                                      conf["length_method"] == "discard")
    eval_pairs, _ = read_split(vocab, f"{raw}/newstest2014.en", f"{raw}/newstest2014.de",
                               max_positions, False)
    refs = read_lines(f"{raw}/newstest2014.de")  # what the converter writes as eval.ref
    if len(eval_pairs) != len(refs):
        raise SystemExit(f"{raw}/newstest2014.*: a blank line, but every eval line is needed "
                         "(the BLEU reference)")
    n_params = sum(t.numel() for t in model.parameters())
    print(f"pytorch: {len(train_pairs)} training pairs ({dropped} dropped), {len(eval_pairs)} eval pairs, "
          f"vocabulary {len(vocab.entries)}; {n_params} parameters; batches of {max_tokens} tokens; "
          f"{dev}, {'torch' if args.torch_dropout else 'trainer'} dropout; data read in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    target, max_epochs = float(conf["target_accuracy"]), int(conf["max_epochs"])
    every, offset = int(conf["eval_every"]), int(conf["eval_offset"])
    smoothing = float(conf["label_smoothing"])
    epochs, reached, step = [], False, 0
    for epoch in range(1, max_epochs + 1):
        t0 = time.perf_counter()
        plan = plan_epoch(train_pairs, max_length, max_tokens, seed, epoch)
        loss_sum = torch.zeros((), device=dev)  # read once an epoch, as the trainer does
        for i, members in enumerate(plan):
            src, tgt_in, tgt_out, src_len = make_batch(train_pairs, members, dev)
            drop = Dropout(keep, attn_keep, seed, ((epoch << 24) + i) << STREAM_BITS, not args.torch_dropout)
            with autocast():
                logits = model(src, src_len, tgt_in, drop)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt_out.view(-1),
                                   ignore_index=PAD, label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            for g in opt.param_groups:
                g["lr"] = float(np.float32(rsqrt_lr(conf, step)))
            scaler.step(opt)
            scaler.update()
            step += 1
            loss_sum += loss.detach()
        mean_loss = loss_sum.item() / len(plan)
        t1 = time.perf_counter()
        if (epoch + offset) % every:
            continue  # not an eval epoch (the trainer's cadence)
        with autocast():
            score, hyps = evaluate(model, vocab, eval_pairs, refs, conf, dev)
        t2 = time.perf_counter()
        epochs.append(dict(epoch=epoch, bleu=score, loss=mean_loss, steps=len(plan), train_s=t1 - t0,
                           eval_s=t2 - t1))
        print(f"pytorch: epoch {epoch}: BLEU {score:.2f} (target {100 * target:.2f}) mean train loss "
              f"{mean_loss:.4f} over {len(plan)} steps; train {t1 - t0:.1f} s, eval {t2 - t1:.1f} s",
              flush=True)
        if args.translations_out:
            with open(args.translations_out, "w") as f:
                f.writelines(h + "\n" for h in hyps)
        if score / 100.0 >= target:
            reached = True
            break
    seconds = time.perf_counter() - start
    print(f"pytorch: {'target reached' if reached else 'target NOT reached'}, time to train "
          f"{seconds:.1f} s ({seconds / 60:.2f} min)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, torch=torch.__version__, reached=reached, seconds=seconds,
                           epochs=epochs), f, indent=1)


if __name__ == "__main__":
    main()
