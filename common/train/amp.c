// amp.c: precision choice, the dynamic loss scaler, and the CPU halves of the
// unscale and cast passes.
#include "train/amp.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "ops/conv.h"
#include "ops/dense.h"

static const char *const kPrecNames[] = {
    [PREC_FP32] = "fp32", [PREC_TF32] = "tf32", [PREC_FP16] = "fp16", [PREC_BF16] = "bf16",
};
#define N_PRECS ((int)(sizeof kPrecNames / sizeof kPrecNames[0]))

int amp_precision_parse(const char *name) {
  for (int p = 0; p < N_PRECS; p++)
    if (strcmp(name, kPrecNames[p]) == 0) return p;
  return -1;
}

const char *amp_precision_name(Precision p) { return kPrecNames[p]; }

DType amp_compute_dtype(Precision p) {
  return p == PREC_FP16 ? DT_F16 : p == PREC_BF16 ? DT_BF16 : DT_F32;
}

// PyTorch's GradScaler defaults, and a floor of 1 (below it fp16 gradients
// would be scaled down, which defeats the purpose).
const ConfigKey amp_config_keys[] = {
    {"precision", CFG_STRING, "fp32",
     "compute precision: fp32 | tf32 | fp16 | bf16 (master weights stay fp32; fp16 scales the loss)", "fp32|tf32|fp16|bf16"},
    {"loss_scale_init", CFG_FLOAT, "65536", "fp16: the first loss scale", "(0, inf)"},
    {"loss_scale_growth_interval", CFG_INT, "2000", "fp16: clean steps before the scale grows", "[1, inf)"},
    {"loss_scale_growth_factor", CFG_FLOAT, "2", "fp16: factor of each growth", "(1, inf)"},
    {"loss_scale_backoff", CFG_FLOAT, "0.5", "fp16: factor applied on overflow", "(0, 1)"},
    {"loss_scale_min", CFG_FLOAT, "1", "fp16: the scale never backs off below this", "(0, inf)"},
    {"linear_epilogues", CFG_BOOL, "true",
     "CUDA: linear layers add the bias and sum its gradient inside cuBLASLt's GEMMs where it "
     "offers them; false: separate passes", NULL},
};
const int amp_config_key_count = (int)(sizeof amp_config_keys / sizeof amp_config_keys[0]);

AmpConfig amp_config_get(const Config *c, DeviceKind device) {
  const char *prec = config_string(c, "precision");
  int p = amp_precision_parse(prec);
  if (p < 0) DIE("precision '%s' passed the config's choices", prec);
  if (p != PREC_FP32 && device == DEVICE_CPU)
    die_input("--precision", "'%s' needs a GPU; the CPU path computes in fp32", prec);
  AmpConfig a = {
      .precision = (Precision)p,
      .scale_init = (float)config_float(c, "loss_scale_init"),
      .growth_interval = config_int(c, "loss_scale_growth_interval"),
      .growth_factor = (float)config_float(c, "loss_scale_growth_factor"),
      .backoff = (float)config_float(c, "loss_scale_backoff"),
      .scale_min = (float)config_float(c, "loss_scale_min"),
      .linear_epilogues = config_bool(c, "linear_epilogues"),
  };
  // Each key's own range is its allowed values (config.c).
  if (!(a.scale_init >= a.scale_min))
    die_input("--loss_scale_init", "%g is below --loss_scale_min=%g", a.scale_init, a.scale_min);
  return a;
}

void amp_apply_math(const Device *dev, Precision p) {
  op_conv2d_set_tf32(dev, p == PREC_TF32);
  op_gemm_set_tf32(dev, p == PREC_TF32);
}

void amp_setup(const Config *c, const Device *dev, AmpConfig *cfg, LossScaler *s) {
  *cfg = amp_config_get(c, dev->kind);
  amp_apply_math(dev, cfg->precision);
  op_linear_set_epilogues(dev, cfg->linear_epilogues);
  amp_scaler_init(s, cfg, dev->kind);
}

void amp_report(const LossScaler *s, FILE *out, const char *who) {
  if (s->dynamic)
    fprintf(out, "%s: amp: %lld step(s) skipped for gradient overflow; final loss scale %g\n", who,
            (long long)s->skipped_steps, s->scale);
}

