#!/usr/bin/env python3
"""coco_generate and coco_to_lmdb end to end on a tiny set (40 train / 10 val
images of 64x64): the JSON is COCO's (pycocotools loads it and scores its own
boxes as detections at AP 1), the same seed gives the same files and another
seed others, and every LMDB record (read back with lmdb-utils' mdb_dump and
decoded by the layout of common/data/record.h) holds its image's file, id,
boxes and labels as the JSON says: boxes as fractions, labels 1..N in the
order of "categories", crowd boxes negative, train images without
annotations left out and val ones kept (with --val_images=annotated left
out too, as the MLPerf reference's eval set). Then
object_detection/prepare_data.sh small with the sizes overridden.

    python3 tests/datasets/test_coco_convert.py BUILD_DIR
"""
import filecmp
import json
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

from convert_check import check_prepare, payload, records, report, run

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist")
PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")


def generate(build, out, seed=1):
    p = run(f"{build}/bin/coco_generate --out={out} --train_count=40 --val_count=10 --side=64 --seed={seed}")
    if p.returncode:
        raise SystemExit(f"FAIL coco_generate: status {p.returncode}: {p.stderr.strip()[-300:]}")


def decode(value):
    """An IMAGE_BOXES record: (image_id, boxes, labels, image bytes)."""
    value, _fmt = payload(value, 2)
    image_id, count = struct.unpack_from("<qI", value, 0)
    at = 12
    boxes = [struct.unpack_from("<4f", value, at + 16 * i) for i in range(count)]
    at += 16 * count
    labels = list(struct.unpack_from(f"<{count}i", value, at))
    at += 4 * count
    (n,) = struct.unpack_from("<I", value, at)
    return image_id, boxes, labels, value[at + 4:at + 4 + n]


def want_records(coco, split, annotated_only=False):
    """What the records of a split must hold, from the JSON."""
    d = json.load(open(coco / "annotations" / f"instances_{split}2017.json"))
    label = {c["id"]: i + 1 for i, c in enumerate(d["categories"])}
    by_image = {im["id"]: [] for im in d["images"]}
    for a in d["annotations"]:
        by_image[a["image_id"]].append(a)
    want = []
    for im in d["images"]:
        anns = by_image[im["id"]]
        if not anns and (split == "train" or annotated_only):
            continue
        w, h = im["width"], im["height"]
        boxes = [(a["bbox"][0] / w, a["bbox"][1] / h, (a["bbox"][0] + a["bbox"][2]) / w,
                  (a["bbox"][1] + a["bbox"][3]) / h) for a in anns]
        labels = [-label[a["category_id"]] if a["iscrowd"] else label[a["category_id"]] for a in anns]
        want.append((im["id"], boxes, labels, (coco / f"{split}2017" / im["file_name"]).read_bytes()))
    return d, want


def compare(coco, lmdb, split, annotated_only=False):
    d, want = want_records(coco, split, annotated_only)
    got = [decode(v) for v in records(lmdb / split)]
    if len(got) != len(want):
        return f"{len(got)} records, want {len(want)}"
    for (gid, gboxes, glabels, gbytes), (wid, wboxes, wlabels, wbytes) in zip(got, want):
        if gid != wid or glabels != wlabels or gbytes != wbytes or len(gboxes) != len(wboxes):
            return f"image {wid}: got id {gid}, labels {glabels}, want {wlabels} (or other bytes)"
        for g, w in zip(gboxes, wboxes):
            if max(abs(a - b) for a, b in zip(g, w)) > 1e-6:
                return f"image {wid}: box {g}, want {w}"
    return None


