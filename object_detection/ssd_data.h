// ssd_data.h: object detection input. Reads image+boxes records (kind
// IMAGE_BOXES, record.h) from an LMDB data set, decodes and augments them as
// the MLPerf SSD reference's SSDTransformer (mlcommons/training
// single_stage_detector/ssd/utils.py) into batches of the loader (loader.h):
//   field 0: images (B, side, side, 3), uint8 RGB, or float normalised with
//            mean/std when float_output
// training (augment.train):
//   field 1: labels (B, n_boxes) int32, ssd_match's per default box
//   field 2: offsets (B, n_boxes, 4) f32, ssd_match's encoded ground truth
// eval:
//   field 1: image ids (B) int64, the COCO ids
//   field 2: sizes (B, 2) int32, the original (height, width)
// Matching runs on the loader threads. Crowd boxes (negative labels) are
// left out of training; eval reads no boxes (COCO eval uses the JSON) but
// checks them as training does.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "data/augment.h"
#include "data/loader.h"
#include "device/device.h"
#include "object_detection/ssd_boxes.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- geometry
// The reference's SSDCropping, boxes ltrb relative to the image:
//   repeat: choose one of 7 modes uniformly: keep the whole image; min IoU
//   0.1, 0.3, 0.5, 0.7, 0.9; no constraint. For a constraint, up to max_tries
//   candidates (the reference: 1; MLPerf's max_samples allows 1 or 50): w, h
//   uniform in [0.3, 1], rejected unless 0.5 <= w/h <= 2; left uniform in
//   [0, 1 - w], top in [0, 1 - h]; rejected unless every box has IoU (fp32,
//   ssd_iou) > min IoU with it; rejected when no box's centre lies strictly
//   inside it. A rejected candidate of the last try chooses a mode again, so
//   an image never loses all its boxes (one without boxes keeps the whole
//   image).
// The accepted crop keeps the boxes whose centres are inside, clipped to it
// and made relative to it. After SSD_CROP_MAX_ROUNDS modes without success
// (probability (6/7)^1000) the whole image is kept.
#define SSD_CROP_MAX_ROUNDS 1000
#define SSD_CROP_MODES 7
// Per mode: the IoU every box must pass (NaN: the whole image; -inf: none).
extern const float kSsdCropMinIou[SSD_CROP_MODES];
typedef struct SsdCrop {
  float left, top, right, bottom;  // relative; the whole image is 0, 0, 1, 1
  int mode;                        // the accepted mode; 0 for the whole image
} SsdCrop;

// boxes, labels: (n) in; out_boxes, out_labels: (n) the kept boxes; returns
// their count. In and out may not overlap.
int32_t ssd_random_crop(const float *boxes, const int32_t *labels, int32_t n, int max_tries,
                        Rng *rng, SsdCrop *crop, float *out_boxes, int32_t *out_labels);
// The boxes (n) whose centres lie strictly inside crop, clipped to it and
// relative to it; returns their count. A box whose clipped sides meet in
// fp32 (a sliver, for ssd_encode a log of 0) is left out too.
int32_t ssd_crop_boxes(const SsdCrop *crop, const float *boxes, const int32_t *labels, int32_t n,
                       float *out_boxes, int32_t *out_labels);
// The source pixels the reference cuts for a crop: int(left * width) ..
// int(right * width) (at least one pixel), likewise rows. The boxes stay
// relative to the fractional crop, as the reference's.
CropBox ssd_crop_pixels(const SsdCrop *crop, int32_t width, int32_t height);
// Mirrors boxes left-right: (l, t, r, b) -> (1 - r, t, 1 - l, b).
void ssd_flip_boxes(float *boxes, int32_t n);

// ---------------------------------------------------------------- augmentation
typedef struct SsdAugment {
  bool train;           // crop, flip, jitter and matching; else resize only
  int32_t side;         // output side, 300
  bool crop, flip;      // training: the random crop, the flip with probability 1/2
  int max_tries;        // crop candidates per mode (1)
  ColorJitter jitter;   // training: 0.125, 0.5, 0.5, 0.05
  bool float_output;    // normalise on the CPU; else uint8 (normalise on the GPU)
  float mean[3], std[3];
  uint64_t seed;
} SsdAugment;

// The MLPerf SSD300 settings: 300 pixels, crop with 1 try, flip, jitter
// (0.125, 0.5, 0.5, 0.05), ImageNet's mean and std; uint8 output.
SsdAugment ssd_augment_mlperf(bool train, uint64_t seed);

// The geometry of training sample `index` of `epoch` for an image of
// width x height with n boxes (crowd boxes already left out): the crop and
// flip (the RNG's first draws), the kept boxes (relative to the output
// image, flipped) in out_boxes / out_labels (n each); returns their count.
// *rng is left at the colour jitter's draws.
int32_t ssd_augment_boxes(const SsdAugment *a, const float *boxes, const int32_t *labels,
                          int32_t n, Rng *rng, SsdCrop *crop, bool *flip, float *out_boxes,
                          int32_t *out_labels);

// ---------------------------------------------------------------- loader
typedef struct SsdLoaderConfig {
  const char *lmdb_dir;
  SsdAugment augment;
  const SsdBoxConfig *boxes;  // the default boxes; training; image_size == augment.side
  int32_t num_classes;        // background included (81): |label| must be in 1..num_classes-1
  int64_t batch_size;
  int threads, ring_batches;
  int rank, world;
  int64_t start_epoch;
  const Device *dev;  // NULL: host only
  bool keep_last;     // training: a short last batch rather than none (loader.h)
} SsdLoaderConfig;

// A loader over lmdb_dir; training shuffles per epoch and drops the short
// last batch (or keeps it), eval reads every record once in order.
// *record_count gets the data set's size when not NULL. A record that is not
// IMAGE_BOXES, a box outside [0, 1] or without positive width and height, or
// a label 0 or outside the classes stops with one line naming the LMDB and
// the record.
Loader *ssd_loader_open(const SsdLoaderConfig *cfg, int64_t *record_count);

#ifdef __cplusplus
}
#endif
