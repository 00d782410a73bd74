// ssd_boxes.c: the CPU reference of SSD's boxes, matching, NMS and loss.
#include "ssd_boxes.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/loss.h"

const SsdBoxConfig kSsd300Boxes = {
    .image_size = 300,
    .n_maps = 6,
    .feat_size = {38, 19, 10, 5, 3, 1},
    .step = {8, 16, 32, 64, 100, 300},
    .scale = {21, 45, 99, 153, 207, 261, 315},
    .n_ratios = {1, 2, 2, 2, 1, 1},
    .ratio = {{2}, {2, 3}, {2, 3}, {2, 3}, {2}, {2}},
};

const SsdNmsParams kSsdNms = {
    .score_threshold = 0.05f, .iou_threshold = 0.5f, .max_per_class = 200, .max_output = 200};

// ---------------------------------------------------------------- default boxes
void ssd_box_config_check(const SsdBoxConfig *cfg) {
  if (cfg->image_size <= 0) DIE("SSD boxes: image_size %d must be positive", cfg->image_size);
  if (cfg->n_maps < 1 || cfg->n_maps > SSD_MAX_MAPS)
    DIE("SSD boxes: n_maps %d is outside [1, %d]", cfg->n_maps, SSD_MAX_MAPS);
  for (int k = 0; k < cfg->n_maps; k++) {
    if (cfg->feat_size[k] <= 0 || cfg->step[k] <= 0)
      DIE("SSD boxes: map %d has feat_size %d, step %d (both must be positive)", k,
          cfg->feat_size[k], cfg->step[k]);
    if (cfg->n_ratios[k] < 0 || cfg->n_ratios[k] > SSD_MAX_RATIOS)
      DIE("SSD boxes: map %d has %d ratios (at most %d)", k, cfg->n_ratios[k], SSD_MAX_RATIOS);
  }
}

int ssd_boxes_per_location(const SsdBoxConfig *cfg, int map) {
  return 2 + 2 * cfg->n_ratios[map];
}

int64_t ssd_map_first_box(const SsdBoxConfig *cfg, int map) {
  int64_t first = 0;
  for (int k = 0; k < map; k++)
    first += (int64_t)cfg->feat_size[k] * cfg->feat_size[k] * ssd_boxes_per_location(cfg, k);
  return first;
}

static float clamp01(double x) { return fminf(fmaxf((float)x, 0.0f), 1.0f); }

SsdDefaultBoxes ssd_default_boxes(const SsdBoxConfig *cfg) {
  ssd_box_config_check(cfg);
  SsdDefaultBoxes db = {.n = ssd_map_first_box(cfg, cfg->n_maps)};
  db.xywh = xmalloc((size_t)db.n * 4 * sizeof(float));
  db.ltrb = xmalloc((size_t)db.n * 4 * sizeof(float));
  float *b = db.xywh;
  for (int k = 0; k < cfg->n_maps; k++) {
    double size = cfg->image_size;
    double s1 = cfg->scale[k] / size, s2 = cfg->scale[k + 1] / size;
    double shapes[2 + 2 * SSD_MAX_RATIOS][2] = {{s1, s1}, {sqrt(s1 * s2), sqrt(s1 * s2)}};
    for (int r = 0; r < cfg->n_ratios[k]; r++) {
      double root = sqrt(cfg->ratio[k][r]);
      shapes[2 + 2 * r][0] = shapes[2 + 2 * r + 1][1] = s1 * root;
      shapes[2 + 2 * r][1] = shapes[2 + 2 * r + 1][0] = s1 / root;
    }
    // The reference's centre (j + 0.5) / fk with fk = image_size / step, in
    // that order, so that the doubles (and their fp32 roundings) agree.
    double fk = size / cfg->step[k];
    int f = cfg->feat_size[k];
    for (int s = 0; s < ssd_boxes_per_location(cfg, k); s++)
      for (int i = 0; i < f; i++)
        for (int j = 0; j < f; j++, b += 4) {
          b[0] = clamp01((j + 0.5) / fk);
          b[1] = clamp01((i + 0.5) / fk);
          b[2] = clamp01(shapes[s][0]);
          b[3] = clamp01(shapes[s][1]);
        }
  }
  for (int64_t a = 0; a < db.n; a++) {
    const float *x = db.xywh + 4 * a;
    float *c = db.ltrb + 4 * a;
    c[0] = x[0] - 0.5f * x[2];
    c[1] = x[1] - 0.5f * x[3];
    c[2] = x[0] + 0.5f * x[2];
    c[3] = x[1] + 0.5f * x[3];
  }
  return db;
}

