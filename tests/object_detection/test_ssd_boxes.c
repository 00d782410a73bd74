// SSD's box machinery (object_detection/ssd_boxes.c) on hand-checked cases:
// the 8,732 default boxes and one known box of each map, offsets' round
// trip, matching (threshold, forced matches and their ties), NMS (within and
// across classes, the per-class and per-image cuts), the batch decode
// against one image at a time, the loss with hard negative mining and its
// gradient.
//
// With `--io IN OUT` it runs no cases: it reads a default-box config, ground
// truth, offsets and logits from IN (written by test_ssd_boxes_reference.py)
// and writes the default boxes, the matches, the loss and its gradient and
// the detections to OUT, which that script compares with its numpy
// implementation of the MLPerf reference.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "object_detection/ssd_boxes.h"
#include "tests/ops/ops_test_util.h"

static const Device CPU = {.kind = DEVICE_CPU};

// ---------------------------------------------------------------- default boxes
static void ssd300_has_8732_boxes(void) {
  const SsdBoxConfig *c = &kSsd300Boxes;
  // 38^2 * 4, 19^2 * 6, 10^2 * 6, 5^2 * 6, 3^2 * 4, 1 * 4
  const int64_t first[7] = {0, 5776, 7942, 8542, 8692, 8728, 8732};
  for (int k = 0; k <= 6; k++) CHECK_EQ_INT(ssd_map_first_box(c, k), first[k]);
  SsdDefaultBoxes db = ssd_default_boxes(c);
  CHECK_EQ_INT(db.n, 8732);
  for (int64_t i = 0; i < 4 * db.n; i++) CHECK(db.xywh[i] >= 0.0f && db.xywh[i] <= 1.0f);
  ssd_default_boxes_free(&db);
}

typedef struct KnownBox {
  int64_t index;
  double cx, cy, w, h;
} KnownBox;

static void a_known_box_of_each_map(void) {
  // index = first box of the map + shape * f^2 + i * f + j; centre
  // (j + 0.5) * step / 300; sizes from the scales (pixels / 300).
  const double s2 = sqrt(2.0), s3 = sqrt(3.0);
  const KnownBox known[] = {
      {0, 0.5 * 8 / 300, 0.5 * 8 / 300, 0.07, 0.07},              // map 38, small, (0, 0)
      {1444 + 2 * 38 + 5, 5.5 * 8 / 300, 2.5 * 8 / 300, sqrt(21.0 * 45) / 300,
       sqrt(21.0 * 45) / 300},                                      // map 38, large, (2, 5)
      {3 * 1444 + 37 * 38 + 1, 1.5 * 8 / 300, 37.5 * 8 / 300, 0.07 / s2, 0.07 * s2},
      {5776 + 4 * 361 + 18 * 19 + 18, 18.5 * 16 / 300, 18.5 * 16 / 300, 0.15 * s3,
       0.15 / s3},                                                  // map 19, ratio 3
      {7942 + 9, 1.0, 0.5 * 32 / 300, 0.33, 0.33},                  // map 10: cx 1.013 clamped
      {8542 + 25 + 2 * 5 + 2, 2.5 * 64 / 300, 2.5 * 64 / 300, sqrt(153.0 * 207) / 300,
       sqrt(153.0 * 207) / 300},                                    // map 5, large
      {8692 + 2 * 9 + 3 + 1, 0.5, 0.5, 0.69 * s2, 0.69 / s2},       // map 3, ratio 2
      {8728 + 2, 0.5, 0.5, 1.0, 0.87 / s2},                         // map 1: w 1.23 clamped
      {8728 + 1, 0.5, 0.5, sqrt(261.0 * 315) / 300, sqrt(261.0 * 315) / 300},
  };
  SsdDefaultBoxes db = ssd_default_boxes(&kSsd300Boxes);
  for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
    const KnownBox *k = &known[i];
    const float *x = db.xywh + 4 * k->index, *c = db.ltrb + 4 * k->index;
    // Both sides round the same doubles to fp32: a few ulp of 1 at most.
    CHECK_NEAR(x[0], k->cx, 1e-6);
    CHECK_NEAR(x[1], k->cy, 1e-6);
    CHECK_NEAR(x[2], k->w, 1e-6);
    CHECK_NEAR(x[3], k->h, 1e-6);
    // Corners of the clamped box, not clamped themselves.
    CHECK_NEAR(c[0], k->cx - 0.5 * k->w, 1e-6);
    CHECK_NEAR(c[3], k->cy + 0.5 * k->h, 1e-6);
  }
  CHECK(db.ltrb[0] < 0.0f);  // the first box passes the image's left edge
  ssd_default_boxes_free(&db);
}

