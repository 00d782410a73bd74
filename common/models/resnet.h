// resnet.h: ResNet building blocks (basic and bottleneck, any depth and
// width) with the v1.5 placement of the stride (in the 3x3 convolution of a
// downsampling bottleneck), forward and backward over the op library. Shared
// by the ResNet-50 classifier and a detector's ResNet-34 backbone.
//
// Activations are NHWC. Every buffer a step touches is allocated once in
// resnet_init for a maximum batch; a step with a smaller batch (the last eval
// batch) uses the leading part of each buffer.
//
// Precision (ResnetConfig.dtype). fp32: everything fp32 (CPU or CUDA). fp16
// or bf16 (CUDA only), as PyTorch's autocast does it: the parameters,
// gradients and optimizer state stay fp32 (net->params); each forward casts
// the weights once into a low-precision copy (amp_cast) that convolutions
// and the classifier read; activations and their gradients are fp16/bf16;
// batch norm keeps fp32 parameters, statistics and reductions; the logits
// and their gradient are fp32. Convolution filter gradients come out of
// cuDNN in the compute dtype and are added into the fp32 gradients right
// away (amp_accumulate_grads); batch-norm and classifier gradients are
// written in fp32 directly.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "device/tensor.h"
#include "ops/conv.h"
#include "ops/norm.h"
#include "ops/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RESNET_BASIC, RESNET_BOTTLENECK } ResnetBlockKind;

#define RESNET_MAX_STAGES 4

// Convolution weights at init, as TensorFlow's variance scaling: zero mean
// and variance scale / fan, fan = in_c k k (fan_in) or out_c k k (fan_out);
// a normal, or one truncated at two of its standard deviations and widened
// so that what is left keeps that variance (truncated). torchvision's
// Kaiming normal: 2, fan_out, normal; the MLPerf v0.7 ResNet reference's
// tf.variance_scaling_initializer(distribution="truncated_normal"): 1,
// fan_in, truncated.
typedef struct ResnetConvInit {
  float scale;
  bool fan_in;     // else fan_out
  bool truncated;  // else a normal
} ResnetConvInit;

typedef struct ResnetConfig {
  ResnetBlockKind block;
  int stages;                        // 1..4
  int blocks[RESNET_MAX_STAGES];     // residual blocks per stage: 3,4,6,3 for ResNet-50
  int stage_stride[RESNET_MAX_STAGES];  // stride of each stage's first block; 0: the
                                     // default, 1 for the first stage and 2 after it
                                     // (a detector's backbone keeps a stage at 1)
  int width;                         // channels of the first stage's 3x3 convs: 64
  int in_channels;                   // 3
  int image_size;                    // input side: 224
  bool stem_7x7;                     // 7x7/2 conv + 3x3/2 max pool; else one 3x3/1 conv
  int num_classes;                   // 0: backbone only, no pooling or classifier
  bool zero_init_residual;           // last BN of each block starts with gamma 0
  ResnetConvInit conv_init;          // 2, fan_out, normal
  float bn_momentum, bn_eps;         // 0.1, 1e-5 (PyTorch's convention)
  DType dtype;                       // compute dtype: DT_F32, or DT_F16 / DT_BF16 on CUDA
} ResnetConfig;

// ResNet-50 v1.5: 224-pixel RGB input, 1000 classes, the 7x7 stem.
ResnetConfig resnet_config_50(void);
// Parses "3,4,6,3" into cfg->blocks and cfg->stages; false when malformed.
bool resnet_parse_stages(ResnetConfig *cfg, const char *text);

// A convolution followed by batch norm: the unit every ResNet layer is made of.
typedef struct ResnetConvBn {
  int w, gamma, beta;   // parameter indices
  int running_mean, running_var;  // buffer indices
  ConvParams conv;
  int64_t in_c, out_c, kernel;
  int64_t out_h, out_w;
  BatchNorm bn;         // running (buffers) and saved statistics bound at init
  Tensor x;             // (N, H, W, in_c) the input, not owned
  Tensor conv_out;      // (N, P, Q, out_c)
  Tensor y;             // (N, P, Q, out_c) after BN [+ residual] [+ ReLU]
  bool relu;
  bool zero_gamma;      // BN gamma starts at 0 (the end of a residual branch)
} ResnetConvBn;

