"""object_detection/ssd_boxes.c against ssd_reference.py (numpy, after the
MLPerf SSD reference) on random ground truth, offsets and logits: default
boxes, matching, the loss with hard negative mining and its gradient, NMS.
The C side is test_ssd_boxes --io IN OUT.

Two layouts: SSD300 (8,732 boxes, 81 classes; an image without ground
truth, two equal ground truths with different labels, a tiny one) and a
small SSD (84 boxes) whose first image has so many positives that mining
runs out of negatives, and whose second has ground truth meeting default
boxes at IoU 0.5 exactly (the threshold is strict).

Labels, matches, the mined sets and the NMS keep lists must agree exactly
(both sides round the same fp32 operations, log/exp/softmax in float64
rounded once); floats within 1e-5 relative (one or two fp32 roundings
apart, ~1e-7). run_c and check serve test_ssd_boxes_golden.py (PyTorch's
values from tests/golden/ssd.gld) too.

    python3 tests/object_detection/test_ssd_boxes_reference.py BUILD_DIR
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ssd_reference as ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F32 = np.float32
TOL = 1e-5
failures = 0


def case(name, ok, why=""):
    global failures
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failures += not ok


def random_gt(rng, count, lo, hi):
    wh = rng.uniform(lo, hi, (count, 2))
    lt = rng.uniform(0, 1 - wh)
    return np.concatenate([lt, lt + wh], axis=1).astype(F32)


def write_input(path, layout, images, ploc, logits):
    with open(path, "wb") as f:
        i32 = lambda *v: f.write(np.array(v, "<i4").tobytes())
        i32(layout["image_size"], len(layout["feat_size"]))
        for fs, step, ratios in zip(layout["feat_size"], layout["steps"], layout["ratios"]):
            i32(fs, step, len(ratios))
            f.write(np.array(ratios, "<f8").tobytes())
        f.write(np.array(layout["scales"], "<f8").tobytes())
        i32(len(images), logits.shape[2])
        for gt, label in images:
            i32(len(gt))
            f.write(gt.astype("<f4").tobytes())
            f.write(label.astype("<i4").tobytes())
        f.write(ploc.astype("<f4").tobytes())
        f.write(logits.astype("<f4").tobytes())


class Reader:
    def __init__(self, path):
        self.buf, self.at = open(path, "rb").read(), 0

    def take(self, dtype, count):
        out = np.frombuffer(self.buf, dtype, count, self.at)
        self.at += out.nbytes
        return out


def close(got, want):
    """Relative L2 error and the largest element error relative to the largest |want|."""
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    scale = max(np.abs(want).max(initial=0), 1e-30)
    return max(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30),
               np.abs(got - want).max(initial=0) / scale)


def run_c(name, layout, images, ploc, logits, build):
    """What test_ssd_boxes --io computes, as a dict (None, and a failed
    case, if it fails): xywh, ltrb (n, 4); labels (B, n), offsets (B, n, 4);
    loss, dloc (B, n, 4), dlogits (B, n, C); dets: per image a list of
    (box, label, score, ltrb), best first."""
    batch, n, classes = logits.shape
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        write_input(inp, layout, images, ploc, logits)
        prog = os.path.join(build, "tests", "test_ssd_boxes")
        run = subprocess.run([prog, "--io", inp, out], capture_output=True, text=True)
        if run.returncode != 0:
            case(name + "_runs", False, "exit %d: %s" % (run.returncode, run.stderr.strip()[-300:]))
            return None
        r = Reader(out)
    got = {"xywh": r.take("<f4", n * 4).reshape(n, 4), "ltrb": r.take("<f4", n * 4).reshape(n, 4)}
    per_image = [(r.take("<i4", n), r.take("<f4", n * 4).reshape(n, 4)) for _ in range(batch)]
    got["labels"] = np.stack([p[0] for p in per_image])
    got["offsets"] = np.stack([p[1] for p in per_image])
    got["loss"] = float(r.take("<f4", 1)[0])
    got["dloc"] = r.take("<f4", batch * n * 4).reshape(ploc.shape)
    got["dlogits"] = r.take("<f4", batch * n * classes).reshape(logits.shape)
    got["dets"] = []
    for _ in range(batch):
        count = int(r.take("<i4", 1)[0])
        got["dets"].append([(int(r.take("<i4", 1)[0]), int(r.take("<i4", 1)[0]),
                             r.take("<f4", 1)[0], r.take("<f4", 4)) for _ in range(count)])
    return got


def check(name, got, want, tol):
    """The cases <name>_default_boxes, _matching, _loss, _nms: got and want
    as run_c's dicts; boxes, labels, mined sets and keep lists exactly,
    floats within tol (close())."""
    case(name + "_default_boxes", np.array_equal(got["xywh"], want["xywh"])
         and np.array_equal(got["ltrb"], want["ltrb"]), "xywh or ltrb differ")
    bad = []
    for b, (c_lab, want_lab) in enumerate(zip(got["labels"], want["labels"])):
        if not np.array_equal(c_lab, want_lab):
            diff = np.nonzero(c_lab != want_lab)[0]
            bad.append("image %d: %d labels differ, first box %d: %d vs %d" % (
                b, len(diff), diff[0], c_lab[diff[0]], want_lab[diff[0]]))
        elif close(got["offsets"][b], want["offsets"][b]) > tol:
            bad.append("image %d: offsets off by %.3g" % (
                b, close(got["offsets"][b], want["offsets"][b])))
    case(name + "_matching", not bad, "; ".join(bad))
    mined = lambda d: np.any(d["dlogits"] != 0, axis=2)
    errs = {"loss": abs(got["loss"] - want["loss"]) / max(abs(want["loss"]), 1e-30),
            "dloc": close(got["dloc"], want["dloc"]),
            "dlogits": close(got["dlogits"], want["dlogits"])}
    case(name + "_loss", np.array_equal(mined(got), mined(want))
         and all(e <= tol for e in errs.values()),
         "loss %.7g vs %.7g; %d rows of dlogits zero on one side only; relative errors %s" % (
             got["loss"], want["loss"], (mined(got) != mined(want)).sum(),
             ", ".join("%s %.3g" % kv for kv in errs.items())))
    bad = []
    for b, (c_dets, w_dets) in enumerate(zip(got["dets"], want["dets"])):
        keys = lambda dets: [(d[0], d[1]) for d in dets]
        if keys(c_dets) != keys(w_dets):
            first = next((i for i, (g, w) in enumerate(zip(keys(c_dets), keys(w_dets))) if g != w),
                         min(len(c_dets), len(w_dets)))
            bad.append("image %d: %d vs %d detections, first difference at %d" % (
                b, len(c_dets), len(w_dets), first))
        elif c_dets and (close([g[2] for g in c_dets], [w[2] for w in w_dets]) > tol
                         or close([g[3] for g in c_dets], [w[3] for w in w_dets]) > tol):
            bad.append("image %d: scores or boxes differ" % b)
    case(name + "_nms", not bad, "; ".join(bad))
    return errs


def compare(name, layout, images, ploc, logits, build):
    got = run_c(name, layout, images, ploc, logits, build)
    if got is None:
        return
    xywh, ltrb = ref.default_boxes(**layout)
    want = {"xywh": xywh, "ltrb": ltrb}
    matches = [ref.match(xywh, ltrb, gt, gt_label) for gt, gt_label in images]
    want["labels"] = np.stack([m[0] for m in matches])
    want["offsets"] = np.stack([m[1] for m in matches])
    want["loss"], want["dloc"], want["dlogits"] = ref.loss(ploc, logits, want["offsets"],
                                                           want["labels"])
    want["dets"] = [ref.detect(xywh, ploc[b], logits[b]) for b in range(len(images))]
    check(name, got, want, TOL)


def main():
    build = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
    rng = np.random.default_rng(17)

    # SSD300: 6 random ground truths; none; 3 random, a copy of the first
    # with another label (ties), and a tiny box (a forced match).
    n, classes = 8732, 81
    g0 = random_gt(rng, 6, 0.05, 0.6)
    g2 = random_gt(rng, 3, 0.05, 0.6)
    g2 = np.concatenate([g2, g2[:1], np.array([[0.40, 0.40, 0.41, 0.41]], F32)])
    images = [(g0, rng.integers(1, classes, 6)), (np.zeros((0, 4), F32), np.zeros(0, np.int64)),
              (g2, np.array([3, 9, 12, 44, 80]))]
    ploc = rng.normal(0, 1, (3, n, 4)).astype(F32)
    logits = rng.normal(0, 2, (3, n, classes)).astype(F32)
    xywh, ltrb = ref.default_boxes(**ref.SSD300)
    case("reference_has_8732_boxes", len(xywh) == 8732, "%d boxes" % len(xywh))
    compare("ssd300", ref.SSD300, images, ploc, logits, build)
    cand = (ref.softmax(logits[0])[:, 1:] > F32(0.05)).sum(axis=0)
    case("reference_cuts_at_200", cand.min() > 200 and len(ref.detect(xywh, ploc[0], logits[0])) == 200,
         "the per-class and per-image cuts of 200 are not reached")

    # Small: 60 ground truths (more than a quarter of the boxes positive:
    # mining takes every box, positives twice); then boxes at IoU 0.5.
    n, classes = 84, 5
    exact = np.array([[0, 0, 0.25, 0.5], [0.5, 0.5, 1.0, 0.75]], F32)
    images = [(random_gt(rng, 60, 0.2, 0.5), rng.integers(1, classes, 60)),
              (exact, np.array([2, 4]))]
    xywh, ltrb = ref.default_boxes(**ref.SMALL)
    ious = ref.iou(exact, ltrb)
    forced = ious.argmax(axis=1)
    at_half = [(g, a) for g, a in zip(*np.nonzero(ious == F32(0.5))) if a not in forced]
    case("reference_has_iou_exactly_one_half", len(at_half) > 0 and (ious.max(axis=0) <= 0.5).sum()
         > 0, "no unforced default box meets the ground truth at IoU 0.5")
    pos0 = (ref.match(xywh, ltrb, *images[0])[0] > 0).sum()
    case("reference_mining_runs_out", 4 * pos0 > n, "%d positives of %d boxes" % (pos0, n))
    ploc = rng.normal(0, 1, (2, n, 4)).astype(F32)
    logits = rng.normal(0, 2, (2, n, classes)).astype(F32)
    compare("small", ref.SMALL, images, ploc, logits, build)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