static void a_small_ssd_uses_the_same_code(void) {
  // 128 x 128 input, five maps.
  SsdBoxConfig c = {.image_size = 128,
                    .n_maps = 5,
                    .feat_size = {16, 8, 4, 2, 1},
                    .step = {8, 16, 32, 64, 128},
                    .scale = {12, 28, 52, 76, 100, 124},
                    .n_ratios = {1, 2, 2, 1, 1},
                    .ratio = {{2}, {2, 3}, {2, 3}, {2}, {2}}};
  SsdDefaultBoxes db = ssd_default_boxes(&c);
  CHECK_EQ_INT(db.n, 256 * 4 + 64 * 6 + 16 * 6 + 4 * 4 + 4);
  // Map 8, shape 3 (ratio 2 transposed), location (1, 2).
  const float *x = db.xywh + 4 * (1024 + 3 * 64 + 8 + 2);
  CHECK_NEAR(x[0], 2.5 * 16 / 128, 1e-6);
  CHECK_NEAR(x[1], 1.5 * 16 / 128, 1e-6);
  CHECK_NEAR(x[2], 28.0 / 128 / sqrt(2.0), 1e-6);
  CHECK_NEAR(x[3], 28.0 / 128 * sqrt(2.0), 1e-6);
  ssd_default_boxes_free(&db);
}

// ---------------------------------------------------------------- offsets
static void iou_of_known_boxes(void) {
  const float a[4] = {0, 0, 2, 2}, b[4] = {1, 1, 3, 3}, far[4] = {5, 5, 6, 6};
  CHECK_NEAR(ssd_iou(a, b), 1.0 / 7, 1e-7);
  CHECK_NEAR(ssd_iou(a, far), 0, 0);
  CHECK_NEAR(ssd_iou(a, a), 1, 0);
}

