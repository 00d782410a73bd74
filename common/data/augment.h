// augment.h: image augmentation on RGB uint8 images in the op library's
// activation layout, NHWC: a bilinear crop-resize with optional mirroring
// (from RGB pixels or from a JPEG's planes) and the mean/std normalisation.
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

// out = (in / 255 - mean) / std per channel; in, out: (pixels, 3). The GPU
// version of this runs after the copy in the trainers.
void augment_normalize_cpu(const uint8_t *in, float *out, int64_t pixels, const float mean[3],
                           const float std[3]);

#ifdef __cplusplus
}
#endif
