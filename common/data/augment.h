// augment.h: image augmentation on RGB uint8 images in the op library's
// activation layout, NHWC: a bilinear crop-resize with optional mirroring
// (from RGB pixels or from a JPEG's planes), decoding at a scale that keeps a
// crop sharp, colour jitter and the mean/std normalisation.
// A task chooses its crop boxes (classification's random-resized and centre
// crops live in its task folder) and calls these.
// All random numbers of one sample come from the counter-based RNG keyed by
// (seed, epoch, sample index), so a batch is the same whatever thread made it.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/rng.h"
#include "data/image.h"

#ifdef __cplusplus
extern "C" {
#endif

// A rectangle of source pixels.
typedef struct CropBox {
  int32_t x, y, width, height;
} CropBox;

// The RNG of sample `index` in `epoch`.
Rng augment_sample_rng(uint64_t seed, int64_t epoch, int64_t index);

// Bilinear resize of the box (x, y, box_w, box_h in source pixels, fractional
// allowed) of src into out, mirrored left-right when flip. Sample positions
// are pixel centres, as in PIL and OpenCV's INTER_LINEAR.
void augment_crop_resize(const uint8_t *src, int32_t src_width, int32_t src_height,
                         float x, float y, float box_w, float box_h, bool flip,
                         uint8_t *out, int32_t out_width, int32_t out_height);
// src: (src_height, src_width, 3); out: (out_height, out_width, 3)

// augment_crop_resize of a JPEG's planes (box in Y-plane pixels): each plane
// resized, then YCbCr converted to RGB (JFIF); grey gives R = G = B.
void augment_crop_resize_planes(const ImagePlanes *src, float x, float y, float box_w, float box_h,
                                bool flip, uint8_t *out, int32_t out_width, int32_t out_height);
// out: (out_height, out_width, 3)

// Decodes an encoded image (header already read into info) at the smallest
// JPEG DCT scale that keeps the box (x, y, box_w, box_h in full-size source
// pixels) at least out_width x out_height, and crop-resizes the box into out
// as augment_crop_resize (augment_crop_resize_planes for a planar JPEG).
// rgb and planes are the caller's reusable decode buffers. A decode error
// stops with a message naming `name`; a warning keeps the image.
void augment_decode_crop_resize(ImageDecoder *d, Image *rgb, ImagePlanes *planes,
                                const uint8_t *bytes, size_t n_bytes, const ImageInfo *info,
                                const char *name, float x, float y, float box_w, float box_h,
                                bool flip, uint8_t *out, int32_t out_width, int32_t out_height);

// Colour jitter with torchvision's ColorJitter semantics on PIL images:
// factors brightness b, contrast c, saturation s drawn uniform in
// [max(0, 1 - v), 1 + v], hue h uniform in [-v, v]; a strength of 0 leaves
// that adjustment out; the adjustments present are applied in a random order.
// Each is PIL's, on 8-bit RGB:
//   brightness: blend with black,                out = f * p
//   contrast:   blend with the mean grey level m, out = m + f (p - m), m the
//               rounded mean of the image's L = (19595 R + 38470 G + 7471 B
//               + 2^15) >> 16
//   saturation: blend with the pixel's own L,    out = L + f (p - L)
//   hue:        RGB -> PIL's 8-bit HSV, H += (uint8)(int)(h * 255) mod 256,
//               back to RGB
// A blend computes in float and truncates toward zero, clipped to [0, 255].
typedef struct ColorJitter {
  float brightness, contrast, saturation, hue;  // strengths
} ColorJitter;

enum { JITTER_BRIGHTNESS, JITTER_CONTRAST, JITTER_SATURATION, JITTER_HUE, JITTER_KINDS };
typedef struct ColorJitterDraw {
  int count;                 // adjustments applied
  int order[JITTER_KINDS];   // which, in order (JITTER_*)
  float factor[JITTER_KINDS];  // per kind: the factor (hue: the shift in [-0.5, 0.5])
} ColorJitterDraw;

// Draws the factors (brightness, contrast, saturation, hue, those of non-zero
// strength) and then shuffles their order.
ColorJitterDraw augment_color_jitter_draw(const ColorJitter *j, Rng *rng);
// Applies a draw in place; pixels: (count, 3).
void augment_color_jitter(uint8_t *pixels, int64_t count, const ColorJitterDraw *d);
void augment_adjust_brightness(uint8_t *pixels, int64_t count, float factor);
void augment_adjust_contrast(uint8_t *pixels, int64_t count, float factor);
void augment_adjust_saturation(uint8_t *pixels, int64_t count, float factor);
void augment_adjust_hue(uint8_t *pixels, int64_t count, float shift);

// out = in x scale + shift per channel; in, out: (pixels, 3). The GPU
// version of this (op_affine_u8) runs after the copy in the trainers.
void augment_affine_cpu(const uint8_t *in, float *out, int64_t pixels, const float scale[3],
                        const float shift[3]);
// augment_affine_cpu of out = (in / 255 - mean) / std per channel.
void augment_normalize_cpu(const uint8_t *in, float *out, int64_t pixels, const float mean[3],
                           const float std[3]);

#ifdef __cplusplus
}
#endif
