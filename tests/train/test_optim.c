// Optimizers: three steps of each kind against PyTorch (tests/golden/optim.gld,
// from gen_optim.py), hand-computed steps (weight-decay exclusions, AdamW
// without bias correction as Google's BERT optimizer, LARS and LAMB trust
// ratios), gradient clipping and accumulation helpers, bad hyperparameters,
// and the fused CUDA kernels against the CPU reference.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "tests/harness/test.h"
#include "train/optim.h"

// The golden model: "b" is a bias, excluded from decay and trust ratios.
static const ParamSpec kGoldenSpecs[] = {
    {"w", 2, {4, 6}, 0},
    {"b", 1, {6}, PARAM_NO_DECAY},
    {"e", 2, {10, 3}, 0},
};
#define N_GOLDEN 3

static Device cpu_device(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  return dev;
}

// Copies golden tensor `prefix.<name>` of every parameter into buf.
static void load_tensors(GoldenFile *g, const ParamSet *ps, float *buf, const char *prefix) {
  for (int t = 0; t < ps->count; t++) {
    char name[64];
    snprintf(name, sizeof name, "%s.%s", prefix, ps->specs[t].name);
    int64_t n = 0;
    float *x = golden_get(g, name, &n);
    REQUIRE(n == ps->numels[t]);
    memcpy(buf + ps->offsets[t], x, (size_t)n * sizeof(float));
  }
}

// Three steps of `cfg`; after each, every tensor matches PyTorch's within a
// relative L2 error of 2e-6: a few fp32 roundings per element and step (about
// 6e-8 each), plus the norms, which PyTorch sums in fp32 and this code in fp64.
static void golden_case(const char *name, OptConfig cfg, float lr_scale) {
  GoldenFile *g = golden_load("optim.gld");
  Device dev = cpu_device();
  ParamSet ps;
  paramset_init(&ps, kGoldenSpecs, N_GOLDEN, optim_state_count(cfg.kind), DEVICE_CPU);
  Optimizer opt;
  optim_init(&opt, &cfg, &ps);
  load_tensors(g, &ps, ps.params, "init");
  float *lr = golden_get(g, "lr", NULL);
  for (int k = 0; k < 3; k++) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "grad%d", k);
    load_tensors(g, &ps, ps.grads, prefix);
    optim_step(&opt, &dev, &ps, lr[k] * lr_scale);
    for (int t = 0; t < ps.count; t++) {
      char want[64];
      snprintf(want, sizeof want, "%s.step%d.%s", name, k, ps.specs[t].name);
      float *x = golden_get(g, want, NULL);
      double err = test_rel_error(ps.params + ps.offsets[t], x, ps.numels[t]);
      CHECK_MSG(err < 2e-6, "%s: relative error %g", want, err);
    }
  }
  CHECK_EQ_INT(opt.step, 3);
  optim_free(&opt);
  paramset_free(&ps);
  golden_free(g);
}

// The hyperparameters of each case in gen_optim.py's CASES.
#define GOLDEN_CASE(name, kind_, lr_scale, ...)                      \
  static void golden_##name(void) {                                  \
    OptConfig c = optim_defaults(kind_);                             \
    OptConfig set = {.kind = kind_, __VA_ARGS__};                    \
    c.weight_decay = set.weight_decay;                               \
    c.nesterov = set.nesterov;                                       \
    if (set.lars_eta > 0) c.lars_eta = set.lars_eta;                 \
    golden_case(#name, c, lr_scale);                                 \
  }
GOLDEN_CASE(sgd, OPT_SGD, 1.0f, .weight_decay = 0.01f)
GOLDEN_CASE(sgd_nesterov, OPT_SGD, 1.0f, .weight_decay = 0.01f, .nesterov = true)
GOLDEN_CASE(lars, OPT_LARS, 50.0f, .weight_decay = 0.05f, .lars_eta = 0.02f)  // LARS_LR_SCALE
GOLDEN_CASE(adam, OPT_ADAM, 1.0f, .weight_decay = 0.01f)
GOLDEN_CASE(adamw, OPT_ADAMW, 1.0f, .weight_decay = 0.05f)
GOLDEN_CASE(lamb, OPT_LAMB, 1.0f, .weight_decay = 0.01f)

