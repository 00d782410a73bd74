#!/usr/bin/env python3
"""build/bin/coco_eval against pycocotools' COCOeval (iouType "bbox") on
random annotation and results files: all 12 stats equal to 1e-6, and the
summary printed as pycocotools prints it, line for line.

Each seed makes images with non-contiguous ids, categories with
non-contiguous ids, boxes of every area range (areas exactly 32^2 and 96^2
among them, and an "area" field that is not the box's), crowd regions,
images without ground truth, images without detections, detections on
integer pixels (IoUs that land on a threshold) and scores from a few values
(ties within and across images), and one image and category with more than
100 detections (the maxDets cut).

    python3 tests/object_detection/test_coco_eval_pycocotools.py BUILD_DIR
"""
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from cases import run_case  # noqa: E402

SEEDS = range(1, 9)
CATEGORY_IDS = [1, 3, 7, 18, 44, 90]
# Box sides that give small (< 32^2), medium and large (> 96^2) boxes.
SIDES = [(2, 30), (32, 95), (96, 300)]


def box(rng, width, height):
    """[x, y, w, h] inside the image, on integer pixels half of the time."""
    lo, hi = SIDES[rng.randrange(3)]
    w, h = rng.uniform(lo, hi), rng.uniform(lo, hi)
    x, y = rng.uniform(0, max(1, width - w)), rng.uniform(0, max(1, height - h))
    if rng.random() < 0.5:
        return [float(round(v)) for v in (x, y, w, h)]
    return [x, y, w, h]


def annotation_area(rng, b):
    """A segment's area: the box's scaled down, or now and then exactly a
    range's bound."""
    r = rng.random()
    if r < 0.05:
        return 32.0 * 32.0
    if r < 0.1:
        return 96.0 * 96.0
    return b[2] * b[3] * rng.uniform(0.5, 1.0)


def jitter(rng, b):
    """A detection near box b: integer shifts for integer boxes."""
    if all(float(v).is_integer() for v in b):
        d = [b[0] + rng.randint(-3, 3), b[1] + rng.randint(-3, 3),
             max(0, b[2] + rng.randint(-4, 4)), max(0, b[3] + rng.randint(-4, 4))]
        return [float(v) for v in d]
    s = 0.15 * max(b[2], b[3])
    return [b[0] + rng.gauss(0, s), b[1] + rng.gauss(0, s),
            max(0.0, b[2] * rng.uniform(0.7, 1.3)), max(0.0, b[3] * rng.uniform(0.7, 1.3))]


def make_files(seed, dir_):
    rng = random.Random(seed)
    image_ids = sorted(rng.sample(range(1, 5000), 30))
    images = [{"id": i, "width": rng.randint(200, 640), "height": rng.randint(200, 640)}
              for i in image_ids]
    rng.shuffle(images)  # the file's order is not the id order
    categories = [{"id": c, "name": f"c{c}"} for c in CATEGORY_IDS]
    anns, dets = [], []
    score = (lambda: rng.choice([0.1, 0.3, 0.5, 0.7, 0.9])) if seed % 2 else rng.random
    for im in images:
        n_gt = 0 if rng.random() < 0.2 else rng.randint(1, 10)
        for _ in range(n_gt):
            b = box(rng, im["width"], im["height"])
            crowd = int(rng.random() < 0.1)
            anns.append({"id": len(anns) + 1, "image_id": im["id"],
                         "category_id": rng.choice(CATEGORY_IDS), "bbox": b,
                         "area": annotation_area(rng, b), "iscrowd": crowd})
            if rng.random() < 0.2:
                continue  # missed
            for _ in range(rng.choice([1, 1, 1, 2, 3])):  # duplicates are false positives
                cat = anns[-1]["category_id"] if rng.random() < 0.9 else rng.choice(CATEGORY_IDS)
                dets.append({"image_id": im["id"], "category_id": cat,
                             "bbox": jitter(rng, b), "score": score()})
        if rng.random() < 0.15:
            continue  # an image without false positives
        for _ in range(rng.randint(0, 4)):
            dets.append({"image_id": im["id"], "category_id": rng.choice(CATEGORY_IDS),
                         "bbox": box(rng, im["width"], im["height"]), "score": score()})
    # More than 100 detections of one image and category.
    crowded = images[0]
    for _ in range(130):
        dets.append({"image_id": crowded["id"], "category_id": CATEGORY_IDS[0],
                     "bbox": box(rng, crowded["width"], crowded["height"]), "score": score()})
    rng.shuffle(dets)
    gt_path, res_path = os.path.join(dir_, f"gt{seed}.json"), os.path.join(dir_, f"res{seed}.json")
    with open(gt_path, "w") as f:
        json.dump({"images": images, "categories": categories, "annotations": anns}, f)
    with open(res_path, "w") as f:
        json.dump(dets, f)
    return gt_path, res_path


def pycocotools_eval(gt_path, res_path):
    """COCOeval's stats and the summary lines it prints."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gt = COCO(gt_path)
        ev = COCOeval(gt, gt.loadRes(res_path), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    lines = [line for line in out.getvalue().splitlines() if line.startswith(" Average")]
    return list(ev.stats), lines


def coco_eval(build, gt_path, res_path, *flags):
    p = subprocess.run([os.path.join(build, "bin", "coco_eval"), gt_path, res_path, *flags],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"coco_eval exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout.splitlines()


def check_seed(build, seed, dir_):
    gt_path, res_path = make_files(seed, dir_)
    want, want_lines = pycocotools_eval(gt_path, res_path)
    got = [float(line.rsplit("=", 1)[1]) for line in coco_eval(build, gt_path, res_path, "--digits=17")]
    if len(got) != 12:
        return f"{len(got)} stats, not 12"
    worst = max(range(12), key=lambda i: abs(got[i] - want[i]))
    if abs(got[worst] - want[worst]) > 1e-6:
        return f"stat {worst}: coco_eval {got[worst]!r}, pycocotools {float(want[worst])!r}"
    lines = coco_eval(build, gt_path, res_path)
    if lines != want_lines:
        diff = next((g, w) for g, w in zip(lines + [""] * 12, want_lines) if g != w)
        return f"summary line {diff[0]!r}, pycocotools {diff[1]!r}"
    return None


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    try:
        import pycocotools.cocoeval  # noqa: F401  (scripts/deps.sh installs it)
    except ImportError:
        print("SKIP coco_eval_matches_pycocotools: pycocotools is not installed (make deps)")
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as dir_:
        for seed in SEEDS:
            failed += not run_case(f"coco_eval_matches_pycocotools_seed{seed}", check_seed,
                                   build, seed, dir_)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
