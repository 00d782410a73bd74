// test_ssd_boxes_cuda.c: ssd_loss_cuda against ssd_loss_cpu (through the
// ssd_loss dispatcher) on the SSD300 box count and on a small layout: several
// images, one without positives and one with 4P > n (positives mined too),
// exact ties between losses at the mining cut (rows of logits copied), and
// negatives of loss exactly 0 tying the positives. Then ssd_detect_batch_cuda
// against ssd_detect_batch_cpu (through ssd_detect) on the same two layouts:
// batches with tied scores within and across classes, an image without a
// score above the threshold, an image where every box is a candidate (more
// than max_per_class), and an IoU exactly at the NMS threshold; the
// detections identical. Skips without a GPU; runs on the CPU emulation of
// CUDA (EMU=1).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../object_detection/ssd_boxes.h"
#include "tests/harness/test.h"
#include "tests/ops/ops_test_util.h"

// A batch's inputs; positives[b] positives in image b at scattered boxes.
typedef struct LossInputs {
  int64_t batch, n, classes;
  float *ploc, *gloc, *logits;  // (B, n, 4), (B, n, 4), (B, n, C)
  int32_t *glabel;              // (B, n)
} LossInputs;

// Image b: uniform logits on [-2, 2), offsets on [-1.5, 1.5) (both sides of
// smooth L1's kink). With ties, every negative's logits are one of 7 rows,
// so the losses come in large groups of equal values and the cut at 3P falls
// inside one; every 11th negative gets a loss of exactly 0 (background at 0,
// the rest at -1000), tying the positives' rank key.
static LossInputs make_inputs(int64_t batch, int64_t n, int64_t classes,
                              const int64_t *positives, const bool *ties, uint64_t seed) {
  LossInputs in = {.batch = batch, .n = n, .classes = classes};
  int64_t rows = batch * n;
  in.ploc = random_array(rows * 4, seed, -1.5f, 1.5f, DT_F32);
  in.gloc = random_array(rows * 4, seed + 1, -1.5f, 1.5f, DT_F32);
  in.logits = random_array(rows * classes, seed + 2, -2.0f, 2.0f, DT_F32);
  in.glabel = calloc((size_t)rows, sizeof(int32_t));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t a = 0; a < n; a++) {
      int64_t row = b * n + a;
      float *x = in.logits + row * classes;
      if ((17 * a + 5 * b) % n < positives[b])  // exactly P: 17 is prime to n
        in.glabel[row] = 1 + (int32_t)(a % (classes - 1));
      else if (ties[b] && a % 11 == 5)
        for (int64_t c = 0; c < classes; c++) x[c] = c ? -1000.0f : 0.0f;
      else if (ties[b])
        memcpy(x, in.logits + (b * n + a % 7) * classes, (size_t)classes * sizeof(float));
    }
  return in;
}

static void free_inputs(LossInputs *in) {
  free(in->ploc), free(in->gloc), free(in->logits), free(in->glabel);
}

#if HAVE_CUDA
static const Device CPU = {.kind = DEVICE_CPU};

static void *to_gpu(const void *host, size_t bytes) { return device_upload(DEVICE_CUDA, host, bytes); }

