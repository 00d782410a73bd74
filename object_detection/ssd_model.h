// ssd_model.h: the SSD network - a ResNet backbone (models/resnet.h), extra
// feature blocks without batch norm, and a location and a class head per
// feature map - forward and backward over the op library, as the MLPerf
// reference (mlcommons/training single_stage_detector/ssd: ssd300.py SSD300,
// base_model.py ResNet34).
//
// SSD300 (ssd_model_config_300): ResNet-34 up to layer3 (basic blocks 3, 4,
// 6, width 64, the 7x7 stem), layer3's first block at stride 1, so a 300
// input gives 38x38x256; then five extra blocks, each a 1x1 conv (bias) +
// ReLU and a 3x3 conv (bias) + ReLU:
//   256 -> 256 -> 512  3x3/2 pad 1   38 -> 19
//   512 -> 256 -> 512  3x3/2 pad 1   19 -> 10
//   512 -> 128 -> 256  3x3/2 pad 1   10 -> 5
//   256 -> 128 -> 256  3x3/1 pad 0    5 -> 3
//   256 -> 128 -> 256  3x3/1 pad 0    3 -> 1
// and on each of the six maps a 3x3 pad 1 conv (bias) of nbox*4 channels
// (locations) and one of nbox*n_classes (classes), nbox 4, 6, 6, 6, 4, 4:
// 8,732 boxes.
//
// Output order. The reference views a head's NCHW output of nbox*4
// channels as (4, nbox*H*W): channel coord * nbox + k holds coordinate
// coord of box shape k (class logits likewise: channel class * nbox + k).
// Here the head output is NHWC (N, H, W, 4, nbox); it is permuted to
// (N, nbox, H, W, 4) and the maps concatenated along the box axis, giving
// loc (N, n_boxes, 4) and logits (N, n_boxes, n_classes) in ssd_boxes.h's
// box order (map, box shape, row-major location) with the reference's
// channel meaning, so the reference's head weights load unchanged (after
// the OIHW -> KRSC transpose every convolution needs).
//
// Initialisation (seeded, as the reference where it has one): the backbone
// as resnet_init (Kaiming normal over fan-out, BN 1/0; the reference starts
// from torchvision's ImageNet ResNet-34 instead, which this model cannot
// load yet); extra and head weights Xavier uniform (bound sqrt(6 / (fan_in +
// fan_out)), fan = channels * 3 * 3 or * 1), as the reference's
// _init_weights; their biases PyTorch's Conv2d default, uniform in
// +-1/sqrt(fan_in) (the reference leaves them at that default).
//
// Parameters: one ParamSet, the backbone's tensors first (resnet's names),
// then per extra block e "extra<e>.{a,b}.{weight,bias}", then per map k
// "head<k>.{loc,conf}.{weight,bias}". Biases and BN are PARAM_NO_DECAY,
// as resnet marks BN; note that the reference's SGD (train.py:
// torch.optim.SGD(ssd300.parameters(), weight_decay=5e-4)) decays every
// tensor, BN and biases included, so a trainer that follows it must not
// skip the flagged ones. Buffers (BN running statistics): the backbone's.
//
// Precision (cfg.dtype) as resnet.h: fp32 on CPU or CUDA; fp16/bf16 on
// CUDA with fp32 parameters, gradients and BN, activations in the compute
// dtype, a low-precision copy of the weights cast at every forward. The
// outputs loc and logits and their gradients are fp32 in every precision.
//
// Buffers are allocated once for a maximum batch; a smaller batch uses the
// leading part of each.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "models/resnet.h"
#include "object_detection/ssd_boxes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SsdModelConfig {
  ResnetConfig backbone;           // num_classes 0; its last stage's output is map 0
  int n_maps;                      // feature maps, 1..SSD_MAX_MAPS (one more than
                                   // the extra blocks)
  // Extra block e turns map e into map e + 1 (e < n_maps - 1):
  int extra_mid[SSD_MAX_MAPS];     // channels of its 1x1 conv
  int extra_out[SSD_MAX_MAPS];     // channels of its 3x3 conv: map e + 1's
  int extra_stride[SSD_MAX_MAPS];  // stride of its 3x3 conv
  int extra_pad[SSD_MAX_MAPS];     // padding of its 3x3 conv
  int boxes[SSD_MAX_MAPS];         // default boxes per location of map k
  int n_classes;                   // background included: 81 for the full set
  DType dtype;                     // compute dtype (resnet.h); overrides backbone.dtype
} SsdModelConfig;

