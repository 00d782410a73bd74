// classify_data.h: image classification input. Reads image+label records
// from an LMDB data set, decodes and augments them (augment.h) into batches
// of the loader (loader.h):
//   field 0: images (B, out_side, out_side, 3), uint8 RGB, or float
//            normalised with mean/std when float_output
//   field 1: labels (B,) int32
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "data/image.h"
#include "data/loader.h"
#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// The crops, as boxes of source pixels:
//   train: random-resized-crop (torchvision's RandomResizedCrop parameters:
//          area fraction in [scale_min, scale_max], log-uniform aspect ratio in
//          [ratio_min, ratio_max], 10 tries, then a centre crop clamped to the
//          ratio range), later resized to out_side^2 and mirrored with
//          probability 1/2;
//   eval:  the box that resizing the short side to resize_side and cutting the
//          centre out_side^2 keeps (done as one crop and one resize).
CropBox classify_random_resized_crop_box(int32_t width, int32_t height, float scale_min,
                                         float scale_max, float ratio_min, float ratio_max,
                                         Rng *rng);
CropBox classify_center_crop_box(int32_t width, int32_t height, int32_t resize_side,
                                 int32_t out_side);

typedef struct ClassifyAugment {
  bool train;           // random-resized-crop + flip; else resize + centre crop
  int32_t out_side;     // 224
  int32_t resize_side;  // eval: the short side before the centre crop, 256
  float scale_min, scale_max, ratio_min, ratio_max;  // 0.08, 1, 3/4, 4/3
  bool float_output;    // normalise on the CPU; else uint8 (normalise on the GPU)
  float mean[3], std[3];
  uint64_t seed;
} ClassifyAugment;

// The ImageNet settings: 224 out of 256, torchvision's crop ranges and the
// ImageNet channel mean and standard deviation; uint8 output.
ClassifyAugment classify_augment_imagenet(bool train, uint64_t seed);

// Per-thread decode buffers of classify_augment_image.
typedef struct ClassifyScratch {
  Image rgb;
  ImagePlanes planes;
} ClassifyScratch;
void classify_scratch_free(ClassifyScratch *s);

// Decodes one encoded image (JPEG or PNG) and augments it as sample `index`
// of `epoch` into out: (out_side, out_side, 3). A JPEG is decoded at the
// smallest DCT scale that keeps the crop at least out_side pixels on each
// side; a YCbCr or grey JPEG to its planes, only the crop being converted to
// RGB. An image that does not decode stops with a message naming `name`.
void classify_augment_image(ImageDecoder *d, ClassifyScratch *scratch, const ClassifyAugment *a,
                            const uint8_t *bytes, size_t n_bytes, const char *name,
                            int64_t epoch, int64_t index, uint8_t *out);

typedef struct ClassifyLoaderConfig {
  const char *lmdb_dir;
  ClassifyAugment augment;
  int64_t batch_size;
  int threads, ring_batches;
  int rank, world;
  int64_t start_epoch;
  const Device *dev;  // NULL: host only
  int32_t num_classes;  // a record's label outside 0..num_classes-1 is an error naming it
} ClassifyLoaderConfig;

// A loader over lmdb_dir; training (augment.train) shuffles per epoch and
// drops the short last batch, eval reads every record once in order.
// *record_count gets the data set's size when not NULL.
Loader *classify_loader_open(const ClassifyLoaderConfig *cfg, int64_t *record_count);

#ifdef __cplusplus
}
#endif
