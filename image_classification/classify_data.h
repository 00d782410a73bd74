// classify_data.h: image classification input. Reads image+label records
// from an LMDB data set, decodes and augments them (augment.h) into batches
// of the loader (loader.h):
//   field 0: images (B, out_side, out_side, 3), uint8 RGB, or float
//            normalised (classify_input_affine) when float_output
//   field 1: labels (B,) int32
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "data/image.h"
#include "data/loader.h"
#include "device/device.h"
#include "ops/elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

// The training crop's sampler, and the ranges its boxes keep to.
typedef enum {
  CLASSIFY_CROP_RANDOM_RESIZED,  // torchvision's RandomResizedCrop
  CLASSIFY_CROP_DISTORTED_BOX,   // TensorFlow's sample_distorted_bounding_box
} ClassifyCropMethod;

typedef struct ClassifyCrop {
  ClassifyCropMethod method;
  float scale_min, scale_max;  // the box's area over the image's: 0.08, 1
  float ratio_min, ratio_max;  // its width over its height: 3/4, 4/3
  int attempts;                // draws before the fallback: 10
  float min_covered;           // the least fraction of the image a box covers: 0
} ClassifyCrop;

// The crops, as boxes of source pixels:
//   train, random_resized (torchvision's RandomResizedCrop parameters): an
//          area fraction uniform in [scale_min, scale_max] and a log-uniform
//          aspect ratio in [ratio_min, ratio_max]; after `attempts` draws
//          that do not fit, a centre crop clamped to the ratio range;
//   train, distorted_box (the MLPerf v0.7 ResNet reference's
//          tf.image.sample_distorted_bounding_box with the whole image as
//          the object box): an aspect ratio uniform in [ratio_min,
//          ratio_max], a height uniform over the whole pixels whose box
//          area falls in [scale_min, scale_max] of the image; after
//          `attempts` draws that do not fit, the whole image;
//   either: later resized to out_side^2 and mirrored with probability 1/2;
//   eval:  the box that resizing the short side to resize_side and cutting the
//          centre out_side^2 keeps (done as one crop and one resize).
// min_covered: a box inside the image covers box area / image area of it,
// so this is one more floor on the area: above scale_min it rejects the
// draws below it (the reference: area from 0.05, covering 0.1, so no box
// under a tenth of the image; each rejected draw spends an attempt).
CropBox classify_random_resized_crop_box(int32_t width, int32_t height, const ClassifyCrop *c,
                                         Rng *rng);
CropBox classify_distorted_box(int32_t width, int32_t height, const ClassifyCrop *c, Rng *rng);
CropBox classify_train_crop_box(int32_t width, int32_t height, const ClassifyCrop *c, Rng *rng);
CropBox classify_center_crop_box(int32_t width, int32_t height, int32_t resize_side,
                                 int32_t out_side);

// The network's input from the crop's bytes x: mean_std, (x / 255 - mean) /
// std with torchvision's ImageNet mean and std; mean, x - the MLPerf
// reference's channel means in pixel units (123.68, 116.78, 103.94:
// imagenet_preprocessing.py, no division).
typedef enum { CLASSIFY_NORM_MEAN_STD, CLASSIFY_NORM_MEAN } ClassifyNorm;

typedef struct ClassifyAugment {
  bool train;           // random crop + flip; else resize + centre crop
  int32_t out_side;     // 224
  int32_t resize_side;  // eval: the short side before the centre crop, 256
  ClassifyCrop crop;    // train
  bool float_output;    // normalise on the CPU; else uint8 (normalise on the GPU)
  ClassifyNorm norm;
  float mean[3], std[3];  // mean_std's, on [0, 1]
  uint64_t seed;
} ClassifyAugment;

// The ImageNet settings: 224 out of 256, torchvision's crop and the
// ImageNet channel mean and standard deviation; uint8 output.
ClassifyAugment classify_augment_imagenet(bool train, uint64_t seed);
// The normalisation as one multiply-add per channel (op_affine_u8 on the
// device, augment_affine_cpu with float_output).
ChannelAffine classify_input_affine(const ClassifyAugment *a);

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
  bool keep_last;       // training: a short last batch rather than none (loader.h)
} ClassifyLoaderConfig;

// A loader over lmdb_dir; training (augment.train) shuffles per epoch and
// drops the short last batch (or keeps it), eval reads every record once in
// order.
// *record_count gets the data set's size when not NULL.
Loader *classify_loader_open(const ClassifyLoaderConfig *cfg, int64_t *record_count);

#ifdef __cplusplus
}
#endif
