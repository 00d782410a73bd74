// ssd_boxes.h: SSD's box machinery, CPU reference - the default boxes, the
// offsets a head predicts against them, the matching of ground truth to
// default boxes, the eval's NMS, and the training loss with hard negative
// mining and its gradient. Each follows the MLPerf SSD reference
// (mlcommons/training single_stage_detector/ssd: utils.py DefaultBoxes and
// Encoder, base_model.py Loss); where it breaks a tie or an edge case the
// reference leaves to PyTorch, the comment says how. Plain fp32 C: the oracle
// a CUDA version is tested against.
//
// Coordinates are relative to the image ([0, 1] inside it), as
// (cx, cy, w, h) "xywh" or corners "ltrb" (left, top, right, bottom).
// Box index order (n boxes per image): map by map; inside a map, box shape by
// box shape (small square, large square, then each ratio's pair); inside a
// shape, row-major locations (i, j). That is the reference's order, which its
// heads produce by viewing a conv output of nbox*4 (or nbox*classes)
// channels as (4, nbox * H * W): channel coord * nbox + k holds coordinate
// coord of shape k, and box k * H * W + i * W + j of the map.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "device/tensor.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- default boxes
#define SSD_MAX_MAPS 8
#define SSD_MAX_RATIOS 4

// The default-box layout of one SSD. Map k has feat_size[k]^2 locations whose
// centres are (j + 0.5) / (image_size / step[k]) apart; at each, the squares
// s_k and sqrt(s_k s_{k+1}) (s_k = scale[k] / image_size), then per ratio r
// the boxes (s_k sqrt(r), s_k / sqrt(r)) and its transpose: 2 + 2 n_ratios
// boxes. Every xywh value is clamped to [0, 1], as the reference does.
typedef struct SsdBoxConfig {
  int image_size;                           // pixels of the square input
  int n_maps;                               // at most SSD_MAX_MAPS
  int feat_size[SSD_MAX_MAPS];              // side of each feature map
  int step[SSD_MAX_MAPS];                   // pixels between neighbouring centres
  double scale[SSD_MAX_MAPS + 1];           // box sizes in pixels: map k uses k, k + 1
  int n_ratios[SSD_MAX_MAPS];               // at most SSD_MAX_RATIOS
  double ratio[SSD_MAX_MAPS][SSD_MAX_RATIOS];
} SsdBoxConfig;

// The MLPerf SSD300 layout (the reference's dboxes300_coco): maps 38, 19, 10,
// 5, 3, 1; steps 8, 16, 32, 64, 100, 300; scales 21, 45, 99, 153, 207, 261,
// 315; ratios [2], [2, 3], [2, 3], [2, 3], [2], [2]: 8,732 boxes.
extern const SsdBoxConfig kSsd300Boxes;

typedef struct SsdDefaultBoxes {
  int64_t n;    // boxes
  float *xywh;  // (n, 4) clamped to [0, 1]
  float *ltrb;  // (n, 4) corners of the clamped boxes (may pass 0 or 1)
} SsdDefaultBoxes;

// Dies naming the field when cfg breaks a limit above.
void ssd_box_config_check(const SsdBoxConfig *cfg);
int ssd_boxes_per_location(const SsdBoxConfig *cfg, int map);
// The index of map's first box; map == n_maps gives the total.
int64_t ssd_map_first_box(const SsdBoxConfig *cfg, int map);
// Computed in double from the config and rounded once to fp32 (as the
// reference builds them in Python floats); ltrb from the fp32 xywh in fp32.
SsdDefaultBoxes ssd_default_boxes(const SsdBoxConfig *cfg);
void ssd_default_boxes_free(SsdDefaultBoxes *db);

// ---------------------------------------------------------------- offsets
// Box variances: offsets are (dx / (0.1 w_d), dy / (0.1 h_d), log(w / w_d) / 0.2,
// log(h / h_d) / 0.2) against default box d.
#define SSD_VAR_XY 0.1f
#define SSD_VAR_WH 0.2f

// IoU of two ltrb boxes in fp32, as the reference: intersection /
// (area a + area b - intersection), areas (r - l)(b - t). 0/0 gives NaN.
float ssd_iou(const float a[4], const float b[4]);
// The offsets of ground truth gt (ltrb, positive width and height) against
// default box db (xywh): gt's centre 0.5 (l + r), size r - l as the reference
// converts it, then 10 (x - x_d) / w_d and 5 log(w / w_d).
void ssd_encode(const float db_xywh[4], const float gt_ltrb[4], float off[4]);
// The inverse: the box a head's offsets off predict, as ltrb (not clipped).
void ssd_decode(const float db_xywh[4], const float off[4], float ltrb[4]);

