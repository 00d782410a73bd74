#!/usr/bin/env python3
"""The same training in PyTorch, for comparison with build/bin/resnet: the same
ResNet (basic or bottleneck v1.5 blocks, NHWC / channels_last), the same data
(the raw ImageNet-layout folder the converter read), the same SGD/LARS-free
schedule (SGD momentum, linear warmup, polynomial decay), label smoothing,
eval after every epoch, the same precision (the conf's `precision`: bf16 or
fp16 autocast with fp32 master weights, fp16 with a GradScaler; tf32; fp32).
Prints top-1 per epoch and the time to the target.

  python3 image_classification/pytorch_reference.py --config=image_classification/configs/small.conf \
      --raw=data/resnet/small/raw [--device=cuda] [--max_epochs=N] [--no_augment]
"""
import argparse
import csv
import os
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


def load_split(raw, split, side):
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
    x = np.stack([np.asarray(Image.open(p).convert("RGB").resize((side, side))) for p in paths])
    return torch.from_numpy(x), torch.tensor(labels)


class Block(nn.Module):
    def __init__(self, cin, width, stride, bottleneck):
        super().__init__()
        cout = width * 4 if bottleneck else width
        if bottleneck:
            shapes = [(cin, width, 1, 1), (width, width, 3, stride), (width, cout, 1, 1)]
        else:
            shapes = [(cin, width, 3, stride), (width, cout, 3, 1)]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, k, s, k // 2, bias=False) for a, b, k, s in shapes)
        self.bns = nn.ModuleList(nn.BatchNorm2d(b) for _, b, _, _ in shapes)
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
                b = Block(c, width << s, 2 if s > 0 and i == 0 else 1, bottleneck)
                blocks.append(b)
                c = b.cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)
        nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_epochs", type=int)
    ap.add_argument("--no_augment", action="store_true")
    args = ap.parse_args()
    conf = read_conf(args.config)
    dev = torch.device(args.device)
    torch.manual_seed(1)
    side = int(conf["image_size"])
    xtr, ytr = load_split(args.raw, "train", side)
    xva, yva = load_split(args.raw, "val", side)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    prep = lambda x: ((x.to(dev).permute(0, 3, 1, 2).float() - mean) / std).contiguous(memory_format=torch.channels_last)
    model = ResNet(conf).to(dev).to(memory_format=torch.channels_last)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim == 1 else decay).append(p)
    opt = torch.optim.SGD([{"params": decay, "weight_decay": float(conf["weight_decay"])},
                           {"params": no_decay, "weight_decay": 0}], lr=0.0,
                          momentum=float(conf["momentum"]))
    batch = int(conf["batch_size"])
    epochs = args.max_epochs or int(conf["max_epochs"])
    steps_per_epoch = len(xtr) // batch
    warm = round(float(conf["warmup_epochs"]) * steps_per_epoch)
    total = round(float(conf.get("decay_epochs", 0) or conf["max_epochs"]) * steps_per_epoch)
    base, end, power = float(conf["base_lr"]), float(conf["end_lr"]), float(conf["poly_power"])

    def lr_at(step):
        if step < warm:
            return base * (step + 1) / warm
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return end + (base - end) * (1 - frac) ** power

    target, smoothing = float(conf["target_accuracy"]), float(conf["label_smoothing"])
    precision = conf.get("precision", "fp32")
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise SystemExit(f"pytorch_reference: precision '{precision}' is not fp32, tf32, bf16 or fp16")
    if precision != "fp32" and args.device == "cpu":
        raise SystemExit(f"pytorch_reference: precision '{precision}' needs a GPU (the CPU run is fp32)")
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")
    start, step = time.time(), 0
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(xtr))
        for s in range(steps_per_epoch):
            idx = perm[s * batch:(s + 1) * batch]
            x = prep(xtr[idx])
            if not args.no_augment:
                flip = torch.rand(len(idx), device=dev) < 0.5
                x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with torch.autocast(args.device, dtype=lowp or torch.float32, enabled=lowp is not None):
                loss = F.cross_entropy(model(x), ytr[idx].to(dev), label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            step += 1
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(args.device, dtype=lowp or torch.float32,
                                             enabled=lowp is not None):
            for s in range(0, len(xva), 512):
                correct += (model(prep(xva[s:s + 512])).argmax(1).cpu() == yva[s:s + 512]).sum().item()
        acc = correct / len(xva)
        print("epoch %d: top-1 %.4f loss %.4f  %.1f s" % (epoch, acc, loss.item(), time.time() - start), flush=True)
        if acc >= target:
            print("pytorch: target %.3f reached at epoch %d, time to train %.1f s" % (target, epoch, time.time() - start))
            return
    print("pytorch: target %.3f not reached in %d epochs (%.1f s)" % (target, epochs, time.time() - start))


if __name__ == "__main__":
    main()