// Runs both and compares: the loss and gradients within tol_rounded(fp32);
// which boxes the gradient weights (its zero rows) and by how much (1 or 2
// per box: the ratio of the rows) exactly.
static void compare(const char *what, const LossInputs *in, float grad_scale) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t rows = in->batch * in->n, nl = rows * in->classes;
  size_t scratch_bytes = ssd_loss_scratch_bytes(in->batch, in->n);
  Arena cpu_arena, gpu_arena;
  arena_init(&cpu_arena, "ssd loss", DEVICE_CPU, scratch_bytes);
  arena_init(&gpu_arena, "ssd loss", DEVICE_CUDA, scratch_bytes);
  float loss, *dloc = out_buf(rows * 4), *dlogits = out_buf(nl);
  ssd_loss(&CPU, in->batch, in->n, in->classes, in->ploc, in->logits, in->gloc, in->glabel,
           grad_scale, &cpu_arena, &loss, dloc, dlogits);
  float *d_ploc = to_gpu(in->ploc, (size_t)rows * 4 * sizeof(float));
  float *d_gloc = to_gpu(in->gloc, (size_t)rows * 4 * sizeof(float));
  float *d_logits = to_gpu(in->logits, (size_t)nl * sizeof(float));
  int32_t *d_label = to_gpu(in->glabel, (size_t)rows * sizeof(int32_t));
  float *d_loss = device_alloc(DEVICE_CUDA, sizeof(float));
  float *d_dloc = device_alloc(DEVICE_CUDA, (size_t)rows * 4 * sizeof(float));
  float *d_dlogits = device_alloc(DEVICE_CUDA, (size_t)nl * sizeof(float));
  ssd_loss(&dev, in->batch, in->n, in->classes, d_ploc, d_logits, d_gloc, d_label, grad_scale,
           &gpu_arena, d_loss, d_dloc, d_dlogits);
  device_sync(&dev);
  float got_loss, *got_dloc = out_buf(rows * 4), *got_dlogits = out_buf(nl);
  download(&got_loss, d_loss, 1, DT_F32);
  download(got_dloc, d_dloc, rows * 4, DT_F32);
  download(got_dlogits, d_dlogits, nl, DT_F32);
  char dtype[96];
  snprintf(dtype, sizeof dtype, "fp32, %s", what);
  test_check_error("loss", dtype, test_rel_error(&got_loss, &loss, 1), tol_rounded(DT_F32));
  test_check_error("dloc", dtype, test_rel_error(got_dloc, dloc, rows * 4),
                   tol_rounded(DT_F32));
  test_check_error("dlogits", dtype, test_rel_error(got_dlogits, dlogits, nl),
                   tol_rounded(DT_F32));
  // The mined set: a row is zero on both or on neither; on a weighted row
  // the largest element's ratio is 1 (not 2 or 1/2: a box weighted twice on
  // one side only). Worst elementwise difference printed for the report.
  int64_t pattern_errors = 0, weight_errors = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *want = dlogits + r * in->classes, *got = got_dlogits + r * in->classes;
    int64_t big = 0;
    bool want_zero = true, got_zero = true;
    for (int64_t c = 0; c < in->classes; c++) {
      want_zero &= want[c] == 0.0f, got_zero &= got[c] == 0.0f;
      if (fabsf(want[c]) > fabsf(want[big])) big = c;
      worst = fmax(worst, fabs((double)got[c] - want[c]));
    }
    pattern_errors += want_zero != got_zero;
    if (!want_zero && fabs(got[big] / want[big] - 1.0) > 1e-3) weight_errors++;
  }
  CHECK_EQ_INT(pattern_errors, 0);
  CHECK_EQ_INT(weight_errors, 0);
  printf("  %s: loss %.9g vs %.9g, max |ddlogits| %.3g\n", what, got_loss, loss, worst);
  free(dloc), free(dlogits), free(got_dloc), free(got_dlogits);
  device_free(DEVICE_CUDA, d_ploc), device_free(DEVICE_CUDA, d_gloc);
  device_free(DEVICE_CUDA, d_logits), device_free(DEVICE_CUDA, d_label);
  device_free(DEVICE_CUDA, d_loss), device_free(DEVICE_CUDA, d_dloc);
  device_free(DEVICE_CUDA, d_dlogits);
  arena_free(&cpu_arena), arena_free(&gpu_arena);
  device_close(&dev);
}
#else
static void compare(const char *what, const LossInputs *in, float grad_scale) {
  (void)what, (void)in, (void)grad_scale;
  test_skip("no GPU");
}
#endif

