"""Golden values for SSD's box machinery (object_detection/ssd_boxes.c, read by
tests/object_detection/test_ssd_boxes_golden.py): a PyTorch implementation of
the MLPerf SSD reference (mlcommons/training single_stage_detector/ssd:
utils.py DefaultBoxes and Encoder, base_model.py Loss), in float32 on the CPU,
on random ground truth, offsets and logits.

Two cases, the layouts of ssd_reference.py (the numpy port):
  ssd300  8,732 boxes, 81 classes; image 0: three random ground truths, a
          copy of the first with another label, a tiny box; image 1: none
  small   84 boxes, 5 classes; image 0: 60 ground truths (4P > n: mining
          runs out of negatives); image 1: ground truth meeting default boxes
          at IoU 0.5 exactly (the match threshold is strict)
Per case <c>: the layout (<c>.image_size, .feat_size, .steps, .scales,
.ratios padded with 0); the inputs <c>.gt<b> (n_gt, 4) ltrb, <c>.label<b>,
and ploc, logits as golden.tile_rows of <c>.ploc.a/.b, <c>.logits.a/.b
(SSD300's logits alone would be 5.7 MB); the outputs <c>.xywh, <c>.ltrb (n,
4) default boxes; the matches <c>.positive (flat b * n + i), .positive_label,
.offsets (P, 4); <c>.loss (1); <c>.dloc (P, 4) (zero elsewhere);
<c>.dlogits_rows (flat indices of the rows autograd leaves nonzero:
positives and mined negatives), <c>.dlogits (rows, C); <c>.det<b> (k, 7):
box, label, score, ltrb of each detection, best first.

Ties the reference leaves to torch are broken as ssd_boxes.h says: stable
sorts (equal scores or losses to the lower box index, equal detections to
the lower class), a ground truth's best default box the first on a tie, the
later ground truth winning a box two pick.

Run: python3 tests/golden/gen_ssd.py [OUTDIR] (or make goldens).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "object_detection"))
import golden  # noqa: E402
from ssd_reference import SMALL, SSD300  # noqa: E402  (the layouts only)

MATCH_IOU, SCORE_MIN, NMS_IOU, TOP_K, NEG_PER_POS = 0.5, 0.05, 0.5, 200, 3


def default_boxes(image_size, feat_size, steps, scales, ratios):
    """(xywh, ltrb) float32: map by map, shape by shape, row-major locations;
    built in Python floats, rounded once, clamped to [0, 1]."""
    boxes = []
    for k, size in enumerate(feat_size):
        cells = image_size / steps[k]
        small, large = scales[k] / image_size, scales[k + 1] / image_size
        shapes = [(small, small), (math.sqrt(small * large),) * 2]
        for r in ratios[k]:
            shapes += [(small * math.sqrt(r), small / math.sqrt(r)),
                       (small / math.sqrt(r), small * math.sqrt(r))]
        boxes += [((j + 0.5) / cells, (i + 0.5) / cells, w, h)
                  for w, h in shapes for i in range(size) for j in range(size)]
    xywh = torch.tensor(boxes, dtype=torch.float32).clamp(0, 1)
    return xywh, to_ltrb(xywh)


def to_ltrb(xywh):
    x, y, w, h = xywh.unbind(1)
    return torch.stack([x - 0.5 * w, y - 0.5 * h, x + 0.5 * w, y + 0.5 * h], 1)


def iou(a, b):
    """(len(a), len(b)) IoU of ltrb boxes."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    overlap = (rb - lt).clamp(min=0).prod(2)
    area = lambda t: (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    return overlap / (area(a)[:, None] + area(b)[None, :] - overlap)


def encode(db_xywh, gt_ltrb):
    """Offsets of ground truth against default boxes: variances 0.1 (centre), 0.2 (size)."""
    centre = 0.5 * (gt_ltrb[:, :2] + gt_ltrb[:, 2:])
    size = gt_ltrb[:, 2:] - gt_ltrb[:, :2]
    return torch.cat([(1 / 0.1) * (centre - db_xywh[:, :2]) / db_xywh[:, 2:],
                      (1 / 0.2) * (size / db_xywh[:, 2:]).log()], 1)


def decode(db_xywh, off):
    centre = (0.1 * off[:, :2]) * db_xywh[:, 2:] + db_xywh[:, :2]
    size = (0.2 * off[:, 2:]).exp() * db_xywh[:, 2:]
    return to_ltrb(torch.cat([centre, size], 1))


def match(db_xywh, db_ltrb, gt, label):
    """(labels (n), offsets (n, 4)): each default box the ground truth of
    highest IoU when > 0.5, and each ground truth its best box regardless."""
    n = len(db_xywh)
    labels, offsets = torch.zeros(n, dtype=torch.int64), torch.zeros(n, 4)
    if len(gt) == 0:
        return labels, offsets
    ious = iou(gt, db_ltrb)                         # (G, n)
    best_iou, best_gt = ious.max(0)                 # first maximum on ties
    for g, box in enumerate(ious.max(1).indices.tolist()):
        best_iou[box], best_gt[box] = 2.0, g        # in order: the later wins
    pos = best_iou > MATCH_IOU
    labels[pos] = label[best_gt[pos]]
    offsets[pos] = encode(db_xywh[pos], gt[best_gt[pos]])
    return labels, offsets


def ssd_loss(ploc, logits, gloc, glabel):
    """Per image (smooth L1 of the positives' offsets + cross-entropy of the
    positives and the 3P negatives of highest loss) / P, 0 without
    positives; the mean over the batch."""
    batch, n, classes = logits.shape
    pos = glabel > 0
    npos = pos.sum(1)
    loc = (F.smooth_l1_loss(ploc, gloc, reduction="none").sum(2) * pos).sum(1)
    con = F.cross_entropy(logits.reshape(-1, classes), glabel.reshape(-1),
                          reduction="none").reshape(batch, n)
    order = con.detach().masked_fill(pos, 0).sort(dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(n).expand(batch, n))
    mined = rank < (NEG_PER_POS * npos).clamp(max=n)[:, None]
    per_image = (loc + (con * (pos.float() + mined.float())).sum(1)) / npos.clamp(min=1)
    return (per_image * (npos > 0)).mean()


def detect(db_xywh, loc, logits):
    """One image's detections (box, label, score, ltrb), best first: per
    class, the 200 best of score > 0.05, greedy NMS dropping IoU >= 0.5;
    then the 200 best over all classes."""
    boxes, scores = decode(db_xywh, loc), logits.softmax(1)
    kept = []
    for c in range(1, logits.shape[1]):
        cand = torch.nonzero(scores[:, c] > SCORE_MIN)[:, 0]
        cand = cand[scores[cand, c].sort(descending=True, stable=True).indices[:TOP_K]]
        while len(cand):
            best = cand[0]
            box_label = torch.tensor([float(best), float(c)])
            kept.append(torch.cat([box_label, scores[best, c:c + 1], boxes[best]]))
            cand = cand[iou(boxes[cand], boxes[best:best + 1])[:, 0] < NMS_IOU]
    if not kept:
        return torch.zeros(0, 7)
    kept = torch.stack(kept)
    return kept[kept[:, 2].sort(descending=True, stable=True).indices[:TOP_K]]


def random_gt(count, lo, hi):
    wh = lo + (hi - lo) * torch.rand(count, 2)
    lt = (1 - wh) * torch.rand(count, 2)
    return torch.cat([lt, lt + wh], 1)


def make_case(name, layout, images, classes, table_rows=(101, 89)):
    """The tensors of one case: layout, inputs, outputs (module docstring)."""
    xywh, ltrb = default_boxes(**layout)
    batch, n = len(images), len(xywh)
    out = {name + ".image_size": [layout["image_size"]]}
    for key in ("feat_size", "steps", "scales"):
        out["%s.%s" % (name, key)] = layout[key]
    out[name + ".ratios"] = [r + [0] * (2 - len(r)) for r in layout["ratios"]]
    inputs = {}
    for what, cols, sd in (("ploc", 4, 1.0), ("logits", classes, 2.0)):
        tables = [torch.randn(rows, cols) * (sd / math.sqrt(2)) for rows in table_rows]
        out["%s.%s.a" % (name, what)], out["%s.%s.b" % (name, what)] = tables
        full = golden.tile_rows(tables[0].numpy(), tables[1].numpy(), batch * n)
        inputs[what] = torch.from_numpy(full).reshape(batch, n, cols).requires_grad_()
    labels, offsets = [], []
    for b, (gt, label) in enumerate(images):
        out["%s.gt%d" % (name, b)], out["%s.label%d" % (name, b)] = gt.reshape(-1, 4), label
        lab, off = match(xywh, ltrb, gt.reshape(-1, 4), label)
        labels.append(lab)
        offsets.append(off)
    glabel, gloc = torch.stack(labels), torch.stack(offsets)
    loss = ssd_loss(inputs["ploc"], inputs["logits"], gloc, glabel)
    loss.backward()
    positive = torch.nonzero(glabel.reshape(-1) > 0)[:, 0]
    dlogits = inputs["logits"].grad.reshape(batch * n, classes)
    rows = torch.nonzero(dlogits.abs().sum(1) > 0)[:, 0]
    out.update({name + ".xywh": xywh, name + ".ltrb": ltrb, name + ".positive": positive,
                name + ".positive_label": glabel.reshape(-1)[positive],
                name + ".offsets": gloc.reshape(-1, 4)[positive], name + ".loss": loss.reshape(1),
                name + ".dloc": inputs["ploc"].grad.reshape(-1, 4)[positive],
                name + ".dlogits_rows": rows, name + ".dlogits": dlogits[rows]})
    with torch.no_grad():
        for b in range(batch):
            out["%s.det%d" % (name, b)] = detect(xywh, inputs["ploc"][b], inputs["logits"][b])
    return out, glabel


def main(outdir=HERE):
    torch.manual_seed(17)
    torch.set_num_threads(1)
    gt = random_gt(3, 0.05, 0.6)
    gt = torch.cat([gt, gt[:1], torch.tensor([[0.40, 0.40, 0.41, 0.41]])])
    images = [(gt, torch.tensor([3, 9, 12, 44, 80])), (torch.zeros(0, 4), torch.zeros(0))]
    ssd300, _ = make_case("ssd300", SSD300, images, 81)
    assert len(ssd300["ssd300.xywh"]) == 8732 and len(ssd300["ssd300.det0"]) == TOP_K, \
        "SSD300 case does not reach the 200 cut"

    exact = torch.tensor([[0, 0, 0.25, 0.5], [0.5, 0.5, 1.0, 0.75]])
    images = [(random_gt(60, 0.2, 0.5), torch.randint(1, 5, (60,))), (exact, torch.tensor([2, 4]))]
    small, glabel = make_case("small", SMALL, images, 5, table_rows=(13, 17))
    assert 4 * (glabel[0] > 0).sum() > glabel.shape[1], "mining does not run out of negatives"
    ious = iou(exact, small["small.ltrb"])
    assert ((ious == 0.5) & (glabel[1] == 0)).any(), "no unmatched box at IoU 0.5 exactly"
    golden.write(os.path.join(outdir, "ssd.gld"), {**ssd300, **small}, __file__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