void ssd_default_boxes_free(SsdDefaultBoxes *db) {
  free(db->xywh);
  free(db->ltrb);
  *db = (SsdDefaultBoxes){0};
}

// ---------------------------------------------------------------- offsets
float ssd_iou(const float a[4], const float b[4]) {
  float w = fmaxf(fminf(a[2], b[2]) - fmaxf(a[0], b[0]), 0.0f);
  float h = fmaxf(fminf(a[3], b[3]) - fmaxf(a[1], b[1]), 0.0f);
  float inter = w * h;
  float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
  return inter / (area_a + area_b - inter);
}

// log and exp in double, rounded once to fp32: the correctly rounded result
// (but for rare halfway cases), so the numpy comparison and a CUDA port
// reproduce the decoded boxes bit for bit.
static float log_f(float x) { return (float)log((double)x); }
static float exp_f(float x) { return (float)exp((double)x); }

void ssd_encode(const float db_xywh[4], const float gt_ltrb[4], float off[4]) {
  float x = 0.5f * (gt_ltrb[0] + gt_ltrb[2]), y = 0.5f * (gt_ltrb[1] + gt_ltrb[3]);
  float w = gt_ltrb[2] - gt_ltrb[0], h = gt_ltrb[3] - gt_ltrb[1];
  off[0] = (1.0f / SSD_VAR_XY) * (x - db_xywh[0]) / db_xywh[2];
  off[1] = (1.0f / SSD_VAR_XY) * (y - db_xywh[1]) / db_xywh[3];
  off[2] = (1.0f / SSD_VAR_WH) * log_f(w / db_xywh[2]);
  off[3] = (1.0f / SSD_VAR_WH) * log_f(h / db_xywh[3]);
}

void ssd_decode(const float db_xywh[4], const float off[4], float ltrb[4]) {
  float x = SSD_VAR_XY * off[0] * db_xywh[2] + db_xywh[0];
  float y = SSD_VAR_XY * off[1] * db_xywh[3] + db_xywh[1];
  float w = exp_f(SSD_VAR_WH * off[2]) * db_xywh[2];
  float h = exp_f(SSD_VAR_WH * off[3]) * db_xywh[3];
  ltrb[0] = x - 0.5f * w;
  ltrb[1] = y - 0.5f * h;
  ltrb[2] = x + 0.5f * w;
  ltrb[3] = y + 0.5f * h;
}

// ---------------------------------------------------------------- matching
// The first default box of highest IoU with gt.
static int64_t best_box(const SsdDefaultBoxes *db, const float *gt) {
  int64_t best = 0;
  float best_iou = -INFINITY;
  for (int64_t a = 0; a < db->n; a++) {
    float iou = ssd_iou(gt, db->ltrb + 4 * a);
    if (iou > best_iou) best_iou = iou, best = a;
  }
  return best;
}

int64_t ssd_match(const SsdDefaultBoxes *db, const float *gt_ltrb, const int32_t *gt_label,
                  int64_t n_gt, int32_t *labels, float *offsets) {
  // labels holds each box's best ground truth and offsets[4a] its IoU until
  // the last pass writes the targets over them.
  for (int64_t a = 0; a < db->n; a++) {
    float best_iou = -INFINITY;
    int32_t best = -1;
    for (int64_t g = 0; g < n_gt; g++) {
      float iou = ssd_iou(gt_ltrb + 4 * g, db->ltrb + 4 * a);
      if (iou > best_iou) best_iou = iou, best = (int32_t)g;
    }
    labels[a] = best;
    offsets[4 * a] = best_iou;
  }
  // Forced matches in ground-truth order: a later one takes a shared box,
  // as the reference's indexed assignment leaves it.
  for (int64_t g = 0; g < n_gt; g++) {
    int64_t a = best_box(db, gt_ltrb + 4 * g);
    labels[a] = (int32_t)g;
    offsets[4 * a] = 2.0f;
  }
  int64_t positives = 0;
  for (int64_t a = 0; a < db->n; a++) {
    float *off = offsets + 4 * a;
    int32_t g = labels[a];
    if (g >= 0 && off[0] > SSD_MATCH_IOU) {
      labels[a] = gt_label[g];
      ssd_encode(db->xywh + 4 * a, gt_ltrb + 4 * g, off);
      positives++;
    } else {
      labels[a] = 0;
      memset(off, 0, 4 * sizeof(float));
    }
  }
  return positives;
}