static void loss_cuda_matches_cpu_on_a_small_layout(void) {
  // 40 boxes, 5 classes. Image 0: 3 positives, the 9 mined among tied
  // negatives; 1: none; 2: 12 positives (4P > n: every negative mined and
  // the lowest-index positives and zero-loss negatives to fill 36); 3: one.
  const int64_t positives[4] = {3, 0, 12, 1};
  const bool ties[4] = {true, true, true, false};
  LossInputs in = make_inputs(4, 40, 5, positives, ties, 11);
  compare("40 boxes", &in, 1.0f);
  compare("40 boxes, grad_scale 8", &in, 8.0f);
  free_inputs(&in);
}

static void loss_cuda_matches_cpu_on_ssd300(void) {
  // 8,732 boxes, 81 classes. Image 0: 20 positives among tied losses; 1:
  // none; 2: 150, no ties; 3: 2,400 (4P > n).
  SsdDefaultBoxes db = ssd_default_boxes(&kSsd300Boxes);
  const int64_t positives[4] = {20, 0, 150, 2400};
  const bool ties[4] = {true, false, false, true};
  LossInputs in = make_inputs(4, db.n, 81, positives, ties, 23);
  compare("SSD300", &in, 1.0f);
  free_inputs(&in);
  ssd_default_boxes_free(&db);
}

// ---------------------------------------------------------------- detection
// 88 boxes: a 4x4 map of 4 shapes and a 2x2 map of 6.
static const SsdBoxConfig kSmallBoxes = {
    .image_size = 64,
    .n_maps = 2,
    .feat_size = {4, 2},
    .step = {16, 32},
    .scale = {16, 32, 48},
    .n_ratios = {1, 2},
    .ratio = {{2}, {2, 3}},
};

// What an image of a detection batch holds.
typedef enum {
  IMAGE_RANDOM,  // logits uniform on [-3, 3)
  IMAGE_TIED,    // every box's logits one of 7 rows, class 2's equal to class 1's
  IMAGE_EMPTY,   // background at 12: no class above e^-9
  IMAGE_FLOOD,   // every box: classes 1 and 2 at 4, the rest 0 - all candidates, all tied
} ImageKind;

typedef struct DetectInputs {
  int64_t batch, n, classes;
  float *loc, *logits;  // (B, n, 4) uniform on [-1, 1), (B, n, C)
} DetectInputs;

static DetectInputs make_detect_inputs(int64_t n, int64_t classes, const ImageKind *kinds,
                                       int64_t batch, uint64_t seed) {
  DetectInputs in = {.batch = batch, .n = n, .classes = classes};
  in.loc = random_array(batch * n * 4, seed, -1.0f, 1.0f, DT_F32);
  in.logits = random_array(batch * n * classes, seed + 1, -3.0f, 3.0f, DT_F32);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t a = 0; a < n; a++) {
      float *x = in.logits + (b * n + a) * classes;  // (C)
      if (kinds[b] == IMAGE_TIED) {
        memcpy(x, in.logits + (b * n + a % 7) * classes, (size_t)classes * sizeof(float));
        x[2] = x[1];
      } else if (kinds[b] == IMAGE_EMPTY) {
        x[0] = 12.0f;
      } else if (kinds[b] == IMAGE_FLOOD) {
        for (int64_t c = 0; c < classes; c++) x[c] = c == 1 || c == 2 ? 4.0f : 0.0f;
      }
    }
  return in;
}

static void free_detect_inputs(DetectInputs *in) { free(in->loc), free(in->logits); }