def pycocotools_check(coco):
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        print("SKIP coco_json_pycocotools: pycocotools not importable (pip install pycocotools)")
        return
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(coco / "annotations" / "instances_val2017.json"))
        dets = [{"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0}
                for a in gt.dataset["annotations"] if not a["iscrowd"]]
        ev = COCOeval(gt, gt.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
        for a in gt.dataset["annotations"]:
            gt.annToMask(a)  # polygons and the crowd's RLE decode
    report("coco_json_pycocotools", None if abs(ev.stats[0] - 1) < 1e-9 else f"AP {ev.stats[0]}, want 1")


def main():
    build = (ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")).resolve()
    for need, pkg in ((FMNIST, "dataset-fashion-mnist"), (PHOTOS, "opencv-doc")):
        if not need.is_dir():
            print(f"SKIP coco_convert: {need} missing (Debian {pkg})")
            return 0
    tmp = Path(tempfile.mkdtemp(prefix="coco-test-"))
    try:
        coco = tmp / "coco"
        generate(build, coco)
        d = json.load(open(coco / "annotations" / "instances_train2017.json"))
        crowd = sum(a["iscrowd"] for a in d["annotations"])
        ids = {im["id"] for im in d["images"]} - {a["image_id"] for a in d["annotations"]}
        report("coco_generate_layout",
               None if len(d["images"]) == 40 and len(os.listdir(coco / "train2017")) == 40 and crowd >= 1
               and len(ids) >= 1 and [c["id"] for c in d["categories"]] == [1, 3, 5, 8, 13, 21, 34, 55, 70, 90]
               else f"{len(d['images'])} images, {crowd} crowd, {len(ids)} without annotations")
        pycocotools_check(coco)
        generate(build, tmp / "again")
        same = all(sorted(filecmp.cmpfiles(coco / sub, tmp / "again" / sub, os.listdir(coco / sub),
                                           shallow=False)[0]) == sorted(os.listdir(coco / sub))
                   for sub in ("train2017", "val2017", "annotations"))
        report("coco_generate_same_seed_same_files", None if same else "files differ")
        generate(build, tmp / "other", seed=2)
        other = (tmp / "other/annotations/instances_train2017.json").read_bytes()
        report("coco_generate_other_seed_other_files",
               None if other != (coco / "annotations/instances_train2017.json").read_bytes() else "same JSON")

        lmdb = tmp / "lmdb"
        p = run(f"{build}/bin/coco_to_lmdb --coco={coco} --out={lmdb}")
        report("coco_to_lmdb_runs", None if p.returncode == 0 else f"status {p.returncode}: {p.stderr[-300:]}")
        for split in ("train", "val"):
            report(f"coco_records_match_json_{split}", compare(coco, lmdb, split))
        cats = json.load(open(lmdb / "categories.json"))["categories"]
        report("coco_categories_json", None if [(c["label"], c["id"]) for c in cats] ==
               [(i + 1, c["id"]) for i, c in enumerate(d["categories"])] else f"{cats}")
        p = run(f"{build}/bin/coco_to_lmdb --coco={coco} --out={tmp}/val_only --split=val")
        report("coco_to_lmdb_val_only", None if p.returncode == 0 and not (tmp / "val_only/train").exists()
               and (tmp / "val_only/val").is_dir() else f"status {p.returncode}: {p.stderr[-300:]}")
        p = run(f"{build}/bin/coco_to_lmdb --coco={coco} --out={tmp}/annotated --val_images=annotated")
        val = json.load(open(coco / "annotations" / "instances_val2017.json"))
        empty = {im["id"] for im in val["images"]} - {a["image_id"] for a in val["annotations"]}
        report("coco_to_lmdb_val_annotated_only",
               (f"status {p.returncode}: {p.stderr[-300:]}" if p.returncode else
                f"the val JSON has {len(empty)} images without annotations: nothing to leave out" if not empty else
                compare(coco, tmp / "annotated", "val", annotated_only=True) or
                compare(coco, tmp / "annotated", "train")))

        env = dict(os.environ, TRAIN_COUNT="30", VAL_COUNT="8", SIDE="64")
        check_prepare("coco_prepare_small", ROOT / "object_detection" / "prepare_data.sh", tmp / "prepared", build,
                      env, ROOT, "val", 8)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
