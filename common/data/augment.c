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

void augment_affine_cpu(const uint8_t *in, float *out, int64_t pixels, const float scale[3],
                        const float shift[3]) {
  for (int64_t i = 0; i < pixels * 3; i++) out[i] = (float)in[i] * scale[i % 3] + shift[i % 3];
}

void augment_normalize_cpu(const uint8_t *in, float *out, int64_t pixels, const float mean[3],
                           const float std[3]) {
  float scale[3], shift[3];
  for (int c = 0; c < 3; c++) {
    scale[c] = 1.0f / (255.0f * std[c]);
    shift[c] = -mean[c] / std[c];
  }
  augment_affine_cpu(in, out, pixels, scale, shift);
}

// The decoded size that keeps a crop of crop_len source pixels at least
// out_len pixels long.
static int32_t min_decoded(int32_t full, float crop_len, int32_t out_len) {
  if (crop_len < 1) crop_len = 1;
  int64_t need = (int64_t)ceil((double)full * out_len / crop_len);
  return need < full ? (int32_t)need : full;
}

void augment_decode_crop_resize(ImageDecoder *d, Image *rgb, ImagePlanes *planes,
                                const uint8_t *bytes, size_t n_bytes, const ImageInfo *info,
                                const char *name, float x, float y, float box_w, float box_h,
                                bool flip, uint8_t *out, int32_t out_width, int32_t out_height) {
  char msg[512];
  int32_t width = info->width, height = info->height;
  int32_t min_w = min_decoded(width, box_w, out_width);
  int32_t min_h = min_decoded(height, box_h, out_height);
  // A warning (corrupt data that libjpeg decoded anyway) keeps the image: the
  // converters already refused such files unless told to accept them.
  ImageStatus st;
  int32_t got_w, got_h;
  if (info->planar) {
    st = image_decode_planes(d, bytes, n_bytes, min_w, min_h, planes, msg, sizeof msg);
    got_w = planes->width, got_h = planes->height;
  } else {
    st = image_decode(d, bytes, n_bytes, min_w, min_h, rgb, msg, sizeof msg);
    got_w = rgb->width, got_h = rgb->height;
  }
  if (st == IMAGE_ERROR) die_input(name, "%s", msg);
  float sx = (float)got_w / (float)width, sy = (float)got_h / (float)height;
  x *= sx, y *= sy, box_w *= sx, box_h *= sy;
  if (info->planar)
    augment_crop_resize_planes(planes, x, y, box_w, box_h, flip, out, out_width, out_height);
  else
    augment_crop_resize(rgb->pixels, got_w, got_h, x, y, box_w, box_h, flip, out, out_width,
                        out_height);
}

// ---------------------------------------------------------------- colour jitter

ColorJitterDraw augment_color_jitter_draw(const ColorJitter *j, Rng *rng) {
  ColorJitterDraw d = {.count = 0, .factor = {1, 1, 1, 0}};
  const float strength[JITTER_KINDS] = {j->brightness, j->contrast, j->saturation, j->hue};
  for (int k = 0; k < JITTER_KINDS; k++) {
    if (!(strength[k] > 0)) continue;
    float lo = k == JITTER_HUE ? -strength[k] : fmaxf(0.0f, 1.0f - strength[k]);
    float hi = k == JITTER_HUE ? strength[k] : 1.0f + strength[k];
    d.factor[k] = lo + (hi - lo) * rng_next_uniform(rng);
    d.order[d.count++] = k;
  }
  for (int i = d.count - 1; i > 0; i--) {  // Fisher-Yates
    int k = (int)rng_next_below(rng, (uint32_t)(i + 1));
    int t = d.order[i];
    d.order[i] = d.order[k], d.order[k] = t;
  }
  return d;
}