// ---------------------------------------------------------- hand-computed

// Two tensors: "w" = {3, 4} (norm 5) and a bias "b" = {1, 1}.
static const ParamSpec kHandSpecs[] = {
    {"w", 1, {2}, 0},
    {"b", 1, {2}, PARAM_NO_DECAY},
};

typedef struct Hand {
  Device dev;
  ParamSet ps;
  Optimizer opt;
  float *w, *b, *gw, *gb;
} Hand;

static void hand_init(Hand *h, OptConfig cfg, const float w[2], const float gw[2]) {
  h->dev = cpu_device();
  paramset_init(&h->ps, kHandSpecs, 2, optim_state_count(cfg.kind), DEVICE_CPU);
  optim_init(&h->opt, &cfg, &h->ps);
  h->w = h->ps.params + h->ps.offsets[0];
  h->b = h->ps.params + h->ps.offsets[1];
  h->gw = h->ps.grads + h->ps.offsets[0];
  h->gb = h->ps.grads + h->ps.offsets[1];
  memcpy(h->w, w, 2 * sizeof(float));
  memcpy(h->gw, gw, 2 * sizeof(float));
  h->b[0] = h->b[1] = 1.0f;
  h->gb[0] = h->gb[1] = 1.0f;
}

static void hand_free(Hand *h) {
  optim_free(&h->opt);
  paramset_free(&h->ps);
}

// w = {1, -2}, g = {0.5, 0.5}, lr 0.1, momentum 0.9, wd 0.1, two steps:
//   g' = {0.6, 0.3}, buf = g', w = {0.94, -2.03}
//   g' = {0.594, 0.297}, buf = 0.9 {0.6, 0.3} + g' = {1.134, 0.567}, w = {0.8266, -2.0867}
// The bias (no decay): buf = 1, w = 0.9; buf = 1.9, w = 0.71.
static void hand_sgd_momentum(void) {
  OptConfig c = optim_defaults(OPT_SGD);
  c.weight_decay = 0.1f;
  Hand h;
  hand_init(&h, c, (float[]){1, -2}, (float[]){0.5f, 0.5f});
  optim_step(&h.opt, &h.dev, &h.ps, 0.1f);
  CHECK_NEAR(h.w[0], 0.94, 1e-6);
  CHECK_NEAR(h.w[1], -2.03, 1e-6);
  optim_step(&h.opt, &h.dev, &h.ps, 0.1f);
  CHECK_NEAR(h.w[0], 0.8266, 1e-6);
  CHECK_NEAR(h.w[1], -2.0867, 1e-6);
  CHECK_NEAR(h.b[0], 0.71, 1e-6);
  hand_free(&h);
}

// w = {3, 4}, g = {0.6, 0.8}: ||w|| = 5, ||g|| = 1; eta 0.01, wd 0.1, eps 0:
// ratio = 0.01 * 5 / (1 + 0.1 * 5) = 1/30. lr 0.5, no momentum:
// w -= 0.5 / 30 (g + 0.1 w) = {0.015, 0.02}. The bias takes the plain step
// w -= 0.5 g: no ratio, no decay.
static void hand_lars_trust_ratio(void) {
  OptConfig c = optim_defaults(OPT_LARS);
  c.momentum = 0;
  c.weight_decay = 0.1f;
  c.lars_eta = 0.01f;
  Hand h;
  hand_init(&h, c, (float[]){3, 4}, (float[]){0.6f, 0.8f});
  optim_step(&h.opt, &h.dev, &h.ps, 0.5f);
  CHECK_NEAR(h.w[0], 2.985, 1e-6);
  CHECK_NEAR(h.w[1], 3.98, 1e-6);
  CHECK_NEAR(h.b[0], 0.5, 1e-7);
  CHECK_NEAR(h.b[1], 0.5, 1e-7);
  hand_free(&h);
}

