#!/usr/bin/env python3
"""The same NCF training in PyTorch, for comparison with build/bin/ncf: the
same data (the converter's ncf.bin, so the same split and test negatives),
the same NeuMF and initialisation, the same hyperparameters (read from the
trainer's config), the same training-negative rule and the same HR@10 rule.
Prints HR@10 per epoch and the time to the target. As with the trainer, any
config key can be overridden by a flag (--max_epochs=3, --learning_rate=0.001).

  python3 recommendation/pytorch_reference.py --config=recommendation/configs/medium.conf \\
      --data_dir=data/ncf/medium [--device=cuda] [--amp=bf16|fp16|off] [--json=PATH] [--KEY=VALUE]
  python3 recommendation/pytorch_reference.py --config=recommendation/configs/small.conf \\
      --data_dir=data/ncf/small --device=cpu [--threads=N]

Differences from build/bin/ncf, by design: the random numbers (torch's
generator, not the trainer's Philox streams: the same rules, other draws),
and fused Adam, PyTorch's fastest stock optimizer. The precision follows the
config's `precision` key as the trainer does: bf16 / fp16 run the training
step in autocast (fp16 with a gradient scaler), tf32 enables TF32 matmuls,
fp32 is plain; --amp overrides it (CPU runs are always fp32). The clock starts
before the data is read, as the trainer's run_start does; evaluation is
fp32 (TF32 with tf32).
"""
import argparse
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOPK = 10
# recommendation/movielens.h, MlFileHeader: magic, version, header_bytes, n_users,
# n_items, n_train, n_neg, neg_seed, min_ratings, six section offsets,
# file_bytes, two reserved words.
HEADER = struct.Struct("<8sII4qQq6QQ2Q")
SECTIONS = ("train_offsets", "train_items", "test_items", "test_negs")


def read_conf(path):
    """The trainer's `key = value` config (comments after #)."""
    conf = {}
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "=" in line:
                k, v = line.split("=", 1)
                conf[k.strip()] = v.strip()
    return conf


