// amp.h: mixed precision. Master weights, gradients and optimizer state stay
// fp32 (ParamSet); the forward and backward passes compute in the precision
// the `precision` key names, from a low-precision copy of the weights made by
// amp_cast once per step. fp16 gradients under- and overflow, so fp16 runs
// scale the loss and unscale the gradients (dynamic loss scaling); bf16 has
// fp32's exponent range and runs unscaled.
//
// One training step under fp16:
//   loss gradient x amp_loss_scale(s) -> backward -> all-reduce (dist.h)
//   -> amp_unscale(s, ...)          grads *= 1/scale, and inf/nan sets a device flag
//   -> if (amp_update(s, dev)) optim_step(...)   else the step is skipped
// The unscale comes after the all-reduce so that every rank sees the same
// flag and takes the same decision.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "device/device.h"
#include "device/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PREC_FP32, PREC_TF32, PREC_FP16, PREC_BF16 } Precision;

// "fp32" | "tf32" | "fp16" | "bf16"; -1 when unknown.
int amp_precision_parse(const char *name);
const char *amp_precision_name(Precision p);
// The dtype activations and the weight copy use: fp32 for fp32 and tf32.
DType amp_compute_dtype(Precision p);

// Config keys a trainer adds to its table: precision, loss_scale_init,
// loss_scale_growth_interval, loss_scale_growth_factor, loss_scale_backoff,
// loss_scale_min, linear_epilogues.
extern const ConfigKey amp_config_keys[];
extern const int amp_config_key_count;

typedef struct AmpConfig {
  Precision precision;
  float scale_init;         // fp16: the first loss scale
  int64_t growth_interval;  // fp16: clean steps before the scale grows
  float growth_factor;      // > 1
  float backoff;            // in (0, 1): the factor applied on overflow
  float scale_min;          // the scale never backs off below this floor
  bool linear_epilogues;    // CUDA: op_linear_set_epilogues
} AmpConfig;

// Reads and checks the keys above; a bad value is a one-line error naming the
// key. Low precision on a CPU device is refused: the CPU path computes in fp32.
AmpConfig amp_config_get(const Config *c, DeviceKind device);

// The math mode of fp32 convolutions and GEMMs for precision p: TF32 tensor
// cores for tf32, true fp32 otherwise (fp16/bf16 ops use tensor cores by
// their dtype). Process-wide; nothing on a CPU device.
void amp_apply_math(const Device *dev, Precision p);

typedef struct LossScaler {
  AmpConfig cfg;
  bool dynamic;            // fp16: scaling and overflow checks on
  float scale;             // 1 when not dynamic
  int64_t good_steps;      // clean steps since the scale last changed
  int64_t skipped_steps;   // steps skipped for overflow, in all
  DeviceKind device;
  int *found_inf;          // (1) on `device`: set by amp_unscale, cleared by amp_update
} LossScaler;

void amp_scaler_init(LossScaler *s, const AmpConfig *cfg, DeviceKind device);
void amp_scaler_free(LossScaler *s);
// What a trainer does with its precision keys: reads and checks them
// (amp_config_get), sets the math mode (amp_apply_math) and the linear
// layers' epilogues, and initialises the loss scaler on dev's kind.
void amp_setup(const Config *c, const Device *dev, AmpConfig *cfg, LossScaler *s);
// Multiply the loss gradient by this before backward.
float amp_loss_scale(const LossScaler *s);

// grads[0..n) *= extra_factor / scale in one pass, flagging any inf or nan;
// extra_factor folds in other scalings (1 / micro-batches). Not dynamic: a
// plain scaling by extra_factor, no check.
void amp_unscale(LossScaler *s, const Device *dev, float *grads, int64_t n, float extra_factor);
void amp_unscale_cpu(const Device *dev, float *grads, int64_t n, float factor, int *found_inf);
void amp_unscale_cuda(const Device *dev, float *grads, int64_t n, float factor, int *found_inf);

// After amp_unscale: false when the gradients overflowed (the caller skips
// the optimizer step; the scale backs off, the skip is counted and reported
// on stderr), true otherwise (after growth_interval clean steps in a row the
// scale grows). Reads the 4-byte flag from the device: the one host sync of
// an fp16 step. Not dynamic: always true, no sync.
bool amp_update(LossScaler *s, const Device *dev);

// fp16: one line on out - "<who>: amp: N step(s) skipped for gradient
// overflow; final loss scale S"; nothing for other precisions.
void amp_report(const LossScaler *s, FILE *out, const char *who);

// dst[0..n) = src in dtype (fp16 or bf16, round to nearest even; fp32 copies):
// the low-precision weights for compute, cast from the fp32 master copy.
void amp_cast(const Device *dev, const float *src, void *dst, DType dtype, int64_t n);
void amp_cast_cpu(const Device *dev, const float *src, void *dst, DType dtype, int64_t n);
void amp_cast_cuda(const Device *dev, const float *src, void *dst, DType dtype, int64_t n);

// grads[0..n) += src[0..n) read in dtype (fp16, bf16 or fp32): brings
// gradients an op could only write in the compute dtype (cuDNN's filter
// gradient takes the dtype of its data) into the fp32 gradient buffer.
void amp_accumulate_grads(const Device *dev, const void *src, DType dtype, float *grads, int64_t n);
void amp_accumulate_grads_cpu(const Device *dev, const void *src, DType dtype, float *grads,
                              int64_t n);
void amp_accumulate_grads_cuda(const Device *dev, const void *src, DType dtype, float *grads,
                               int64_t n);

// Tensor i of a low-precision weight copy of ps's tensors first, first + 1,
// ... laid out as they are in ps->params from offsets[first] on (a flat
// buffer of dtype filled by amp_cast; first 0: the whole ParamSet).
Tensor amp_weight_view(const ParamSet *ps, void *lowp, DType dtype, int first, int i);

#if HAVE_CUDA
// Reads the device flag into the host and clears it (on dev->stream).
int amp_take_flag_cuda(const Device *dev, int *found_inf);
#endif

#ifdef __cplusplus
}
#endif
