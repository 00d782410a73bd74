// optim.h: optimizers over a ParamSet's flat fp32 buffers: SGD (momentum,
// Nesterov), LARS (MLPerf form), Adam, AdamW, LAMB; gradient accumulation
// and clipping by global norm.
//
// Every optimizer walks params, grads and state[] of the ParamSet as a whole,
// using each tensor's flags: PARAM_NO_DECAY tensors (biases, batch-norm and
// layer-norm parameters) get no weight decay and no trust ratio (LARS, LAMB).
// The CPU functions are the reference; the CUDA ones are fused multi-tensor
// kernels (one launch per step for SGD and the Adam family, three for LARS and
// LAMB, whatever the number of tensors), on dev->stream, with the
// learning rate passed by value so that a step never waits for the host.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mllog.h"
#include "device/device.h"
#include "device/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OPT_SGD, OPT_LARS, OPT_ADAM, OPT_ADAMW, OPT_LAMB } OptKind;

typedef struct OptConfig {
  OptKind kind;
  float momentum;        // SGD, LARS
  bool nesterov;         // SGD, LARS
  float weight_decay;    // SGD, LARS, Adam (L2 into the gradient); AdamW, LAMB (decoupled)
  float beta1, beta2;    // Adam, AdamW, LAMB
  float eps;             // Adam family: added to sqrt(v); LARS: in the trust-ratio denominator
  float lars_eta;        // LARS trust coefficient
  bool bias_correction;  // Adam family: divide m and v by 1 - beta^t
  float max_grad_norm;   // run_update clips the gradients to this global norm first; 0: never
} OptConfig;

// The usual defaults of each kind: momentum 0.9 (SGD, LARS), betas (0.9, 0.999),
// eps 1e-8 (Adam, AdamW) or 1e-6 (LAMB), bias correction on; for LARS the
// MLPerf reference values eta 0.001 and eps 0. Weight decay 0.
OptConfig optim_defaults(OptKind kind);
// The Adam family's keys in a trainer's key table, with the trainer's
// defaults of beta2 and eps (strings, as a key table's); optim_adam_config
// reads them. Bias correction is on by default (PyTorch's Adam and AdamW);
// some fine-tuning recipes turn it off (TensorFlow's AdamWeightDecayOptimizer
// has none; FusedAdam takes bias_correction=False).
#define OPTIM_ADAM_KEYS(beta2, eps)                                                   \
  {"adam_beta1", CFG_FLOAT, "0.9", "Adam beta1", "[0, 1)"},                           \
  {"adam_beta2", CFG_FLOAT, beta2, "Adam beta2", "[0, 1)"},                           \
  {"adam_eps", CFG_FLOAT, eps, "Adam epsilon", "(0, inf)"},                           \
  {"adam_bias_correction", CFG_BOOL, "true",                                          \
   "divide Adam's moments by 1 - beta^t (false: the raw moments)", NULL}
// optim_defaults(kind), an Adam-family kind, with OPTIM_ADAM_KEYS' values.
OptConfig optim_adam_config(const Config *cfg, OptKind kind);
// "sgd" | "lars" | "adam" | "adamw" | "lamb"; -1 when unknown.
int optim_kind_parse(const char *name);
const char *optim_kind_name(OptKind kind);
// State buffers each kind keeps per parameter: 1 (momentum) or 2 (m, v). Pass
// it to paramset_init as n_state.
int optim_state_count(OptKind kind);

struct OptimCuda;  // the device tables of the fused kernels (optim_cuda.cu)

typedef struct Optimizer {
  OptConfig cfg;
  int64_t step;            // updates applied so far: t of the bias correction
  DeviceKind device;
  float last_grad_norm;    // CPU: the norm seen by the latest optim_clip_grads
  struct OptimCuda *cuda;  // NULL on CPU
} Optimizer;

// Checks that ps has the state buffers cfg->kind needs; a bad hyperparameter
// (negative learning-rate factor, beta outside [0, 1)) is a one-line error.
void optim_init(Optimizer *opt, const OptConfig *cfg, const ParamSet *ps);
void optim_free(Optimizer *opt);

// One update with learning rate lr: params and state change, grads are read.
void optim_step(Optimizer *opt, const Device *dev, ParamSet *ps, float lr);
void optim_step_cpu(Optimizer *opt, const Device *dev, ParamSet *ps, float lr);
void optim_step_cuda(Optimizer *opt, const Device *dev, ParamSet *ps, float lr);

// Gradient accumulation over micro-batches: zero before the first, and scale
// by 1/micro_batches after the last (or fold that factor into amp_unscale).
void optim_grads_zero(const Device *dev, ParamSet *ps);
void optim_grads_zero_cpu(const Device *dev, ParamSet *ps);
void optim_grads_zero_cuda(const Device *dev, ParamSet *ps);
void optim_grads_scale(const Device *dev, ParamSet *ps, float factor);
void optim_grads_scale_cpu(const Device *dev, ParamSet *ps, float factor);
void optim_grads_scale_cuda(const Device *dev, ParamSet *ps, float factor);

// Clipping by global norm (PyTorch's clip_grad_norm_): when the L2 norm of all
// gradients exceeds max_norm, they are scaled by max_norm / (norm + 1e-6). On
// CUDA the norm stays on the device; optim_last_grad_norm reads it (a sync).
void optim_clip_grads(Optimizer *opt, const Device *dev, ParamSet *ps, float max_norm);
void optim_clip_grads_cpu(Optimizer *opt, const Device *dev, ParamSet *ps, float max_norm);
void optim_clip_grads_cuda(Optimizer *opt, const Device *dev, ParamSet *ps, float max_norm);
float optim_last_grad_norm(const Optimizer *opt);

// MLLOG: opt_name and the optimizer's own hyperparameter keys under the names
// the MLPerf checker expects for that kind (lars_opt_momentum, sgd_opt_weight_decay,
// opt_adam_beta_1, opt_lamb_weight_decay_rate ...).
void optim_log(const OptConfig *cfg, MLLog *log);

// Counts one more update in opt->step and returns the Adam bias corrections
// 1 - beta^t for it (1 when bias_correction is off); both step functions call it.
typedef struct OptStepScalars {
  float bc1, bc2;
} OptStepScalars;
OptStepScalars optim_next_step(Optimizer *opt);

#if HAVE_CUDA
// The CUDA halves of optim_init / optim_free / optim_last_grad_norm.
void optim_init_cuda(Optimizer *opt, const ParamSet *ps);
void optim_free_cuda(Optimizer *opt);
float optim_last_grad_norm_cuda(const Optimizer *opt);
#endif

#ifdef __cplusplus
}
#endif
