// Mixed precision: the dynamic loss scaler (an inf or nan gradient skips the
// step, halves the scale and leaves the weights alone; the scale grows after
// the interval; the floor holds), bf16 without scaling, the config keys, the
// casts, and the CUDA passes against the CPU ones.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/test.h"
#include "train/amp.h"
#include "train/optim.h"

static const ParamSpec kSpecs[] = {{"w", 1, {5}, 0}};

static AmpConfig fp16_config(void) {
  return (AmpConfig){.precision = PREC_FP16, .scale_init = 1024, .growth_interval = 3,
                     .growth_factor = 2, .backoff = 0.5f, .scale_min = 1};
}

typedef struct Rig {
  Device dev;
  ParamSet ps;
  Optimizer opt;
  LossScaler sc;
} Rig;

static void rig_init(Rig *r, AmpConfig cfg) {
  device_open(&r->dev, DEVICE_CPU, 0);
  paramset_init(&r->ps, kSpecs, 1, 1, DEVICE_CPU);
  OptConfig oc = optim_defaults(OPT_SGD);
  oc.momentum = 0;
  optim_init(&r->opt, &oc, &r->ps);
  amp_scaler_init(&r->sc, &cfg, DEVICE_CPU);
  for (int i = 0; i < 5; i++) r->ps.params[i] = (float)i;
}

static void rig_free(Rig *r) {
  amp_scaler_free(&r->sc);
  optim_free(&r->opt);
  paramset_free(&r->ps);
}

// A backward pass of loss * scale with true gradient 1 everywhere, plus an
// optional poisoned element; then unscale, update, and step when allowed.
static bool rig_step(Rig *r, float poison) {
  for (int i = 0; i < 5; i++) r->ps.grads[i] = 1.0f * amp_loss_scale(&r->sc);
  if (poison != 0) r->ps.grads[3] = poison;
  amp_unscale(&r->sc, &r->dev, r->ps.grads, r->ps.total_numel, 1.0f);
  bool ok = amp_update(&r->sc, &r->dev);
  if (ok) optim_step(&r->opt, &r->dev, &r->ps, 0.5f);
  return ok;
}

static void overflow_skips_step(void) {
  Rig r;
  rig_init(&r, fp16_config());
  CHECK(!rig_step(&r, INFINITY));
  for (int i = 0; i < 5; i++) CHECK(r.ps.params[i] == (float)i);  // untouched
  CHECK(amp_loss_scale(&r.sc) == 512.0f);
  CHECK_EQ_INT(r.sc.skipped_steps, 1);
  CHECK_EQ_INT(r.opt.step, 0);
  CHECK(!rig_step(&r, NAN));
  CHECK(amp_loss_scale(&r.sc) == 256.0f);
  CHECK_EQ_INT(r.sc.skipped_steps, 2);
  // A clean step: the unscaled gradient is exactly 1, so w -= 0.5.
  CHECK(rig_step(&r, 0));
  for (int i = 0; i < 5; i++) CHECK_NEAR(r.ps.params[i], i - 0.5, 0);
  CHECK_EQ_INT(r.opt.step, 1);
  rig_free(&r);
}

static void scale_grows_after_interval(void) {
  Rig r;
  rig_init(&r, fp16_config());
  CHECK(rig_step(&r, 0) && rig_step(&r, 0));
  CHECK(amp_loss_scale(&r.sc) == 1024.0f);
  CHECK(rig_step(&r, 0));  // the third clean step in a row
  CHECK(amp_loss_scale(&r.sc) == 2048.0f);
  CHECK_EQ_INT(r.sc.good_steps, 0);
  // An overflow restarts the count: two clean steps after it do not grow.
  CHECK(rig_step(&r, 0) && rig_step(&r, 0));
  CHECK(!rig_step(&r, -INFINITY));
  CHECK(rig_step(&r, 0) && rig_step(&r, 0));
  CHECK(amp_loss_scale(&r.sc) == 1024.0f);
  CHECK(rig_step(&r, 0));
  CHECK(amp_loss_scale(&r.sc) == 2048.0f);
  rig_free(&r);
}

static void scale_floor_holds(void) {
  AmpConfig cfg = fp16_config();
  cfg.scale_init = 8;
  cfg.scale_min = 4;
  Rig r;
  rig_init(&r, cfg);
  CHECK(!rig_step(&r, INFINITY));
  CHECK(!rig_step(&r, INFINITY));
  CHECK(amp_loss_scale(&r.sc) == 4.0f);
  CHECK_EQ_INT(r.sc.skipped_steps, 2);
  rig_free(&r);
}

