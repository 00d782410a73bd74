#!/usr/bin/env python3
"""The same training in PyTorch, for comparison with build/bin/resnet:
- the same ResNet (basic or bottleneck v1.5 blocks, channels_last), the same
  initialisation rules (`conv_init_*`, `zero_init_residual`);
- the same data: the raw ImageNet-layout folder the converter read, decoded
  again every epoch by `loader_threads` DataLoader workers (PIL), with the
  trainer's crop (`crop`: random_resized or distorted_box, with the `crop_*`
  ranges, tries and coverage) and flip for training, and for eval the centre
  crop that keeps image_size/resize_side of the short side; the
  normalisation (`normalize`) on the device; an epoch's short last batch
  dropped or kept (`train_last_batch`);
- the same optimizer (`optimizer`: SGD with momentum as PyTorch has it, or
  LARS as the MLPerf reference has it: trust ratio eta ||w|| / (||g|| + wd
  ||w||), the scaled learning rate inside the momentum buffer), biases and
  batch-norm parameters without weight decay (and without LARS);
- the same schedule (linear warmup over `warmup_epochs`, polynomial decay to
  `end_lr` by `decay_epochs`), label smoothing, precision (`precision`: bf16 or
  fp16 autocast with fp32 master weights, fp16 with a GradScaler; tf32; fp32);
- the same eval cadence (`eval_every`, `eval_offset`: the first eval after
  epoch eval_every - eval_offset; an epoch limit off the cadence ends without
  an eval there);
- the same clock: from the point the trainer logs run_start (model,
  optimizer and data set opened) to the eval that reaches the target, image
  decoding included.
One difference stays: PIL's bilinear resize filters over the whole source
span when it shrinks (antialiasing); the trainer's samples the four nearest
pixels. Prints the trainer's epoch lines ("pytorch: epoch N: top-1 X (target
Y), loss L; train T s, eval E s") and its last line ("pytorch: target
reached, time to train S s"), which `make bench-cpu` reads.

  python3 image_classification/pytorch_reference.py --config=image_classification/configs/small.conf \
      --raw=data/resnet/small/raw [--device=cuda] [--max_epochs=N] [--threads=N] [--no_augment]
"""
import argparse
import csv
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image


def read_conf(path):
    conf = {}
    for line in open(path):
        line = line.split("#")[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            conf[k.strip()] = v.strip()
    return conf


def list_split(raw, split):
    """(paths, labels) of a split of the raw ImageNet layout; class indices
    from the sorted wnids, as the converter gives them."""
    classes = sorted(os.listdir(os.path.join(raw, "train")))
    index = {w: i for i, w in enumerate(classes)}
    paths, labels = [], []
    if split == "train":
        for w in classes:
            for f in sorted(os.listdir(os.path.join(raw, "train", w))):
                paths.append(os.path.join(raw, "train", w, f))
                labels.append(index[w])
    else:
        for row in csv.DictReader(open(os.path.join(raw, "LOC_val_solution.csv"))):
            paths.append(os.path.join(raw, "val", row["ImageId"] + ".JPEG"))
            labels.append(index[row["PredictionString"].split()[0]])
    return paths, labels


class Crop:
    """The trainer's train crop keys (classify_data.h's ClassifyCrop)."""

    def __init__(self, conf):
        self.method = conf.get("crop", "random_resized")
        self.scale_min = float(conf.get("crop_scale_min", 0.08))
        self.scale_max = float(conf.get("crop_scale_max", 1))
        self.ratio_min = float(conf.get("crop_ratio_min", 0.75))
        self.ratio_max = float(conf.get("crop_ratio_max", 4 / 3))
        self.attempts = int(conf.get("crop_attempts", 10))
        self.min_covered = float(conf.get("crop_min_covered", 0))

    def box(self, width, height, rng):
        if self.method == "distorted_box":
            return distorted_box(width, height, self, rng)
        return random_resized_crop_box(width, height, self, rng)


def random_resized_crop_box(width, height, c, rng):
    """The trainer's crop box (classify_data.c): (x, y, w, h)."""
    area = width * height
    log_lo, log_hi = math.log(c.ratio_min), math.log(c.ratio_max)
    for _ in range(c.attempts):
        target = area * (c.scale_min + (c.scale_max - c.scale_min) * rng.random())
        ratio = math.exp(log_lo + (log_hi - log_lo) * rng.random())
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height and w * h >= c.min_covered * area:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    w, h = width, height
    if width / height < c.ratio_min:
        h = round(width / c.ratio_min)
    elif width / height > c.ratio_max:
        w = round(height * c.ratio_max)
    return (width - w) // 2, (height - h) // 2, w, h


def distorted_box(width, height, c, rng):
    """The trainer's distorted box (classify_data.c, after TensorFlow's
    sample_distorted_bounding_box): (x, y, w, h)."""
    area = width * height
    lo_area, hi_area = c.scale_min * area, c.scale_max * area
    for _ in range(c.attempts):
        ratio = c.ratio_min + (c.ratio_max - c.ratio_min) * rng.random()
        h, h_max = round(math.sqrt(lo_area / ratio)), round(math.sqrt(hi_area / ratio))
        if round(h_max * ratio) > width:
            h_max = int((width + 0.5 - 1e-7) / ratio)
        h_max = min(h_max, height)
        h = h_max if h >= h_max else rng.randint(h, h_max)
        w = round(h * ratio)
        if w * h < lo_area:
            h += 1
            w = round(h * ratio)
        if w * h > hi_area:
            h -= 1
            w = round(h * ratio)
        if not (lo_area <= w * h <= hi_area and 0 < w <= width and 0 < h <= height):
            continue
        if w * h < c.min_covered * area:
            continue
        y = rng.randint(0, height - h - 1) if h < height else 0
        x = rng.randint(0, width - w - 1) if w < width else 0
        return x, y, w, h
    return 0, 0, width, height


def center_crop_box(width, height, resize_side, out_side):
    """The trainer's eval box: the fraction out_side / resize_side of the short side."""
    shorter = min(width, height)
    side = min(max(round(shorter * out_side / resize_side), 1), shorter)
    return (width - side) // 2, (height - side) // 2, side, side


class Images(torch.utils.data.Dataset):
    """Decodes and crops one image a call: uint8 (side, side, 3) and its label."""

    def __init__(self, paths, labels, conf, train):
        self.paths, self.labels, self.train = paths, labels, train
        self.side, self.resize_side = int(conf["image_size"]), int(conf.get("resize_side", 256))
        self.crop = Crop(conf)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        img = Image.open(self.paths[i]).convert("RGB")
        width, height = img.size
        if self.train:
            rng = random  # seeded per worker and epoch by the DataLoader
            x, y, w, h = self.crop.box(width, height, rng)
            flip = rng.random() < 0.5
        else:
            x, y, w, h = center_crop_box(width, height, self.resize_side, self.side)
            flip = False
        out = img.resize((self.side, self.side), Image.BILINEAR, box=(x, y, x + w, y + h))
        if flip:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(out).copy()), self.labels[i]


