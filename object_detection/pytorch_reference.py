#!/usr/bin/env python3
"""The same SSD training in PyTorch, for comparison with build/bin/ssd:
- the same network from the same config keys: the ResNet backbone (`stages`,
  `stage_strides`, `width`, `imagenet_stem`; basic blocks, a 1x1 projection
  with batch norm where the shape changes, batch norm momentum 0.1, eps 1e-5),
  the extra blocks (`extra_blocks`: 1x1 conv + ReLU, 3x3 conv + ReLU, with
  biases, no batch norm) and per map a 3x3 location head and class head, their
  outputs viewed as (N, D, boxes, H, W) and permuted to the trainer's box order;
  the same initialisation rules (Kaiming normal over fan-out for the backbone,
  batch norm gamma 1 and beta 0, Xavier-uniform extras and heads with PyTorch's
  default conv biases), so the same parameter count;
- the same default boxes (`box_steps`, `box_scales`, `box_ratios`: map, then
  box shape, then row-major location; xywh clamped to [0, 1] in fp32), the
  same matching (each box its best ground truth when IoU > 0.5, each ground
  truth its first best box, a later one winning a shared box) and encoding
  (variances 0.1 / 0.2), done per sample in the loader workers as the trainer
  does on its loader threads;
- the same loss: smooth L1 (beta 1) over the positives' offsets plus
  cross-entropy over the positives and the 3:1 hardest negatives (the
  positives' losses zeroed, sorted stably, the first min(3P, boxes) mined, so
  a positive counts twice once 4P > boxes), per image over P, images without
  positives 0, the mean over the batch;
- the same data: the raw COCO-layout folder the converter read (its JSON and
  JPEGs, decoded again every epoch by `loader_threads` DataLoader workers with
  PIL); boxes made fractions and clipped as datasets/coco_to_lmdb does, labels
  1..N in the JSON's category order, crowd boxes left out of training (and
  counted by the mAP), training only on images with annotations; the
  trainer's augmentation (object_detection/ssd_data.c): the SSD random crop
  (a mode of 7 chosen again until one takes; `max_samples` candidates per
  mode; w, h in [0.3, 1], aspect 1/2..2; every box IoU > the mode's minimum;
  a box centre strictly inside; boxes kept by centre, clipped, slivers
  dropped), the crop in whole pixels as ssd_crop_pixels truncates it, a flip
  with probability 1/2, the trainer's bilinear resize bit for bit (half-pixel
  centres, 7-bit fixed-point weights, no antialiasing), then the colour jitter
  (brightness 0.125, contrast 0.5, saturation 0.5, hue 0.05 in a random
  order, as Pillow's ImageEnhance and HSV conversion); ImageNet's mean and
  std; eval resizes the whole image;
- the same optimizer: SGD with momentum as PyTorch has it (the trainer's is
  written to match it), `weight_decay` on every tensor (or, with
  decay_bn_and_bias false, not on biases and batch norm), the linear warmup
  from 0 over `warmup_steps`, then x `decay_factor` at each of
  `decay_epochs`, stepped per batch, drop_last epochs of `batch_size`;
- the same eval cadence (`eval_every`, `eval_offset`, or the epochs of
  `eval_epochs`) and the same decode:
  softmax, per class the scores > 0.05, the best 200 (ties to the lower box),
  greedy NMS dropping IoU >= 0.5, the best 200 of the image (ties to the
  lower class), boxes in pixels of the original image; scored by the suite's
  pycocotools-equal scorer build/bin/coco_eval (`--coco_eval`), the
  trainer's in-process mAP on the same detections;
- the same stop rule: mAP >= `target_accuracy` after an eval, or the epoch
  limit; the same clock: from the point the trainer logs run_start (model and
  optimizer made; the data set's listing read, as the trainer counts its
  LMDB records before it) to the eval that reaches the target, image
  decoding, the decode and the scoring included.
Differences that stay:
- the random streams: PyTorch's generator for the weights, Python's for the
  shuffle and the augmentation (per sample from seed, epoch and index, so
  independent of the worker count), not the trainer's Philox streams: the
  same rules, other draws;
- JPEG decoding: PIL decodes to RGB (libjpeg's chroma upsampling, then its
  colour conversion); the trainer resizes the Y, Cb and Cr planes at their
  own resolutions and converts after: pixels differ by a level or so;
- the hue adjustment is Pillow's HSV round trip, which the trainer's matches
  but for about 1 value in 1,000 (up to 4 levels); brightness, contrast and
  saturation are the same;
- the loss's cross-entropy is fp32 (the trainer computes it in double and
  rounds once), which may reorder near-tied negatives in the mining;
- the `precision` key as the trainer reads it: bf16 or fp16 autocast over
  fp32 master weights (fp16 with a GradScaler), TF32 for tf32, fp32 on the
  CPU; no multi-rank run.
Prints the trainer's epoch lines ("pytorch: epoch N: mAP X (target Y), ...;
train T s, eval E s") and its last line ("pytorch: target reached, time to
train S s"), which `make bench-cpu` reads.

  python3 object_detection/pytorch_reference.py \\
      --config=object_detection/configs/small.conf --data_dir=data/ssd/small \\
      [--raw=DIR] [--device=cuda] [--max_epochs=N] [--threads=N] [--seed=N] [--KEY=VALUE]
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageEnhance

# train.c's keys that the small config may leave out, with the trainer's defaults.
DEFAULTS = {
    "image_size": "300", "stages": "3,4,6", "stage_strides": "1,2,1", "width": "64",
    "imagenet_stem": "true",
    "extra_blocks": "256:512:2:1,256:512:2:1,128:256:2:1,128:256:1:0,128:256:1:0",
    "box_steps": "8,16,32,64,100,300", "box_scales": "21,45,99,153,207,261,315",
    "box_ratios": "2;2,3;2,3;2,3;2;2", "max_samples": "1", "loader_threads": "8",
    "batch_size": "32", "base_lr": "2.5e-3", "warmup_steps": "300", "decay_epochs": "40,50",
    "decay_factor": "0.1", "momentum": "0.9", "weight_decay": "5e-4", "decay_bn_and_bias": "true",
    "max_epochs": "80", "target_accuracy": "0.23", "eval_every": "5", "eval_offset": "0",
    "eval_epochs": "", "backbone": "", "precision": "fp32",
}
VAR_XY, VAR_WH = np.float32(0.1), np.float32(0.2)  # ssd_boxes.h's box variances
MATCH_IOU = np.float32(0.5)
SCORE_MIN, NMS_IOU, MAX_PER_CLASS, MAX_OUTPUT = np.float32(0.05), np.float32(0.5), 200, 200
CROP_MIN_IOU = [None, 0.1, 0.3, 0.5, 0.7, 0.9, -math.inf]  # mode 0: the whole image
CROP_MAX_ROUNDS = 1000
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
F32 = np.float32


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


def ints(text, sep=","):
    return [int(v) for v in text.split(sep) if v.strip()]


# ---------------------------------------------------------------- data set
def read_split(raw, split):
    """The images of one split of the raw COCO layout: a list of (path, id,
    width, height, boxes (n, 4) fp32 ltrb fractions, labels (n) with crowd
    boxes negative), in the JSON's image order, and the category ids by label
    (index 0 unused). Boxes are clipped and made fractions as coco_to_lmdb
    does; boxes without area are dropped."""
    path = os.path.join(raw, "annotations", f"instances_{split}2017.json")
    with open(path) as f:
        coco = json.load(f)
    category_ids = [None] + [c["id"] for c in coco["categories"]]
    label_of = {cid: i for i, cid in enumerate(category_ids) if i}
    images = {im["id"]: im for im in coco["images"]}
    boxes = {i: [] for i in images}
    for a in coco["annotations"]:
        im = images[a["image_id"]]
        W, H = float(im["width"]), float(im["height"])
        x, y, w, h = (float(v) for v in a["bbox"])
        x0, y0, x1, y1 = max(x, 0.0), max(y, 0.0), min(x + w, W), min(y + h, H)
        if x1 <= x0 or y1 <= y0:
            continue
        label = label_of[a["category_id"]]
        boxes[a["image_id"]].append(([x0 / W, y0 / H, x1 / W, y1 / H], -label if a.get("iscrowd") else label))
    out = []
    for im in coco["images"]:
        b = boxes[im["id"]]
        out.append((os.path.join(raw, f"{split}2017", im["file_name"]), im["id"], im["width"], im["height"],
                    np.array([v for v, _ in b], dtype=F32).reshape(-1, 4),
                    np.array([l for _, l in b], dtype=np.int64)))
    return out, category_ids


# ---------------------------------------------------------------- boxes
def iou(a, b):
    """IoU of ltrb boxes a (..., 4) and b (..., 4) in fp32, as ssd_iou."""
    w = np.maximum(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), F32(0))
    h = np.maximum(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), F32(0))
    inter = w * h
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (area_a + area_b - inter)


def default_boxes(image_size, feat_sizes, steps, scales, ratios):
    """(n, 4) xywh and ltrb fp32 default boxes in the trainer's order: map,
    box shape (small square, large square, each ratio's pair), row, column."""
    xywh = []
    for k, f in enumerate(feat_sizes):
        s1, s2 = scales[k] / image_size, scales[k + 1] / image_size
        shapes = [(s1, s1), (math.sqrt(s1 * s2),) * 2]
        for r in ratios[k]:
            shapes += [(s1 * math.sqrt(r), s1 / math.sqrt(r)), (s1 / math.sqrt(r), s1 * math.sqrt(r))]
        fk = image_size / steps[k]
        centre = (np.arange(f) + 0.5) / fk  # double, rounded once as the trainer's
        cy, cx = np.meshgrid(centre, centre, indexing="ij")
        for w, h in shapes:
            xywh.append(np.stack([cx.ravel(), cy.ravel(), np.full(f * f, w), np.full(f * f, h)], 1))
    xywh = np.clip(np.concatenate(xywh).astype(F32), F32(0), F32(1))
    half = F32(0.5)
    ltrb = np.stack([xywh[:, 0] - half * xywh[:, 2], xywh[:, 1] - half * xywh[:, 3],
                     xywh[:, 0] + half * xywh[:, 2], xywh[:, 1] + half * xywh[:, 3]], 1)
    return xywh, ltrb


def match(db_xywh, db_ltrb, gt, gt_labels):
    """ssd_match: (n) labels (0 background) and (n, 4) encoded offsets."""
    n = len(db_xywh)
    labels, offsets = np.zeros(n, dtype=np.int64), np.zeros((n, 4), dtype=F32)
    if len(gt) == 0:
        return labels, offsets
    ious = iou(gt[:, None, :], db_ltrb[None, :, :])  # (G, n)
    best_gt = ious.argmax(0)  # the first best, as the trainer's strict >
    best_iou = ious[best_gt, np.arange(n)]
    for g in range(len(gt)):  # forced matches in order: a later ground truth wins a shared box
        a = ious[g].argmax()
        best_gt[a], best_iou[a] = g, F32(2)
    pos = best_iou > MATCH_IOU
    g, d = gt[best_gt[pos]], db_xywh[pos]
    half = F32(0.5)
    x, y = half * (g[:, 0] + g[:, 2]), half * (g[:, 1] + g[:, 3])
    w, h = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    inv_xy, inv_wh = F32(1) / VAR_XY, F32(1) / VAR_WH
    offsets[pos, 0] = inv_xy * (x - d[:, 0]) / d[:, 2]
    offsets[pos, 1] = inv_xy * (y - d[:, 1]) / d[:, 3]
    offsets[pos, 2] = inv_wh * np.log((w / d[:, 2]).astype(np.float64)).astype(F32)
    offsets[pos, 3] = inv_wh * np.log((h / d[:, 3]).astype(np.float64)).astype(F32)
    labels[pos] = gt_labels[best_gt[pos]]
    return labels, offsets


def decode(db_xywh, loc):
    """ssd_decode of (..., n, 4) offsets to ltrb boxes, fp32."""
    x = VAR_XY * loc[..., 0] * db_xywh[:, 2] + db_xywh[:, 0]
    y = VAR_XY * loc[..., 1] * db_xywh[:, 3] + db_xywh[:, 1]
    w = np.exp((VAR_WH * loc[..., 2]).astype(np.float64)).astype(F32) * db_xywh[:, 2]
    h = np.exp((VAR_WH * loc[..., 3]).astype(np.float64)).astype(F32) * db_xywh[:, 3]
    half = F32(0.5)
    return np.stack([x - half * w, y - half * h, x + half * w, y + half * h], -1)


def softmax(logits):
    """The trainer's softmax: the sum in double, each probability rounded once."""
    x = logits.astype(np.float64)
    m = logits.max(-1, keepdims=True).astype(np.float64)
    lse = m + np.log(np.exp(x - m).sum(-1, keepdims=True))
    return np.exp(x - lse).astype(F32)


def detect(probs, boxes):
    """ssd_detect_cpu for one image: (label, score, ltrb) of at most 200
    detections, best first."""
    kept = []
    for c in range(1, probs.shape[1]):
        s = probs[:, c]
        cand = np.nonzero(s > SCORE_MIN)[0]
        cand = cand[np.argsort(-s[cand], kind="stable")][:MAX_PER_CLASS]  # ties to the lower box
        b = boxes[cand]
        over = ~(iou(b[:, None, :], b[None, :, :]) < NMS_IOU)  # a NaN IoU drops too
        alive = np.ones(len(cand), dtype=bool)
        for i in range(len(cand)):
            if alive[i]:
                kept.append((c, s[cand[i]], b[i]))
                alive[i + 1:] &= ~over[i, i + 1:]
    order = sorted(range(len(kept)), key=lambda i: -kept[i][1])  # stable: ties to the lower class
    return [kept[i] for i in order[:MAX_OUTPUT]]


# ---------------------------------------------------------------- augmentation
def uniform(rng, lo, hi):
    return F32(lo) + (F32(hi) - F32(lo)) * F32(rng.random())


def random_crop(boxes, max_tries, rng):
    """ssd_random_crop: (left, top, right, bottom) fp32 fractions, or None
    for the whole image."""
    for _ in range(CROP_MAX_ROUNDS):
        mode = rng.randrange(7)
        if mode == 0:
            return None
        for _ in range(max_tries):
            w, h = uniform(rng, 0.3, 1.0), uniform(rng, 0.3, 1.0)
            if w / h < F32(0.5) or w / h > F32(2.0):
                continue
            left, top = uniform(rng, 0.0, F32(1) - w), uniform(rng, 0.0, F32(1) - h)
            c = np.array([left, top, left + w, top + h], dtype=F32)
            if not np.all(iou(boxes, c) > F32(CROP_MIN_IOU[mode])):
                continue
            half = F32(0.5)
            xc, yc = half * (boxes[:, 0] + boxes[:, 2]), half * (boxes[:, 1] + boxes[:, 3])
            if np.any((xc > c[0]) & (xc < c[2]) & (yc > c[1]) & (yc < c[3])):
                return c
    return None


def crop_boxes(c, boxes, labels):
    """ssd_crop_boxes: the boxes whose centre lies inside, clipped, relative."""
    half = F32(0.5)
    xc, yc = half * (boxes[:, 0] + boxes[:, 2]), half * (boxes[:, 1] + boxes[:, 3])
    inside = (xc > c[0]) & (xc < c[2]) & (yc > c[1]) & (yc < c[3])
    b, w, h = boxes[inside], c[2] - c[0], c[3] - c[1]
    out = np.stack([(np.maximum(b[:, 0], c[0]) - c[0]) / w, (np.maximum(b[:, 1], c[1]) - c[1]) / h,
                    (np.minimum(b[:, 2], c[2]) - c[0]) / w, (np.minimum(b[:, 3], c[3]) - c[1]) / h], 1)
    keep = (out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])  # slivers of zero size left out
    return out[keep].astype(F32), labels[inside][keep]


