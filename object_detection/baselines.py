"""What a detector that never looks at the image scores on a generated set's
val split, so that the small target can be set clearly above it: the
training boxes' shapes and places clustered (k-means on x, y, w, h as
fractions of the image), and every val image given every cluster's box with
every category, scored by how often the training set has that cluster and
that category. pycocotools scores the detections as the trainer's mAP does.
numpy and pycocotools only; seconds.

    python3 object_detection/baselines.py DATA_DIR/raw [--clusters 8,32,128]
"""
import argparse
import contextlib
import io
import json
import os
import tempfile

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval


def train_boxes(path):
    with open(path) as f:
        d = json.load(f)
    size = {im["id"]: (im["width"], im["height"]) for im in d["images"]}
    boxes, cats = [], []
    for a in d["annotations"]:
        if a.get("iscrowd", 0):
            continue
        w, h = size[a["image_id"]]
        x, y, bw, bh = a["bbox"]
        boxes.append((x / w, y / h, bw / w, bh / h))
        cats.append(a["category_id"])
    return np.array(boxes), np.array(cats)


def kmeans(points, k, seed, iters=50):
    rng = np.random.default_rng(seed)
    centres = points[rng.choice(len(points), k, replace=False)]
    for _ in range(iters):
        nearest = ((points[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
        for c in range(k):
            if (nearest == c).any():
                centres[c] = points[nearest == c].mean(0)
    nearest = ((points[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
    return centres, np.bincount(nearest, minlength=k) / len(points)


def prior_map(raw, k, seed):
    boxes, cats = train_boxes(os.path.join(raw, "annotations/instances_train2017.json"))
    centres, box_freq = kmeans(boxes, k, seed)
    ids, counts = np.unique(cats, return_counts=True)
    cat_freq = counts / counts.sum()
    gt_path = os.path.join(raw, "annotations/instances_val2017.json")
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_path)
    dets = []
    for im in gt.dataset["images"]:
        w, h = im["width"], im["height"]
        for (x, y, bw, bh), pb in zip(centres, box_freq):
            for cid, pc in zip(ids, cat_freq):
                dets.append({"image_id": im["id"], "category_id": int(cid),
                             "bbox": [x * w, y * h, bw * w, bh * h], "score": float(pb * pc)})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(dets, f)
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(gt, gt.loadRes(f.name), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    os.unlink(f.name)
    return ev.stats[0], ev.stats[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("raw", help="the generated set in COCO's layout (DATA_DIR/raw)")
    p.add_argument("--clusters", default="8,32,128")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print("%-28s %8s %8s" % ("baseline", "mAP", "AP50"))
    for k in map(int, a.clusters.split(",")):
        ap, ap50 = prior_map(a.raw, k, a.seed)
        print("%-28s %8.4f %8.4f" % ("box prior, %d clusters" % k, ap, ap50))


if __name__ == "__main__":
    main()