// bf16 has fp32's range: scale 1, no check, every step taken.
static void bf16_runs_unscaled(void) {
  AmpConfig cfg = fp16_config();
  cfg.precision = PREC_BF16;
  Rig r;
  rig_init(&r, cfg);
  CHECK(!r.sc.dynamic);
  CHECK(amp_loss_scale(&r.sc) == 1.0f);
  CHECK(rig_step(&r, 0));
  // extra_factor still applies (micro-batch averaging).
  r.ps.grads[0] = 6;
  amp_unscale(&r.sc, &r.dev, r.ps.grads, 1, 1.0f / 3);
  CHECK_NEAR(r.ps.grads[0], 2.0, 1e-6);
  rig_free(&r);
}

// 1/scale and the micro-batch factor in one pass.
static void unscale_folds_extra_factor(void) {
  Rig r;
  rig_init(&r, fp16_config());
  for (int i = 0; i < 5; i++) r.ps.grads[i] = 2048.0f * (float)i;
  amp_unscale(&r.sc, &r.dev, r.ps.grads, 5, 0.25f);
  for (int i = 0; i < 5; i++) CHECK_NEAR(r.ps.grads[i], 0.5 * i, 0);
  CHECK(amp_update(&r.sc, &r.dev));
  rig_free(&r);
}

static void precision_names(void) {
  CHECK_EQ_INT(amp_precision_parse("bf16"), PREC_BF16);
  CHECK_EQ_INT(amp_precision_parse("fp64"), -1);
  CHECK_STR(amp_precision_name(PREC_TF32), "tf32");
  CHECK_EQ_INT(amp_compute_dtype(PREC_FP16), DT_F16);
  CHECK_EQ_INT(amp_compute_dtype(PREC_TF32), DT_F32);
}