// Nesterov LARS with the same numbers and momentum 0.5: buf = step =
// {0.015, 0.02}, w -= momentum buf + step = 1.5 step.
static void hand_lars_nesterov(void) {
  OptConfig c = optim_defaults(OPT_LARS);
  c.momentum = 0.5f;
  c.nesterov = true;
  c.weight_decay = 0.1f;
  c.lars_eta = 0.01f;
  Hand h;
  hand_init(&h, c, (float[]){3, 4}, (float[]){0.6f, 0.8f});
  optim_step(&h.opt, &h.dev, &h.ps, 0.5f);
  CHECK_NEAR(h.w[0], 3 - 0.0225, 1e-6);
  CHECK_NEAR(h.w[1], 4 - 0.03, 1e-6);
  hand_free(&h);
}

// A zero tensor has no norm to trust: ratio 1, so w = -lr g.
static void hand_lars_zero_weight(void) {
  OptConfig c = optim_defaults(OPT_LARS);
  c.momentum = 0;
  c.weight_decay = 0.1f;
  Hand h;
  hand_init(&h, c, (float[]){0, 0}, (float[]){1, 2});
  optim_step(&h.opt, &h.dev, &h.ps, 0.5f);
  CHECK_NEAR(h.w[0], -0.5, 1e-7);
  CHECK_NEAR(h.w[1], -1.0, 1e-7);
  hand_free(&h);
}

// AdamW with zero gradients: m = v = 0, so only the decoupled decay moves
// the weights: w *= 1 - lr wd for "w", and the bias stays put.
static void hand_adamw_decay_exclusion(void) {
  OptConfig c = optim_defaults(OPT_ADAMW);
  c.weight_decay = 0.5f;
  Hand h;
  hand_init(&h, c, (float[]){3, 4}, (float[]){0, 0});
  h.gb[0] = h.gb[1] = 0;
  optim_step(&h.opt, &h.dev, &h.ps, 0.1f);
  CHECK_NEAR(h.w[0], 3 * 0.95, 1e-6);
  CHECK_NEAR(h.w[1], 4 * 0.95, 1e-6);
  CHECK(h.b[0] == 1.0f && h.b[1] == 1.0f);
  hand_free(&h);
}

// AdamW as Google's BERT AdamWeightDecayOptimizer: no bias correction
// (adam_bias_correction = false, read by optim_adam_config), the decay
// added to the update: w -= lr (m / (sqrt(v) + eps) + wd w). Two steps of
// g = {1, -1} on w = {3, 4}, lr 0.01, wd 0.1, betas (0.9, 0.999), eps 1e-6:
//   m1 = 0.1 g, v1 = 0.001:       u1 = 0.1 / (0.0316228 + 1e-6) = 3.16218 sign(g)
//   m2 = 0.19 g, v2 = 0.001999:   u2 = 0.19 / (0.0447102 + 1e-6) = 4.24950 sign(g)
// (with bias correction both would be about 1). The bias: g = 1, no decay.
static double google_adamw(double w, double g, double lr, double wd, int steps) {
  double m = 0, v = 0;
  for (int t = 0; t < steps; t++) {
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    w -= lr * (m / (sqrt(v) + 1e-6) + wd * w);
  }
  return w;
}

