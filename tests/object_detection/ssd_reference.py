"""An independent numpy implementation of the MLPerf SSD reference's box
machinery (mlcommons/training single_stage_detector/ssd: utils.py
DefaultBoxes and Encoder, base_model.py Loss), written from its semantics
for test_ssd_boxes_reference.py to compare object_detection/ssd_boxes.c
with. The reference computes in torch float32; so does this, where the
rounding decides a comparison (IoU against thresholds, default boxes);
softmax and cross-entropy go through float64 and are rounded once, as the C
code does, so that thresholds and rankings see the same fp32 numbers.

Ties the reference leaves to torch (its sorts) are broken as ssd_boxes.h
says: equal scores go to the lower box index, then the lower class.
"""
import math

import numpy as np

F32 = np.float32
HALF = F32(0.5)
# SSD300's default boxes (the reference's dboxes300_coco; ssd_boxes.h's
# kSsd300Boxes): default_boxes(**SSD300) gives 8,732.
SSD300 = dict(image_size=300, feat_size=[38, 19, 10, 5, 3, 1], steps=[8, 16, 32, 64, 100, 300],
              scales=[21, 45, 99, 153, 207, 261, 315], ratios=[[2], [2, 3], [2, 3], [2, 3], [2], [2]])
# A small SSD (84 boxes) with dyadic centres and sizes: box corners are
# exact, so IoU 0.5 can be exact.
SMALL = dict(image_size=64, feat_size=[4, 2, 1], steps=[16, 32, 64], scales=[16, 32, 48, 64],
             ratios=[[2], [2], [2]])


def default_boxes(image_size, feat_size, steps, scales, ratios):
    """(n, 4) xywh and ltrb, float32: per map, per shape, row-major (i, j)."""
    parts = []
    for k, f in enumerate(feat_size):
        s1, s2 = scales[k] / image_size, scales[k + 1] / image_size
        shapes = [(s1, s1), (math.sqrt(s1 * s2), math.sqrt(s1 * s2))]
        for r in ratios[k]:
            shapes += [(s1 * math.sqrt(r), s1 / math.sqrt(r)), (s1 / math.sqrt(r), s1 * math.sqrt(r))]
        fk = image_size / steps[k]
        i, j = np.meshgrid(np.arange(f), np.arange(f), indexing="ij")
        cx, cy = (j.ravel() + 0.5) / fk, (i.ravel() + 0.5) / fk
        for w, h in shapes:
            parts.append(np.stack([cx, cy, np.full(f * f, w), np.full(f * f, h)], axis=1))
    xywh = np.clip(np.concatenate(parts).astype(F32), F32(0), F32(1))
    return xywh, xywh_to_ltrb(xywh)


def xywh_to_ltrb(b):
    return np.stack([b[:, 0] - HALF * b[:, 2], b[:, 1] - HALF * b[:, 3],
                     b[:, 0] + HALF * b[:, 2], b[:, 1] + HALF * b[:, 3]], axis=1)