def crop_pixels(c, width, height):
    """ssd_crop_pixels: (x, y, w, h) whole pixels of a relative crop."""
    x0, x1 = int(c[0] * F32(width)), min(int(c[2] * F32(width)), width)
    y0, y1 = int(c[1] * F32(height)), min(int(c[3] * F32(height)), height)
    x0, y0 = min(x0, x1 - 1), min(y0, y1 - 1)
    return x0, y0, x1 - x0, y1 - y0


def axis_taps(start, extent, src_len, out_len):
    """augment.c's taps: the left source index and the right weight in 1/128."""
    step = F32(extent) / F32(out_len)
    s = F32(start) + (np.arange(out_len, dtype=F32) + F32(0.5)) * step - F32(0.5)
    s = np.clip(s, F32(0), F32(src_len - 1))
    i = s.astype(np.int64)
    if src_len == 1:
        return i, np.zeros_like(i)
    i = np.minimum(i, src_len - 2)
    frac = np.floor((s - i.astype(F32)) * F32(128) + F32(0.5)).astype(np.int64)  # lroundf of a value >= 0
    return i, frac


def crop_resize(img, x, y, w, h, flip, side):
    """The trainer's bilinear crop-resize (augment.c), bit for bit: the
    vertical blend first, then the horizontal, in 7-bit fixed point."""
    H, W = img.shape[:2]
    xi, xf = axis_taps(x, w, W, side)
    yi, yf = axis_taps(y, h, H, side)
    src = img.astype(np.int64)
    rows = src[yi] * (128 - yf)[:, None, None] + src[np.minimum(yi + 1, H - 1)] * yf[:, None, None]
    out = (rows[:, xi] * (128 - xf)[None, :, None] + rows[:, np.minimum(xi + 1, W - 1)] * xf[None, :, None]
           + (1 << 13)) >> 14
    if flip:
        out = out[:, ::-1]
    return np.ascontiguousarray(out.astype(np.uint8))