void amp_scaler_init(LossScaler *s, const AmpConfig *cfg, DeviceKind device) {
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  s->dynamic = cfg->precision == PREC_FP16;
  s->scale = s->dynamic ? cfg->scale_init : 1.0f;
  s->device = device;
  s->found_inf = device_alloc(device, sizeof(int));
  device_zero(device, s->found_inf, sizeof(int));
}

void amp_scaler_free(LossScaler *s) {
  device_free(s->device, s->found_inf);
  memset(s, 0, sizeof *s);
}

float amp_loss_scale(const LossScaler *s) { return s->scale; }

void amp_unscale(LossScaler *s, const Device *dev, float *grads, int64_t n, float extra_factor) {
  // Not dynamic: the same pass with a NULL flag only scales.
  int *flag = s->dynamic ? s->found_inf : NULL;
  float factor = extra_factor / s->scale;
  if (!s->dynamic && factor == 1.0f) return;
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) {
    amp_unscale_cuda(dev, grads, n, factor, flag);
    return;
  }
#endif
  amp_unscale_cpu(dev, grads, n, factor, flag);
}

void amp_unscale_cpu(const Device *dev, float *grads, int64_t n, float factor, int *found_inf) {
  (void)dev;
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    grads[i] *= factor;
    bad |= !isfinite(grads[i]);
  }
  if (found_inf && bad) *found_inf = 1;
}

static int take_flag(LossScaler *s, const Device *dev) {
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) return amp_take_flag_cuda(dev, s->found_inf);
#endif
  (void)dev;
  int v = *s->found_inf;
  *s->found_inf = 0;
  return v;
}

bool amp_update(LossScaler *s, const Device *dev) {
  if (!s->dynamic) return true;
  if (take_flag(s, dev)) {
    float old = s->scale;
    s->scale = fmaxf(s->scale * s->cfg.backoff, s->cfg.scale_min);
    s->good_steps = 0;
    s->skipped_steps++;
    if (check_rank() <= 0)
      fprintf(stderr, "amp: gradient overflow at loss scale %g: step skipped (%lld so far), scale now %g\n",
              old, (long long)s->skipped_steps, s->scale);
    return false;
  }
  if (++s->good_steps >= s->cfg.growth_interval) {
    s->scale *= s->cfg.growth_factor;
    s->good_steps = 0;
  }
  return true;
}

void amp_cast(const Device *dev, const float *src, void *dst, DType dtype, int64_t n) {
  if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16)
    DIE("amp_cast: to %s", dtype_name(dtype));
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) {
    amp_cast_cuda(dev, src, dst, dtype, n);
    return;
  }
#endif
  amp_cast_cpu(dev, src, dst, dtype, n);
}

void amp_cast_cpu(const Device *dev, const float *src, void *dst, DType dtype, int64_t n) {
  (void)dev;
  uint16_t *out = dst;
  switch (dtype) {
    case DT_F16:
      for (int64_t i = 0; i < n; i++) out[i] = f32_to_f16(src[i]);
      break;
    case DT_BF16:
      for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(src[i]);
      break;
    default: memmove(dst, src, (size_t)n * sizeof(float)); break;
  }
}

void amp_accumulate_grads(const Device *dev, const void *src, DType dtype, float *grads,
                          int64_t n) {
  if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16)
    DIE("amp_accumulate_grads: from %s", dtype_name(dtype));
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) {
    amp_accumulate_grads_cuda(dev, src, dtype, grads, n);
    return;
  }
#endif
  amp_accumulate_grads_cpu(dev, src, dtype, grads, n);
}

void amp_accumulate_grads_cpu(const Device *dev, const void *src, DType dtype, float *grads,
                              int64_t n) {
  (void)dev;
  for (int64_t i = 0; i < n; i++) grads[i] += dtype_load_f32(src, dtype, i);
}

Tensor amp_weight_view(const ParamSet *ps, void *lowp, DType dtype, int first, int i) {
  if (i < first) DIE("amp_weight_view: tensor %d is not in a copy from tensor %d on", i, first);
  Tensor t = paramset_param(ps, i);
  t.data = (uint8_t *)lowp + (size_t)(ps->offsets[i] - ps->offsets[first]) * dtype_size(dtype);
  t.dtype = dtype;
  return t;
}
