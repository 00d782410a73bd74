// The detection input (object_detection/ssd_data.h): the SSD random crop
// (centre rule, clipping, IoU constraint), the flip, the colour jitter
// (common/data/augment.h) on hand-checked pixels, and a small LMDB of
// generated images read back into batches whose targets are ssd_match's,
// identical whatever the thread count, crowd boxes never positive, bad
// records named.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/augment.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "data/sampler.h"
#include "object_detection/ssd_data.h"
#include "tests/data/image_test_util.h"
#include "tests/harness/test.h"

// ---------------------------------------------------------------- geometry

static void crop_keeps_centres_inside_and_clips(void) {
  const float boxes[4 * 4] = {0.1f, 0.1f, 0.3f, 0.3f,   // centre (0.2, 0.2): out
                              0.4f, 0.4f, 0.9f, 0.8f,   // (0.65, 0.6): in, clipped right, bottom
                              0.0f, 0.5f, 0.2f, 0.9f,   // (0.1, 0.7): out
                              0.2f, 0.3f, 0.5f, 0.6f};  // (0.35, 0.45): in, clipped left
  const int32_t labels[4] = {1, 2, 3, 4};
  SsdCrop crop = {0.25f, 0.25f, 0.75f, 0.75f, 1};
  float out[16];
  int32_t out_labels[4];
  REQUIRE(ssd_crop_boxes(&crop, boxes, labels, 4, out, out_labels) == 2);
  CHECK(out_labels[0] == 2 && out_labels[1] == 4);
  // (0.4, 0.4, 0.75, 0.75) and (0.25, 0.3, 0.5, 0.6), less 0.25, over 0.5.
  const float expect[8] = {0.3f, 0.3f, 1.0f, 1.0f, 0.0f, 0.1f, 0.5f, 0.7f};
  for (int i = 0; i < 8; i++) CHECK_NEAR(out[i], expect[i], 1e-6);
  // A centre on the crop's edge is not inside.
  const float edge[4] = {0.15f, 0.3f, 0.35f, 0.4f};  // centre x 0.25
  CHECK_EQ_INT(ssd_crop_boxes(&crop, edge, labels, 1, out, out_labels), 0);
  // The reference's pixel cut: int(left * W) .. int(right * W).
  CropBox px = ssd_crop_pixels(&(SsdCrop){0.25f, 0.1f, 0.76f, 0.9f, 1}, 101, 50);
  CHECK(px.x == 25 && px.width == 76 - 25 && px.y == 5 && px.height == 45 - 5);
}

// Crops of n boxes; mode_count gets how often each mode won.
static int crop_violations(const float *boxes, const int32_t *labels, int32_t n,
                           int mode_count[SSD_CROP_MODES]) {
  int bad = 0;
  for (int i = 0; i < 4000; i++) {
    Rng rng = augment_sample_rng(9, 1, i);
    SsdCrop c;
    float out[12];
    int32_t out_labels[3];
    int32_t kept = ssd_random_crop(boxes, labels, n, i % 2 ? 50 : 1, &rng, &c, out, out_labels);
    mode_count[c.mode]++;
    bad += kept == 0;  // a crop keeps a box's centre, or another mode is chosen
    if (c.mode == 0) {
      bad += kept != n || c.left != 0 || c.right != 1 ||
             memcmp(out, boxes, (size_t)n * 4 * sizeof(float)) != 0;
      continue;
    }
    float w = c.right - c.left, h = c.bottom - c.top, crop_ltrb[4] = {c.left, c.top, c.right, c.bottom};
    bad += w < 0.3f - 1e-6f || w > 1.0f + 1e-6f || h < 0.3f - 1e-6f || h > 1.0f + 1e-6f ||
           w / h < 0.5f - 1e-6f || w / h > 2.0f + 1e-6f || c.left < 0 || c.right > 1.0f + 1e-6f ||
           c.top < 0 || c.bottom > 1.0f + 1e-6f;
    for (int b = 0; b < n; b++) bad += !(ssd_iou(boxes + 4 * b, crop_ltrb) > kSsdCropMinIou[c.mode]);
    for (int32_t k = 0; k < kept; k++)
      for (int j = 0; j < 4; j++) bad += out[4 * k + j] < 0.0f || out[4 * k + j] > 1.0f;
  }
  return bad;
}