#if HAVE_CUDA
// Runs ssd_detect on the CPU and on the GPU and checks that every image's
// detections are the same, bit for bit; count gets the CPU's counts.
static void compare_detect(const char *what, const SsdDefaultBoxes *db, const DetectInputs *in,
                           const SsdNmsParams *p, int32_t *count) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t rows = in->batch * in->n, n_out = in->batch * p->max_output;
  Arena cpu_arena, gpu_arena;
  arena_init(&cpu_arena, "ssd detect", DEVICE_CPU,
             ssd_detect_batch_scratch_bytes(DEVICE_CPU, in->batch, in->n, in->classes, p));
  arena_init(&gpu_arena, "ssd detect", DEVICE_CUDA,
             ssd_detect_batch_scratch_bytes(DEVICE_CUDA, in->batch, in->n, in->classes, p));
  SsdDeviceBoxes cpu_boxes = ssd_default_boxes_to_device(&CPU, db);
  SsdDeviceBoxes gpu_boxes = ssd_default_boxes_to_device(&dev, db);
  SsdDetection *want = calloc((size_t)n_out, sizeof *want);
  SsdDetection *got = calloc((size_t)n_out, sizeof *got);
  int32_t *got_count = calloc((size_t)in->batch, sizeof *got_count);
  ssd_detect(&CPU, &cpu_boxes, in->batch, in->loc, in->logits, in->classes, p, &cpu_arena, want,
             count);
  float *d_loc = to_gpu(in->loc, (size_t)rows * 4 * sizeof(float));
  float *d_logits = to_gpu(in->logits, (size_t)(rows * in->classes) * sizeof(float));
  ssd_detect(&dev, &gpu_boxes, in->batch, d_loc, d_logits, in->classes, p, &gpu_arena, got,
             got_count);
  int total = 0, mismatches = 0;
  for (int64_t b = 0; b < in->batch; b++) {
    CHECK_EQ_INT(got_count[b], count[b]);
    total += count[b];
    for (int i = 0; i < count[b] && i < got_count[b]; i++) {
      const SsdDetection *w = &want[b * p->max_output + i], *g = &got[b * p->max_output + i];
      if (memcmp(w, g, sizeof *w) == 0) continue;
      if (mismatches++ == 0)
        test_fail(__FILE__, __LINE__,
                  "%s: image %lld detection %d: box %d label %d score %.9g ltrb %.9g %.9g "
                  "%.9g %.9g, want box %d label %d score %.9g ltrb %.9g %.9g %.9g %.9g",
                  what, (long long)b, i, g->box, g->label, g->score, g->ltrb[0], g->ltrb[1],
                  g->ltrb[2], g->ltrb[3], w->box, w->label, w->score, w->ltrb[0], w->ltrb[1],
                  w->ltrb[2], w->ltrb[3]);
    }
  }
  CHECK_EQ_INT(mismatches, 0);
  printf("  %s: %d detections over %lld images (counts", what, total, (long long)in->batch);
  for (int64_t b = 0; b < in->batch; b++) printf(" %d", count[b]);
  printf(")\n");
  free(want), free(got), free(got_count);
  device_free(DEVICE_CUDA, d_loc), device_free(DEVICE_CUDA, d_logits);
  ssd_device_boxes_free(&cpu_boxes), ssd_device_boxes_free(&gpu_boxes);
  arena_free(&cpu_arena), arena_free(&gpu_arena);
  device_close(&dev);
}
#else
static void compare_detect(const char *what, const SsdDefaultBoxes *db, const DetectInputs *in,
                           const SsdNmsParams *p, int32_t *count) {
  (void)what, (void)db, (void)in, (void)p, (void)count;
  test_skip("no GPU");
}
#endif