def adjust_hue(img, shift):
    """torchvision's adjust_hue on a PIL image: Pillow's HSV, H + shift * 255 wrapping."""
    h, s, v = img.convert("HSV").split()
    delta = int(shift * 255) % 256  # truncated toward zero, then wrapped as a uint8
    h = Image.fromarray(((np.asarray(h).astype(np.int64) + delta) % 256).astype(np.uint8), "L")
    return Image.merge("HSV", (h, s, v)).convert("RGB")


def color_jitter(pixels, rng):
    """augment_color_jitter with brightness 0.125, contrast 0.5, saturation
    0.5, hue 0.05: the four factors drawn, then applied in a random order."""
    factor = [uniform(rng, 0.875, 1.125), uniform(rng, 0.5, 1.5), uniform(rng, 0.5, 1.5),
              uniform(rng, -0.05, 0.05)]
    order = [0, 1, 2, 3]
    rng.shuffle(order)
    img = Image.fromarray(pixels)
    for k in order:
        f = float(factor[k])
        if k == 0:
            img = ImageEnhance.Brightness(img).enhance(f)
        elif k == 1:
            img = ImageEnhance.Contrast(img).enhance(f)
        elif k == 2:
            img = ImageEnhance.Color(img).enhance(f)
        else:
            img = adjust_hue(img, f)
    return np.asarray(img)