def iou(a, b):
    """(N, M) IoU of ltrb boxes, float32."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.maximum(rb - lt, F32(0))
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (area_a[:, None] + area_b[None, :] - inter)


def encode(db_xywh, gt_ltrb):
    """Offsets of gt (ltrb) against default boxes (xywh), with variances 0.1, 0.2."""
    x = HALF * (gt_ltrb[:, 0] + gt_ltrb[:, 2])
    y = HALF * (gt_ltrb[:, 1] + gt_ltrb[:, 3])
    w, h = gt_ltrb[:, 2] - gt_ltrb[:, 0], gt_ltrb[:, 3] - gt_ltrb[:, 1]
    log = lambda v: np.log(v.astype(np.float64)).astype(F32)
    return np.stack([F32(10) * (x - db_xywh[:, 0]) / db_xywh[:, 2],
                     F32(10) * (y - db_xywh[:, 1]) / db_xywh[:, 3],
                     F32(5) * log(w / db_xywh[:, 2]), F32(5) * log(h / db_xywh[:, 3])], axis=1)


def decode(db_xywh, off):
    """The ltrb boxes that offsets predict."""
    exp = lambda v: np.exp(v.astype(np.float64)).astype(F32)
    x = F32(0.1) * off[:, 0] * db_xywh[:, 2] + db_xywh[:, 0]
    y = F32(0.1) * off[:, 1] * db_xywh[:, 3] + db_xywh[:, 1]
    w = exp(F32(0.2) * off[:, 2]) * db_xywh[:, 2]
    h = exp(F32(0.2) * off[:, 3]) * db_xywh[:, 3]
    return xywh_to_ltrb(np.stack([x, y, w, h], axis=1))


def match(db_xywh, db_ltrb, gt_ltrb, gt_label, criteria=0.5):
    """Encoder.encode: (labels (n), offsets (n, 4)); background offsets 0."""
    n = len(db_xywh)
    labels, offsets = np.zeros(n, np.int32), np.zeros((n, 4), F32)
    if len(gt_ltrb) == 0:
        return labels, offsets
    ious = iou(gt_ltrb, db_ltrb)                      # (G, n)
    best_gt, best_iou = ious.argmax(axis=0), ious.max(axis=0)
    best_box = ious.argmax(axis=1)                    # (G): first on ties
    best_iou[best_box] = 2.0
    for g, box in enumerate(best_box):                # a later gt wins a shared box
        best_gt[box] = g
    pos = best_iou > F32(criteria)
    labels[pos] = gt_label[best_gt[pos]]
    offsets[pos] = encode(db_xywh[pos], gt_ltrb[best_gt[pos]])
    return labels, offsets


def log_softmax64(logits):
    """(lse (n), x - lse (n, C)) in float64 from float32 logits."""
    x = logits.astype(np.float64)
    m = logits.max(axis=1).astype(np.float64)
    lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
    return lse, x - lse[:, None]


def softmax(logits):
    return np.exp(log_softmax64(logits)[1]).astype(F32)


def detect(db_xywh, loc, logits, score_threshold=0.05, iou_threshold=0.5, max_per_class=200,
           max_output=200):
    """decode_single: a list of (box, label, score, ltrb), best first."""
    boxes, probs = decode(db_xywh, loc), softmax(logits)
    kept = []
    for c in range(1, logits.shape[1]):
        s = probs[:, c]
        idx = np.nonzero(s > F32(score_threshold))[0]
        order = idx[np.lexsort((idx, -s[idx]))][:max_per_class]
        while order.size:
            best = order[0]
            kept.append((int(best), c, s[best], boxes[best]))
            order = order[iou(boxes[order], boxes[best:best + 1])[:, 0] < F32(iou_threshold)]
    scores = np.array([k[2] for k in kept], F32)
    return [kept[i] for i in np.argsort(-scores, kind="stable")[:max_output]]


def loss(ploc, logits, gloc, glabel, negatives_per_positive=3):
    """Loss.forward and its gradient: (loss, dloc (B, n, 4), dlogits (B, n, C))."""
    batch, n, classes = logits.shape
    total = 0.0
    dloc, dlogits = np.zeros(ploc.shape), np.zeros(logits.shape)
    for b in range(batch):
        pos = glabel[b] > 0
        positives = int(pos.sum())
        if positives == 0:
            continue
        lse, logp = log_softmax64(logits[b])
        con = (lse - logits[b][np.arange(n), glabel[b]]).astype(F32)
        # Rank of each box in con (positives as 0) sorted descending.
        con_neg = np.where(pos, F32(0), con)
        order = np.lexsort((np.arange(n), -con_neg))
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        mined = rank < min(negatives_per_positive * positives, n)
        weight = pos.astype(np.float64) + mined
        d = (ploc[b] - gloc[b]).astype(np.float64)
        small = np.abs(d) < 1
        sl1 = np.where(small, 0.5 * d * d, np.abs(d) - 0.5)
        total += (sl1[pos].sum() + (weight * con).sum()) / positives
        scale = 1.0 / (batch * positives)
        dloc[b] = np.where(pos[:, None], np.where(small, d, np.sign(d)), 0) * scale
        onehot = np.eye(classes)[glabel[b]]
        dlogits[b] = weight[:, None] * (np.exp(logp) - onehot) * scale
    return total / batch, dloc, dlogits
