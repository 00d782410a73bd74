// image_test_util.h: what the image tests share (tests/data/test_image.c,
// tests/image_classification/test_classify_data.c): a smooth test pattern,
// the mean difference of two images, and one-shot decoding.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/image.h"

// A smooth colour pattern: JPEG keeps it within a few levels.
static inline uint8_t *pattern(int32_t w, int32_t h, int channels) {
  uint8_t *p = malloc((size_t)w * h * channels);
  for (int32_t y = 0; y < h; y++)
    for (int32_t x = 0; x < w; x++)
      for (int c = 0; c < channels; c++)
        p[((size_t)y * w + x) * channels + c] =
            (uint8_t)(40 + 170.0 * (0.5 + 0.5 * sin(0.05 * x * (c + 1) + 0.07 * y)));
  return p;
}

static inline double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += fabs((double)a[i] - b[i]);
  return s / (double)n;
}

static inline ImageStatus decode(const uint8_t *bytes, size_t n, int32_t min_w, int32_t min_h, Image *out,
                          char *msg) {
  ImageDecoder *d = image_decoder_create();
  ImageStatus st = image_decode(d, bytes, n, min_w, min_h, out, msg, 512);
  image_decoder_free(d);
  return st;
}