class Detection(torch.utils.data.Dataset):
    """One sample a call, addressed as (epoch, index): for training the
    augmented uint8 (S, S, 3) image with its matched labels and offsets; for
    eval the resized image, its COCO id and (height, width)."""

    def __init__(self, items, side, boxes, max_tries, seed, train):
        self.items, self.side, self.boxes = items, side, boxes
        self.max_tries, self.seed, self.train = max_tries, seed, train

    def __len__(self):
        return len(self.items)

    def __getitem__(self, key):
        epoch, i = key
        path, image_id, _, _, boxes, labels = self.items[i]
        img = np.asarray(Image.open(path).convert("RGB"))
        height, width = img.shape[:2]
        if not self.train:
            pixels = crop_resize(img, 0, 0, width, height, False, self.side)
            return torch.from_numpy(pixels), image_id, torch.tensor([height, width])
        rng = random.Random(f"{self.seed}:{epoch}:{i}")  # the sample's own stream
        keep = labels > 0  # crowd boxes: not trained on
        boxes, labels = boxes[keep], labels[keep]
        c = random_crop(boxes, self.max_tries, rng)
        if c is not None:
            boxes, labels = crop_boxes(c, boxes, labels)
        flip = rng.random() < 0.5
        if flip:
            boxes = np.stack([F32(1) - boxes[:, 2], boxes[:, 1], F32(1) - boxes[:, 0], boxes[:, 3]], 1)
        x, y, w, h = crop_pixels(c, width, height) if c is not None else (0, 0, width, height)
        pixels = color_jitter(crop_resize(img, x, y, w, h, flip, self.side), rng)
        target, offsets = match(*self.boxes, boxes, labels)
        return torch.from_numpy(pixels.copy()), torch.from_numpy(target), torch.from_numpy(offsets)