// ---------------------------------------------------------------- detection
// A box's score, ordered by descending score, ties to the lower position.
typedef struct Ranked {
  float score;
  int32_t at;
} Ranked;

static int by_score_desc(const void *pa, const void *pb) {
  const Ranked *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  return (a->at > b->at) - (a->at < b->at);
}

// The softmax of one row, in double and rounded once (op_softmax_xent's
// probabilities, so that eval scores and training losses agree).
static void softmax_row(const float *x, int64_t cols, float *p) {
  float max = -INFINITY;
  for (int64_t c = 0; c < cols; c++) max = fmaxf(max, x[c]);
  double sum = 0;
  for (int64_t c = 0; c < cols; c++) sum += exp((double)x[c] - max);
  double lse = max + log(sum);
  for (int64_t c = 0; c < cols; c++) p[c] = (float)exp(x[c] - lse);
}

size_t ssd_detect_scratch_bytes(int64_t n_boxes, int64_t n_classes, const SsdNmsParams *p) {
  size_t slack = 6 * ARENA_ALIGN_BYTES;
  return (size_t)n_boxes * (size_t)(n_classes + 4) * sizeof(float) +
         (size_t)n_boxes * sizeof(Ranked) + (size_t)p->max_per_class * sizeof(bool) +
         (size_t)(n_classes > 1 ? n_classes - 1 : 0) * (size_t)p->max_per_class *
             (sizeof(SsdDetection) + sizeof(Ranked)) +
         slack;
}

// Greedy NMS of one class over its candidates (best first, Ranked.at the
// box): appends the kept ones to kept and returns their count. alive:
// (n_cand) scratch, whether candidate i is not suppressed yet; the order is
// fixed, so the next one kept is the first alive.
static int nms_class(const Ranked *cand, int n_cand, const float *boxes, const float *probs,
                     int64_t n_classes, int32_t label, float iou_threshold, bool *alive,
                     SsdDetection *kept) {
  for (int i = 0; i < n_cand; i++) alive[i] = true;
  int n_kept = 0;
  for (int i = 0; i < n_cand; i++) {
    if (!alive[i]) continue;
    const float *box = boxes + 4 * cand[i].at;
    SsdDetection *d = &kept[n_kept++];
    memcpy(d->ltrb, box, sizeof d->ltrb);
    d->score = probs[cand[i].at * n_classes + label];
    d->label = label;
    d->box = cand[i].at;
    // The reference keeps only the boxes with IoU < threshold (a NaN IoU,
    // of two empty boxes, drops too).
    for (int j = i + 1; j < n_cand; j++)
      if (alive[j] && !(ssd_iou(boxes + 4 * cand[j].at, box) < iou_threshold)) alive[j] = false;
  }
  return n_kept;
}