static void accepted_crops_meet_their_iou(void) {
  const float three[3 * 4] = {0.1f, 0.2f, 0.5f, 0.7f, 0.4f, 0.3f, 0.9f, 0.95f,
                              0.05f, 0.05f, 0.2f, 0.15f};
  const int32_t labels[3] = {1, 2, 3};
  int modes[SSD_CROP_MODES] = {0};
  CHECK_EQ_INT(crop_violations(three, labels, 3, modes), 0);
  // The small box allows no IoU above 0.17 with a crop of area >= 0.09: min
  // IoU 0.3 and above never win; the whole image and no constraint do.
  for (int m = 0; m < SSD_CROP_MODES; m++)
    if (m != 1) CHECK_MSG((m == 0 || m == 6) == (modes[m] > 0), "mode %d won %d times", m, modes[m]);
  // One box that a crop can match closely: every mode wins.
  const float one[4] = {0.2f, 0.15f, 0.8f, 0.85f};
  memset(modes, 0, sizeof modes);
  CHECK_EQ_INT(crop_violations(one, labels, 1, modes), 0);
  for (int m = 0; m < SSD_CROP_MODES; m++) CHECK_MSG(modes[m] > 0, "mode %d never won", m);
}

static void flip_mirrors_boxes(void) {
  float b[8] = {0.1f, 0.2f, 0.4f, 0.9f, 0.0f, 0.0f, 1.0f, 0.5f};
  ssd_flip_boxes(b, 2);
  const float expect[8] = {0.6f, 0.2f, 0.9f, 0.9f, 0.0f, 0.0f, 1.0f, 0.5f};
  for (int i = 0; i < 8; i++) CHECK_NEAR(b[i], expect[i], 1e-7);
}

// ---------------------------------------------------------------- colour jitter

static void zero_jitter_is_identity(void) {
  ColorJitter none = {0};
  Rng rng = augment_sample_rng(1, 0, 0);
  ColorJitterDraw d = augment_color_jitter_draw(&none, &rng);
  CHECK_EQ_INT(d.count, 0);
  uint8_t *img = pattern(17, 9, 3), *copy = malloc(17 * 9 * 3);
  memcpy(copy, img, 17 * 9 * 3);
  augment_color_jitter(img, 17 * 9, &d);
  CHECK(memcmp(img, copy, 17 * 9 * 3) == 0);
  // Factor 1 (and hue 0 on grey) changes nothing either.
  augment_adjust_brightness(img, 17 * 9, 1.0f);
  augment_adjust_contrast(img, 17 * 9, 1.0f);
  augment_adjust_saturation(img, 17 * 9, 1.0f);
  CHECK(memcmp(img, copy, 17 * 9 * 3) == 0);
  free(img);
  free(copy);
}

static void jitter_draws_ranges_and_orders(void) {
  ColorJitter j = {0.125f, 0.5f, 0.5f, 0.05f};
  int first[JITTER_KINDS] = {0}, bad = 0;
  for (int i = 0; i < 2000; i++) {
    Rng rng = augment_sample_rng(2, 0, i);
    ColorJitterDraw d = augment_color_jitter_draw(&j, &rng);
    bad += d.count != 4;
    bad += d.factor[0] < 0.875f || d.factor[0] > 1.125f || d.factor[1] < 0.5f ||
           d.factor[1] > 1.5f || d.factor[2] < 0.5f || d.factor[2] > 1.5f ||
           d.factor[3] < -0.05f || d.factor[3] > 0.05f;
    int seen = 0;
    for (int k = 0; k < 4; k++) seen |= 1 << d.order[k];
    bad += seen != 15;
    first[d.order[0]]++;
  }
  CHECK_EQ_INT(bad, 0);
  for (int k = 0; k < 4; k++) CHECK_MSG(first[k] > 400 && first[k] < 600, "kind %d first %d times", k, first[k]);
}