class EpochOrder(torch.utils.data.Sampler):
    """Each epoch's keys (epoch, index): a fresh permutation from the seed
    and the epoch for training, the file's order for eval."""

    def __init__(self, n, seed, shuffle):
        self.n, self.seed, self.shuffle, self.epoch = n, seed, shuffle, 0

    def __len__(self):
        return self.n

    def __iter__(self):
        order = list(range(self.n))
        if self.shuffle:
            random.Random(f"shuffle:{self.seed}:{self.epoch}").shuffle(order)
        return iter([(self.epoch, i) for i in order])


# ---------------------------------------------------------------- network
def kaiming_conv(cin, cout, k, stride, pad):
    conv = nn.Conv2d(cin, cout, k, stride, pad, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv_a, self.bn_a = kaiming_conv(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout)
        self.conv_b, self.bn_b = kaiming_conv(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(kaiming_conv(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        short = self.proj(x) if self.proj is not None else x
        h = F.relu(self.bn_a(self.conv_a(x)))
        return F.relu(self.bn_b(self.conv_b(h)) + short)


def xavier_conv(cin, cout, k, stride, pad):
    """Xavier-uniform weights; the bias keeps PyTorch's default U(+-1/sqrt(fan_in))."""
    conv = nn.Conv2d(cin, cout, k, stride, pad)
    nn.init.xavier_uniform_(conv.weight)
    return conv


class SSD(nn.Module):
    """The backbone, the extra blocks and the heads of ssd_model.c, from the
    config's keys; forward gives loc (N, boxes, 4) and logits (N, boxes, C)."""

    def __init__(self, conf, num_classes, boxes_per_map):
        super().__init__()
        width, strides = int(conf["width"]), ints(conf["stage_strides"])
        if conf["imagenet_stem"] == "true":
            stem = [kaiming_conv(3, width, 7, 2, 3), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        else:
            stem = [kaiming_conv(3, width, 3, 1, 1), nn.BatchNorm2d(width), nn.ReLU()]
        layers, c = stem, width
        for s, n in enumerate(ints(conf["stages"])):
            for i in range(n):
                layers.append(BasicBlock(c, width << s, strides[s] if i == 0 else 1))
                c = width << s
        self.backbone = nn.Sequential(*layers)
        self.extras = nn.ModuleList()
        channels = [c]
        for item in conf["extra_blocks"].split(","):
            mid, out, stride, pad = ints(item, ":")
            self.extras.append(nn.Sequential(xavier_conv(c, mid, 1, 1, 0), nn.ReLU(),
                                             xavier_conv(mid, out, 3, stride, pad), nn.ReLU()))
            c = out
            channels.append(c)
        self.loc = nn.ModuleList(xavier_conv(ch, 4 * nb, 3, 1, 1) for ch, nb in zip(channels, boxes_per_map))
        self.conf = nn.ModuleList(xavier_conv(ch, num_classes * nb, 3, 1, 1)
                                  for ch, nb in zip(channels, boxes_per_map))
        self.boxes_per_map, self.num_classes = boxes_per_map, num_classes

    def feature_maps(self, x):
        maps = [self.backbone(x)]
        for e in self.extras:
            maps.append(e(maps[-1]))
        return maps

    def forward(self, x):
        locs, logits = [], []
        for h, nb, lh, ch in zip(self.feature_maps(x), self.boxes_per_map, self.loc, self.conf):
            n, _, side, _ = h.shape
            # Channel d * nb + k is box k's value d: (N, D, nb, H, W) -> (N, nb, H, W, D).
            locs.append(lh(h).view(n, 4, nb, side, side).permute(0, 2, 3, 4, 1).reshape(n, -1, 4))
            logits.append(ch(h).view(n, self.num_classes, nb, side, side).permute(0, 2, 3, 4, 1)
                          .reshape(n, -1, self.num_classes))
        return torch.cat(locs, 1), torch.cat(logits, 1)


def make_model(conf, num_classes, dev):
    """The config's network in training mode, its default boxes (xywh and
    ltrb) and its maps' sizes."""
    side = int(conf["image_size"])
    ratios = [[float(r) for r in m.split(",") if r] for m in conf["box_ratios"].split(";")]
    model = SSD(conf, num_classes, [2 + 2 * len(r) for r in ratios]).to(dev)
    with torch.no_grad():  # the map sizes, probed in eval mode so that no BN statistic moves
        model.eval()
        feat_sizes = [m.shape[2] for m in model.feature_maps(torch.zeros(1, 3, side, side, device=dev))]
        model.train()
    db_xywh, db_ltrb = default_boxes(side, feat_sizes, ints(conf["box_steps"]),
                                     [float(s) for s in conf["box_scales"].split(",")], ratios)
    return model, db_xywh, db_ltrb, feat_sizes


def ssd_loss(loc, logits, gloc, glabel):
    """ssd_loss_cpu: (smooth L1 of positives + CE of positives and 3:1 mined
    negatives) / P per image, 0 without positives, mean over the batch."""
    pos = glabel > 0  # (B, n)
    n_pos = pos.sum(1)
    loc_loss = (F.smooth_l1_loss(loc, gloc, reduction="none", beta=1.0).sum(2) * pos).sum(1)
    con = F.cross_entropy(logits.flatten(0, 1), glabel.flatten(), reduction="none").view_as(glabel)
    ranked = con.detach().masked_fill(pos, 0.0)
    order = ranked.sort(dim=1, descending=True, stable=True).indices  # ties to the lower box
    rank = order.argsort(1)
    mined = rank < (3 * n_pos).clamp(max=glabel.shape[1])[:, None]
    con_loss = (con * (pos.float() + mined.float())).sum(1)
    per_image = torch.where(n_pos > 0, (loc_loss + con_loss) / n_pos.clamp(min=1), torch.zeros_like(loc_loss))
    return per_image.mean()


# ---------------------------------------------------------------- eval
def evaluate(model, loader, prep, db_xywh, category_ids, annotations, coco_eval, device):
    """COCO mAP@[.5:.95] of the decoded val split, scored by coco_eval."""
    model.eval()
    results = []
    with torch.no_grad():
        for x, ids, sizes in loader:
            loc, logits = model(prep(x.to(device)))
            probs = softmax(logits.float().cpu().numpy())
            boxes = decode(db_xywh, loc.float().cpu().numpy())
            for p, b, image_id, (h, w) in zip(probs, boxes, ids.tolist(), sizes.tolist()):
                for label, score, ltrb in detect(p, b):
                    # As the trainer: the width and height in fp32, then pixels in double.
                    l, t, bw, bh = (float(v) for v in (ltrb[0], ltrb[1], ltrb[2] - ltrb[0], ltrb[3] - ltrb[1]))
                    results.append({"image_id": image_id, "category_id": category_ids[label],
                                    "bbox": [l * w, t * h, bw * w, bh * h], "score": float(score)})
    model.train()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(results, f)
    try:
        out = subprocess.run([coco_eval, annotations, f.name, "--digits=17"], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    stats = [float(line.rsplit("=", 1)[1]) for line in out.splitlines() if "=" in line]
    return stats[0], stats[1], stats[2]


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--data_dir", help="the trainer's DATA_DIR; the raw folder is DATA_DIR/raw")
    ap.add_argument("--raw", help="the raw COCO-layout folder (default DATA_DIR/raw)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_epochs", type=int)
    ap.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: its own choice)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--coco_eval", default="build/bin/coco_eval", help="the suite's COCO scorer")
    args, extra = ap.parse_known_args()
    conf = read_conf(args.config)
    for flag in extra:  # --KEY=VALUE overrides a config key, as the trainer's flags do
        key, _, value = flag.lstrip("-").partition("=")
        if not flag.startswith("--") or key not in conf or not value:
            raise SystemExit(f"pytorch_reference: unknown flag '{flag}'")
        conf[key] = value
    if args.max_epochs:
        conf["max_epochs"] = str(args.max_epochs)
    raw = args.raw or (args.data_dir and os.path.join(args.data_dir, "raw"))
    if not raw:
        raise SystemExit("pytorch_reference: give --data_dir (or --raw)")
    precision = conf["precision"]
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise SystemExit(f"pytorch_reference: precision '{precision}' is not fp32, tf32, bf16 or fp16")
    if precision != "fp32" and args.device == "cpu":
        raise SystemExit(f"pytorch_reference: precision '{precision}' needs a GPU (the CPU run is fp32)")
    if conf["backbone"]:  # never random weights where the config asks for pretrained ones
        raise SystemExit(f"pytorch_reference: backbone '{conf['backbone']}': pretrained backbones are not "
                         "supported (random initialisation only)")
    dev = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    # The data set's listing (the trainer counts its records before run_start).
    train_items, category_ids = read_split(raw, "train")
    train_items = [it for it in train_items if len(it[5])]  # images with annotations, as the converter
    val_items, _ = read_split(raw, "val")
    num_classes = len(category_ids)  # background included

    side = int(conf["image_size"])
    model, db_xywh, db_ltrb, feat_sizes = make_model(conf, num_classes, dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch: {n_params} parameters, {len(db_xywh)} default boxes, {num_classes} classes, "
          f"maps {feat_sizes}", flush=True)

    # The optimizer and schedule.
    wd, momentum = float(conf["weight_decay"]), float(conf["momentum"])
    if conf["decay_bn_and_bias"] == "true":
        groups = [{"params": list(model.parameters()), "weight_decay": wd}]
    else:  # biases and batch norm (the 1-D tensors) without decay
        groups = [{"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": wd},
                  {"params": [p for p in model.parameters() if p.ndim == 1], "weight_decay": 0.0}]
    opt = torch.optim.SGD(groups, lr=0.0, momentum=momentum)
    batch = int(conf["batch_size"])
    steps_per_epoch = len(train_items) // batch
    base, warm, factor = float(conf["base_lr"]), int(conf["warmup_steps"]), float(conf["decay_factor"])
    boundaries = ints(conf["decay_epochs"])

    def lr_at(step):  # schedule.c's SCHED_STEP with warmup factor 0
        if step < warm:
            return base * (step + 1) / warm
        epoch = step // steps_per_epoch
        return base * factor ** sum(epoch >= b for b in boundaries)

    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
    scale, shift = 1.0 / (255.0 * std), -mean / std

    def prep(x):  # (N, S, S, 3) uint8 -> normalised (N, 3, S, S) fp32
        return x.permute(0, 3, 1, 2).float() * scale + shift

    target, epochs = float(conf["target_accuracy"]), int(conf["max_epochs"])
    every, offset = int(conf["eval_every"]), int(conf["eval_offset"])
    fixed = ints(conf["eval_epochs"])  # run.c's eval_epochs: evals after exactly these epochs
    workers = int(conf["loader_threads"])
    annotations = os.path.join(raw, "annotations", "instances_val2017.json")

    start = time.time()  # the trainer's run_start: the data set is read from here on
    train_order = EpochOrder(len(train_items), args.seed, shuffle=True)
    train_set = Detection(train_items, side, (db_xywh, db_ltrb), int(conf["max_samples"]), args.seed, True)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch, sampler=train_order, drop_last=True,
                                               num_workers=workers, persistent_workers=workers > 0)
    val_set = Detection(val_items, side, None, 1, args.seed, False)
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=batch, sampler=EpochOrder(len(val_items), 0, False),
                                             num_workers=workers, persistent_workers=workers > 0)
    # The trainer's precision: bf16 or fp16 autocast over fp32 master weights
    # (fp16 with a GradScaler), TF32 for tf32; the loss in fp32.
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def autocast():
        return torch.autocast(args.device, dtype=lowp or torch.float32, enabled=lowp is not None)

    step, m = 0, 0.0
    model.train()
    for epoch in range(1, epochs + 1):
        train_order.epoch = epoch
        loss_sum, n_steps = torch.zeros((), device=dev), 0  # read once an epoch, as the trainer does
        t0 = time.time()
        for x, labels, offsets in train_loader:
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with autocast():
                loc, logits = model(prep(x.to(dev)))
            loss = ssd_loss(loc.float(), logits.float(), offsets.to(dev), labels.to(dev))
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.detach()
            n_steps += 1
            step += 1
        mean_loss = loss_sum.item() / n_steps
        t1 = time.time()
        if (epoch not in fixed) if fixed else (epoch + offset) % every != 0:
            print(f"pytorch: epoch {epoch}: no eval (cadence), mean train loss {mean_loss:.4f}; "
                  f"train {t1 - t0:.1f} s", flush=True)
            continue
        with autocast():
            m, ap50, ap75 = evaluate(model, val_loader, prep, db_xywh, category_ids, annotations,
                                     args.coco_eval, dev)
        # The trainer's epoch line, "pytorch" for its benchmark's name.
        print(f"pytorch: epoch {epoch}: mAP {m:.4f} (target {target:.4f}), AP50 {ap50:.4f}, AP75 {ap75:.4f}, "
              f"mean train loss {mean_loss:.4f}; train {t1 - t0:.1f} s, eval {time.time() - t1:.1f} s",
              flush=True)
        if m >= target:
            break
    seconds = time.time() - start
    print(f"pytorch: {'target reached' if m >= target else 'target NOT reached'}, time to train "
          f"{seconds:.1f} s ({seconds / 60:.2f} min)")


if __name__ == "__main__":
    main()