static void encode_decode_round_trip(void) {
  const float db[4] = {0.5f, 0.4f, 0.2f, 0.1f};
  // A box shifted by 0.1 w, 0.1 h and scaled by e^0.2: offsets (1, 1, 1, 1).
  float w = 0.2f * expf(0.2f), h = 0.1f * expf(0.2f), cx = 0.52f, cy = 0.41f;
  const float gt[4] = {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
  float off[4], back[4];
  ssd_encode(db, gt, off);
  for (int k = 0; k < 4; k++) CHECK_NEAR(off[k], 1.0, 1e-5);
  // decode(encode(gt)) = gt: a few fp32 roundings of values below 1.
  float x[40], o[4];
  test_fill_uniform(x, 40, 3, 0.05f, 0.9f);
  for (int i = 0; i < 40; i += 4) {
    const float box[4] = {x[i], x[i + 1], x[i] + x[i + 2], x[i + 1] + x[i + 3]};
    ssd_encode(db, box, o);
    ssd_decode(db, o, back);
    for (int k = 0; k < 4; k++) CHECK_NEAR(back[k], box[k], 1e-6);
  }
}

// ---------------------------------------------------------------- matching
// Two hand-made default boxes with exact (dyadic) corners.
static float kTwoXywh[8] = {0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 0.25f, 1.0f, 0.5f};
static float kTwoLtrb[8] = {0, 0, 0.5f, 0.5f, 0, 0, 1, 0.5f};

static void matching_needs_iou_above_one_half(void) {
  SsdDefaultBoxes db = {.n = 2, .xywh = kTwoXywh, .ltrb = kTwoLtrb};
  // The ground truth is box 1 (IoU 1); box 0 has IoU 0.25 / 0.5 = 0.5 exactly.
  const float gt[4] = {0, 0, 1, 0.5f};
  const int32_t label[1] = {4};
  int32_t labels[2];
  float off[8];
  CHECK_EQ_INT(ssd_match(&db, gt, label, 1, labels, off), 1);
  CHECK_EQ_INT(labels[0], 0);
  CHECK_EQ_INT(labels[1], 4);
  for (int k = 0; k < 8; k++) CHECK_NEAR(off[k], 0, 1e-7);  // box 1 is the gt itself
  // No ground truth: all background.
  CHECK_EQ_INT(ssd_match(&db, gt, label, 0, labels, off), 0);
  CHECK_EQ_INT(labels[0] + labels[1], 0);
}

static void every_ground_truth_takes_its_best_box(void) {
  SsdDefaultBoxes db = ssd_default_boxes(&kSsd300Boxes);
  int32_t *labels = malloc((size_t)db.n * sizeof(int32_t));
  float *off = malloc((size_t)db.n * 4 * sizeof(float));
  // A tiny box overlaps no default box by more than one half, yet it takes one.
  const float tiny[4] = {0.50f, 0.50f, 0.51f, 0.51f};
  const int32_t five = 5;
  CHECK_EQ_INT(ssd_match(&db, tiny, &five, 1, labels, off), 1);
  int64_t taken = -1;
  float best = -1;
  for (int64_t a = 0; a < db.n; a++) {
    if (labels[a]) taken = a;
    float iou = ssd_iou(tiny, db.ltrb + 4 * a);
    if (iou > best) best = iou;
  }
  REQUIRE(taken >= 0);
  CHECK(best < 0.5f);
  CHECK_NEAR(ssd_iou(tiny, db.ltrb + 4 * taken), best, 0);
  CHECK_EQ_INT(labels[taken], 5);

  // Two equal ground truths, labels 3 then 7, equal to map 5's small square
  // at (2, 2) (box 8554): on the IoU tie every box takes the first (3), but
  // the forced box goes to the later (7). Its large square (box 8579) has
  // IoU 153 / 207 = 0.74 with it.
  const float *sq = db.ltrb + 4 * 8554;
  const float two[8] = {sq[0], sq[1], sq[2], sq[3], sq[0], sq[1], sq[2], sq[3]};
  const int32_t l37[2] = {3, 7};
  int64_t pos = ssd_match(&db, two, l37, 2, labels, off);
  CHECK_EQ_INT(labels[8554], 7);
  CHECK_EQ_INT(labels[8579], 3);
  int64_t sevens = 0;
  for (int64_t a = 0; a < db.n; a++) sevens += labels[a] == 7;
  CHECK_EQ_INT(sevens, 1);
  CHECK(pos >= 2);
  free(labels);
  free(off);
  ssd_default_boxes_free(&db);
}

// ---------------------------------------------------------------- detection
// logits (n, 3) with softmax scores close to the given class-1 and class-2
// probabilities: log p, log of the rest for the background.
static void logits_for(float *logits, const float (*p)[2], int n) {
  for (int a = 0; a < n; a++) {
    logits[3 * a] = logf(1.0f - p[a][0] - p[a][1]);
    logits[3 * a + 1] = logf(p[a][0]);
    logits[3 * a + 2] = logf(p[a][1]);
  }
}

// Runs ssd_detect_cpu and checks the detections' boxes and labels, in
// order; out gets them.
static void check_detections(const SsdDefaultBoxes *db, const float *loc, const float *logits,
                             const SsdNmsParams *prm, int n_want, const int32_t *want_box,
                             const int32_t *want_label, SsdDetection *out) {
  Arena arena;
  arena_init(&arena, "detect", DEVICE_CPU, ssd_detect_scratch_bytes(db->n, 3, prm));
  int n = ssd_detect_cpu(&CPU, db, loc, logits, 3, prm, &arena, out);
  arena_free(&arena);
  CHECK_EQ_INT(n, n_want);
  for (int i = 0; i < n && i < n_want; i++) {
    CHECK_EQ_INT(out[i].box, want_box[i]);
    CHECK_EQ_INT(out[i].label, want_label[i]);
  }
}

static void nms_suppresses_within_a_class_only(void) {
  // Boxes 0 and 1 overlap (IoU 0.036 / 0.044 = 0.82); box 2 is apart; box 3
  // scores 0.04.
  float xywh[16] = {0.3f, 0.3f, 0.2f, 0.2f, 0.32f, 0.3f, 0.2f, 0.2f,
                    0.8f, 0.8f, 0.1f, 0.1f, 0.5f, 0.8f, 0.1f, 0.1f};
  float ltrb[16];
  const float zero[4] = {0, 0, 0, 0};
  for (int a = 0; a < 4; a++) ssd_decode(xywh + 4 * a, zero, ltrb + 4 * a);
  SsdDefaultBoxes db = {.n = 4, .xywh = xywh, .ltrb = ltrb};
  const float p[4][2] = {{0.6f, 0.1f}, {0.3f, 0.6f}, {0.2f, 0.1f}, {0.04f, 0.01f}};
  float logits[12], loc[16] = {0};
  logits_for(logits, p, 4);
  // Class 1: box 0 (0.6) keeps, box 1 (0.3) goes, box 2 (0.2) keeps.
  // Class 2: box 1 (0.6) keeps, box 0 (0.1) goes, box 2 (0.1) keeps.
  const int32_t want_box[4] = {0, 1, 2, 2}, want_label[4] = {1, 2, 1, 2};
  const float want_score[4] = {0.6f, 0.6f, 0.2f, 0.1f};
  SsdDetection out[200];
  check_detections(&db, loc, logits, &kSsdNms, 4, want_box, want_label, out);
  for (int i = 0; i < 4; i++) CHECK_NEAR(out[i].score, want_score[i], 1e-6);
  for (int k = 0; k < 4; k++) CHECK_NEAR(out[0].ltrb[k], ltrb[k], 0);
}

static void nms_keeps_the_best_per_class_and_image(void) {
  // 8 disjoint boxes; class 1 scores 0.09 - 0.01 a, class 2 0.085 - 0.01 a.
  float xywh[32], ltrb[32], loc[32] = {0}, logits[24], p[8][2];
  for (int a = 0; a < 8; a++) {
    const float box[4] = {0.1f * a + 0.05f, 0.5f, 0.05f, 0.05f};
    memcpy(xywh + 4 * a, box, sizeof box);
    ssd_decode(box, loc, ltrb + 4 * a);
    p[a][0] = 0.09f - 0.01f * a, p[a][1] = 0.085f - 0.01f * a;
  }
  logits_for(logits, (const float(*)[2])p, 8);
  SsdDefaultBoxes db = {.n = 8, .xywh = xywh, .ltrb = ltrb};
  // Above 0.05: boxes 0-3 (class 1), 0-3 (class 2: 0.055 at box 3); the
  // best 3 of each class, then the best 4 of the image.
  const SsdNmsParams prm = {.score_threshold = 0.05f, .iou_threshold = 0.5f,
                            .max_per_class = 3, .max_output = 4};
  const int32_t want_box[4] = {0, 0, 1, 1}, want_label[4] = {1, 2, 1, 2};
  SsdDetection out[4];
  check_detections(&db, loc, logits, &prm, 4, want_box, want_label, out);
}

static void nms_cuts_at_200(void) {
  enum { N = 300 };
  float *xywh = malloc(N * 4 * sizeof(float)), *ltrb = malloc(N * 4 * sizeof(float));
  float *loc = calloc(N * 4, sizeof(float)), *logits = malloc(N * 3 * sizeof(float));
  float(*p)[2] = malloc(N * sizeof *p);
  for (int a = 0; a < N; a++) {  // disjoint boxes on a 20 x 15 grid
    const float box[4] = {(a % 20 + 0.5f) / 20, (a / 20 + 0.5f) / 15, 0.02f, 0.02f};
    memcpy(xywh + 4 * a, box, sizeof box);
    ssd_decode(box, loc, ltrb + 4 * a);
    p[a][0] = 0.9f - 0.002f * a, p[a][1] = 0.001f;
  }
  logits_for(logits, (const float(*)[2])p, N);
  SsdDefaultBoxes db = {.n = N, .xywh = xywh, .ltrb = ltrb};
  // All 300 pass 0.05; the 200 best, in order, all of class 1.
  int32_t want_box[200], want_label[200];
  for (int i = 0; i < 200; i++) want_box[i] = i, want_label[i] = 1;
  SsdDetection out[200];
  check_detections(&db, loc, logits, &kSsdNms, 200, want_box, want_label, out);
  free(xywh), free(ltrb), free(loc), free(logits), free(p);
}

static void detect_batch_runs_each_image(void) {
  // Three images of 3 x 3 x 4 + 2 x 2 x 4 = 52 boxes, 4 classes, the middle
  // one without a score above the threshold: through ssd_detect on the CPU,
  // each image's detections and count as its own ssd_detect_cpu call's.
  const SsdBoxConfig c = {.image_size = 60, .n_maps = 2, .feat_size = {3, 2},
                          .step = {20, 30}, .scale = {15, 30, 45}, .n_ratios = {1, 1},
                          .ratio = {{2}, {3}}};
  enum { B = 3, C = 4, MAX_OUT = 20 };
  SsdDefaultBoxes db = ssd_default_boxes(&c);
  int64_t n = db.n;
  float *loc = random_array(B * n * 4, 5, -1.0f, 1.0f, DT_F32);
  float *logits = random_array(B * n * C, 6, -3.0f, 3.0f, DT_F32);
  for (int64_t a = 0; a < n; a++) logits[(n + a) * C] = 12.0f;  // image 1: background
  const SsdNmsParams prm = {.score_threshold = 0.2f, .iou_threshold = 0.4f,
                            .max_per_class = 10, .max_output = MAX_OUT};
  SsdDeviceBoxes boxes = ssd_default_boxes_to_device(&CPU, &db);
  CHECK(boxes.device == DEVICE_CPU && boxes.n == n && boxes.xywh != db.xywh);
  CHECK(memcmp(boxes.xywh, db.xywh, (size_t)n * 4 * sizeof(float)) == 0);
  Arena arena;
  arena_init(&arena, "detect", DEVICE_CPU,
             ssd_detect_batch_scratch_bytes(DEVICE_CPU, B, n, C, &prm));
  SsdDetection got[B * MAX_OUT], want[MAX_OUT];
  int32_t count[B];
  ssd_detect(&CPU, &boxes, B, loc, logits, C, &prm, &arena, got, count);
  for (int b = 0; b < B; b++) {
    int n_want = ssd_detect_cpu(&CPU, &db, loc + b * n * 4, logits + b * n * C, C, &prm,
                                &arena, want);
    CHECK_EQ_INT(count[b], n_want);
    if (count[b] == n_want)
      CHECK(memcmp(got + b * MAX_OUT, want, (size_t)n_want * sizeof *want) == 0);
  }
  CHECK(count[0] > 0 && count[2] > 0);
  CHECK_EQ_INT(count[1], 0);
  CHECK(arena.used_bytes == 0);
  arena_free(&arena);
  ssd_device_boxes_free(&boxes);
  free(loc), free(logits);
  ssd_default_boxes_free(&db);
}

// ---------------------------------------------------------------- loss
// log(sum exp(x)) - x[label] in double.
static double xent(const float *x, int c, int label) {
  double s = 0;
  for (int j = 0; j < c; j++) s += exp(x[j]);
  return log(s) - x[label];
}

typedef struct LossCase {
  int64_t batch, n, classes;
  float *ploc, *logits, *gloc, *dloc, *dlogits;
  int32_t *glabel;
  Arena arena;
} LossCase;

static LossCase loss_case(int64_t batch, int64_t n, int64_t classes) {
  LossCase c = {.batch = batch, .n = n, .classes = classes};
  c.ploc = calloc((size_t)(batch * n * 4), sizeof(float));
  c.gloc = calloc((size_t)(batch * n * 4), sizeof(float));
  c.dloc = calloc((size_t)(batch * n * 4), sizeof(float));
  c.logits = calloc((size_t)(batch * n * classes), sizeof(float));
  c.dlogits = calloc((size_t)(batch * n * classes), sizeof(float));
  c.glabel = calloc((size_t)(batch * n), sizeof(int32_t));
  arena_init(&c.arena, "loss", DEVICE_CPU, ssd_loss_scratch_bytes(batch, n));
  return c;
}

static double loss_of(void *ctx) {
  LossCase *c = ctx;
  float loss;
  ssd_loss_cpu(&CPU, c->batch, c->n, c->classes, c->ploc, c->logits, c->gloc, c->glabel, 1.0f,
               &c->arena, &loss, c->dloc, c->dlogits);
  return loss;
}

static void loss_case_free(LossCase *c) {
  free(c->ploc), free(c->gloc), free(c->dloc), free(c->logits), free(c->dlogits);
  free(c->glabel);
  arena_free(&c->arena);
}

static void loss_of_a_tiny_case(void) {
  // Two images of 8 boxes, 3 classes. Image 0: box 5 positive (label 2);
  // negatives' background logits 0..6 make their cross-entropies fall with
  // the logit, so the 3 mined are boxes 0, 1, 2 (logits 0, 0.5, 1). Image 1
  // has no positive: it adds 0, but counts in the mean.
  LossCase c = loss_case(2, 8, 3);
  for (int a = 0; a < 8; a++) c.logits[3 * a] = 0.5f * (float)a;
  c.logits[3 * 5 + 2] = 1.0f;
  c.glabel[5] = 2;
  const float d[4] = {0.5f, -2.0f, 0.25f, 1.5f};  // ploc - gloc of box 5
  for (int k = 0; k < 4; k++) c.ploc[4 * 5 + k] = d[k], c.gloc[4 * 5 + k] = 0;
  double sl1 = 0.125 + 1.5 + 0.03125 + 1.0;
  double con = xent(c.logits + 15, 3, 2);
  for (int a = 0; a < 3; a++) con += xent(c.logits + 3 * a, 3, 0);
  double want = (sl1 + con) / 1 / 2;
  CHECK_NEAR(loss_of(&c), want, 1e-6 * want);
  // The gradient: only box 5's offsets, and the weighted boxes' logits.
  CHECK_NEAR(c.dloc[4 * 5 + 1], -1.0 / 2, 1e-7);
  CHECK_NEAR(c.dloc[4 * 5 + 0], 0.5 / 2, 1e-7);
  for (int a = 3; a < 16; a++)
    if (a != 5)
      for (int j = 0; j < 3; j++) CHECK_NEAR(c.dlogits[3 * a + j], 0, 0);
  // With a batch of one image the loss doubles.
  c.batch = 1;
  CHECK_NEAR(loss_of(&c), 2 * want, 2e-6 * want);
  loss_case_free(&c);
}

static void mining_counts_a_positive_twice_when_negatives_run_out(void) {
  // 4 boxes, 2 positives: min(3 * 2, 4) = 4 boxes mined, the positives
  // among them (with loss 0 in the ranking), so each positive's
  // cross-entropy counts twice - the reference's rule.
  LossCase c = loss_case(1, 4, 2);
  const float x[8] = {0.1f, 0.3f, -0.2f, 0.4f, 0.7f, 0.0f, 0.2f, 0.9f};
  memcpy(c.logits, x, sizeof x);
  c.glabel[1] = 1, c.glabel[3] = 1;
  double want = (2 * xent(x + 2, 2, 1) + 2 * xent(x + 6, 2, 1) + xent(x, 2, 0) +
                 xent(x + 4, 2, 0)) / 2;
  CHECK_NEAR(loss_of(&c), want, 1e-6 * want);
  // One positive: 3 mined = the 3 negatives, the positive once.
  c.glabel[3] = 0;
  want = xent(x + 2, 2, 1) + xent(x, 2, 0) + xent(x + 4, 2, 0) + xent(x + 6, 2, 0);
  CHECK_NEAR(loss_of(&c), want, 1e-6 * want);
  loss_case_free(&c);
}

static void loss_gradient_matches_finite_differences(void) {
  // 2 images of 40 boxes, 4 classes; 2 and 3 positives. The mined
  // negatives' background logits sit at -2 (cross-entropy ~3), the others'
  // at +3 (~0.1), so no step of eps moves a box across the mining cut; the
  // offsets' differences avoid smooth L1's kink at |d| = 1 by 0.1.
  enum { B = 2, N = 40, C = 4 };
  LossCase c = loss_case(B, N, C);
  test_fill_uniform(c.logits, B * N * C, 7, -1.0f, 1.0f);
  test_fill_uniform(c.ploc, B * N * 4, 8, -0.8f, 0.8f);
  const int positives[B] = {2, 3};
  for (int b = 0; b < B; b++)
    for (int a = 0; a < N; a++) {
      int64_t row = b * N + a;
      if (a < positives[b]) c.glabel[row] = 1 + a % (C - 1);
      else c.logits[row * C] = a < positives[b] * 4 ? -2.0f : 3.0f;
      // Half the positives' offsets in the linear part: |d| in [1.1, 1.9].
      for (int k = 0; k < 4; k++)
        if (a < positives[b] && k % 2) c.gloc[4 * row + k] = c.ploc[4 * row + k] > 0 ? -1.1f : 1.1f;
    }
  loss_of(&c);
  float *gl = malloc(sizeof(float) * B * N * C), *gp = malloc(sizeof(float) * B * N * 4);
  memcpy(gl, c.dlogits, sizeof(float) * B * N * C);
  memcpy(gp, c.dloc, sizeof(float) * B * N * 4);
  // FD_EPS 1e-2 on a loss of ~10: rounding ~6e-8 * 10 / 2e-2 = 3e-5 against
  // gradients of ~0.1 - 0.5 (1 / (B P) times p - onehot); truncation:
  // smooth L1 is piecewise quadratic (none), the cross-entropy's third
  // derivative is below 1, so eps^2 / 6 / (B P) ~ 1e-5. FD_TOL (1e-2) is
  // two orders above both; a wrong weight or normalisation is off by order 1.
  double err_l = test_gradcheck(loss_of, &c, c.logits, gl, B * N * C, FD_EPS, 200, FD_FLOOR);
  double err_p = test_gradcheck(loss_of, &c, c.ploc, gp, B * N * 4, FD_EPS, 200, FD_FLOOR);
  test_check_error("dlogits", "fp32 finite differences", err_l, FD_TOL);
  test_check_error("dloc", "fp32 finite differences", err_p, FD_TOL);
  // grad_scale scales the gradient (by a power of two: exactly), not the loss.
  double loss1 = loss_of(&c);
  float loss8;
  ssd_loss_cpu(&CPU, B, N, C, c.ploc, c.logits, c.gloc, c.glabel, 8.0f, &c.arena, &loss8,
               c.dloc, c.dlogits);
  CHECK_NEAR(loss8, loss1, 0);
  for (int i = 0; i < B * N * C; i++) CHECK_NEAR(c.dlogits[i], 8.0f * gl[i], 0);
  for (int i = 0; i < B * N * 4; i++) CHECK_NEAR(c.dloc[i], 8.0f * gp[i], 0);
  free(gl), free(gp);
  loss_case_free(&c);
}

// ---------------------------------------------------------------- --io IN OUT
// IN, little-endian: i32 image_size, n_maps; per map i32 feat_size, step,
// n_ratios, f64 ratios[n_ratios]; f64 scales[n_maps + 1]; i32 batch,
// classes; per image i32 n_gt, f32 gt_ltrb[n_gt][4], i32 gt_label[n_gt];
// f32 ploc[batch][n][4], logits[batch][n][classes].
// OUT: f32 xywh[n][4], ltrb[n][4]; per image i32 labels[n], f32
// offsets[n][4]; f32 loss, dloc[batch][n][4], dlogits[batch][n][classes];
// per image i32 count, then per detection i32 box, label, f32 score, ltrb[4].
static void read_or_die(FILE *f, void *dst, size_t bytes) {
  if (fread(dst, 1, bytes, f) != bytes) die_input("--io input", "file ends early");
}

static int32_t read_i32(FILE *f) {
  int32_t v;
  read_or_die(f, &v, sizeof v);
  return v;
}

static void *read_array(FILE *f, size_t bytes) {
  void *p = xmalloc(bytes ? bytes : 1);
  read_or_die(f, p, bytes);
  return p;
}

static void write_or_die(FILE *f, const void *src, size_t bytes) {
  if (fwrite(src, 1, bytes, f) != bytes) DIE("--io output: write failed");
}

static void read_config(FILE *f, SsdBoxConfig *c) {
  *c = (SsdBoxConfig){.image_size = read_i32(f), .n_maps = read_i32(f)};
  if (c->n_maps < 1 || c->n_maps > SSD_MAX_MAPS) die_input("--io input", "bad n_maps");
  for (int k = 0; k < c->n_maps; k++) {
    c->feat_size[k] = read_i32(f);
    c->step[k] = read_i32(f);
    c->n_ratios[k] = read_i32(f);
    if (c->n_ratios[k] < 0 || c->n_ratios[k] > SSD_MAX_RATIOS)
      die_input("--io input", "bad n_ratios");
    read_or_die(f, c->ratio[k], (size_t)c->n_ratios[k] * sizeof(double));
  }
  read_or_die(f, c->scale, (size_t)(c->n_maps + 1) * sizeof(double));
}

static int run_io(const char *in_path, const char *out_path) {
  FILE *in = fopen(in_path, "rb"), *out = fopen(out_path, "wb");
  if (!in || !out) DIE("--io: cannot open %s or %s", in_path, out_path);
  SsdBoxConfig cfg;
  read_config(in, &cfg);
  SsdDefaultBoxes db = ssd_default_boxes(&cfg);
  int64_t batch = read_i32(in), classes = read_i32(in), n = db.n;
  int32_t *labels = xmalloc((size_t)(batch * n) * sizeof(int32_t));
  float *gloc = xmalloc((size_t)(batch * n * 4) * sizeof(float));
  for (int64_t b = 0; b < batch; b++) {
    int32_t n_gt = read_i32(in);
    if (n_gt < 0) die_input("--io input", "negative n_gt");
    float *gt = read_array(in, (size_t)n_gt * 4 * sizeof(float));
    int32_t *gt_label = read_array(in, (size_t)n_gt * sizeof(int32_t));
    ssd_match(&db, gt, gt_label, n_gt, labels + b * n, gloc + b * n * 4);
    free(gt), free(gt_label);
  }
  float *ploc = read_array(in, (size_t)(batch * n * 4) * sizeof(float));
  float *logits = read_array(in, (size_t)(batch * n * classes) * sizeof(float));
  write_or_die(out, db.xywh, (size_t)n * 4 * sizeof(float));
  write_or_die(out, db.ltrb, (size_t)n * 4 * sizeof(float));
  for (int64_t b = 0; b < batch; b++) {
    write_or_die(out, labels + b * n, (size_t)n * sizeof(int32_t));
    write_or_die(out, gloc + b * n * 4, (size_t)n * 4 * sizeof(float));
  }
  float *dloc = xmalloc((size_t)(batch * n * 4) * sizeof(float));
  float *dlogits = xmalloc((size_t)(batch * n * classes) * sizeof(float));
  Arena arena;
  size_t loss_bytes = ssd_loss_scratch_bytes(batch, n);
  size_t detect_bytes = ssd_detect_scratch_bytes(n, classes, &kSsdNms);
  arena_init(&arena, "io", DEVICE_CPU, loss_bytes > detect_bytes ? loss_bytes : detect_bytes);
  float loss;
  ssd_loss_cpu(&CPU, batch, n, classes, ploc, logits, gloc, labels, 1.0f, &arena, &loss, dloc,
               dlogits);
  write_or_die(out, &loss, sizeof loss);
  write_or_die(out, dloc, (size_t)(batch * n * 4) * sizeof(float));
  write_or_die(out, dlogits, (size_t)(batch * n * classes) * sizeof(float));
  SsdDetection *det = xmalloc((size_t)kSsdNms.max_output * sizeof(SsdDetection));
  for (int64_t b = 0; b < batch; b++) {
    int32_t count = ssd_detect_cpu(&CPU, &db, ploc + b * n * 4, logits + b * n * classes,
                                   classes, &kSsdNms, &arena, det);
    write_or_die(out, &count, sizeof count);
    for (int i = 0; i < count; i++) {
      write_or_die(out, &det[i].box, sizeof(int32_t));
      write_or_die(out, &det[i].label, sizeof(int32_t));
      write_or_die(out, &det[i].score, sizeof(float));
      write_or_die(out, det[i].ltrb, 4 * sizeof(float));
    }
  }
  fclose(in);
  if (fclose(out) != 0) DIE("--io output: close failed");
  free(labels), free(gloc), free(ploc), free(logits), free(dloc), free(dlogits), free(det);
  arena_free(&arena);
  ssd_default_boxes_free(&db);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--io") == 0) return run_io(argv[2], argv[3]);
  TEST_RUN(ssd300_has_8732_boxes);
  TEST_RUN(a_known_box_of_each_map);
  TEST_RUN(a_small_ssd_uses_the_same_code);
  TEST_RUN(iou_of_known_boxes);
  TEST_RUN(encode_decode_round_trip);
  TEST_RUN(matching_needs_iou_above_one_half);
  TEST_RUN(every_ground_truth_takes_its_best_box);
  TEST_RUN(nms_suppresses_within_a_class_only);
  TEST_RUN(nms_keeps_the_best_per_class_and_image);
  TEST_RUN(nms_cuts_at_200);
  TEST_RUN(detect_batch_runs_each_image);
  TEST_RUN(loss_of_a_tiny_case);
  TEST_RUN(mining_counts_a_positive_twice_when_negatives_run_out);
  TEST_RUN(loss_gradient_matches_finite_differences);
  return test_finish();
}
