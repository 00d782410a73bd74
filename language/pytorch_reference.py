#!/usr/bin/env python3
"""The same BERT fine-tune on SQuAD in PyTorch, for comparison with build/bin/bert:
- the same model: the checkpoint's config.json and model.safetensors
  (DATA_DIR/model, where prepare_data.sh links the pretrained MiniLM), read
  by the trainer's names (with or without `bert.`, layer norms as
  weight/bias or gamma/beta); post-norm layers with biases on every
  projection, GELU (erf), layer-norm epsilon from the checkpoint, no pooler;
  the span head from the checkpoint when it has `qa_outputs`, else the
  trainer's N(0, 0.02) drawn from the same Philox stream (seed, 500 + the
  head's index in the parameter table), so the same numbers; the pad
  token's embedding gets no gradient;
- the same dropout, mask for mask: every site draws its keep mask from the
  trainer's Philox4x32-10 streams (language/bert_model.c and
  common/models/transformer.c: a step's streams start at step << 10, the
  embeddings' first, then six a layer), on the same elements: the
  embeddings' output, each attention sub-layer's output, the attention
  probabilities, the FFN's GELU output and the FFN's output
  (`--dropout_rng=torch` draws them from torch's generator instead);
- the same data: the SQuAD-layout JSON under DATA_DIR/raw that the
  converter read, tokenised again with the checkpoint's vocab.txt by the
  trainer's WordPiece rules (language/wordpiece.c: clean, CJK, NFD without
  Mn, simple lowercase, punctuation, greedy longest pieces, byte spans), cut
  into the same windows ([CLS] question [SEP] context part [SEP], questions
  cut to 64 tokens, max_seq_length from the config and doc_stride from the
  data set's stamp, DATA_DIR/lmdb/.complete), the same answer positions and
  max-context flags;
- the same batches: each epoch's Philox shuffle (seed, stream 1000 +
  epoch), runs of `length_group` batches sorted by length (longest first,
  ties in shuffled order), the whole batches shuffled (stream 2000 +
  epoch), the last step topped up from the start of the order; each batch
  padded to its longest window, attention masked past each window's length,
  the loss (CE(start) + CE(end)) / 2 over every position of the padded batch;
- the same optimizer: AdamW (PyTorch's arithmetic, as the trainer's),
  betas, epsilon and weight decay from the config, no decay on biases and
  layer norms, gradients clipped to `max_grad_norm`, linear warmup over
  `warmup_proportion` of the schedule's steps (rounded as the trainer
  rounds) then linear decay to 0 over `decay_epochs` (0: max_epochs);
- the same eval after every epoch: every dev window through the model in
  batches of `eval_batch`, the best span of each question (the n_best
  largest start and end logits over all of a window's positions, both ends
  in the context, end >= start, at most max_answer_length tokens, the start
  in its max-context window, score the sum; ties to the earlier window and
  the higher-ranked start then end), the answer the context's bytes under
  it, scored by the official SQuAD v1.1 EM and F1 (language/squad_eval.c);
  the run stops when F1 / 100 reaches `target_accuracy`;
- the clock from the trainer's run_start (model loaded, optimizer made) to
  the eval that reaches the target.
Differences that stay:
- feature building: the trainer reads windows the converter
  (squad_to_lmdb) wrote before its run_start; here the JSON is tokenised and
  cut after the clock starts, so that time counts here and not there;
- arithmetic: PyTorch's GEMMs, softmax, GELU and AdamW round differently in
  the last bits (each step's loss agrees with the trainer's to the 4
  decimals it prints for the first hundred steps or so, then the two runs
  drift apart as any two fp32 runs do); the head's normal
  numbers use numpy's float32 log and cos, which may differ from the C
  library's in the last bit;
- the Unicode tables: Python's unicodedata where the trainer has utf8proc
  (they differ only on code points newer than the older of the two; the
  generated sets are ASCII and typographic quotes), and Python's
  str.lower() of one character where the trainer takes utf8proc's simple
  mapping (the two differ only where the full mapping is longer);
- one process: no data parallelism over MPI ranks;
- low precision through PyTorch's autocast: the `precision` key as the
  trainer reads it (bf16 or fp16 products over fp32 master weights, fp16
  with a GradScaler; TF32 for tf32; fp32 on the CPU), rounded elsewhere
  than the trainer rounds; AdamW fused on CUDA (on the CPU the
  single-tensor loop, whose arithmetic the trainer's follows).
Prints the trainer's epoch lines ("pytorch: epoch N: F1 X (target Y), ...;
train T s, eval E s") and its last line ("pytorch: target reached, time to
train S s"), which `make bench-cpu` reads (with --dropout_rng=torch: the
time a PyTorch user's training takes).

  python3 language/pytorch_reference.py --config=language/configs/small.conf \\
      --data_dir=data/bert/small [--device=cpu] [--threads=1] [--seed=1] [--max_epochs=N] \\
      [--dropout_rng=philox|torch] [--step_losses=FILE] [--eval_first]
"""
import argparse
import json
import math
import os
import re
import struct
import time
import unicodedata

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------- config