class LARS(torch.optim.Optimizer):
    """LARS as the MLPerf reference (and common/train/optim_math.h) has it;
    a group with adapt=False (biases, batch norm) is plain momentum SGD with
    the learning rate inside the buffer and no weight decay."""

    def __init__(self, groups, momentum, eta):
        super().__init__(groups, dict(lr=0.0, momentum=momentum, eta=eta, weight_decay=0.0, adapt=True))

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            wd = g["weight_decay"] if g["adapt"] else 0.0
            for p in g["params"]:
                if p.grad is None:
                    continue
                lr = g["lr"]
                if g["adapt"]:
                    wn, gn = p.norm(), p.grad.norm()
                    ratio = torch.where((wn > 0) & (gn > 0), g["eta"] * wn / (gn + wd * wn), torch.ones_like(wn))
                    lr = lr * ratio
                step = (p.grad + wd * p) * lr
                buf = self.state[p].get("buf")
                if buf is None:
                    buf = self.state[p]["buf"] = torch.zeros_like(p)
                buf.mul_(g["momentum"]).add_(step)
                p.sub_(buf)


class Block(nn.Module):
    def __init__(self, cin, width, stride, bottleneck, zero_gamma):
        super().__init__()
        cout = width * 4 if bottleneck else width
        if bottleneck:
            shapes = [(cin, width, 1, 1), (width, width, 3, stride), (width, cout, 1, 1)]
        else:
            shapes = [(cin, width, 3, stride), (width, cout, 3, 1)]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, k, s, k // 2, bias=False) for a, b, k, s in shapes)
        self.bns = nn.ModuleList(nn.BatchNorm2d(b) for _, b, _, _ in shapes)
        if zero_gamma:
            nn.init.zeros_(self.bns[-1].weight)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.cout = cout

    def forward(self, x):
        short = self.proj(x) if self.proj is not None else x
        h = x
        for i, (c, b) in enumerate(zip(self.convs, self.bns)):
            h = b(c(h))
            h = F.relu(h + short) if i == len(self.convs) - 1 else F.relu(h)
        return h


