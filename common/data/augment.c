// augment.c: bilinear crop-resize-flip, normalisation (augment.h).
#include "data/augment.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

Rng augment_sample_rng(uint64_t seed, int64_t epoch, int64_t index) {
  // 2^40 samples per epoch, 2^23 epochs, below the sampler's shuffle streams.
  return rng_make(seed, ((uint64_t)epoch << 40) | (uint64_t)index);
}

// Fixed-point weights of 1/128 pixel: a horizontal result (<= 255 * 128)
// fits 16 bits, a vertical one 32.
enum { kFracBits = 7, kOne = 1 << kFracBits };

// For each output coordinate along one axis: the left source index and the
// weight of the right neighbour in fixed point.
static void axis_taps(float start, float extent, int32_t src_len, int32_t out_len, int32_t *index,
                      int32_t *frac) {
  float step = extent / (float)out_len;
  for (int32_t o = 0; o < out_len; o++) {
    float s = start + ((float)o + 0.5f) * step - 0.5f;
    if (s < 0) s = 0;
    if (s > (float)(src_len - 1)) s = (float)(src_len - 1);
    int32_t i = (int32_t)s;
    if (i > src_len - 2) i = src_len > 1 ? src_len - 2 : 0;
    index[o] = i;
    frac[o] = src_len > 1 ? (int32_t)lroundf((s - (float)i) * kOne) : 0;
  }
}

// out[i] = top[i] * (kOne - w) + bottom[i] * w. In blocks of a fixed 16 so
// that -O2's vectoriser, which takes only loops it can replace whole, takes
// the inner loop.
static void blend_rows(const uint8_t *restrict top, const uint8_t *restrict bottom, int32_t w,
                       size_t n, uint16_t *restrict out) {
  enum { kBlock = 16 };
  uint16_t wt = (uint16_t)(kOne - w), wb = (uint16_t)w;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int k = 0; k < kBlock; k++)
      out[i + k] = (uint16_t)(top[i + k] * wt + bottom[i + k] * wb);
  for (; i < n; i++) out[i] = (uint16_t)(top[i] * wt + bottom[i] * wb);
}

// The crop-resize of augment_crop_resize for `channels` interleaved
// channels; inlined into its two callers so that each gets its own constant.
static inline void crop_resize(const uint8_t *src, int32_t src_width, int32_t src_height,
                               int channels, float x, float y, float box_w, float box_h, bool flip,
                               uint8_t *out, int32_t out_width, int32_t out_height) {
  int32_t *xi = xmalloc(2 * (size_t)(out_width + out_height) * sizeof(int32_t));
  int32_t *xf = xi + out_width, *yi = xf + out_width, *yf = yi + out_height;
  axis_taps(x, box_w, src_width, out_width, xi, xf);
  axis_taps(y, box_h, src_height, out_height, yi, yf);
  // The source columns the taps touch, [lo, hi], and the values to the right
  // neighbour (0 for a one-pixel-wide source).
  int32_t lo = xi[0], hi = xi[out_width - 1] + (src_width > 1);
  for (int32_t ox = 0; ox < out_width; ox++) xi[ox] = (xi[ox] - lo) * channels;  // now offsets
  if (flip)  // mirror by taking the taps right to left
    for (int32_t a = 0, b = out_width - 1; a < b; a++, b--) {
      int32_t ti = xi[a], tf = xf[a];
      xi[a] = xi[b], xf[a] = xf[b], xi[b] = ti, xf[b] = tf;
    }
  size_t dx = src_width > 1 ? (size_t)channels : 0, row_bytes = (size_t)src_width * channels;
  size_t dy = src_height > 1 ? row_bytes : 0;
  // One output row: first the vertical blend of its two source rows over the
  // touched columns (contiguous, so it vectorises), then one horizontal tap
  // pair per output pixel.
  size_t blend_values = (size_t)(hi - lo + 1) * channels;
  uint16_t *blend = xmalloc(blend_values * sizeof(uint16_t));  // (hi - lo + 1, channels)
  for (int32_t oy = 0; oy < out_height; oy++) {
    const uint8_t *top = src + (size_t)yi[oy] * row_bytes + (size_t)lo * channels;
    blend_rows(top, top + dy, yf[oy], blend_values, blend);
    uint8_t *px = out + (size_t)oy * out_width * channels;
    for (int32_t ox = 0; ox < out_width; ox++, px += channels) {
      const uint16_t *a = blend + xi[ox];
      int32_t wx = xf[ox];
      for (int c = 0; c < channels; c++)
        px[c] = (uint8_t)((a[c] * (kOne - wx) + a[c + dx] * wx + (1 << (2 * kFracBits - 1))) >>
                          (2 * kFracBits));
    }
  }
  free(blend);
  free(xi);
}

void augment_crop_resize(const uint8_t *src, int32_t src_width, int32_t src_height, float x,
                         float y, float box_w, float box_h, bool flip, uint8_t *out,
                         int32_t out_width, int32_t out_height) {
  crop_resize(src, src_width, src_height, 3, x, y, box_w, box_h, flip, out, out_width, out_height);
}

static uint8_t clamp_u8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

void augment_crop_resize_planes(const ImagePlanes *src, float x, float y, float box_w, float box_h,
                                bool flip, uint8_t *out, int32_t out_width, int32_t out_height) {
  size_t n = (size_t)out_width * out_height;
  uint8_t *ycc = xmalloc(3 * n);  // (3, out_height, out_width)
  // Pixel centres map alike in every plane, so a subsampled plane takes the
  // box scaled by its sampling factor.
  for (int p = 0; p < src->count; p++)
    crop_resize(src->plane[p], src->plane_width[p], src->plane_height[p], 1, x * src->scale_x[p],
                y * src->scale_y[p], box_w * src->scale_x[p], box_h * src->scale_y[p], flip,
                ycc + (size_t)p * n, out_width, out_height);
  if (src->count == 1) {
    for (size_t i = 0; i < n; i++) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = ycc[i];
  } else {
    // JFIF YCbCr -> RGB, full range, weights in 16-bit fixed point.
    const uint8_t *yp = ycc, *cb = ycc + n, *cr = ycc + 2 * n;
    for (size_t i = 0; i < n; i++) {
      int32_t luma = (int32_t)yp[i] << 16, u = cb[i] - 128, v = cr[i] - 128;
      out[3 * i] = clamp_u8((luma + 91881 * v + 32768) >> 16);
      out[3 * i + 1] = clamp_u8((luma - 22554 * u - 46802 * v + 32768) >> 16);
      out[3 * i + 2] = clamp_u8((luma + 116130 * u + 32768) >> 16);
    }
  }
  free(ycc);
}

void augment_normalize_cpu(const uint8_t *in, float *out, int64_t pixels, const float mean[3],
                           const float std[3]) {
  float scale[3], shift[3];
  for (int c = 0; c < 3; c++) {
    scale[c] = 1.0f / (255.0f * std[c]);
    shift[c] = -mean[c] / std[c];
  }
  for (int64_t i = 0; i < pixels * 3; i++) out[i] = (float)in[i] * scale[i % 3] + shift[i % 3];
}