int ssd_detect_cpu(const Device *dev, const SsdDefaultBoxes *db, const float *loc,
                   const float *logits, int64_t n_classes, const SsdNmsParams *p,
                   Arena *scratch, SsdDetection *out) {
  (void)dev;
  size_t mark = arena_mark(scratch);
  int64_t n = db->n;
  float *probs = arena_alloc(scratch, (size_t)(n * n_classes) * sizeof(float));  // (n, C)
  float *boxes = arena_alloc(scratch, (size_t)n * 4 * sizeof(float));            // (n, 4)
  Ranked *cand = arena_alloc(scratch, (size_t)n * sizeof(Ranked));                // (n)
  bool *alive = arena_alloc(scratch, (size_t)p->max_per_class * sizeof(bool));
  int64_t max_kept = (n_classes - 1) * p->max_per_class;
  SsdDetection *kept = arena_alloc(scratch, (size_t)max_kept * sizeof(SsdDetection));
  Ranked *order = arena_alloc(scratch, (size_t)max_kept * sizeof(Ranked));
  for (int64_t a = 0; a < n; a++) {
    softmax_row(logits + a * n_classes, n_classes, probs + a * n_classes);
    ssd_decode(db->xywh + 4 * a, loc + 4 * a, boxes + 4 * a);
  }
  int n_kept = 0;
  for (int32_t c = 1; c < n_classes; c++) {
    int n_cand = 0;
    for (int64_t a = 0; a < n; a++) {
      float score = probs[a * n_classes + c];
      if (score > p->score_threshold) cand[n_cand++] = (Ranked){score, (int32_t)a};
    }
    qsort(cand, (size_t)n_cand, sizeof *cand, by_score_desc);
    if (n_cand > p->max_per_class) n_cand = p->max_per_class;
    n_kept += nms_class(cand, n_cand, boxes, probs, n_classes, c, p->iou_threshold, alive,
                        kept + n_kept);
  }
  // The best max_output over all classes; ties to the lower class (kept is
  // in class order).
  for (int i = 0; i < n_kept; i++) order[i] = (Ranked){kept[i].score, i};
  qsort(order, (size_t)n_kept, sizeof *order, by_score_desc);
  int n_out = n_kept < p->max_output ? n_kept : p->max_output;
  for (int i = 0; i < n_out; i++) out[i] = kept[order[i].at];
  arena_release(scratch, mark);
  return n_out;
}

SsdDeviceBoxes ssd_default_boxes_to_device(const Device *dev, const SsdDefaultBoxes *db) {
  SsdDeviceBoxes boxes = {.device = dev->kind, .n = db->n};
  size_t bytes = (size_t)db->n * 4 * sizeof(float);
  boxes.xywh = device_alloc(dev->kind, bytes);
  device_copy(dev->kind, boxes.xywh, DEVICE_CPU, db->xywh, bytes);
  return boxes;
}

void ssd_device_boxes_free(SsdDeviceBoxes *boxes) {
  device_free(boxes->device, boxes->xywh);
  *boxes = (SsdDeviceBoxes){0};
}

size_t ssd_detect_batch_scratch_bytes(DeviceKind kind, int64_t batch, int64_t n_boxes,
                                      int64_t n_classes, const SsdNmsParams *p) {
  if (kind == DEVICE_CPU) return ssd_detect_scratch_bytes(n_boxes, n_classes, p);
  // CUDA: scores (B, C - 1, n), kept (B, C - 1, max_per_class) and its
  // counts (B, C - 1), the output (B, max_output) and counts (B).
  size_t lists = (size_t)batch * (size_t)(n_classes > 1 ? n_classes - 1 : 0);
  return lists * (size_t)n_boxes * sizeof(float) +
         lists * ((size_t)p->max_per_class * sizeof(SsdDetection) + sizeof(int32_t)) +
         (size_t)batch * ((size_t)p->max_output * sizeof(SsdDetection) + sizeof(int32_t)) +
         4 * ARENA_ALIGN_BYTES;
}

void ssd_detect_batch_cpu(const Device *dev, const SsdDeviceBoxes *boxes, int64_t batch,
                          const float *loc, const float *logits, int64_t n_classes,
                          const SsdNmsParams *p, Arena *scratch, SsdDetection *out,
                          int32_t *count) {
  OP_REQUIRE("ssd_detect_batch_cpu", boxes->device == DEVICE_CPU);
  SsdDefaultBoxes db = {.n = boxes->n, .xywh = boxes->xywh};  // all ssd_detect_cpu reads
  for (int64_t b = 0; b < batch; b++)
    count[b] = ssd_detect_cpu(dev, &db, loc + b * db.n * 4, logits + b * db.n * n_classes,
                              n_classes, p, scratch, out + b * p->max_output);
}

// ---------------------------------------------------------------- loss
size_t ssd_loss_scratch_bytes(int64_t batch, int64_t n_boxes) {
  // CPU: con, weight, mean_con, rank; CUDA: con and a double per image.
  return (size_t)(batch * n_boxes + n_boxes + 1) * sizeof(float) +
         (size_t)n_boxes * sizeof(Ranked) + (size_t)batch * sizeof(double) +
         4 * ARENA_ALIGN_BYTES;
}