class ResNet(nn.Module):
    def __init__(self, conf):
        super().__init__()
        width, classes = int(conf["width"]), int(conf["num_classes"])
        bottleneck = conf.get("block", "bottleneck") == "bottleneck"
        stages = [int(s) for s in conf["stages"].split(",")]
        if conf.get("imagenet_stem", "true") == "true":
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, c = [], width
        for s, n in enumerate(stages):
            for i in range(n):
                b = Block(c, width << s, 2 if s > 0 and i == 0 else 1, bottleneck,
                          conf.get("zero_init_residual", "true") == "true")
                blocks.append(b)
                c = b.cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)
        nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)
        # Variance scaling (the trainer's conv_init_*): scale / fan, a normal
        # or one truncated at 2 standard deviations and widened to keep it.
        scale = float(conf.get("conv_init_scale", 2))
        fan_in = conf.get("conv_init_fan", "out") == "in"
        truncated = conf.get("conv_init_dist", "normal") == "truncated_normal"
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fans = nn.init._calculate_fan_in_and_fan_out(m.weight)
                std = math.sqrt(scale / fans[0 if fan_in else 1])
                if truncated:
                    sigma = std / 0.87962566103423978  # a standard normal's std truncated to [-2, 2]
                    nn.init.trunc_normal_(m.weight, std=sigma, a=-2 * sigma, b=2 * sigma)
                else:
                    nn.init.normal_(m.weight, std=std)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_epochs", type=int)
    ap.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: its own choice)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no_augment", action="store_true", help="train on the eval crop, unflipped")
    args = ap.parse_args()
    conf = read_conf(args.config)
    dev = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    optimizer = conf.get("optimizer", "lars")
    if optimizer not in ("sgd", "lars"):
        raise SystemExit(f"pytorch_reference: optimizer '{optimizer}' is not sgd or lars")
    precision = conf.get("precision", "fp32")
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise SystemExit(f"pytorch_reference: precision '{precision}' is not fp32, tf32, bf16 or fp16")
    if precision != "fp32" and args.device == "cpu":
        raise SystemExit(f"pytorch_reference: precision '{precision}' needs a GPU (the CPU run is fp32)")
    workers = int(conf.get("loader_threads", 4))
    batch = int(conf["batch_size"])
    train_set = Images(*list_split(args.raw, "train"), conf, train=not args.no_augment)
    val_set = Images(*list_split(args.raw, "val"), conf, train=False)
    keep_last = conf.get("train_last_batch", "drop") == "keep"
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch, shuffle=True, drop_last=not keep_last,
                                               num_workers=workers, persistent_workers=workers > 0)
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=512, num_workers=workers,
                                             persistent_workers=workers > 0)
    if conf.get("normalize", "mean_std") == "mean":  # the MLPerf reference's channel means, no division
        mean = torch.tensor([123.68, 116.78, 103.94], device=dev).view(1, 3, 1, 1)
        std = torch.ones(1, 3, 1, 1, device=dev)
    else:
        mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
        std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    prep = lambda x: ((x.to(dev).permute(0, 3, 1, 2).float() - mean) / std).contiguous(memory_format=torch.channels_last)
    model = ResNet(conf).to(dev).to(memory_format=torch.channels_last)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim == 1 else decay).append(p)
    wd, momentum = float(conf["weight_decay"]), float(conf["momentum"])
    if optimizer == "sgd":
        opt = torch.optim.SGD([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0}],
                              lr=0.0, momentum=momentum)
    else:
        opt = LARS([{"params": decay, "weight_decay": wd}, {"params": no_decay, "adapt": False}],
                   momentum=momentum, eta=float(conf.get("lars_eta", 0.001)))
    epochs = args.max_epochs or int(conf["max_epochs"])
    steps_per_epoch = -(-len(train_set) // batch) if keep_last else len(train_set) // batch
    warm = round(float(conf["warmup_epochs"]) * steps_per_epoch)
    total = round(float(conf.get("decay_epochs", 0) or conf["max_epochs"]) * steps_per_epoch)
    base, end, power = float(conf["base_lr"]), float(conf["end_lr"]), float(conf["poly_power"])
    every, offset = int(conf.get("eval_every", 4)), int(conf.get("eval_offset", 0))

    def lr_at(step):
        if step < warm:
            return base * (step + 1) / warm
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return end + (base - end) * (1 - frac) ** power

    target, smoothing = float(conf["target_accuracy"]), float(conf["label_smoothing"])
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")
    acc = 0.0
    start, step = time.time(), 0  # the trainer's run_start
    for epoch in range(1, epochs + 1):
        model.train()
        t0 = time.time()
        for x, y in train_loader:
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with torch.autocast(args.device, dtype=lowp or torch.float32, enabled=lowp is not None):
                loss = F.cross_entropy(model(prep(x)), y.to(dev), label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            step += 1
        t1 = time.time()
        if (epoch + offset) % every != 0:
            print(f"pytorch: epoch {epoch}: no eval (cadence), loss {loss.item():.4f}; train {t1 - t0:.1f} s",
                  flush=True)
            continue
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(args.device, dtype=lowp or torch.float32,
                                             enabled=lowp is not None):
            for x, y in val_loader:
                correct += (model(prep(x)).argmax(1).cpu() == y).sum().item()
        acc = correct / len(val_set)
        # The trainer's epoch line, "pytorch" for its benchmark's name.
        print(f"pytorch: epoch {epoch}: top-1 {acc:.4f} (target {target:.4f}), loss {loss.item():.4f}; "
              f"train {t1 - t0:.1f} s, eval {time.time() - t1:.1f} s", flush=True)
        if acc >= target:
            break
    reached = acc >= target
    seconds = time.time() - start
    print(f"pytorch: {'target reached' if reached else 'target NOT reached'}, time to train "
          f"{seconds:.1f} s ({seconds / 60:.2f} min)")


if __name__ == "__main__":
    main()