static void jitter_factors_hand_checked(void) {
  // Brightness: f * p, truncated, clipped.
  uint8_t p[3] = {100, 201, 7};
  augment_adjust_brightness(p, 1, 0.5f);
  CHECK(p[0] == 50 && p[1] == 100 && p[2] == 3);
  uint8_t q[3] = {100, 201, 7};
  augment_adjust_brightness(q, 1, 1.5f);
  CHECK(q[0] == 150 && q[1] == 255 && q[2] == 10);
  // Contrast: towards the mean grey (0 and 200: 100).
  uint8_t c[6] = {0, 0, 0, 200, 200, 200};
  augment_adjust_contrast(c, 2, 0.5f);
  CHECK(c[0] == 50 && c[2] == 50 && c[3] == 150 && c[5] == 150);
  // Saturation: towards the pixel's L = (100*19595 + 150*38470 + 200*7471
  // + 32768) >> 16 = 141: 141 + 0.5 (p - 141) = 120.5, 145.5, 170.5.
  uint8_t s[3] = {100, 150, 200};
  augment_adjust_saturation(s, 1, 0.5f);
  CHECK_MSG(s[0] == 120 && s[1] == 145 && s[2] == 170, "%d %d %d", s[0], s[1], s[2]);
  uint8_t g[3] = {100, 150, 200};
  augment_adjust_saturation(g, 1, 0.0f);
  CHECK(g[0] == 141 && g[1] == 141 && g[2] == 141);
  // Hue: red (H 0, S 255, V 255) + 0.2 * 255 = 51: sector 1, f 0.2 ->
  // (V (1 - 0.2), V, 0) = (204, 255, 0); - 51 wraps to 205: sector 4,
  // f = 0.8235 -> (V f, 0, V) = (210, 0, 255).
  uint8_t h[6] = {255, 0, 0, 255, 0, 0};
  augment_adjust_hue(h, 1, 0.2f);
  augment_adjust_hue(h + 3, 1, -0.2f);
  CHECK_MSG(h[0] == 204 && h[1] == 255 && h[2] == 0, "%d %d %d", h[0], h[1], h[2]);
  CHECK_MSG(h[3] == 210 && h[4] == 0 && h[5] == 255, "%d %d %d", h[3], h[4], h[5]);
  uint8_t grey[3] = {90, 90, 90};  // no saturation: hue leaves it
  augment_adjust_hue(grey, 1, 0.3f);
  CHECK(grey[0] == 90 && grey[1] == 90 && grey[2] == 90);
}

// ---------------------------------------------------------------- loader over an LMDB

// A small layout: 64-pixel images, maps 8, 4, 2 (4 + 6 + 4 boxes per location).
static const SsdBoxConfig kSmallBoxes = {
    .image_size = 64, .n_maps = 3, .feat_size = {8, 4, 2}, .step = {8, 16, 32},
    .scale = {8, 20, 36, 60}, .n_ratios = {1, 2, 1}, .ratio = {{2}, {2, 3}, {2}}};

enum { kRecords = 12, kClasses = 6, kMaxBoxes = 4, kCrowdLabel = 5 };

typedef struct TestRecord {
  int32_t width, height, n;
  float boxes[kMaxBoxes * 4];
  int32_t labels[kMaxBoxes];
} TestRecord;

// Record i: a (80 + 8i) x (60 + 4i) image; boxes in labels 1..4, one crowd
// box (label -5) in every third, only a crowd box in record 7.
static TestRecord test_record(int i) {
  TestRecord t = {.width = 80 + 8 * i, .height = 60 + 4 * i};
  float o = 0.02f * (float)(i % 5);
  const float base[3][4] = {{0.1f, 0.1f, 0.5f, 0.6f}, {0.45f, 0.3f, 0.9f, 0.9f},
                            {0.3f, 0.05f, 0.4f, 0.2f}};
  if (i == 7) {
    t.n = 1;
    memcpy(t.boxes, (float[4]){0.2f, 0.2f, 0.8f, 0.8f}, sizeof(float[4]));
    t.labels[0] = -kCrowdLabel;
    return t;
  }
  t.n = 1 + i % 3;
  for (int b = 0; b < t.n; b++) {
    for (int k = 0; k < 4; k++) t.boxes[4 * b + k] = base[b][k] + o;
    t.labels[b] = 1 + (i + b) % 4;
  }
  if (i % 3 == 0) {
    memcpy(t.boxes + 4 * t.n, (float[4]){0.0f, 0.0f, 0.7f, 0.7f}, sizeof(float[4]));
    t.labels[t.n++] = -kCrowdLabel;
  }
  return t;
}