// SSD300 as above with n_classes classes (81 for MLPerf).
SsdModelConfig ssd_model_config_300(int n_classes);
// The side of each feature map for cfg's input (backbone.image_size),
// computed from the config alone; returns n_maps, or the index of the first
// map that would be empty (the sides before it filled in). ssd_model_init
// and ssd_model_check_boxes die on such a config.
int ssd_model_map_sizes(const SsdModelConfig *cfg, int sizes[SSD_MAX_MAPS]);
// Dies naming the first difference when cfg does not fit the default boxes
// (input size, map count, each map's side and boxes per location).
void ssd_model_check_boxes(const SsdModelConfig *cfg, const SsdBoxConfig *boxes);

// A 3x3 or 1x1 convolution with bias (extra blocks and heads).
typedef struct SsdConv {
  int w, b;               // parameter indices
  ConvParams conv;
  int64_t in_c, out_c, kernel;
  int64_t out_h, out_w;
  bool relu;
  Tensor x;               // the input of the latest forward, not owned
  Tensor y;               // (N, P, Q, out_c) owned
} SsdConv;

typedef struct SsdMap {
  const Tensor *x;        // (N, H, W, C) the map: the backbone's output or an extra's
  int64_t side, channels, boxes, first_box;
  SsdConv loc, conf;      // heads: y is (N, H, W, 4 * boxes) and (N, H, W, C * boxes)
  Tensor loc_grad;        // (N, H, W, 4 * boxes) and (N, H, W, n_classes * boxes):
  Tensor conf_grad;       // the heads' output gradients, in the heads' layout
  Tensor dx;              // (N, H, W, C) the map's gradient
} SsdMap;

typedef struct SsdModel {
  SsdModelConfig cfg;
  DeviceKind device;
  int64_t max_batch, n_boxes;
  Resnet backbone;        // its params/grads live in `params` (resnet_share_params)
  ParamSpec *specs;       // the backbone's rows, then the extras' and heads'
  char *names;
  int n_params, first_own; // first_own: the first tensor that is not the backbone's
  ParamSet params;
  ParamSet *buffers;      // the backbone's BN running statistics
  SsdConv extra[SSD_MAX_MAPS][2];  // block e: the 1x1 conv (a) and the 3x3 conv (b)
  SsdMap map[SSD_MAX_MAPS];
  Tensor loc, logits;     // (N, n_boxes, 4), (N, n_boxes, n_classes) fp32 outputs
  // Low precision only: the outputs (and their gradients) in the compute
  // dtype before the cast, and the own tensors' weights and filter gradients.
  Tensor loc_lowp, logits_lowp;
  void *lowp_weights, *lowp_grads;
  // Backward scratch: an extra block's 1x1 output gradient, and a data gradient
  // to add, each as large as the largest; fp32 bias gradient.
  Tensor grad_y, grad_x;
  float *dbias;
  void *scratch;          // CPU convolution scratch
  size_t scratch_bytes;
  GradHook hook;
} SsdModel;

// Builds the network for batches of up to max_batch on `device`, with
// n_state optimizer state buffers, parameters initialised from seed (above).
// Dies when a map would be empty.
void ssd_model_init(SsdModel *m, const SsdModelConfig *cfg, int64_t max_batch, int n_state,
                    DeviceKind device, uint64_t seed);
void ssd_model_free(SsdModel *m);
// Forward of x (n, S, S, in_channels) in the compute dtype: *loc (n,
// n_boxes, 4) and *logits (n, n_boxes, n_classes), fp32, valid until the
// next forward. train: BN batch statistics (updating the running ones), and
// keeps what the backward needs.
void ssd_model_forward(SsdModel *m, const Device *dev, const Tensor *x, bool train,
                       const Tensor **loc, const Tensor **logits);
// Backward of the latest training forward from dloc (n, n_boxes, 4) and
// dlogits (n, n_boxes, n_classes), fp32 (ssd_loss_cpu's gradients): adds the
// parameter gradients into m->params.grads. hook hears of each parameter
// tensor once, as soon as its gradient is final (heads, extras from the last
// map down, then the backbone, stem last).
void ssd_model_backward(SsdModel *m, const Device *dev, const Tensor *dloc,
                        const Tensor *dlogits, GradHook hook);

#ifdef __cplusplus
}
#endif
