"""object_detection/ssd_boxes.c against PyTorch: tests/golden/ssd.gld, made
by tests/golden/gen_ssd.py (a torch implementation of the MLPerf SSD
reference, CPU, float32), read here without torch. The C side is
test_ssd_boxes --io IN OUT, compared as test_ssd_boxes_reference.py does
against the numpy port: default boxes, labels, the mined sets (the rows of
dlogits that are not zero) and the NMS keep lists exactly; floats within TOL.

Cases (gen_ssd.py's docstring): SSD300 (8,732 boxes, 81 classes; an image
with a duplicated ground truth and a tiny one, an image without ground
truth) and a small SSD (84 boxes; mining runs out of negatives; ground
truth at IoU 0.5 exactly).

    python3 tests/object_detection/test_ssd_boxes_golden.py BUILD_DIR
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import golden  # noqa: E402
import test_ssd_boxes_reference as via_io  # noqa: E402  (the --io run and the comparison)

# What differs legitimately between torch and the C code: the same fp32
# operations round the same (default boxes, IoU, corners: so boxes, labels
# and keep lists are exact), but torch evaluates log, exp and softmax in
# fp32 (vectorised, an ulp or so each) where the C code goes through double
# and rounds once, and the loss's sums run in another order. The worst is a
# softmax score: fp32 exps summed over 81 classes, at most ~80 u = 4.8e-6
# relative (u = 6e-8), typically sqrt(80) u; cross-entropy and the loss's
# sums of 4P terms less. Measured (torch 2.15.0, AVX-512, 1 thread; as
# close() computes it): ssd300 scores 1.8e-7, dlogits 8.9e-8, dloc 4.5e-8,
# offsets 6.1e-9, loss and boxes bit-equal; small scores 1.2e-7, dlogits
# 1.2e-7, loss 8.5e-8, offsets 4.8e-8. The numpy comparison's 1e-5 is 2x
# the worst-case bound and 55x the worst measured, and far below what a
# fault moves (variance 0.2 -> 0.1: offsets by 0.7-1); one tolerance for
# both oracles. The mined sets are compared exactly: a loss within an ulp
# of the 3P-th could flip one, which would fail here (none does).
TOL = via_io.TOL


def layout_of(t, name):
    ints = lambda key: [int(v) for v in t["%s.%s" % (name, key)]]
    return dict(image_size=ints("image_size")[0], feat_size=ints("feat_size"), steps=ints("steps"),
                scales=ints("scales"),
                ratios=[[int(r) for r in row if r] for row in t[name + ".ratios"]])


def dense(rows, values, shape):
    out = np.zeros((int(np.prod(shape[:-1])), shape[-1]), np.float32)
    out[rows.astype(np.int64)] = values
    return out.reshape(shape)


def compare(t, name, build):
    layout = layout_of(t, name)
    n, batch = len(t[name + ".xywh"]), sum(k.startswith(name + ".gt") for k in t)
    images = [(t["%s.gt%d" % (name, b)], t["%s.label%d" % (name, b)].astype(np.int32))
              for b in range(batch)]
    tiled = lambda what: golden.tile_rows(t["%s.%s.a" % (name, what)], t["%s.%s.b" % (name, what)],
                                          batch * n).reshape(batch, n, -1)
    ploc, logits = tiled("ploc"), tiled("logits")
    got = via_io.run_c(name, layout, images, ploc, logits, build)
    if got is None:
        return
    pos = t[name + ".positive"]
    labels = dense(pos, t[name + ".positive_label"][:, None], (batch, n, 1))[..., 0]
    dets = [[(int(d[0]), int(d[1]), d[2], d[3:]) for d in t["%s.det%d" % (name, b)]]
            for b in range(batch)]
    want = {"xywh": t[name + ".xywh"], "ltrb": t[name + ".ltrb"], "labels": labels.astype(np.int32),
            "offsets": dense(pos, t[name + ".offsets"], (batch, n, 4)),
            "loss": float(t[name + ".loss"][0]),
            "dloc": dense(pos, t[name + ".dloc"], ploc.shape),
            "dlogits": dense(t[name + ".dlogits_rows"], t[name + ".dlogits"], logits.shape),
            "dets": dets}
    errs = via_io.check("golden_" + name, got, want, TOL)
    # The errors measured (TOL's comment), on a line that is not a case.
    for b, (g, w) in enumerate(zip(got["dets"], dets)):
        if len(g) == len(w) and g:
            errs["scores%d" % b] = via_io.close([d[2] for d in g], [d[2] for d in w])
            errs["boxes%d" % b] = via_io.close([d[3] for d in g], [d[3] for d in w])
    errs["offsets"] = via_io.close(got["offsets"], want["offsets"])
    print("errors %s: %s" % (name, ", ".join("%s %.2g" % kv for kv in errs.items())))


def main():
    build = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
    _, t = golden.read(os.path.join(ROOT, "tests", "golden", "ssd.gld"))
    for name in ("ssd300", "small"):
        compare(t, name, build)
    return 1 if via_io.failures else 0


if __name__ == "__main__":
    sys.exit(main())