static void put_boxes_record(LmdbWriter *w, const TestRecord *t, int64_t id, RecordKind kind) {
  uint8_t *px = pattern(t->width, t->height, 3);
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(px, t->width, t->height, 3, 90, &n);
  Record r = {.kind = kind, .image_format = IMAGE_FORMAT_JPEG, .image = jpeg, .image_bytes = n,
              .image_id = id, .box_count = t->n, .boxes = t->boxes, .box_labels = t->labels};
  size_t bytes = record_encoded_bytes(&r);
  uint8_t *value = malloc(bytes);
  record_encode(&r, value, bytes);
  lmdb_writer_put(w, value, bytes);
  free(value);
  free(jpeg);
  free(px);
}

static const char *test_lmdb(void) {
  static char dir[512];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s/boxes", test_tmpdir());
  LmdbWriter *w = lmdb_writer_open(dir);
  for (int i = 0; i < kRecords; i++) {
    TestRecord t = test_record(i);
    put_boxes_record(w, &t, 1000 + i, RECORD_IMAGE_BOXES);
  }
  lmdb_writer_close(w);
  return dir;
}

static SsdLoaderConfig loader_config(bool train, int threads) {
  SsdAugment a = ssd_augment_mlperf(train, 77);
  a.side = 64;
  return (SsdLoaderConfig){.lmdb_dir = test_lmdb(), .augment = a, .boxes = &kSmallBoxes,
                           .num_classes = kClasses, .batch_size = 4, .threads = threads,
                           .ring_batches = 2, .rank = 0, .world = 1};
}

// The non-crowd boxes of t.
static int32_t training_boxes(const TestRecord *t, float *boxes, int32_t *labels) {
  int32_t n = 0;
  for (int b = 0; b < t->n; b++)
    if (t->labels[b] > 0) {
      memcpy(boxes + 4 * n, t->boxes + 4 * b, 4 * sizeof(float));
      labels[n++] = t->labels[b];
    }
  return n;
}

// Reads two epochs of training batches; every sample's targets must be
// ssd_match of its boxes after ssd_augment_boxes, and no crowd label appear.
static void check_training_targets(SsdLoaderConfig cfg) {
  Loader *l = ssd_loader_open(&cfg, NULL);
  SsdDefaultBoxes db = ssd_default_boxes(&kSmallBoxes);
  int32_t *labels = malloc(db.n * sizeof(int32_t));
  float *offsets = malloc(db.n * 4 * sizeof(float));
  Sampler s = {.count = kRecords, .seed = cfg.augment.seed, .world = 1, .shuffle = true};
  uint32_t order[kRecords];
  int64_t mismatched = 0, crowd = 0, positives = 0, samples = 0;
  for (int k = 0; k < 6; k++) {
    const LoaderBatch *b = loader_next(l);
    sampler_epoch_order(&s, b->epoch, order);
    for (int64_t j = 0; j < b->count; j++, samples++) {
      int64_t rec = order[b->step * cfg.batch_size + j];
      TestRecord t = test_record((int)rec);
      float boxes[kMaxBoxes * 4], kept[kMaxBoxes * 4];
      int32_t box_labels[kMaxBoxes], kept_labels[kMaxBoxes];
      int32_t n = training_boxes(&t, boxes, box_labels);
      Rng rng = augment_sample_rng(cfg.augment.seed, b->epoch, rec);
      SsdCrop crop;
      bool flip;
      int32_t nk = ssd_augment_boxes(&cfg.augment, boxes, box_labels, n, &rng, &crop, &flip, kept,
                                     kept_labels);
      ssd_match(&db, kept, kept_labels, nk, labels, offsets);
      const int32_t *got = (const int32_t *)b->host[1] + j * db.n;
      const float *got_off = (const float *)b->host[2] + j * db.n * 4;
      mismatched += memcmp(got, labels, db.n * sizeof(int32_t)) != 0 ||
                    memcmp(got_off, offsets, db.n * 4 * sizeof(float)) != 0;
      for (int64_t i = 0; i < db.n; i++) {
        crowd += got[i] == kCrowdLabel || got[i] < 0;
        positives += got[i] > 0;
        if (rec == 7) crowd += got[i] != 0;  // only a crowd box: all background
      }
    }
  }
  CHECK_EQ_INT(samples, 24);
  CHECK_EQ_INT(mismatched, 0);
  CHECK_EQ_INT(crowd, 0);
  CHECK(positives > 0);
  free(labels);
  free(offsets);
  ssd_default_boxes_free(&db);
  loader_close(l);
}