static void detect_cuda_matches_cpu_on_a_small_layout(void) {
  // 88 boxes, 5 classes. Cuts of 6 per class and 9 per image, both inside
  // runs of tied scores; then the MLPerf parameters, above every count.
  SsdDefaultBoxes db = ssd_default_boxes(&kSmallBoxes);
  const ImageKind kinds[5] = {IMAGE_RANDOM, IMAGE_TIED, IMAGE_EMPTY, IMAGE_FLOOD, IMAGE_RANDOM};
  DetectInputs in = make_detect_inputs(db.n, 5, kinds, 5, 31);
  const SsdNmsParams tight = {
      .score_threshold = 0.1f, .iou_threshold = 0.45f, .max_per_class = 6, .max_output = 9};
  int32_t count[5];
  compare_detect("88 boxes, 6 per class, 9 per image", &db, &in, &tight, count);
  CHECK_EQ_INT(count[2], 0);
  CHECK_EQ_INT(count[3], tight.max_output);
  compare_detect("88 boxes, kSsdNms", &db, &in, &kSsdNms, count);
  CHECK_EQ_INT(count[2], 0);
  CHECK(count[0] > tight.max_output && count[3] > 0);
  free_detect_inputs(&in);
  ssd_default_boxes_free(&db);
}

static void detect_cuda_matches_cpu_on_ssd300(void) {
  // 8,732 boxes, 81 classes, kSsdNms: hundreds of candidates per class in
  // the random and tied images (the tied ones' best among the first boxes,
  // squares), none in the empty one, 8,732 tied ones for classes 1 and 2 in
  // the flooded one.
  SsdDefaultBoxes db = ssd_default_boxes(&kSsd300Boxes);
  const ImageKind kinds[4] = {IMAGE_RANDOM, IMAGE_TIED, IMAGE_EMPTY, IMAGE_FLOOD};
  DetectInputs in = make_detect_inputs(db.n, 81, kinds, 4, 37);
  int32_t count[4];
  compare_detect("SSD300", &db, &in, &kSsdNms, count);
  CHECK_EQ_INT(count[0], kSsdNms.max_output);
  CHECK_EQ_INT(count[1], kSsdNms.max_output);
  CHECK_EQ_INT(count[2], 0);
  CHECK(count[3] > 0);
  free_detect_inputs(&in);
  ssd_default_boxes_free(&db);
}

static void detect_cuda_drops_a_box_at_exactly_the_iou_threshold(void) {
  // One image, zero offsets: class 1 scores box 0 (the 4x4 map's small
  // square at (0, 0)) above box 16 (its large square there); no other
  // candidate. With the threshold at exactly their IoU box 16 goes; an ulp
  // above, it stays.
  SsdDefaultBoxes db = ssd_default_boxes(&kSmallBoxes);
  const ImageKind kinds[1] = {IMAGE_EMPTY};
  DetectInputs in = make_detect_inputs(db.n, 3, kinds, 1, 41);
  memset(in.loc, 0, (size_t)db.n * 4 * sizeof(float));
  in.logits[0 * 3 + 1] = 14.0f;
  in.logits[16 * 3 + 1] = 13.0f;
  float box0[4], box16[4];
  ssd_decode(db.xywh, in.loc, box0);
  ssd_decode(db.xywh + 4 * 16, in.loc, box16);
  float iou = ssd_iou(box16, box0);
  SsdNmsParams p = kSsdNms;
  p.iou_threshold = iou;
  int32_t count[1];
  compare_detect("IoU at the threshold", &db, &in, &p, count);
  CHECK_EQ_INT(count[0], 1);
  p.iou_threshold = nextafterf(iou, 1.0f);
  compare_detect("IoU an ulp below the threshold", &db, &in, &p, count);
  CHECK_EQ_INT(count[0], 2);
  printf("  IoU of the two boxes: %.9g\n", iou);
  free_detect_inputs(&in);
  ssd_default_boxes_free(&db);
}

int main(void) {
  TEST_RUN(loss_cuda_matches_cpu_on_a_small_layout);
  TEST_RUN(loss_cuda_matches_cpu_on_ssd300);
  TEST_RUN(detect_cuda_matches_cpu_on_a_small_layout);
  TEST_RUN(detect_cuda_matches_cpu_on_ssd300);
  TEST_RUN(detect_cuda_drops_a_box_at_exactly_the_iou_threshold);
  return test_finish();
}