// The weight of each box's cross-entropy in one image with P > 0 positives:
// 1 per positive, + 1 per mined box - the reference's con with the
// positives zeroed, sorted descending (ties to the lower index), the first
// min(3P, n) mined.
static void mine_negatives(const float *con, const int32_t *label, int64_t n,
                           int64_t positives, Ranked *rank, float *weight) {
  for (int64_t a = 0; a < n; a++) {
    rank[a] = (Ranked){label[a] > 0 ? 0.0f : con[a], (int32_t)a};
    weight[a] = label[a] > 0;
  }
  qsort(rank, (size_t)n, sizeof *rank, by_score_desc);
  int64_t mined = 3 * positives < n ? 3 * positives : n;
  for (int64_t r = 0; r < mined; r++) weight[rank[r].at] += 1.0f;
}

// Smooth L1 with beta 1 of d and its derivative.
static float smooth_l1(float d, float *grad) {
  float a = fabsf(d);
  *grad = a < 1.0f ? d : (d > 0 ? 1.0f : -1.0f);
  return a < 1.0f ? 0.5f * d * d : a - 0.5f;
}

void ssd_loss_cpu(const Device *dev, int64_t batch, int64_t n_boxes, int64_t n_classes,
                  const float *ploc, const float *logits, const float *gloc,
                  const int32_t *glabel, float grad_scale, Arena *scratch, float *loss,
                  float *dloc, float *dlogits) {
  size_t mark = arena_mark(scratch);
  int64_t rows = batch * n_boxes;
  float *con = arena_alloc(scratch, (size_t)rows * sizeof(float));         // (B, n)
  float *weight = arena_alloc(scratch, (size_t)n_boxes * sizeof(float));   // (n)
  float *mean_con = arena_alloc(scratch, sizeof(float));                   // (1), unused
  Ranked *rank = arena_alloc(scratch, (size_t)n_boxes * sizeof(Ranked));   // (n)
  // Row losses, and p - onehot in dlogits: a grad_scale of `rows` over
  // `rows` kept rows makes op_softmax_xent's factor exactly 1.
  Tensor t_logits = TENSOR((void *)logits, DT_F32, DEVICE_CPU, rows, n_classes);
  Tensor t_labels = TENSOR((void *)glabel, DT_I32, DEVICE_CPU, rows);
  Tensor t_mean = TENSOR(mean_con, DT_F32, DEVICE_CPU, 1);
  Tensor t_con = TENSOR(con, DT_F32, DEVICE_CPU, rows);
  Tensor t_dlogits = TENSOR(dlogits, DT_F32, DEVICE_CPU, rows, n_classes);
  op_softmax_xent_cpu(dev, &t_logits, &t_labels, 0.0f, -1, (float)rows, &t_mean, &t_con,
                      &t_dlogits);
  double total = 0;
  for (int64_t b = 0; b < batch; b++) {
    const int32_t *label = glabel + b * n_boxes;  // (n)
    int64_t positives = 0;
    for (int64_t a = 0; a < n_boxes; a++) positives += label[a] > 0;
    if (positives) mine_negatives(con + b * n_boxes, label, n_boxes, positives, rank, weight);
    // d image / d input: 1 / P, over the batch's mean: 1 / B.
    float norm = positives ? grad_scale / ((float)batch * (float)positives) : 0.0f;
    double image = 0;
    for (int64_t a = 0; a < n_boxes; a++) {
      int64_t row = b * n_boxes + a;
      float w = positives ? weight[a] : 0.0f;
      image += (double)w * con[row];
      for (int64_t c = 0; c < n_classes; c++) dlogits[row * n_classes + c] *= w * norm;
      for (int k = 0; k < 4; k++) {
        float grad = 0;
        if (label[a] > 0) image += smooth_l1(ploc[4 * row + k] - gloc[4 * row + k], &grad);
        dloc[4 * row + k] = grad * norm;
      }
    }
    if (positives) total += image / (double)positives;
  }
  *loss = (float)(total / (double)batch);
  arena_release(scratch, mark);
}