def read_conf(path):
    """The trainer's `key = value` config (comments after #) over its defaults."""
    conf = dict(DEFAULTS)
    for line in open(path):
        line = line.split("#")[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            conf[k.strip()] = v.strip()
    return conf


# The trainer's defaults (language/train.c kKeys and common/train/run.c) for
# keys a config may leave out.
DEFAULTS = {"batch_size": "32", "length_group": "0", "learning_rate": "3e-5", "warmup_proportion": "0.1",
            "decay_epochs": "0", "weight_decay": "0.01", "adam_beta1": "0.9", "adam_beta2": "0.999",
            "adam_eps": "1e-6", "max_grad_norm": "1.0", "eval_batch": "64", "n_best": "20",
            "max_answer_length": "30", "max_epochs": "2", "target_accuracy": "0.905", "eval_every": "1",
            "eval_offset": "0", "max_seq_length": "384"}


def data_stamp(data_dir):
    """The converter's sizes from DATA_DIR/lmdb/.complete (prepare_data.sh):
    `key=value` words (max_seq_length, doc_stride); {} when absent."""
    path = os.path.join(data_dir, "lmdb", ".complete")
    if not os.path.exists(path):
        return {}
    return dict(w.split("=", 1) for w in open(path).read().split() if "=" in w)


# --------------------------------------------------------------------------- Philox (core/rng.h)

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF


def philox_blocks(seed, stream, first, n):
    """Blocks first .. first+n-1 of (seed, stream), word w of block j at
    out[4 j + w] (uint32): rng_blocks_cpu, vectorised over the blocks."""
    block = np.arange(first, first + n, dtype=np.uint64)
    c0 = block & np.uint64(MASK32)
    c1 = block >> np.uint64(32)
    c2 = np.full(n, stream & MASK32, dtype=np.uint64)
    c3 = np.full(n, (stream >> 32) & MASK32, dtype=np.uint64)
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    m0, m1, lo = np.uint64(M0), np.uint64(M1), np.uint64(MASK32)
    for _ in range(10):
        p0, p1 = c0 * m0, c2 * m1  # 32 x 32 -> 64 bits, exact in uint64
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & lo,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & lo)
        k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1).astype(np.uint32)