// ---------------------------------------------------------------- matching
// IoU a default box must pass (strictly) to take a ground truth.
#define SSD_MATCH_IOU 0.5f

// One image's training targets, as the reference's Encoder.encode:
//   - each default box takes the ground truth of highest IoU (the first on a
//     tie), kept when that IoU > SSD_MATCH_IOU;
//   - every ground truth also takes its best default box (the first on a
//     tie) whatever the IoU; when two pick the same box the later one wins.
// gt_ltrb: (n_gt, 4) with r > l and b > t; gt_label: (n_gt) in [1, classes).
// labels: (n) the matched label, 0 for background; offsets: (n, 4) the
// encoded ground truth, 0 for background. Returns the positives' count.
// n_gt may be 0 (all background). No allocation: safe on loader threads.
int64_t ssd_match(const SsdDefaultBoxes *db, const float *gt_ltrb, const int32_t *gt_label,
                  int64_t n_gt, int32_t *labels, float *offsets);

// ---------------------------------------------------------------- detection (eval)
typedef struct SsdNmsParams {
  float score_threshold;  // a class's score must pass it (strictly)
  float iou_threshold;    // NMS drops a box whose IoU with a kept one is >= this
  int max_per_class;      // candidates per class (highest scores) before NMS
  int max_output;         // detections per image after NMS, highest scores
} SsdNmsParams;

// The MLPerf eval: 0.05, 0.5, 200, 200 (decode_batch(..., 0.50, 200) with
// decode_single's max_num 200).
extern const SsdNmsParams kSsdNms;

typedef struct SsdDetection {
  float ltrb[4];  // decoded box, relative, not clipped
  float score;    // softmax probability of label
  int32_t label;  // in [1, classes)
  int32_t box;    // the default box it came from
} SsdDetection;

// Scratch ssd_detect_cpu takes from its arena (with alignment slack).
size_t ssd_detect_scratch_bytes(int64_t n_boxes, int64_t n_classes, const SsdNmsParams *p);
// One image's detections, as the reference's decode_single: softmax over
// the classes (in double, rounded once, as ops/loss.c's cross-entropy); per
// class but background, the boxes scoring > score_threshold, the
// max_per_class highest, greedy NMS (keep the highest, drop every remaining
// box with IoU >= iou_threshold, repeat); then the max_output highest over
// all classes. Writes them to out (max_output entries) by descending score
// and returns their count. Ties (equal scores) go to the lower box index
// within a class, then to the lower class (the reference's torch.sort leaves
// them unspecified). The reference returns them in ascending order.
//   loc: (n, 4) offsets; logits: (n, n_classes)
int ssd_detect_cpu(const Device *dev, const SsdDefaultBoxes *db, const float *loc,
                   const float *logits, int64_t n_classes, const SsdNmsParams *p,
                   Arena *scratch, SsdDetection *out);

// A batch's detections, with the default boxes in the memory of the device
// that decodes. ssd_default_boxes_to_device copies db's xywh (the decode
// reads nothing else) to dev's memory; make it once, next to the model, and
// pass it to every ssd_detect of the run. A CPU device gets a host copy, so
// that the call reads the same on both.
typedef struct SsdDeviceBoxes {
  DeviceKind device;  // where xywh lives: the dev->kind of the ssd_detect calls
  int64_t n;
  float *xywh;  // (n, 4)
} SsdDeviceBoxes;
SsdDeviceBoxes ssd_default_boxes_to_device(const Device *dev, const SsdDefaultBoxes *db);
void ssd_device_boxes_free(SsdDeviceBoxes *boxes);

// Scratch ssd_detect_batch_cpu (kind DEVICE_CPU: one image's
// ssd_detect_scratch_bytes, reused) or ssd_detect_batch_cuda (DEVICE_CUDA:
// every score of the batch, B (C - 1) n floats - as much as the logits -
// and the kept boxes, B (C - 1) max_per_class detections) takes from its
// arena, with alignment slack.
size_t ssd_detect_batch_scratch_bytes(DeviceKind kind, int64_t batch, int64_t n_boxes,
                                      int64_t n_classes, const SsdNmsParams *p);