static void hand_adamw_without_bias_correction(void) {
  static const ConfigKey keys[] = {OPTIM_ADAM_KEYS("0.999", "1e-6")};
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, keys, (int)(sizeof keys / sizeof keys[0]));
  CHECK(optim_adam_config(&cfg, OPT_ADAMW).bias_correction);  // the default keeps it
  char err[256];
  REQUIRE(config_set(&cfg, "adam_bias_correction", "false", "test", err, sizeof err) == 0);
  OptConfig c = optim_adam_config(&cfg, OPT_ADAMW);
  config_free(&cfg);
  c.weight_decay = 0.1f;
  Hand h;
  hand_init(&h, c, (float[]){3, 4}, (float[]){1, -1});
  for (int k = 0; k < 2; k++) optim_step(&h.opt, &h.dev, &h.ps, 0.01f);
  CHECK_NEAR(google_adamw(3, 1, 0.01, 0.1, 1), 3 - 0.01 * (3.16218 + 0.3), 1e-6);  // the comment's u1
  CHECK_NEAR(h.w[0], google_adamw(3, 1, 0.01, 0.1, 2), 2e-6);
  CHECK_NEAR(h.w[1], google_adamw(4, -1, 0.01, 0.1, 2), 2e-6);
  CHECK_NEAR(h.b[0], google_adamw(1, 1, 0.01, 0, 2), 2e-6);
  hand_free(&h);
}

// LAMB's first step with bias correction: m^ = g, v^ = g^2, so
// u = g / (|g| + eps) = {1, -1} / (1 + eps); ratio ||w|| / ||u|| = 5 (1 + eps) / sqrt 2;
// w -= lr ratio u = lr 5 / sqrt 2 {1, -1}: eps cancels.
static void hand_lamb_trust_ratio(void) {
  OptConfig c = optim_defaults(OPT_LAMB);
  Hand h;
  hand_init(&h, c, (float[]){3, 4}, (float[]){1, -1});
  optim_step(&h.opt, &h.dev, &h.ps, 0.1f);
  double d = 0.1 * 5 / sqrt(2.0);
  CHECK_NEAR(h.w[0], 3 - d, 2e-6);
  CHECK_NEAR(h.w[1], 4 + d, 2e-6);
  // The bias: ratio 1, u = 1 / (1 + eps): w = 1 - 0.1 / (1 + 1e-6).
  CHECK_NEAR(h.b[0], 1 - 0.1 / (1 + 1e-6), 1e-7);
  hand_free(&h);
}

// Global norm of {3, 4, 1, 1}... with the bias grads zeroed: exactly 5.
static void clip_by_global_norm(void) {
  Hand h;
  hand_init(&h, optim_defaults(OPT_SGD), (float[]){0, 0}, (float[]){3, 4});
  h.gb[0] = h.gb[1] = 0;
  optim_clip_grads(&h.opt, &h.dev, &h.ps, 10.0f);
  CHECK_NEAR(optim_last_grad_norm(&h.opt), 5.0, 1e-6);
  CHECK(h.gw[0] == 3.0f && h.gw[1] == 4.0f);  // under the limit: untouched
  optim_clip_grads(&h.opt, &h.dev, &h.ps, 1.0f);
  CHECK_NEAR(h.gw[0], 0.6, 1e-6);
  CHECK_NEAR(h.gw[1], 0.8, 1e-6);
  hand_free(&h);
}

// Accumulating two micro-batches, then averaging, gives the mean gradient.
static void accumulate_micro_batches(void) {
  Hand h;
  hand_init(&h, optim_defaults(OPT_SGD), (float[]){0, 0}, (float[]){9, 9});
  optim_grads_zero(&h.dev, &h.ps);
  CHECK(h.gw[0] == 0 && h.gb[1] == 0);
  float micro[2][2] = {{1, 2}, {3, 6}};
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < 2; i++) h.gw[i] += micro[m][i];
  optim_grads_scale(&h.dev, &h.ps, 0.5f);
  CHECK_NEAR(h.gw[0], 2.0, 0);
  CHECK_NEAR(h.gw[1], 4.0, 0);
  hand_free(&h);
}