def load_ncf(path):
    """The arrays of an ncf.bin (recommendation/movielens.h) as numpy views."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < HEADER.size:
        raise SystemExit(f"{path}: too short for a header ({raw.size} bytes)")
    h = HEADER.unpack(bytes(raw[:HEADER.size]))
    magic, version, header_bytes, n_users, n_items, n_train, n_neg = h[:7]
    offsets, file_bytes = h[9:15], h[15]
    if magic != b"NCFMLBIN" or version != 1 or header_bytes != HEADER.size:
        raise SystemExit(f"{path}: not a version 1 ncf.bin (convert with movielens_convert)")
    if file_bytes != raw.size:
        raise SystemExit(f"{path}: {raw.size} bytes, the header describes {file_bytes}")
    counts = (n_users + 1, n_train, n_users, n_users * n_neg)
    dtypes = (np.int64, np.int32, np.int32, np.int32)
    d = {name: np.frombuffer(raw, dtype=dt, count=n, offset=off)
         for name, dt, n, off in zip(SECTIONS, dtypes, counts, offsets)}
    d["test_negs"] = d["test_negs"].reshape(n_users, n_neg)
    d.update(n_users=n_users, n_items=n_items, n_train=n_train)
    return d


class NeuMF(nn.Module):
    """GMF (mf_dim) and MLP (layers[0] / 2 per side, Linear + ReLU to each
    of layers[1:]) branches, concatenated into one Linear to a logit;
    initialised as recommendation/ncf_model.c (the MLPerf reference)."""

    def __init__(self, n_users, n_items, mf_dim, layers):
        super().__init__()
        self.mf_user = nn.Embedding(n_users, mf_dim)
        self.mf_item = nn.Embedding(n_items, mf_dim)
        self.mlp_user = nn.Embedding(n_users, layers[0] // 2)
        self.mlp_item = nn.Embedding(n_items, layers[0] // 2)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:]))
        self.final = nn.Linear(mf_dim + layers[-1], 1)
        for emb in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, 0.0, 0.01)
        for lin in self.mlp:
            nn.init.xavier_uniform_(lin.weight)
        limit = math.sqrt(3.0 / self.final.in_features)  # LeCun uniform
        nn.init.uniform_(self.final.weight, -limit, limit)

    def forward(self, users, items):
        gmf = self.mf_user(users) * self.mf_item(items)
        x = torch.cat([self.mlp_user(users), self.mlp_item(items)], 1)
        for lin in self.mlp:
            x = F.relu(lin(x))
        return self.final(torch.cat([gmf, x], 1)).squeeze(1)


class Sampler:
    """An epoch's samples on the device: every training positive once and
    n_neg negatives each, drawn uniformly from the items outside the user's
    training items (recommendation/ncf_batch.h's rule), in a fresh order.
    The r-th unrated item of user u is r + (the number of u's training items
    i_k, k counted within u, with i_k - k <= r): one searchsorted over keys
    u * n_items + i_k - k, ascending over the whole CSR."""

    def __init__(self, data, n_neg, device):
        offsets = torch.from_numpy(data["train_offsets"].copy()).to(device)
        self.items = torch.from_numpy(data["train_items"].astype(np.int64)).to(device)
        self.n_items, self.n_neg, self.device = data["n_items"], n_neg, device
        counts = offsets[1:] - offsets[:-1]
        self.users = torch.repeat_interleave(torch.arange(len(counts), device=device), counts)
        local = torch.arange(len(self.items), device=device) - offsets[self.users]
        self.keys = self.users * self.n_items + self.items - local
        self.offsets, self.counts = offsets, counts

    def samples(self):
        return len(self.items) * (1 + self.n_neg)

    def epoch(self, gen):
        """(users, items, labels) of one epoch, shuffled."""
        neg_u = self.users.repeat(self.n_neg)
        unrated = self.n_items - self.counts[neg_u]
        u = torch.rand(len(neg_u), generator=gen, device=self.device, dtype=torch.float64)
        r = torch.minimum((u * unrated).long(), unrated - 1)
        below = torch.searchsorted(self.keys, neg_u * self.n_items + r, right=True)
        neg_i = r + below - self.offsets[neg_u]
        users = torch.cat([self.users, neg_u])
        items = torch.cat([self.items, neg_i])
        labels = torch.cat([torch.ones(len(self.items), device=self.device),
                            torch.zeros(len(neg_u), device=self.device)])
        perm = torch.randperm(len(users), generator=gen, device=self.device)
        return users[perm], items[perm], labels[perm]


def make_step(model, opt, amp):
    """One training step (users, items, labels) -> loss tensor: autocast
    forward (amp 'bf16' or 'fp16'; 'off': fp32), BCE with logits, backward,
    Adam."""
    device = next(model.parameters()).device.type
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler(device) if amp == "fp16" else None

    def step(users, items, labels):
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.binary_cross_entropy_with_logits(model(users, items), labels)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss
    return step


def make_optimizer(model, conf, device):
    return torch.optim.Adam(model.parameters(), lr=float(conf["learning_rate"]),
                            betas=(float(conf["adam_beta1"]), float(conf["adam_beta2"])),
                            eps=float(conf["adam_eps"]), fused=device == "cuda")


def build_model(conf, data, device):
    layers = [int(w) for w in conf["mlp_layers"].split(",")]
    return NeuMF(data["n_users"], data["n_items"], int(conf["mf_dim"]), layers).to(device)


@torch.no_grad()
def evaluate(model, test_items, test_negs, users_per_pass):
    """HR@10 and NDCG@10 with the trainer's rule (recommendation/movielens_sampling.h,
    ml_positive_rank), the MLPerf reference's: the fp32 sigmoids of the
    logits are ranked, a repeated negative counts once, a negative whose
    sigmoid equals the positive's (saturated ones do) ranks above it, a NaN
    never makes a hit."""
    n_users = len(test_items)
    hits = ndcg = 0.0
    for u0 in range(0, n_users, users_per_pass):
        u1 = min(u0 + users_per_pass, n_users)
        negs = test_negs[u0:u1]
        items = torch.cat([test_items[u0:u1, None], negs], 1)  # (n, 1 + n_neg)
        users = torch.arange(u0, u1, device=items.device)[:, None].expand_as(items)
        logits = model(users.reshape(-1), items.reshape(-1)).float().view(items.shape)
        scores = torch.sigmoid(logits)
        repeat = torch.zeros_like(negs, dtype=torch.bool)
        repeat[:, 1:] = negs[:, 1:] == negs[:, :-1]
        rank = (~(scores[:, 1:] < scores[:, :1]) & ~repeat).sum(1)
        hit = rank < TOPK
        hits += hit.sum().item()
        ndcg += torch.where(hit, 1.0 / torch.log2(rank.double() + 2), 0.0).sum().item()
    return hits / n_users, ndcg / n_users


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--data_dir", required=True)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--amp", choices=["bf16", "fp16", "off"],
                   help="autocast dtype of the training step on CUDA (default: the config's "
                        "precision; CPU: always off)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: its own choice)")
    p.add_argument("--json", help="write the epochs and the time to train here")
    args, overrides = p.parse_known_args()
    conf = read_conf(args.config)
    for flag in overrides:
        key, _, value = flag[2:].partition("=")
        if not flag.startswith("--") or key not in conf or not value:
            p.error(f"{flag}: want --KEY=VALUE with a key of {args.config}")
        conf[key] = value
    dev = args.device
    precision = conf.get("precision", "fp32")
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        p.error(f"precision '{precision}' is not fp32, tf32, bf16 or fp16")
    amp = args.amp or (precision if precision in ("bf16", "fp16") else "off")
    amp = amp if dev == "cuda" else "off"
    tf32 = precision == "tf32" and dev == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    start = time.perf_counter()  # run_start: before the data is read
    data = load_ncf(f"{args.data_dir}/ncf.bin")
    sampler = Sampler(data, int(conf["train_negatives"]), dev)
    test_items = torch.from_numpy(data["test_items"].astype(np.int64)).to(dev)
    test_negs = torch.from_numpy(data["test_negs"].astype(np.int64)).to(dev)
    model = build_model(conf, data, dev)
    opt = make_optimizer(model, conf, dev)
    step = make_step(model, opt, amp)
    batch, target = int(conf["batch_size"]), float(conf["target_accuracy"])
    max_epochs = int(conf["max_epochs"])
    print(f"pytorch: {data['n_users']} users, {data['n_items']} items, {data['n_train']} "
          f"training positives; {sum(t.numel() for t in model.parameters())} parameters; "
          f"{sampler.samples()} samples per epoch in batches of {batch}; {dev}, amp {amp}",
          flush=True)
    epochs, reached = [], False
    for epoch in range(1, max_epochs + 1):
        t0 = time.perf_counter()
        users, items, labels = sampler.epoch(gen)
        for s0 in range(0, len(users), batch):
            loss = step(users[s0:s0 + batch], items[s0:s0 + batch], labels[s0:s0 + batch])
        sync()
        t1 = time.perf_counter()
        model.eval()
        hr, ndcg = evaluate(model, test_items, test_negs, int(conf["eval_users"]))
        model.train()
        t2 = time.perf_counter()
        epochs.append(dict(epoch=epoch, hr=hr, ndcg=ndcg, loss=loss.item(), train_s=t1 - t0,
                           eval_s=t2 - t1))
        print(f"pytorch: epoch {epoch}: HR@10 {hr:.4f} NDCG@10 {ndcg:.4f} (target {target:.4f}) "
              f"loss {loss.item():.4f}; train {t1 - t0:.1f} s "
              f"({sampler.samples() / (t1 - t0):.0f} samples/s), eval {t2 - t1:.1f} s", flush=True)
        if hr >= target:
            reached = True
            break
    seconds = time.perf_counter() - start
    print(f"pytorch: {'target reached' if reached else 'target NOT reached'}, time to train "
          f"{seconds:.1f} s ({seconds / 60:.2f} min)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, amp=amp, torch=torch.__version__, reached=reached,
                           seconds=seconds, epochs=epochs), f, indent=1)


if __name__ == "__main__":
    main()