// Each image's ssd_detect_cpu, the detections copied to the HOST:
//   loc: (B, n, 4), logits: (B, n, C) in dev's memory; boxes->device ==
//   dev->kind; scratch an arena of dev's memory.
//   out: (B, max_output) host, image b's count[b] detections first, by
//   descending score (the rest of its row unspecified); count: (B) host.
// The CUDA version (ssd_boxes_cuda.cu) gives the same detections, bit for
// bit on the emulation (on a GPU, CUDA's double exp and log, an ulp or two
// from the host's, may round a rare score to the next float, and so move
// it): one thread per box makes its softmax row; one block per
// (image, class) selects the candidates (the max_per_class highest of score
// > threshold: the k-th highest (score, -box) key found bit by bit), sorts
// them, decodes and runs the NMS; one block per image takes the max_output
// highest of the kept (ties to the lower class). It waits for dev->stream
// (the copy to the host). max_per_class and max_output at most
// SSD_DETECT_MAX_SORT; batch at most 65535.
#define SSD_DETECT_MAX_SORT 1024
void ssd_detect_batch_cpu(const Device *dev, const SsdDeviceBoxes *boxes, int64_t batch,
                          const float *loc, const float *logits, int64_t n_classes,
                          const SsdNmsParams *p, Arena *scratch, SsdDetection *out,
                          int32_t *count);
#if HAVE_CUDA
void ssd_detect_batch_cuda(const Device *dev, const SsdDeviceBoxes *boxes, int64_t batch,
                           const float *loc, const float *logits, int64_t n_classes,
                           const SsdNmsParams *p, Arena *scratch, SsdDetection *out,
                           int32_t *count);
#endif
// Picks ssd_detect_batch_cpu or _cuda by dev->kind: the eval's call, once
// per batch.
static inline void ssd_detect(const Device *dev, const SsdDeviceBoxes *boxes, int64_t batch,
                              const float *loc, const float *logits, int64_t n_classes,
                              const SsdNmsParams *p, Arena *scratch, SsdDetection *out,
                              int32_t *count) {
  OP_DISPATCH_ARGS(dev, ssd_detect_batch,
                   (dev, boxes, batch, loc, logits, n_classes, p, scratch, out, count));
}

// ---------------------------------------------------------------- loss
// Scratch ssd_loss_cpu and ssd_loss_cuda take from their arena (with
// alignment slack).
size_t ssd_loss_scratch_bytes(int64_t batch, int64_t n_boxes);
// The SSD loss of a batch, as the reference's Loss, with its gradient.
// Per image with P > 0 positives (glabel > 0):
//   loc  = sum over positives of smooth L1 (beta 1) of ploc - gloc, 4 offsets
//   con  = cross-entropy per box (ops' op_softmax_xent row losses); the
//          negatives ranked by con (positives counted as 0; ties to the lower
//          index), and every box of rank < min(3P, n) is mined
//   image = (loc + sum of con weighted 1 per positive + 1 per mined box) / P
// - a positive can be mined too, and then counts twice: positives rank
//   below every negative of positive loss, so only when 3P reaches past the
//   negatives (4P > n, in practice), as in the reference;
// images without positives give 0; loss = the mean over the batch (of all B).
// The mining is constant in the gradient (a sort). dloc and dlogits get
// grad_scale times the gradient of loss (AMP's loss scale, or 1).
//   ploc, gloc, dloc: (B, n, 4); logits, dlogits: (B, n, C); glabel: (B, n)
//   loss: (1) fp32
void ssd_loss_cpu(const Device *dev, int64_t batch, int64_t n_boxes, int64_t n_classes,
                  const float *ploc, const float *logits, const float *gloc,
                  const int32_t *glabel, float grad_scale, Arena *scratch, float *loss,
                  float *dloc, float *dlogits);
// The same on the GPU (ssd_boxes_cuda.cu), on dev->stream without waiting:
// every pointer is device memory, loss (1) included, and scratch an arena of
// DEVICE_CUDA memory of ssd_loss_scratch_bytes. batch and n_boxes positive;
// labels in [0, n_classes) (not checked on the device). The cross-entropies
// are computed as the CPU's (in double, each row's terms in the same order,
// rounded once), so the mined sets agree and the gradients agree to an ulp;
// the loss's double sums run in another order.
#if HAVE_CUDA
void ssd_loss_cuda(const Device *dev, int64_t batch, int64_t n_boxes, int64_t n_classes,
                   const float *ploc, const float *logits, const float *gloc,
                   const int32_t *glabel, float grad_scale, Arena *scratch, float *loss,
                   float *dloc, float *dlogits);
#endif
// Picks the CPU or CUDA function by dev->kind (inline, as ncf_metric_add).
static inline void ssd_loss(const Device *dev, int64_t batch, int64_t n_boxes,
                            int64_t n_classes, const float *ploc, const float *logits,
                            const float *gloc, const int32_t *glabel, float grad_scale,
                            Arena *scratch, float *loss, float *dloc, float *dlogits) {
  OP_DISPATCH(dev, ssd_loss, batch, n_boxes, n_classes, ploc, logits, gloc, glabel, grad_scale,
              scratch, loss, dloc, dlogits);
}

#ifdef __cplusplus
}
#endif