static void kinds_and_state(void) {
  CHECK_EQ_INT(optim_state_count(OPT_SGD), 1);
  CHECK_EQ_INT(optim_state_count(OPT_LARS), 1);
  CHECK_EQ_INT(optim_state_count(OPT_ADAM), 2);
  CHECK_EQ_INT(optim_state_count(OPT_LAMB), 2);
  CHECK_EQ_INT(optim_kind_parse("lamb"), OPT_LAMB);
  CHECK_EQ_INT(optim_kind_parse("adagrad"), -1);
  CHECK_STR(optim_kind_name(OPT_ADAMW), "adamw");
}

static void bad_beta(void *ctx) {
  (void)ctx;
  OptConfig c = optim_defaults(OPT_ADAM);
  c.beta2 = 1.5f;
  ParamSet ps;
  paramset_init(&ps, kHandSpecs, 2, 2, DEVICE_CPU);
  Optimizer opt;
  optim_init(&opt, &c, &ps);
}

static void bad_hyperparameter_dies(void) { CHECK_DIES_WITH(bad_beta, NULL, "adam: beta2 1.5"); }

// ------------------------------------------------------------- CUDA vs CPU

#if HAVE_CUDA
// Odd sizes: chunks that end mid-tensor, a one-element tensor, a tensor of
// exactly one chunk plus one.
static const ParamSpec kBigSpecs[] = {
    {"conv", 4, {7, 3, 3, 61}, 0},
    {"bn_gamma", 1, {61}, PARAM_NO_DECAY},
    {"fc", 2, {4097, 1}, 0},
    {"scalar", 1, {1}, PARAM_NO_DECAY},
    {"emb", 2, {333, 17}, 0},
};

// The padding of the flat buffers is zero (paramset_init) and every pass
// keeps it so; the CPU clip sums it, the CUDA chunks skip it. A fill over
// total_numel must leave it zero.
static void zero_padding(const ParamSet *ps, float *buf) {
  for (int t = 0; t < ps->count; t++) {
    int64_t end = t + 1 < ps->count ? ps->offsets[t + 1] : ps->total_numel;
    for (int64_t i = ps->offsets[t] + ps->numels[t]; i < end; i++) buf[i] = 0;
  }
}
#endif

static void cuda_case(OptKind kind, bool bias_correction) {
  if (!test_have_gpu()) test_skip("no GPU");
#if HAVE_CUDA
  OptConfig cfg = optim_defaults(kind);
  cfg.bias_correction = bias_correction;
  cfg.weight_decay = 0.01f;
  cfg.nesterov = kind == OPT_SGD;
  Device cpu = cpu_device(), gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  ParamSet a, b;
  int n_state = optim_state_count(kind);
  paramset_init(&a, kBigSpecs, 5, n_state, DEVICE_CPU);
  paramset_init(&b, kBigSpecs, 5, n_state, DEVICE_CUDA);
  Optimizer oa, ob;
  optim_init(&oa, &cfg, &a);
  optim_init(&ob, &cfg, &b);
  size_t bytes = (size_t)a.total_numel * sizeof(float);
  test_fill_uniform(a.params, a.total_numel, 1, -1, 1);
  zero_padding(&a, a.params);
  device_copy(DEVICE_CUDA, b.params, DEVICE_CPU, a.params, bytes);
  for (int k = 0; k < 3; k++) {
    test_fill_uniform(a.grads, a.total_numel, 10 + (uint64_t)k, -0.5f, 0.5f);
    zero_padding(&a, a.grads);
    device_copy(DEVICE_CUDA, b.grads, DEVICE_CPU, a.grads, bytes);
    float lr = kind == OPT_LARS ? 2.0f : 0.01f;
    optim_step(&oa, &cpu, &a, lr);
    optim_step(&ob, &gpu, &b, lr);
  }
  float *back = malloc(bytes);
  device_sync(&gpu);
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, b.params, bytes);
  // Same formulas (optim_math.h); the GPU differs by FMA contraction and the
  // order of the norm sums: 1e-5 relative leaves room for both over 3 steps.
  for (int t = 0; t < a.count; t++) {
    char what[128];
    snprintf(what, sizeof what, "%s step, tensor %s", optim_kind_name(kind), a.specs[t].name);
    test_check_error(what, "fp32", test_rel_error(back + a.offsets[t], a.params + a.offsets[t],
                                                  a.numels[t]), 1e-5);
  }
  free(back);
  optim_free(&oa);
  optim_free(&ob);
  paramset_free(&a);
  paramset_free(&b);
  device_close(&gpu);