static void training_targets_are_ssd_match(void) {
  // No augmentation: the record's own non-crowd boxes.
  SsdLoaderConfig plain = loader_config(true, 2);
  plain.augment.crop = plain.augment.flip = false;
  plain.augment.jitter = (ColorJitter){0};
  check_training_targets(plain);
  check_training_targets(loader_config(true, 2));
}

// Every field of `batches` batches, concatenated.
static uint8_t *read_all(SsdLoaderConfig cfg, int batches, size_t *bytes) {
  Loader *l = ssd_loader_open(&cfg, NULL);
  size_t n_boxes = (size_t)ssd_map_first_box(&kSmallBoxes, kSmallBoxes.n_maps);
  size_t per[3] = {64 * 64 * 3, n_boxes * 4, n_boxes * 16};
  size_t batch_bytes = (size_t)cfg.batch_size * (per[0] + per[1] + per[2]);
  uint8_t *out = calloc((size_t)batches, batch_bytes);
  for (int k = 0; k < batches; k++) {
    const LoaderBatch *b = loader_next(l);
    uint8_t *dst = out + k * batch_bytes;
    for (int f = 0; f < 3; f++) {
      memcpy(dst, b->host[f], (size_t)b->count * per[f]);
      dst += (size_t)cfg.batch_size * per[f];
    }
  }
  loader_close(l);
  *bytes = (size_t)batches * batch_bytes;
  return out;
}

static void batches_identical_across_thread_counts(void) {
  size_t n1, n3;
  uint8_t *one = read_all(loader_config(true, 1), 6, &n1);
  uint8_t *three = read_all(loader_config(true, 3), 6, &n3);
  CHECK(n1 == n3 && memcmp(one, three, n1) == 0);
  // Another seed gives other batches.
  SsdLoaderConfig other = loader_config(true, 2);
  other.augment.seed = 78;
  uint8_t *b = read_all(other, 6, &n3);
  CHECK(memcmp(one, b, n1) != 0);
  free(one);
  free(three);
  free(b);
}

static void eval_batches_whole_image(void) {
  SsdLoaderConfig cfg = loader_config(false, 2);
  cfg.boxes = NULL;
  int64_t count;
  Loader *l = ssd_loader_open(&cfg, &count);
  CHECK_EQ_INT(count, kRecords);
  ImageDecoder *d = image_decoder_create();
  uint8_t expect[64 * 64 * 3];
  int64_t next = 0;
  for (int k = 0; k < 3; k++) {
    const LoaderBatch *b = loader_next(l);
    for (int64_t j = 0; j < b->count; j++, next++) {
      TestRecord t = test_record((int)next);
      int64_t id;
      int32_t size[2];
      memcpy(&id, (const int64_t *)b->host[1] + j, sizeof id);
      memcpy(size, (const int32_t *)b->host[2] + 2 * j, sizeof size);
      CHECK(id == 1000 + next && size[0] == t.height && size[1] == t.width);
      // The whole image, resized. The loader decodes at a DCT scale (1/2 for
      // the widest) and resizes the JPEG's planes before converting them to
      // RGB; both filter a little differently from a full-size RGB resize:
      // within 2 levels on average on this smooth pattern.
      uint8_t *px = pattern(t.width, t.height, 3);
      size_t n;
      uint8_t *jpeg = image_encode_jpeg(px, t.width, t.height, 3, 90, &n);
      Image full = {0};
      char msg[512];
      REQUIRE(decode(jpeg, n, 0, 0, &full, msg) == IMAGE_OK);
      augment_crop_resize(full.pixels, t.width, t.height, 0, 0, t.width, t.height, false, expect,
                          64, 64);
      double diff = mean_abs_diff(expect, (const uint8_t *)b->host[0] + j * sizeof expect,
                                  sizeof expect);
      CHECK_MSG(diff < 2.0, "record %lld: mean difference %.2f", (long long)next, diff);
      image_free(&full);
      free(jpeg);
      free(px);
    }
  }
  CHECK_EQ_INT(next, kRecords);
  image_decoder_free(d);
  loader_close(l);
}

