// The classification input (image_classification/classify_data.h): the
// random-resized and centre crop boxes, and an image through decode and
// augmentation, deterministic per (seed, epoch, index), with a bad image
// named.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "data/augment.h"
#include "data/image.h"
#include "image_classification/classify_data.h"
#include "tests/data/image_test_util.h"
#include "tests/harness/test.h"

static void random_resized_crop_ranges(void) {
  enum { kDraws = 20000 };
  double scale_sum = 0;
  int bad = 0;
  for (int i = 0; i < kDraws; i++) {
    Rng rng = augment_sample_rng(5, 0, i);
    CropBox b = classify_random_resized_crop_box(500, 375, 0.08f, 1.0f, 0.75f, 4.0f / 3, &rng);
    double scale = (double)b.width * b.height / (500.0 * 375), ratio = (double)b.width / b.height;
    scale_sum += scale;
    // Rounding the sides to whole pixels moves scale and ratio a little.
    bad += b.x < 0 || b.y < 0 || b.x + b.width > 500 || b.y + b.height > 375 || scale < 0.075 ||
           scale > 1.0 || ratio < 0.74 || ratio > 1.35;
  }
  CHECK_EQ_INT(bad, 0);
  // Draws whose box does not fit are retried, which favours small areas: the
  // mean falls below the 0.54 of uniform(0.08, 1).
  CHECK_MSG(scale_sum / kDraws > 0.35 && scale_sum / kDraws < 0.54, "mean scale %.3f",
            scale_sum / kDraws);
  // A 1000x10 strip fits no box of ratio <= 4/3 and area >= 8%: the fallback
  // keeps the full height and the widest allowed width, centred.
  Rng rng = augment_sample_rng(5, 0, 0);
  CropBox b = classify_random_resized_crop_box(1000, 10, 0.08f, 1.0f, 0.75f, 4.0f / 3, &rng);
  CHECK(b.width == 13 && b.height == 10 && b.x == 493 && b.y == 0);
  b = classify_random_resized_crop_box(10, 1000, 0.08f, 1.0f, 0.75f, 4.0f / 3, &rng);
  CHECK(b.width == 10 && b.height == 13 && b.x == 0 && b.y == 493);
}

static void center_crop_box(void) {
  CropBox b = classify_center_crop_box(500, 375, 256, 224);
  CHECK(b.width == 328 && b.height == 328 && b.x == 86 && b.y == 23);
  b = classify_center_crop_box(64, 64, 73, 64);  // a scaled 64-of-73 variant
  CHECK(b.width == 56 && b.x == 4);
}

static void augment_image(const uint8_t *bytes, size_t n, bool train, int64_t index, uint8_t *out) {
  ClassifyAugment a = classify_augment_imagenet(train, 1234);
  a.out_side = 64;
  a.resize_side = 73;
  ImageDecoder *d = image_decoder_create();
  ClassifyScratch scratch = {0};
  classify_augment_image(d, &scratch, &a, bytes, n, "test image", 3, index, out);
  classify_scratch_free(&scratch);
  image_decoder_free(d);
}

static void classify_augment_deterministic(void) {
  uint8_t *src = pattern(300, 200, 3);
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(src, 300, 200, 3, 90, &n);
  uint8_t a[64 * 64 * 3], b[64 * 64 * 3], c[64 * 64 * 3];
  augment_image(jpeg, n, true, 17, a);
  augment_image(jpeg, n, true, 17, b);
  augment_image(jpeg, n, true, 18, c);
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
  // Eval: the centre 200 * 64/73 square of the full-size decode, resized.
  uint8_t expect[64 * 64 * 3];
  augment_image(jpeg, n, false, 17, a);
  Image full = {0};
  char msg[512];
  REQUIRE(decode(jpeg, n, 0, 0, &full, msg) == IMAGE_OK);
  CropBox box = classify_center_crop_box(300, 200, 73, 64);
  augment_crop_resize(full.pixels, 300, 200, box.x, box.y, box.width, box.height, false, expect, 64, 64);
  // The eval crop (175 px to 64) decodes at 1/2 scale, which filters; the
  // full-size path samples every 2.7th pixel bilinearly, which aliases. On
  // this pattern (periods down to 42 px) they differ by a few levels.
  double err = mean_abs_diff(a, expect, sizeof a);
  CHECK_MSG(err < 5.0, "mean |error| %.2f between DCT-scaled and full decode", err);
  image_free(&full);
  free(jpeg);
  free(src);
}

typedef struct Bytes {
  const uint8_t *p;
  size_t n;
} Bytes;

static void augment_child(void *arg) {
  Bytes *b = arg;
  uint8_t out[64 * 64 * 3];
  augment_image(b->p, b->n, true, 0, out);
}

static void classify_bad_image_named(void) {
  Bytes text = {(const uint8_t *)"<html>", 6};
  CHECK_DIES_WITH(augment_child, &text, "test image: not a JPEG or PNG image");
  Bytes empty = {(const uint8_t *)"", 0};
  CHECK_DIES_WITH(augment_child, &empty, "test image: empty (0 bytes)");
}

int main(void) {
  TEST_RUN(random_resized_crop_ranges);
  TEST_RUN(center_crop_box);
  TEST_RUN(classify_augment_deterministic);
  TEST_RUN(classify_bad_image_named);
  return test_finish();
}