// PIL's Image.blend(degenerate, image, f) of one value: computed in float,
// truncated toward zero, clipped.
static inline uint8_t blend_value(int32_t degenerate, int32_t p, float f) {
  float v = (float)degenerate + f * (float)(p - degenerate);
  return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

// PIL's RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
static inline int32_t luma(const uint8_t *p) {
  return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

void augment_adjust_brightness(uint8_t *pixels, int64_t count, float factor) {
  for (int64_t i = 0; i < 3 * count; i++) pixels[i] = blend_value(0, pixels[i], factor);
}

void augment_adjust_contrast(uint8_t *pixels, int64_t count, float factor) {
  if (count <= 0) return;
  int64_t sum = 0;
  for (int64_t i = 0; i < count; i++) sum += luma(pixels + 3 * i);
  // ImageEnhance.Contrast: int(mean + 0.5) of the L image.
  int32_t mean = (int32_t)((double)sum / (double)count + 0.5);
  for (int64_t i = 0; i < 3 * count; i++) pixels[i] = blend_value(mean, pixels[i], factor);
}

void augment_adjust_saturation(uint8_t *pixels, int64_t count, float factor) {
  for (int64_t i = 0; i < count; i++) {
    uint8_t *p = pixels + 3 * i;
    int32_t grey = luma(p);
    for (int c = 0; c < 3; c++) p[c] = blend_value(grey, p[c], factor);
  }
}

// PIL's rgb2hsv (Convert.c, after colorsys): 8-bit H, S, V.
static void rgb_to_hsv(const uint8_t *p, uint8_t *hsv) {
  uint8_t r = p[0], g = p[1], b = p[2];
  uint8_t maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
  uint8_t minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = hsv[1] = 0;
    return;
  }
  float cr = (float)(maxc - minc), s = cr / (float)maxc;
  float rc = (float)(maxc - r) / cr, gc = (float)(maxc - g) / cr, bc = (float)(maxc - b) / cr;
  float h = r == maxc ? bc - gc : g == maxc ? 2.0f + rc - bc : 4.0f + gc - rc;
  h = (float)fmod(h / 6.0 + 1.0, 1.0);
  hsv[0] = clamp_u8((int32_t)(h * 255.0));
  hsv[1] = clamp_u8((int32_t)(s * 255.0));
}

// PIL's hsv2rgb.
static void hsv_to_rgb(const uint8_t *hsv, uint8_t *p) {
  uint8_t h = hsv[0], s = hsv[1], v = hsv[2];
  if (s == 0) {
    p[0] = p[1] = p[2] = v;
    return;
  }
  int i = (int)floor((float)h * 6.0 / 255.0);
  float f = (float)((float)h * 6.0 / 255.0 - (float)i), fs = (float)((float)s / 255.0);
  uint8_t up = clamp_u8((int32_t)round((float)v * (1.0 - fs)));
  uint8_t uq = clamp_u8((int32_t)round((float)v * (1.0 - fs * f)));
  uint8_t ut = clamp_u8((int32_t)round((float)v * (1.0 - fs * (1.0 - f))));
  switch (i % 6) {
    case 0: p[0] = v, p[1] = ut, p[2] = up; break;
    case 1: p[0] = uq, p[1] = v, p[2] = up; break;
    case 2: p[0] = up, p[1] = v, p[2] = ut; break;
    case 3: p[0] = up, p[1] = uq, p[2] = v; break;
    case 4: p[0] = ut, p[1] = up, p[2] = v; break;
    default: p[0] = v, p[1] = up, p[2] = uq; break;
  }
}

void augment_adjust_hue(uint8_t *pixels, int64_t count, float shift) {
  // torchvision: np_h += np.uint8(hue_factor * 255), wrapping.
  uint8_t delta = (uint8_t)(int32_t)(shift * 255.0f);
  for (int64_t i = 0; i < count; i++) {
    uint8_t hsv[3];
    rgb_to_hsv(pixels + 3 * i, hsv);
    hsv[0] = (uint8_t)(hsv[0] + delta);
    hsv_to_rgb(hsv, pixels + 3 * i);
  }
}

void augment_color_jitter(uint8_t *pixels, int64_t count, const ColorJitterDraw *d) {
  for (int i = 0; i < d->count; i++) {
    int k = d->order[i];
    float f = d->factor[k];
    if (k == JITTER_BRIGHTNESS) augment_adjust_brightness(pixels, count, f);
    else if (k == JITTER_CONTRAST) augment_adjust_contrast(pixels, count, f);
    else if (k == JITTER_SATURATION) augment_adjust_saturation(pixels, count, f);
    else augment_adjust_hue(pixels, count, f);
  }
}
