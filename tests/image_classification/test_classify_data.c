// The classification input (image_classification/classify_data.h): the
// random-resized, distorted-box and centre crop boxes, the normalisations,
// and an image through decode and augmentation, deterministic per (seed,
// epoch, index), with a bad image named.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "data/augment.h"
#include "data/image.h"
#include "image_classification/classify_data.h"
#include "tests/data/image_test_util.h"
#include "tests/harness/test.h"

static const ClassifyCrop kTorchvisionCrop = {.method = CLASSIFY_CROP_RANDOM_RESIZED,
                                              .scale_min = 0.08f, .scale_max = 1.0f,
                                              .ratio_min = 0.75f, .ratio_max = 4.0f / 3,
                                              .attempts = 10, .min_covered = 0};
// The MLPerf v0.7 reference's (imagenet_preprocessing.py).
static const ClassifyCrop kReferenceCrop = {.method = CLASSIFY_CROP_DISTORTED_BOX,
                                            .scale_min = 0.05f, .scale_max = 1.0f,
                                            .ratio_min = 0.75f, .ratio_max = 1.33f,
                                            .attempts = 100, .min_covered = 0.1f};

static void random_resized_crop_ranges(void) {
  enum { kDraws = 20000 };
  double scale_sum = 0;
  int bad = 0;
  for (int i = 0; i < kDraws; i++) {
    Rng rng = augment_sample_rng(5, 0, i);
    CropBox b = classify_random_resized_crop_box(500, 375, &kTorchvisionCrop, &rng);
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
  CropBox b = classify_random_resized_crop_box(1000, 10, &kTorchvisionCrop, &rng);
  CHECK(b.width == 13 && b.height == 10 && b.x == 493 && b.y == 0);
  b = classify_random_resized_crop_box(10, 1000, &kTorchvisionCrop, &rng);
  CHECK(b.width == 10 && b.height == 13 && b.x == 0 && b.y == 493);
}

// Draws of `c` on a width x height image: the fraction of boxes under
// `small` of the image's area, of fallbacks (fallback: the box), and the
// means of the boxes' heights and aspect ratios; every box inside the image.
typedef struct CropStats {
  double under_small, fallbacks, mean_height, mean_ratio;
  int outside;
} CropStats;

static CropStats crop_stats(const ClassifyCrop *c, int32_t width, int32_t height, double small,
                            CropBox fallback, int draws) {
  CropStats st = {0};
  for (int i = 0; i < draws; i++) {
    Rng rng = augment_sample_rng(9, 1, i);
    CropBox b = classify_train_crop_box(width, height, c, &rng);
    st.outside += b.x < 0 || b.y < 0 || b.x + b.width > width || b.y + b.height > height;
    st.under_small += (double)b.width * b.height < small * width * height;
    st.fallbacks += memcmp(&b, &fallback, sizeof b) == 0;
    st.mean_height += b.height;
    st.mean_ratio += (double)b.width / b.height;
  }
  st.under_small /= draws;
  st.fallbacks /= draws;
  st.mean_height /= draws;
  st.mean_ratio /= draws;
  return st;
}

// The reference's crop, sample_distorted_bounding_box: boxes inside the
// image with area and ratio in range, the offsets short of the last
// position as TensorFlow's; min_covered 0.1 is a constraint of its own (the
// area range reaches down to 0.05: without it, about a tenth of the boxes
// fall under 10% of the image); and when no box fits, the whole image.
static void distorted_box_ranges_and_fallback(void) {
  enum { kDraws = 20000 };
  int bad = 0, at_last_offset = 0;
  for (int i = 0; i < kDraws; i++) {
    Rng rng = augment_sample_rng(5, 0, i);
    CropBox b = classify_distorted_box(500, 375, &kReferenceCrop, &rng);
    double scale = (double)b.width * b.height / (500.0 * 375), ratio = (double)b.width / b.height;
    // The width is the height times the ratio, rounded: half a pixel of ratio.
    double slack = 0.5 / b.height;
    bad += b.x < 0 || b.y < 0 || b.x + b.width > 500 || b.y + b.height > 375 || scale < 0.1 ||
           scale > 1.0 || ratio < 0.75 - slack || ratio > 1.33 + slack;
    at_last_offset += (b.width < 500 && b.x == 500 - b.width) || (b.height < 375 && b.y == 375 - b.height);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(at_last_offset, 0);
  CropBox whole = {0, 0, 500, 375};
  ClassifyCrop uncovered = kReferenceCrop;
  uncovered.min_covered = 0;
  CropStats with = crop_stats(&kReferenceCrop, 500, 375, 0.1, whole, kDraws);
  CropStats without = crop_stats(&uncovered, 500, 375, 0.1, whole, kDraws);
  CHECK_EQ_INT(with.outside + without.outside, 0);
  CHECK_MSG(with.under_small == 0 && without.under_small > 0.05,
            "boxes under 10%% of the image: %.4f covering 0.1, %.4f without", with.under_small,
            without.under_small);
  // A 1000x10 strip holds no box of 5% of it at a ratio up to 1.33 (19
  // rows at least): every draw falls back to the whole image.
  CropStats strip = crop_stats(&kReferenceCrop, 1000, 10, 0, (CropBox){0, 0, 1000, 10}, 100);
  CHECK_MSG(strip.fallbacks == 1.0, "%.2f of the strip's crops are the whole image", strip.fallbacks);
  // Three tries of a box over 95% of a 500x375 image at ratio 0.75-1.33:
  // only ratios near 4/3 fit, and most draws fall back.
  ClassifyCrop large = kReferenceCrop;
  large.scale_min = 0.95f;
  large.attempts = 3;
  large.min_covered = 0;
  CropStats few = crop_stats(&large, 500, 375, 0, whole, 2000);
  large.attempts = 100;
  CropStats many = crop_stats(&large, 500, 375, 0, whole, 2000);
  CHECK_MSG(few.fallbacks > 0.3 && many.fallbacks < 0.01, "fallbacks: %.3f after 3 tries, %.3f after 100",
            few.fallbacks, many.fallbacks);
}

// What tells the two samplers apart, where every draw fits (a small box on a
// large image): the distorted box draws the height uniformly and the ratio
// uniformly; torchvision's crop the area uniformly and the ratio
// log-uniformly. Each mean within 4 standard errors of its expectation
// (kDraws draws), the rounding of the sides (under 0.3% here) inside that.
static void crop_samplers_distributions(void) {
  enum { kDraws = 20000 };
  ClassifyCrop square = {.scale_min = 0.1f, .scale_max = 0.3f, .ratio_min = 1, .ratio_max = 1,
                         .attempts = 10, .min_covered = 0};
  // Heights 316..548 (the boxes of 10% and 30% of 1000x1000): mean 432,
  // standard deviation 233 / sqrt(12) = 67.3. An area uniform over
  // [1e5, 3e5] has E sqrt(area) = 442.3.
  square.method = CLASSIFY_CROP_DISTORTED_BOX;
  double tol = 4 * 67.3 / sqrt(kDraws);
  CropStats box = crop_stats(&square, 1000, 1000, 0, (CropBox){0, 0, 1000, 1000}, kDraws);
  CHECK_NEAR(box.mean_height, 432.0, tol);
  square.method = CLASSIFY_CROP_RANDOM_RESIZED;
  CropStats resized = crop_stats(&square, 1000, 1000, 0, (CropBox){0, 0, 1000, 1000}, kDraws);
  CHECK_NEAR(resized.mean_height, 442.3, tol);
  // Ratios over [0.5, 2]: uniform has mean 1.25 and standard deviation
  // 1.5 / sqrt(12) = 0.433; log-uniform mean 1.5 / ln 4 = 1.082, standard
  // deviation 0.42.
  ClassifyCrop wide = {.method = CLASSIFY_CROP_DISTORTED_BOX, .scale_min = 0.01f, .scale_max = 0.02f,
                       .ratio_min = 0.5f, .ratio_max = 2.0f, .attempts = 10, .min_covered = 0};
  double ratio_tol = 4 * 0.433 / sqrt(kDraws) + 0.005;
  box = crop_stats(&wide, 1000, 1000, 0, (CropBox){0, 0, 1000, 1000}, kDraws);
  CHECK_NEAR(box.mean_ratio, 1.25, ratio_tol);
  wide.method = CLASSIFY_CROP_RANDOM_RESIZED;
  resized = crop_stats(&wide, 1000, 1000, 0, (CropBox){0, 0, 1000, 1000}, kDraws);
  CHECK_NEAR(resized.mean_ratio, 1.5 / log(4.0), ratio_tol);
}

// torchvision's crop with the coverage floor and the attempts of the keys:
// no box under min_covered, and fewer attempts fall back more often.
static void random_resized_coverage_and_attempts(void) {
  ClassifyCrop c = kTorchvisionCrop;
  c.min_covered = 0.5f;
  CropBox fallback = {0, 0, 500, 375};  // 4/3: the image itself is in the ratio range
  CropStats st = crop_stats(&c, 500, 375, 0.5, fallback, 5000);
  CHECK_MSG(st.under_small == 0, "%.4f of the boxes under half the image", st.under_small);
  c.attempts = 1;
  CropStats one = crop_stats(&c, 500, 375, 0.5, fallback, 5000);
  CHECK_MSG(one.fallbacks > st.fallbacks + 0.1, "fallbacks: %.3f after 1 try, %.3f after 10",
            one.fallbacks, st.fallbacks);
}

// The network's input: torchvision's (x / 255 - mean) / std, the same
// numbers as augment_normalize_cpu; the reference's x - its pixel means, on a
// known image through decode and the eval crop (a lossless PNG of one
// colour, so that every output byte is that colour).
static void input_normalization(void) {
  ClassifyAugment a = classify_augment_imagenet(false, 1);
  ChannelAffine ca = classify_input_affine(&a);
  uint8_t px[6] = {0, 128, 255, 17, 200, 99};
  float got[6], want[6];
  augment_affine_cpu(px, got, 2, ca.scale, ca.shift);
  augment_normalize_cpu(px, want, 2, a.mean, a.std);
  CHECK(memcmp(got, want, sizeof got) == 0);

  a.norm = CLASSIFY_NORM_MEAN;
  a.out_side = 16;
  a.resize_side = 18;
  uint8_t *src = malloc(40 * 30 * 3);
  for (int i = 0; i < 40 * 30; i++) memcpy(src + 3 * i, (uint8_t[]){200, 17, 99}, 3);
  size_t n;
  uint8_t *png = image_encode_png(src, 40, 30, 3, &n);
  ImageDecoder *d = image_decoder_create();
  ClassifyScratch scratch = {0};
  uint8_t out[16 * 16 * 3];
  classify_augment_image(d, &scratch, &a, png, n, "colour", 0, 0, out);
  float input[16 * 16 * 3];
  ca = classify_input_affine(&a);
  augment_affine_cpu(out, input, 16 * 16, ca.scale, ca.shift);
  const double expect[3] = {200 - 123.68, 17 - 116.78, 99 - 103.94};
  double worst = 0;
  for (int i = 0; i < 16 * 16 * 3; i++) worst = fmax(worst, fabs(input[i] - expect[i % 3]));
  // One float rounding of values under 128: 2^-17.
  CHECK_MSG(worst <= 1.0 / (1 << 17), "largest error %.3g against pixel - mean", worst);
  classify_scratch_free(&scratch);
  image_decoder_free(d);
  free(png);
  free(src);
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
  TEST_RUN(distorted_box_ranges_and_fallback);
  TEST_RUN(crop_samplers_distributions);
  TEST_RUN(random_resized_coverage_and_attempts);
  TEST_RUN(input_normalization);
  TEST_RUN(center_crop_box);
  TEST_RUN(classify_augment_deterministic);
  TEST_RUN(classify_bad_image_named);
  return test_finish();
}