#else
  (void)kind;
  (void)bias_correction;
#endif
}

static void cuda_sgd(void) { cuda_case(OPT_SGD, true); }
static void cuda_lars(void) { cuda_case(OPT_LARS, true); }
static void cuda_adam(void) { cuda_case(OPT_ADAM, true); }
static void cuda_adamw(void) { cuda_case(OPT_ADAMW, true); }
static void cuda_adamw_without_bias_correction(void) { cuda_case(OPT_ADAMW, false); }
static void cuda_lamb(void) { cuda_case(OPT_LAMB, true); }

static void cuda_clip_matches_cpu(void) {
  if (!test_have_gpu()) test_skip("no GPU");
#if HAVE_CUDA
  Device cpu = cpu_device(), gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  OptConfig cfg = optim_defaults(OPT_SGD);
  ParamSet a, b;
  paramset_init(&a, kBigSpecs, 5, 1, DEVICE_CPU);
  paramset_init(&b, kBigSpecs, 5, 1, DEVICE_CUDA);
  Optimizer oa, ob;
  optim_init(&oa, &cfg, &a);
  optim_init(&ob, &cfg, &b);
  size_t bytes = (size_t)a.total_numel * sizeof(float);
  test_fill_uniform(a.grads, a.total_numel, 3, -1, 1);
  zero_padding(&a, a.grads);
  device_copy(DEVICE_CUDA, b.grads, DEVICE_CPU, a.grads, bytes);
  optim_clip_grads(&oa, &cpu, &a, 2.0f);
  optim_clip_grads(&ob, &gpu, &b, 2.0f);
  CHECK_NEAR(optim_last_grad_norm(&ob), optim_last_grad_norm(&oa),
             1e-5 * optim_last_grad_norm(&oa));
  float *back = malloc(bytes);
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, b.grads, bytes);
  test_check_error("clip by global norm", "fp32", test_rel_error(back, a.grads, a.total_numel), 1e-5);
  free(back);
  optim_free(&oa);
  optim_free(&ob);
  paramset_free(&a);
  paramset_free(&b);
  device_close(&gpu);
#endif
}

int main(void) {
  TEST_RUN(golden_sgd);
  TEST_RUN(golden_sgd_nesterov);
  TEST_RUN(golden_lars);
  TEST_RUN(golden_adam);
  TEST_RUN(golden_adamw);
  TEST_RUN(golden_lamb);
  TEST_RUN(hand_sgd_momentum);
  TEST_RUN(hand_lars_trust_ratio);
  TEST_RUN(hand_lars_nesterov);
  TEST_RUN(hand_lars_zero_weight);
  TEST_RUN(hand_adamw_decay_exclusion);
  TEST_RUN(hand_adamw_without_bias_correction);
  TEST_RUN(hand_lamb_trust_ratio);
  TEST_RUN(clip_by_global_norm);
  TEST_RUN(accumulate_micro_batches);
  TEST_RUN(kinds_and_state);
  TEST_RUN(bad_hyperparameter_dies);
  TEST_RUN(cuda_sgd);
  TEST_RUN(cuda_lars);
  TEST_RUN(cuda_adam);
  TEST_RUN(cuda_adamw);
  TEST_RUN(cuda_adamw_without_bias_correction);
  TEST_RUN(cuda_lamb);
  TEST_RUN(cuda_clip_matches_cpu);
  return test_finish();
}