static void config_with(Config *c, const char *key, const char *value) {
  config_init(c);
  config_add_keys(c, amp_config_keys, amp_config_key_count);
  char err[256];
  if (key && config_set(c, key, value, "flag", err, sizeof err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
}

static void config_keys(void) {
  Config c;
  config_with(&c, "loss_scale_init", "128");
  AmpConfig a = amp_config_get(&c, DEVICE_CPU);
  CHECK_EQ_INT(a.precision, PREC_FP32);
  CHECK(a.scale_init == 128.0f && a.backoff == 0.5f && a.growth_interval == 2000);
  config_free(&c);
}

// A flag as a user gives it: the config refuses values outside a key's range.
static void die_on_flag(void *ctx) {
  Config c;
  config_init(&c);
  config_add_keys(&c, amp_config_keys, amp_config_key_count);
  char *argv[] = {"prog", ctx};
  config_from_args(&c, 2, argv, "prog");
  amp_config_get(&c, DEVICE_CUDA);
}

static void die_fp16_on_cpu(void *ctx) {
  (void)ctx;
  Config c;
  config_with(&c, "precision", "fp16");
  amp_config_get(&c, DEVICE_CPU);
}

static void bad_config_dies(void) {
  CHECK_DIES_WITH(die_on_flag, "--precision=fp8", "error: --precision: 'fp8' is not one of fp32|tf32|fp16|bf16");
  CHECK_DIES_WITH(die_fp16_on_cpu, NULL, "error: --precision: 'fp16' needs a GPU");
  CHECK_DIES_WITH(die_on_flag, "--loss_scale_backoff=2", "error: --loss_scale_backoff: 2 is outside (0, 1)");
  CHECK_DIES_WITH(die_on_flag, "--loss_scale_growth_factor=1", "error: --loss_scale_growth_factor: 1 is outside (1, inf)");
  CHECK_DIES_WITH(die_on_flag, "--loss_scale_min=0", "error: --loss_scale_min: 0 is outside (0, inf)");
  CHECK_DIES_WITH(die_on_flag, "--loss_scale_min=100000", "error: --loss_scale_init: 65536 is below --loss_scale_min=100000");
}

// Known encodings: 1 -> 0x3c00 / 0x3f80, fp16's largest 65504 -> 0x7bff,
// beyond it inf; 1 + 2^-11 is a tie in fp16 and rounds to even (1.0).
static void cast_known_values(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  float src[4] = {1.0f, 65504.0f, 1e6f, 1.0f + 1.0f / 2048};
  uint16_t h[4], b[4];
  amp_cast(&dev, src, h, DT_F16, 4);
  amp_cast(&dev, src, b, DT_BF16, 4);
  CHECK_EQ_INT(h[0], 0x3c00);
  CHECK_EQ_INT(h[1], 0x7bff);
  CHECK_EQ_INT(h[2], 0x7c00);
  CHECK_EQ_INT(h[3], 0x3c00);
  CHECK_EQ_INT(b[0], 0x3f80);
  CHECK_EQ_INT(b[2], 0x4974);  // 1e6 = 0x49742400 rounds down
}

// The low-precision copy of a whole ParamSet or of its tail, and their
// per-tensor views.
static void weight_copy_views(void) {
  static const ParamSpec specs[] = {{"a", 1, {3}, 0}, {"b", 2, {2, 2}, 0}};
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  ParamSet ps;
  paramset_init(&ps, specs, 2, 0, DEVICE_CPU);
  for (int i = 0; i < 4; i++) ps.params[ps.offsets[1] + i] = 0.5f * (float)(i + 1);
  uint16_t *lowp = malloc((size_t)ps.total_numel * 2);
  amp_cast(&dev, ps.params, lowp, DT_BF16, ps.total_numel);
  Tensor b = amp_weight_view(&ps, lowp, DT_BF16, 0, 1);
  CHECK_EQ_INT(b.dtype, DT_BF16);
  CHECK_EQ_INT(b.ndim, 2);
  CHECK_EQ_INT(b.shape[1], 2);
  CHECK(bf16_to_f32(((uint16_t *)b.data)[3]) == 2.0f);
  // A copy of tensor 1 on only (the layout NCF uses for its linear layers).
  uint16_t *tail = malloc((size_t)(ps.total_numel - ps.offsets[1]) * 2);
  amp_cast(&dev, ps.params + ps.offsets[1], tail, DT_BF16, ps.total_numel - ps.offsets[1]);
  Tensor bt = amp_weight_view(&ps, tail, DT_BF16, 1, 1);
  CHECK(bt.data == (void *)tail);
  CHECK(bf16_to_f32(((uint16_t *)bt.data)[3]) == 2.0f);
  free(tail);
  free(lowp);
  paramset_free(&ps);
}

// fp32 gradients += a low-precision buffer, exactly (every fp16 and bf16
// value is an fp32 value; the sums below are exact in fp32).
static void accumulate_grads_adds_exactly(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  float grads[4] = {1.0f, -2.0f, 0.25f, 0.0f};
  uint16_t b[4] = {f32_to_bf16(0.5f), f32_to_bf16(-0.75f), 0, f32_to_bf16(3.0f)};
  amp_accumulate_grads(&dev, b, DT_BF16, grads, 4);
  CHECK(grads[0] == 1.5f && grads[1] == -2.75f && grads[2] == 0.25f && grads[3] == 3.0f);
  uint16_t h[2] = {f32_to_f16(-1.5f), f32_to_f16(65504.0f)};
  amp_accumulate_grads(&dev, h, DT_F16, grads, 2);
  CHECK(grads[0] == 0.0f && grads[1] == 65501.25f);
  float f[1] = {0.125f};
  amp_accumulate_grads(&dev, f, DT_F32, grads + 2, 1);
  CHECK(grads[2] == 0.375f);
  device_close(&dev);
}

static void cuda_matches_cpu(void) {
  if (!test_have_gpu()) test_skip("no GPU");
#if HAVE_CUDA
  enum { N = 100003 };
  Device cpu, gpu;
  device_open(&cpu, DEVICE_CPU, 0);
  device_open(&gpu, DEVICE_CUDA, 0);
  AmpConfig cfg = fp16_config();
  LossScaler sc;
  amp_scaler_init(&sc, &cfg, DEVICE_CUDA);
  float *x = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  uint16_t *h = malloc(N * 2), *hg = malloc(N * 2);
  test_fill_uniform(x, N, 5, -70000, 70000);  // beyond fp16's range too
  // Rounding edges the random values hardly meet: fp16's overflow tie and
  // its largest finite value, subnormal halves and their ties (2^-25 -> 0,
  // 1.5 2^-24 -> 2^-23), ties to even in fp16 and bf16, -0, an fp32 subnormal.
  const float edges[] = {65520.0f, 65519.0f, 5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f,
                         6.0975552e-5f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                         1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1e-40f, -3.0e38f};
  memcpy(x, edges, sizeof edges);
  float *d = device_alloc(DEVICE_CUDA, N * sizeof(float));
  void *dh = device_alloc(DEVICE_CUDA, N * 2);
  DType types[2] = {DT_F16, DT_BF16};
  for (int k = 0; k < 2; k++) {
    device_copy(DEVICE_CUDA, d, DEVICE_CPU, x, N * sizeof(float));
    amp_cast(&cpu, x, h, types[k], N);
    amp_cast(&gpu, d, dh, types[k], N);
    device_sync(&gpu);
    device_copy(DEVICE_CPU, hg, DEVICE_CUDA, dh, N * 2);
    for (int i = 0; i < N; i++)
      if (h[i] != hg[i]) {
        CHECK_MSG(false, "%s cast of element %d (%.9g): GPU %04x, CPU %04x", dtype_name(types[k]),
                  i, x[i], hg[i], h[i]);
        break;
      }
    // NaNs keep their CPU encodings: the sign, and in bf16 the payload.
    const uint32_t nan_bits[3] = {0x7fc00000u, 0xff800001u, 0x7fa5a5a5u};
    float nans[3];
    uint16_t hn[3], hgn[3];
    memcpy(nans, nan_bits, sizeof nans);
    device_copy(DEVICE_CUDA, d, DEVICE_CPU, nans, sizeof nans);
    amp_cast(&cpu, nans, hn, types[k], 3);
    amp_cast(&gpu, d, dh, types[k], 3);
    device_sync(&gpu);
    device_copy(DEVICE_CPU, hgn, DEVICE_CUDA, dh, sizeof hgn);
    CHECK_MSG(memcmp(hn, hgn, sizeof hn) == 0, "%s NaN casts: GPU %04x %04x %04x, CPU %04x %04x %04x",
              dtype_name(types[k]), hgn[0], hgn[1], hgn[2], hn[0], hn[1], hn[2]);
  }
  // Accumulation: the same IEEE fp32 additions on both sides, bit for bit.
  for (int k = 0; k < 2; k++) {
    amp_cast(&cpu, x, h, types[k], N);
    device_copy(DEVICE_CUDA, dh, DEVICE_CPU, h, N * 2);
    device_copy(DEVICE_CUDA, d, DEVICE_CPU, x, N * sizeof(float));
    memcpy(back, x, N * sizeof(float));
    amp_accumulate_grads(&cpu, h, types[k], back, N);
    amp_accumulate_grads(&gpu, dh, types[k], d, N);
    device_sync(&gpu);
    float *gsum = malloc(N * sizeof(float));
    device_copy(DEVICE_CPU, gsum, DEVICE_CUDA, d, N * sizeof(float));
    CHECK_MSG(memcmp(gsum, back, N * sizeof(float)) == 0, "%s accumulation differs",
              dtype_name(types[k]));
    free(gsum);
  }
  device_copy(DEVICE_CUDA, d, DEVICE_CPU, x, N * sizeof(float));
  // Clean gradients: exact scaling by a power of two, no flag.
  amp_unscale(&sc, &gpu, d, N, 1.0f);
  CHECK(amp_update(&sc, &gpu));
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, d, N * sizeof(float));
  for (int i = 0; i < N; i++)
    if (back[i] != x[i] / 1024.0f) {
      CHECK_MSG(false, "element %d: %g != %g", i, back[i], x[i] / 1024.0f);
      break;
    }
  // The last element poisoned: the flag must be seen.
  float inf = INFINITY;
  device_copy(DEVICE_CUDA, d + N - 1, DEVICE_CPU, &inf, sizeof inf);
  amp_unscale(&sc, &gpu, d, N, 1.0f);
  CHECK(!amp_update(&sc, &gpu));
  CHECK(amp_loss_scale(&sc) == 512.0f);
  device_free(DEVICE_CUDA, d);
  device_free(DEVICE_CUDA, dh);
  free(x);
  free(back);
  free(h);
  free(hg);
  amp_scaler_free(&sc);
  device_close(&gpu);
#endif
}

int main(void) {
  TEST_RUN(overflow_skips_step);
  TEST_RUN(scale_grows_after_interval);
  TEST_RUN(scale_floor_holds);
  TEST_RUN(bf16_runs_unscaled);
  TEST_RUN(unscale_folds_extra_factor);
  TEST_RUN(precision_names);
  TEST_RUN(config_keys);
  TEST_RUN(bad_config_dies);
  TEST_RUN(cast_known_values);
  TEST_RUN(weight_copy_views);
  TEST_RUN(accumulate_grads_adds_exactly);
  TEST_RUN(cuda_matches_cpu);
  return test_finish();
}