static void float_output_is_normalised(void) {
  SsdLoaderConfig u8 = loader_config(true, 2), f32 = loader_config(true, 2);
  f32.augment.float_output = true;
  Loader *a = ssd_loader_open(&u8, NULL), *b = ssd_loader_open(&f32, NULL);
  const LoaderBatch *ba = loader_next(a), *bb = loader_next(b);
  float *expect = malloc(4 * 64 * 64 * 3 * sizeof(float));
  augment_normalize_cpu(ba->host[0], expect, 4 * 64 * 64, u8.augment.mean, u8.augment.std);
  CHECK(memcmp(expect, bb->host[0], 4 * 64 * 64 * 3 * sizeof(float)) == 0);
  free(expect);
  loader_close(a);
  loader_close(b);
}

// ---------------------------------------------------------------- bad records

static void open_and_read_child(void *ctx) {
  SsdLoaderConfig cfg = loader_config(true, 1);
  cfg.lmdb_dir = ctx;
  cfg.batch_size = 1;
  Loader *l = ssd_loader_open(&cfg, NULL);
  loader_next(l);
  loader_next(l);
}

// An LMDB named `name`: a good record 0, then record 1 as `bad` of `kind`;
// reading it must stop with `needle`.
static void check_bad_record(const char *name, const TestRecord *bad, RecordKind kind,
                             const char *needle) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
  LmdbWriter *w = lmdb_writer_open(dir);
  TestRecord good = test_record(1);
  put_boxes_record(w, &good, 1, RECORD_IMAGE_BOXES);
  put_boxes_record(w, bad, 2, kind);
  lmdb_writer_close(w);
  CHECK_DIES_WITH(open_and_read_child, dir, needle);
}

static void bad_records_are_named(void) {
  TestRecord t = test_record(1);
  check_bad_record("bad_kind", &t, RECORD_IMAGE_LABEL,
                   "bad_kind record 1: a image+label record where image+boxes records belong");
  t.boxes[2] = 1.25f;  // past the image
  check_bad_record("bad_box", &t, RECORD_IMAGE_BOXES,
                   "bad_box record 1: box 0 (0.12, 0.12, 1.25, 0.62) is not inside [0, 1]");
  t = test_record(1);
  t.boxes[3] = t.boxes[1];  // no height
  check_bad_record("flat_box", &t, RECORD_IMAGE_BOXES,
                   "flat_box record 1: box 0 (0.12, 0.12, 0.52, 0.12) has no positive width and height");
  t = test_record(1);
  t.labels[1] = kClasses;
  check_bad_record("bad_label", &t, RECORD_IMAGE_BOXES,
                   "bad_label record 1: box 1 has label 6, not in 1..5 (or its negative, a crowd box)");
}

int main(void) {
  TEST_RUN(crop_keeps_centres_inside_and_clips);
  TEST_RUN(accepted_crops_meet_their_iou);
  TEST_RUN(flip_mirrors_boxes);
  TEST_RUN(zero_jitter_is_identity);
  TEST_RUN(jitter_draws_ranges_and_orders);
  TEST_RUN(jitter_factors_hand_checked);
  TEST_RUN(training_targets_are_ssd_match);
  TEST_RUN(batches_identical_across_thread_counts);
  TEST_RUN(eval_batches_whole_image);
  TEST_RUN(float_output_is_normalised);
  TEST_RUN(bad_records_are_named);
  return test_finish();
}