typedef struct ResnetBlock {
  ResnetConvBn conv[3];  // basic: 2 used; bottleneck: 3 (1x1, 3x3 strided, 1x1)
  int n_conv;
  bool has_proj;
  ResnetConvBn proj;     // 1x1 strided projection of the shortcut
} ResnetBlock;

typedef struct Resnet {
  ResnetConfig cfg;
  DeviceKind device;
  int64_t max_batch;
  // Parameter table and buffers.
  ParamSpec *specs;
  ParamSpec *buffer_specs;
  char *names;           // storage of the spec names
  int n_params;
  ParamSet params;
  ParamSet buffers;      // untrained state: every BN's running mean and variance
  float *bn_saved;       // every BN's batch mean and inverse std, for its backward
  // Layers.
  ResnetConvBn stem;
  PoolParams stem_pool;
  Tensor stem_pooled;    // (N, H/4, W/4, width) with the 7x7 stem
  ResnetBlock *blocks;
  int n_blocks;
  int fc_w, fc_b;        // classifier parameters (num_classes > 0)
  const Tensor *out;     // the last block's output of the latest forward
  Tensor features;       // (N, C_last) after global average pooling
  Tensor logits;         // (N, num_classes)
  int64_t out_channels;  // channels of the last stage
  // Backward buffers, each as large as the largest activation.
  Tensor grad[4];
  Tensor dfeatures;      // (N, C_last)
  void *scratch;         // CPU convolution scratch
  size_t scratch_bytes;
  // Low precision only (cfg.dtype fp16/bf16), each laid out like params:
  void *lowp_weights;    // the weights in cfg.dtype, cast at every forward
  void *lowp_grads;      // convolution filter gradients in cfg.dtype, each
                         // added into params.grads as it is made
  Tensor dlogits_lowp;   // (N, num_classes) the logits' gradient in cfg.dtype
  GradHook hook;         // the current backward's (resnet_backward)
  bool params_shared;    // params/grads belong to a larger table (resnet_share_params)
} Resnet;

// Builds the layer list and parameter table (with n_state optimizer state
// buffers: optim_state_count), allocates every buffer for batches of up to
// max_batch on `device`, and initialises the parameters from seed
// (convolutions as cfg->conv_init, N(0, 0.01) classifier, BN 1/0 but the
// zero gammas of zero_init_residual).
void resnet_init(Resnet *net, const ResnetConfig *cfg, int64_t max_batch, int n_state,
                 DeviceKind device, uint64_t seed);
void resnet_free(Resnet *net);
// The standard deviation of a standard normal truncated to [-bound, bound]:
// 0.8796... at 2, by which conv_init's truncated normal is widened.
double resnet_truncated_normal_std(double bound);
// Moves the network's parameters (their current values) and gradients into
// the buffers of `outer`, a larger table whose first tensors are this
// network's specs in order (so their offsets agree), and frees its own: a
// model that holds a ResNet as a part keeps all its parameters in one
// ParamSet. net->params keeps its table and sizes; its params and grads then
// point into outer's buffers, which outer owns (resnet_free leaves them).
void resnet_share_params(Resnet *net, const ParamSet *outer);

// Forward of a batch x (n, S, S, in_channels) in cfg.dtype; returns the
// logits (n, num_classes) fp32, or with num_classes == 0 the last block's
// output (cfg.dtype). train uses batch statistics (and updates the running
// ones) and keeps what the backward needs.
const Tensor *resnet_forward(Resnet *net, const Device *dev, const Tensor *x, bool train);
// Backward from dlogits (n, num_classes) fp32 (or the gradient of the last
// block's output, in cfg.dtype): adds the parameter gradients into
// net->params.grads (fp32). hook hears of each parameter tensor once, as soon
// as its gradient is final (classifier first, stem last).
void resnet_backward(Resnet *net, const Device *dev, const Tensor *dlogits, GradHook hook);

#ifdef __cplusplus
}
#endif