def philox_units(seed, stream, n):
    """Numbers 0 .. n-1 of (seed, stream) as rng_uniform gives them: 24 bits
    over 2^24, float32."""
    words = philox_blocks(seed, stream, 0, (n + 3) // 4)[:n]
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


class Rng:
    """rng.c's sequential draws: number `counter` of (seed, stream)."""

    def __init__(self, seed, stream):
        self.seed, self.stream, self.counter = seed, stream, 0

    def next_u32(self):
        i = self.counter
        self.counter += 1
        return int(philox_blocks(self.seed, self.stream, i >> 2, 1)[i & 3])

    def next_below(self, n):
        limit = ((1 << 32) - n) % n  # rejects the top sliver that would favour small values
        while True:
            u = self.next_u32()
            if u >= limit:
                return u % n

    def shuffle(self, items):
        for i in range(len(items), 1, -1):  # Fisher-Yates, as rng_shuffle_u32
            j = self.next_below(i)
            items[i - 1], items[j] = items[j], items[i - 1]


def philox_normal(seed, stream, n, std):
    """rng_fill_normal_cpu(mean 0): Box-Muller over words 2i, 2i+1, float32."""
    words = philox_blocks(seed, stream, 0, (n + 1) // 2).reshape(-1, 2, 2)  # (block, half, word)
    units = (words >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    u1 = (np.float32(1.0) - units[:, :, 0]).reshape(-1)[:n]
    u2 = units[:, :, 1].reshape(-1)[:n]
    z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(6.283185307179586) * u2)
    return (np.float32(std) * z).astype(np.float32)


# --------------------------------------------------------------------------- WordPiece (wordpiece.c)

CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
MAX_WORD_CHARS = 100


def load_vocab(path):
    """Token -> id (the line index); trailing spaces, tabs and CR are not
    part of a token."""
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n").rstrip(" \t\r"): i for i, line in enumerate(f)}


def is_punct(c):
    cp = ord(c)
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or \
        unicodedata.category(c).startswith("P")


def wordpiece(vocab, text):
    """Tokens of text as (id, byte start, byte end): wp_tokenize's rules."""
    unk = vocab["[UNK]"]
    out, word = [], []  # word: (char, start, end) after steps 1-4

    def finish():
        if not word:
            return
        w_start, w_end = word[0][1], word[-1][2]
        if len(word) > MAX_WORD_CHARS:
            out.append((unk, w_start, w_end))
        else:
            pieces, start = [], 0
            while start < len(word):
                for end in range(len(word), start, -1):
                    piece = ("##" if start else "") + "".join(ch for ch, _, _ in word[start:end])
                    if piece in vocab:
                        pieces.append((vocab[piece], word[start][1], word[end - 1][2]))
                        break
                else:  # no piece: the whole word is one [UNK]
                    pieces = [(unk, w_start, w_end)]
                    break
                start = end
            out.extend(pieces)
        word.clear()

    at = 0
    for c in text:
        start, at = at, at + len(c.encode("utf-8"))
        cp, cat = ord(c), unicodedata.category(c)
        if c in "\t\n\r" or cat in ("Zs", "Zl", "Zp"):
            finish()
            continue
        if cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf", "Co", "Cs"):
            continue  # dropped without splitting the word
        cjk = any(lo <= cp <= hi for lo, hi in CJK)
        if cjk:
            finish()
        for d in unicodedata.normalize("NFD", c):
            if unicodedata.category(d) == "Mn":
                continue
            low = d.lower()
            d = low if len(low) == 1 else d  # the simple mapping: one character to one
            punct = is_punct(d)
            if punct:
                finish()
            word.append((d, start, at))
            if punct:
                finish()
        if cjk:
            finish()
    finish()
    return out


# --------------------------------------------------------------------------- features (squad_features.c)


class Window:
    """One window: ids, the question's token count, answer positions, each
    token's byte span in the context (-1 outside it) and max-context flag."""

    def __init__(self, example, ids, query_tokens, start, end, span_begin, span_end, max_context):
        self.example, self.ids, self.query_tokens = example, ids, query_tokens
        self.start, self.end = start, end
        self.span_begin, self.span_end, self.max_context = span_begin, span_end, max_context


def build_windows(path, vocab, max_seq_length, doc_stride, max_query_length):
    """(examples, windows) of a SQuAD v1.1 file: examples as (id, context,
    gold answers), windows in question order."""
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    examples, windows = [], []
    for article in json.load(open(path, encoding="utf-8"))["data"]:
        for par in article["paragraphs"]:
            context = par["context"]
            ctx = wordpiece(vocab, context)
            for qa in par["qas"]:
                e = len(examples)
                golds = [a["text"] for a in qa["answers"]]
                examples.append((qa["id"], context, golds))
                first = qa["answers"][0]
                begin = len(context[:first["answer_start"]].encode("utf-8"))
                length = len(first["text"].encode("utf-8"))
                ans_start = next(t for t, (_, _, te) in enumerate(ctx) if te > begin)
                ans_end = max(t for t, (_, ts, _) in enumerate(ctx) if ts < begin + length)
                q = wordpiece(vocab, qa["question"])[:max_query_length]
                windows.extend(question_windows(e, [i for i, _, _ in q], ctx, ans_start, ans_end,
                                                max_seq_length, doc_stride, cls, sep))
    return examples, windows


def question_windows(e, q, ctx, ans_start, ans_end, max_seq_length, doc_stride, cls, sep):
    max_ctx = max_seq_length - len(q) - 3
    spans, start = [], 0  # (start, length) of each window's context tokens
    while True:
        length = min(len(ctx) - start, max_ctx)
        spans.append((start, length))
        if start + length >= len(ctx):
            break
        start += min(length, doc_stride)
    out = []
    for start, length in spans:
        first = 2 + len(q)
        n = first + length + 1
        ids = [cls] + q + [sep] + [ctx[start + t][0] for t in range(length)] + [sep]
        span_begin, span_end, maxc = [-1] * n, [-1] * n, [False] * n
        for t in range(length):
            i = start + t
            span_begin[first + t], span_end[first + t] = ctx[i][1], ctx[i][2]
            # The window where min(left, right) + 0.01 length is largest; the first on ties.
            best, best_score = None, -1.0
            for ws, wl in spans:
                if ws <= i < ws + wl:
                    score = min(i - ws, ws + wl - 1 - i) + 0.01 * wl
                    if score > best_score:
                        best_score, best = score, ws
            maxc[first + t] = best == start
        inside = ans_start >= start and ans_end < start + length
        out.append(Window(e, ids, len(q), first + ans_start - start if inside else 0,
                          first + ans_end - start if inside else 0, span_begin, span_end, maxc))
    return out


# --------------------------------------------------------------------------- batches (squad_data.c)


def epoch_order(windows, seed, epoch, batch, group):
    """squad_epoch_order: the shuffle, runs of `group` batches sorted longest
    first (ties in shuffled order), then the whole batches shuffled."""
    n = len(windows)
    order = list(range(n))
    Rng(seed, 1000 + epoch).shuffle(order)
    whole = n // batch if batch > 0 else 0
    if group <= 0 or whole < 2:
        return order
    run = group * batch
    for first in range(0, whole * batch, run):
        count = min(whole * batch - first, run)
        part = order[first:first + count]
        places = sorted(range(count), key=lambda i: (-len(windows[part[i]].ids), i))
        order[first:first + count] = [part[i] for i in places]
    batches = list(range(whole))
    Rng(seed, 2000 + epoch).shuffle(batches)
    grouped = [w for b in batches for w in order[b * batch:(b + 1) * batch]]
    return grouped + order[whole * batch:]


def make_batch(windows, idx, dev):
    """ids, token types, lengths, starts, ends: the batch padded to its
    longest window (squad_batch_fill)."""
    t = max(len(windows[i].ids) for i in idx)
    ids = torch.zeros(len(idx), t, dtype=torch.long)
    types = torch.zeros(len(idx), t, dtype=torch.long)
    for b, i in enumerate(idx):
        w = windows[i]
        ids[b, :len(w.ids)] = torch.tensor(w.ids)
        types[b, w.query_tokens + 2:len(w.ids)] = 1  # after the first [SEP]
    lens = torch.tensor([len(windows[i].ids) for i in idx])
    starts = torch.tensor([windows[i].start for i in idx])
    ends = torch.tensor([windows[i].end for i in idx])
    return ids.to(dev), types.to(dev), lens.to(dev), starts.to(dev), ends.to(dev)


# --------------------------------------------------------------------------- model (bert_model.c)

STREAM_BITS = 10  # a step's dropout streams start at step << 10
LAYER_STREAMS = 6  # per layer: self, cross, relu (the FFN's activation), ffn, self probs, cross probs
DROP_SELF, DROP_RELU, DROP_FFN, DROP_SELF_PROBS = 0, 2, 3, 4


class Dropout:
    """Where a step's dropout masks come from: the trainer's Philox streams
    (seed, stream), element i of the row-major tensor keeping when its
    uniform < keep; or torch's generator. None in eval. The attention
    probabilities take the attention rate, every other site the hidden one."""

    def __init__(self, p, p_attn, seed, step, philox):
        # 1.0f - dropout, as the trainer's keep_prob and attn_keep_prob
        self.keep, self.attn_keep = np.float32(1.0) - np.float32(p), np.float32(1.0) - np.float32(p_attn)
        self.seed, self.philox = seed, philox
        self.base = step << STREAM_BITS

    def __call__(self, x, stream, attn=False):
        keep_prob = self.attn_keep if attn else self.keep
        if not self.philox:
            return F.dropout(x, float(1.0 - keep_prob), training=True)
        keep = philox_units(self.seed, self.base + stream, x.numel()) < keep_prob
        mask = torch.from_numpy(keep).to(x.device).view(x.shape).to(x.dtype)
        return x * float(np.float32(1.0) / keep_prob) * mask  # in * (1.0f / keep), then masked


class Layer(nn.Module):
    """A post-norm encoder layer: LN(x + dropout(attention(x))), then
    LN(h + dropout(W2 dropout(GELU(W1 h)))), as common/models/transformer.c
    computes it (dropout after the GELU too, as the trainer has it)."""

    def __init__(self, d, ff, heads, eps):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x, key_mask, drop, stream):
        b, t, d = x.shape
        dh = d // self.heads
        split = lambda y: y.view(b, t, self.heads, dh).transpose(1, 2)  # (B, H, T, Dh)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))  # (B, H, T, T)
        probs = scores.masked_fill(key_mask, float("-inf")).softmax(-1)  # masked keys exactly 0
        if drop:
            probs = drop(probs, stream + DROP_SELF_PROBS, attn=True)
        att = (probs @ v).transpose(1, 2).reshape(b, t, d)
        y = self.out(att)
        h = self.ln1(x + (drop(y, stream + DROP_SELF) if drop else y))
        f = F.gelu(self.fc1(h))
        if drop:
            f = drop(f, stream + DROP_RELU)
        y = self.fc2(f)
        return self.ln2(h + (drop(y, stream + DROP_FFN) if drop else y))


class BertQA(nn.Module):
    """BERT's embeddings, encoder and span head (no pooler), in the
    trainer's parameter order."""

    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
        self.pad_id = cfg.get("pad_token_id", 0)
        self.word_emb = nn.Embedding(cfg["vocab_size"], d, padding_idx=self.pad_id)  # pad row: no gradient
        self.pos_emb = nn.Embedding(cfg["max_position_embeddings"], d)
        self.type_emb = nn.Embedding(cfg.get("type_vocab_size", 2), d)
        self.emb_ln = nn.LayerNorm(d, eps=eps)
        self.layers = nn.ModuleList(Layer(d, cfg["intermediate_size"], cfg["num_attention_heads"], eps)
                                    for _ in range(cfg["num_hidden_layers"]))
        self.span = nn.Linear(d, 2)
        self.dropout = cfg.get("hidden_dropout_prob", 0.1)
        self.attn_dropout = cfg.get("attention_probs_dropout_prob", 0.1)

    def forward(self, ids, types, lens, drop=None):
        """Start and end logits, each (B, T)."""
        b, t = ids.shape
        pos = torch.arange(t, device=ids.device)
        x = self.emb_ln(self.word_emb(ids) + self.pos_emb(pos)[None] + self.type_emb(types))
        if drop:
            x = drop(x, 0)
        key_mask = (pos[None, :] >= lens[:, None])[:, None, None, :]  # (B, 1, 1, T): keys past the window
        for i, layer in enumerate(self.layers):
            x = layer(x, key_mask, drop, 1 + LAYER_STREAMS * i)
        logits = self.span(x)
        return logits[..., 0], logits[..., 1]


def read_safetensors(path):
    """name -> float32 numpy array of a safetensors file's float tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": np.float32, "F16": np.float16, "BF16": None}
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in kinds:
            continue  # integer buffers (position_ids) are no weights
        lo, hi = info["data_offsets"]
        buf = raw[8 + n + lo:8 + n + hi]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, kinds[info["dtype"]]).astype(np.float32)
        out[name] = a.reshape(info["shape"])
    return out


def load_pretrained(model, path, seed):
    """The checkpoint's tensors into the model by the trainer's names; the
    span head from it or from the trainer's N(0, 0.02) stream. Returns
    whether the checkpoint had the head."""
    st = read_safetensors(path)

    def get(name):
        for prefix in ("", "bert."):
            full = prefix + name
            for alt in (full, full.replace("LayerNorm.weight", "LayerNorm.gamma")
                        .replace("LayerNorm.bias", "LayerNorm.beta")):
                if alt in st:
                    return torch.from_numpy(st[alt].copy())
        return None

    def put(param, name):
        value = get(name)
        if value is None:
            raise SystemExit(f"pytorch_reference: {path}: the checkpoint has no tensor {name}")
        if tuple(value.shape) != tuple(param.shape):
            raise SystemExit(f"pytorch_reference: {path}: {name} is {tuple(value.shape)}, "
                             f"the model takes {tuple(param.shape)}")
        param.data.copy_(value)

    put(model.word_emb.weight, "embeddings.word_embeddings.weight")
    put(model.pos_emb.weight, "embeddings.position_embeddings.weight")
    put(model.type_emb.weight, "embeddings.token_type_embeddings.weight")
    put(model.emb_ln.weight, "embeddings.LayerNorm.weight")
    put(model.emb_ln.bias, "embeddings.LayerNorm.bias")
    roles = (("query", "attention.self.query"), ("key", "attention.self.key"),
             ("value", "attention.self.value"), ("out", "attention.output.dense"),
             ("ln1", "attention.output.LayerNorm"), ("fc1", "intermediate.dense"),
             ("fc2", "output.dense"), ("ln2", "output.LayerNorm"))
    for i, layer in enumerate(model.layers):
        for attr, hf in roles:
            module = getattr(layer, attr)
            put(module.weight, f"encoder.layer.{i}.{hf}.weight")
            put(module.bias, f"encoder.layer.{i}.{hf}.bias")
    if get("qa_outputs.weight") is not None:
        put(model.span.weight, "qa_outputs.weight")
        put(model.span.bias, "qa_outputs.bias")
        return True
    # The trainer's table: 3 embedding tables and the embeddings' norm (5),
    # 16 tensors a layer, then the head's matrix; its init stream is 500 + index.
    index = 5 + 16 * len(model.layers)
    w = philox_normal(seed, 500 + index, model.span.weight.numel(), 0.02)
    model.span.weight.data.copy_(torch.from_numpy(w).view_as(model.span.weight))
    model.span.bias.data.zero_()
    return False


# --------------------------------------------------------------------------- eval (squad_eval.c)

PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def normalize(s):
    """The official v1.1 normalisation: lower, punctuation out, articles
    (whole \\w words a, an, the) out, whitespace collapsed."""
    s = "".join(ch for ch in s.lower() if ch not in PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_em(prediction, golds):
    best_f1 = best_em = 0.0
    p = normalize(prediction)
    for g in golds:
        g = normalize(g)
        best_em = max(best_em, float(p == g))
        pt, gt = p.split(), g.split()
        common = sum(min(pt.count(w), gt.count(w)) for w in set(pt))
        if common:
            prec, rec = common / len(pt), common / len(gt)
            best_f1 = max(best_f1, 2 * prec * rec / (prec + rec))
    return best_f1, best_em


def top_k(x, k):
    """Positions of the k largest, largest first, the lower position first
    among equals (squad_top_k)."""
    return sorted(range(len(x)), key=lambda i: (-x[i], i))[:k]


def best_span(windows, logits, n_best, max_answer):
    """(byte begin, byte end) of the best candidate over a question's
    windows, None when there is none (squad_best_span)."""
    best = None  # (score, begin, end)
    for w, (start_l, end_l) in zip(windows, logits):
        k = min(n_best, len(w.ids))
        ends = top_k(end_l, k)
        for s in top_k(start_l, k):
            if w.span_begin[s] < 0 or not w.max_context[s]:
                continue
            for e in ends:
                if w.span_begin[e] < 0 or e < s or e - s + 1 > max_answer:
                    continue
                score = float(start_l[s]) + float(end_l[e])
                if best is None or score > best[0]:
                    best = (score, w.span_begin[s], w.span_end[e])
    return None if best is None else best[1:]


def evaluate(model, examples, windows, conf, dev):
    """(F1, EM), each 0..100, over every dev question."""
    model.eval()
    logits = []
    eb = int(conf["eval_batch"])
    with torch.no_grad():
        for first in range(0, len(windows), eb):
            idx = list(range(first, min(first + eb, len(windows))))
            ids, types, lens, _, _ = make_batch(windows, idx, dev)
            start, end = model(ids, types, lens)
            start, end = start.float().cpu().numpy(), end.float().cpu().numpy()
            for b, i in enumerate(idx):
                n = len(windows[i].ids)
                logits.append((start[b, :n], end[b, :n]))
    by_question = {}
    for w, l in zip(windows, logits):
        by_question.setdefault(w.example, []).append((w, l))
    f1 = em = 0.0
    for q, (_, context, golds) in enumerate(examples):
        pairs = by_question.get(q, [])
        span = best_span([w for w, _ in pairs], [l for _, l in pairs], int(conf["n_best"]),
                         int(conf["max_answer_length"])) if pairs else None
        text = context.encode("utf-8")[span[0]:span[1]].decode("utf-8", "replace") if span else ""
        if pairs:
            a, b = f1_em(text, golds)
            f1, em = f1 + a, em + b
    model.train()
    return 100 * f1 / len(examples), 100 * em / len(examples)


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--data_dir", required=True)
    ap.add_argument("--init_checkpoint", help="the model's folder (default DATA_DIR/model)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_epochs", type=int)
    ap.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: its own choice)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--doc_stride", type=int, help="default: the data set's stamp (DATA_DIR/lmdb/.complete)")
    ap.add_argument("--max_query_length", type=int, default=64)
    ap.add_argument("--dropout_rng", choices=("philox", "torch"), default="philox",
                    help="philox: the trainer's masks; torch: torch's generator (faster)")
    ap.add_argument("--step_losses", help="write each step's loss here, one a line")
    ap.add_argument("--eval_first", action="store_true", help="score the loaded model before training "
                    "(outside the clock)")
    args = ap.parse_args()
    conf = read_conf(args.config)
    if args.max_epochs:
        conf["max_epochs"] = str(args.max_epochs)
    precision = conf.get("precision", "fp32")
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise SystemExit(f"pytorch_reference: precision '{precision}' is not fp32, tf32, bf16 or fp16")
    if precision != "fp32" and args.device == "cpu":
        raise SystemExit(f"pytorch_reference: precision '{precision}' needs a GPU (the CPU run is fp32)")
    dev = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    stamp = data_stamp(args.data_dir)
    seq = int(conf["max_seq_length"])
    stride = args.doc_stride or int(stamp.get("doc_stride", 128))
    if "max_seq_length" in stamp and int(stamp["max_seq_length"]) != seq:
        print(f"pytorch_reference: note: the converter cut windows of {stamp['max_seq_length']} tokens, "
              f"the config says {seq}; cutting {seq}")

    # init: the model and the optimizer, as the trainer before run_start.
    ckpt = args.init_checkpoint or os.path.join(args.data_dir, "model")
    mcfg = json.load(open(os.path.join(ckpt, "config.json")))
    if mcfg.get("hidden_act", "gelu") != "gelu":
        raise SystemExit("pytorch_reference: hidden_act must be gelu (the erf form)")
    model = BertQA(mcfg)
    head = load_pretrained(model, os.path.join(ckpt, "model.safetensors"), args.seed)
    model = model.to(dev)
    decay = [p for p in model.parameters() if p.ndim == 2]
    no_decay = [p for p in model.parameters() if p.ndim != 2]  # biases, layer norms
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(conf["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}], lr=0.0,
                            betas=(float(conf["adam_beta1"]), float(conf["adam_beta2"])),
                            eps=float(conf["adam_eps"]),
                            **({"fused": True} if dev.type == "cuda" else {"foreach": False}))
    # The trainer's precision: bf16 or fp16 autocast over fp32 master weights
    # (fp16 with a GradScaler, unscaled before the clipping), TF32 for tf32;
    # the loss in fp32.
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def autocast():
        return torch.autocast(dev.type, dtype=lowp or torch.float32, enabled=lowp is not None)

    vocab = load_vocab(os.path.join(ckpt, "vocab.txt"))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch: {ckpt}: {len(model.layers)} layers, width {mcfg['hidden_size']}; {n_params} parameters "
          f"(span head {'from the checkpoint' if head else 'new'}); windows <= {seq}, stride {stride}, "
          f"questions <= {args.max_query_length}; dropout masks {args.dropout_rng}; "
          f"{torch.get_num_threads()} threads", flush=True)
    if args.eval_first:
        raw = os.path.join(args.data_dir, "raw")
        examples, dev_windows = build_windows(os.path.join(raw, "dev-v1.1.json"), vocab, seq, stride,
                                              args.max_query_length)
        with autocast():
            f1, em = evaluate(model, examples, dev_windows, conf, dev)
        print(f"pytorch: before training: F1 {f1:.2f}, EM {em:.2f}", flush=True)

    start_s = time.time()  # the trainer's run_start
    raw = os.path.join(args.data_dir, "raw")
    _, train = build_windows(os.path.join(raw, "train-v1.1.json"), vocab, seq, stride, args.max_query_length)
    examples, dev_windows = build_windows(os.path.join(raw, "dev-v1.1.json"), vocab, seq, stride,
                                          args.max_query_length)
    batch, group = int(conf["batch_size"]), int(conf["length_group"])
    epochs = int(conf["max_epochs"])
    steps_per_epoch = (len(train) + batch - 1) // batch
    llround = lambda x: math.floor(x + 0.5)  # C's llround on these positive values (halves up)
    total = llround(steps_per_epoch * (float(conf["decay_epochs"]) or epochs))
    warm = llround(float(conf["warmup_proportion"]) * total)
    base_lr, clip = float(conf["learning_rate"]), float(conf["max_grad_norm"])
    every, offset = int(conf["eval_every"]), int(conf["eval_offset"])
    target = float(conf["target_accuracy"])
    print(f"pytorch: {len(train)} training windows, {len(dev_windows)} dev windows of {len(examples)} "
          f"questions; {steps_per_epoch} steps an epoch, warmup {warm} of {total} "
          f"(features {time.time() - start_s:.1f} s)", flush=True)

    def lr_at(step):
        if step < warm:
            return base_lr * (step + 1) / warm
        return base_lr * max(0.0, 1.0 - (step - warm) / (total - warm))

    losses = open(args.step_losses, "w") if args.step_losses else None
    step, f1 = 0, 0.0
    model.train()
    for epoch in range(1, epochs + 1):
        order = epoch_order(train, args.seed, epoch, batch, group)
        loss_sum = torch.zeros((), device=dev)  # read once an epoch, as the trainer does
        t0 = time.time()
        for i in range(steps_per_epoch):
            idx = [order[(i * batch + j) % len(train)] for j in range(batch)]
            ids, types, lens, starts, ends = make_batch(train, idx, dev)
            drop = Dropout(model.dropout, model.attn_dropout, args.seed, epoch * steps_per_epoch + i,
                           args.dropout_rng == "philox")
            with autocast():
                start_l, end_l = model(ids, types, lens, drop)
            # The mean over the 2B rows: (mean CE(start) + mean CE(end)) / 2.
            loss = F.cross_entropy(torch.cat([start_l, end_l]).float(), torch.cat([starts, ends]))
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if clip > 0:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            scaler.step(opt)
            scaler.update()
            step += 1
            loss_sum += loss.detach()
            if losses:
                losses.write(f"{step} {loss.item():.6f}\n")
                losses.flush()
        mean_loss = loss_sum.item() / steps_per_epoch
        t1 = time.time()
        if (epoch + offset) % every != 0:
            print(f"pytorch: epoch {epoch}: no eval (cadence), mean train loss {mean_loss:.4f}; "
                  f"train {t1 - t0:.1f} s", flush=True)
            continue
        with autocast():
            f1, em = evaluate(model, examples, dev_windows, conf, dev)
        # The trainer's epoch line, "pytorch" for its benchmark's name.
        print(f"pytorch: epoch {epoch}: F1 {f1:.2f} (target {100 * target:.1f}), EM {em:.2f}, step {step}, "
              f"mean train loss {mean_loss:.4f}; train {t1 - t0:.1f} s, eval {time.time() - t1:.1f} s",
              flush=True)
        if f1 / 100 >= target:
            break
    seconds = time.time() - start_s
    print(f"pytorch: {'target reached' if f1 / 100 >= target else 'target NOT reached'}, time to train "
          f"{seconds:.1f} s ({seconds / 60:.2f} min)")


if __name__ == "__main__":
    main()
