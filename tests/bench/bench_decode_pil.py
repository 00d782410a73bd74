#!/usr/bin/env python3
"""PIL counterpart of bench_decode: decode + random-resized-crop + flip to
224x224 RGB on one core, over the same JPEG files held in memory.

  pil:        torchvision's RandomResizedCrop path (Image.open, convert RGB,
              resize of the crop box with bilinear filtering, flip)
  pil_draft:  the same after Image.draft(), PIL's DCT scaling, asked for the
              size that keeps the crop at least 224 pixels on each side

Prints one "variant images per CPU-second" line each.
  bench_decode_pil.py --list files.txt --seconds 5
"""
import argparse
import io
import math
import random
import time

import numpy as np
from PIL import Image


def crop_params(width, height, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop.get_params, with Python's RNG."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    in_ratio = width / height
    w, h = width, height
    if in_ratio < ratio[0]:
        h = int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        w = int(round(h * ratio[1]))
    return (width - w) // 2, (height - h) // 2, w, h


def sample(data, rng, side, draft):
    img = Image.open(io.BytesIO(data))
    width, height = img.size
    x, y, w, h = crop_params(width, height, rng)
    flip = rng.random() < 0.5
    if draft:
        img.draft("RGB", (math.ceil(width * side / w), math.ceil(height * side / h)))
        sx, sy = img.size[0] / width, img.size[1] / height
        x, y, w, h = x * sx, y * sy, w * sx, h * sy
    img = img.convert("RGB")
    out = img.resize((side, side), Image.BILINEAR, box=(x, y, x + w, y + h))
    if flip:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def run(files, seconds, side, draft):
    rng = random.Random(1)
    done = 0
    # CPU time, as bench_decode: images per CPU-second = images/s per core.
    start = now = time.process_time()
    while now - start < seconds:
        for data in files:
            sample(data, rng, side, draft)
            done += 1
        now = time.process_time()
    return done / (now - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", required=True)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--side", type=int, default=224)
    args = ap.parse_args()
    with open(args.list) as f:
        files = [open(p.strip(), "rb").read() for p in f if p.strip()]
    print(f"files {len(files)}")
    print(f"pil {run(files, args.seconds, args.side, False):.1f}")
    print(f"pil_draft {run(files, args.seconds, args.side, True):.1f}")


if __name__ == "__main__":
    main()
