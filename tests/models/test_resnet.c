// ResNet building blocks: parameter counts of the standard depths, the
// initialisation's statistics, the backward against finite differences for basic and bottleneck networks, the
// running statistics, and CUDA against CPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "models/resnet.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "tests/harness/test.h"
#include "tests/ops/ops_test_util.h"
#include "train/amp.h"
#include "train/optim.h"
#include "train/run.h"

static ResnetConfig tiny_config(ResnetBlockKind block, bool stem_7x7, const char *stages,
                                int image_size) {
  ResnetConfig c = resnet_config_50();
  c.block = block;
  c.stem_7x7 = stem_7x7;
  c.width = 4;
  c.image_size = image_size;
  c.num_classes = 5;
  c.zero_init_residual = false;  // zero gammas would hide the branch from the check
  REQUIRE(resnet_parse_stages(&c, stages));
  return c;
}

static void parameter_counts(void) {
  // torchvision's resnet18/34/50 have 11,689,512 / 21,797,672 / 25,557,032.
  struct { ResnetBlockKind block; const char *stages; int64_t want; } nets[] = {
      {RESNET_BASIC, "2,2,2,2", 11689512},
      {RESNET_BASIC, "3,4,6,3", 21797672},
      {RESNET_BOTTLENECK, "3,4,6,3", 25557032},
  };
  for (int i = 0; i < 3; i++) {
    ResnetConfig c = resnet_config_50();
    c.block = nets[i].block;
    c.image_size = 32;  // the count does not depend on it; keeps buffers small
    REQUIRE(resnet_parse_stages(&c, nets[i].stages));
    Resnet net;
    resnet_init(&net, &c, 1, 0, DEVICE_CPU, 1);
    CHECK_EQ_INT(paramset_count_params(&net.params), nets[i].want);
    resnet_free(&net);
  }
  ResnetConfig bad = resnet_config_50();
  CHECK(!resnet_parse_stages(&bad, "3,x"));
  CHECK(!resnet_parse_stages(&bad, "1,2,3,4,5"));
  CHECK(!resnet_parse_stages(&bad, ""));
}

// Every convolution's weights over the standard deviation conv_init asks
// of them, sqrt(scale / fan), pooled: mean, variance and largest magnitude
// of those z, and the gammas that start at 0.
typedef struct InitStats {
  double mean, var, max_abs;
  int64_t count, zero_gammas, gammas;
} InitStats;

static InitStats init_stats(ResnetConvInit init, bool zero_init_residual) {
  ResnetConfig c = resnet_config_50();
  c.image_size = 8;  // the statistics do not depend on it; keeps buffers small
  c.num_classes = 5;
  c.conv_init = init;
  c.zero_init_residual = zero_init_residual;
  REQUIRE(resnet_parse_stages(&c, "3,4"));
  Resnet net;
  resnet_init(&net, &c, 1, 0, DEVICE_CPU, 11);
  const ParamSet *ps = &net.params;
  InitStats st = {0};
  double sum = 0, sum2 = 0;
  for (int k = -1; k < net.n_blocks; k++) {
    ResnetBlock *b = k < 0 ? NULL : &net.blocks[k];
    int units = k < 0 ? 1 : b->n_conv + b->has_proj;
    for (int j = 0; j < units; j++) {
      const ResnetConvBn *u = k < 0 ? &net.stem : j < b->n_conv ? &b->conv[j] : &b->proj;
      double fan = (double)(init.fan_in ? u->in_c : u->out_c) * u->kernel * u->kernel;
      double std = sqrt(init.scale / fan);
      const float *w = ps->params + ps->offsets[u->w];
      for (int64_t i = 0; i < ps->numels[u->w]; i++) {
        double z = w[i] / std;
        sum += z;
        sum2 += z * z;
        st.max_abs = fmax(st.max_abs, fabs(z));
      }
      st.count += ps->numels[u->w];
      const float *gamma = ps->params + ps->offsets[u->gamma];
      for (int64_t i = 0; i < u->out_c; i++) st.zero_gammas += gamma[i] == 0.0f;
      st.gammas += u->out_c;
    }
  }
  st.mean = sum / st.count;
  st.var = sum2 / st.count - st.mean * st.mean;
  resnet_free(&net);
  return st;
}

// conv_init over the 1.4 million weights of ResNet-50's first two stages:
// the variance scale / fan (fan_in or fan_out as asked: their 1x1
// convolutions have in_c != out_c, which would be 4x off), mean 0, and the
// truncated normal's bound, 2 standard deviations of the normal before
// truncation, 2 / 0.8796 = 2.274 of the asked one. Tolerances: 4 standard
// errors of N draws, for the mean 4 / sqrt(N), for the variance 4
// sqrt(2 / N) (a normal's; a truncated one's is smaller).
static void conv_init_statistics(void) {
  double bound = 2.0 / resnet_truncated_normal_std(2.0);
  CHECK_NEAR(resnet_truncated_normal_std(2.0), 0.87962566103423978, 1e-12);  // scipy's truncnorm.std(-2, 2)
  InitStats ref = init_stats((ResnetConvInit){.scale = 1, .fan_in = true, .truncated = true}, false);
  double n = (double)ref.count;
  CHECK_MSG(n > 1e6, "%.0f weights", n);
  CHECK_NEAR(ref.mean, 0.0, 4 / sqrt(n));
  CHECK_NEAR(ref.var, 1.0, 4 * sqrt(2 / n));
  // Cut at the bound, and reaching close to it.
  CHECK_MSG(ref.max_abs <= bound * (1 + 1e-6) && ref.max_abs > 0.99 * bound,
            "largest |z| %.4f, bound %.4f", ref.max_abs, bound);
  CHECK_EQ_INT(ref.zero_gammas, 0);
  // torchvision's (the default): Kaiming normal over fan_out, untruncated.
  InitStats tv = init_stats(resnet_config_50().conv_init, true);
  CHECK_NEAR(tv.mean, 0.0, 4 / sqrt(n));
  CHECK_NEAR(tv.var, 1.0, 4 * sqrt(2 / n));
  CHECK_MSG(tv.max_abs > bound + 1, "largest |z| %.4f of a normal", tv.max_abs);
  // zero_init_residual: the last BN of each of the 7 blocks, its 256 or 512
  // channels (3 x 256 + 4 x 512).
  CHECK_EQ_INT(tv.zero_gammas, 3 * 256 + 4 * 512);
  CHECK(tv.gammas > tv.zero_gammas);
}

typedef struct GradCtx {
  Resnet *net;
  Device *dev;
  Tensor x;
  float *w;  // (n, classes) loss weights
} GradCtx;

// loss = sum(logits * w), in double.
static double weighted_logits(void *p) {
  GradCtx *g = p;
  const Tensor *logits = resnet_forward(g->net, g->dev, &g->x, true);
  const float *l = logits->data;
  double s = 0;
  for (int64_t i = 0; i < tensor_numel(logits); i++) s += (double)l[i] * g->w[i];
  return s;
}

// What the backward's GradHook heard: calls per tensor, and each gradient as
// it was when announced.
typedef struct ReadyLog {
  const ParamSet *ps;
  int *calls;
  float *snapshot;
} ReadyLog;

static void log_ready(void *ctx, int i) {
  ReadyLog *l = ctx;
  l->calls[i]++;
  memcpy(l->snapshot + l->ps->offsets[i], l->ps->grads + l->ps->offsets[i],
         (size_t)l->ps->numels[i] * sizeof(float));
}

static void check_gradients(ResnetConfig cfg, int64_t n, double tol) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  Resnet net;
  resnet_init(&net, &cfg, n, 0, DEVICE_CPU, 3);
  // Non-trivial BN parameters, so their gradients are not degenerate.
  ParamSet *ps = &net.params;
  for (int i = 0; i < ps->count; i++)
    if (ps->specs[i].ndim == 1)
      rng_fill_uniform_cpu(ps->params + ps->offsets[i], ps->numels[i], 11, (uint64_t)i, 0, 0.5f, 1.5f);
  int64_t s = cfg.image_size;
  float *x = malloc((size_t)(n * s * s * 3) * sizeof(float));
  float *w = malloc((size_t)(n * cfg.num_classes) * sizeof(float));
  test_fill_uniform(x, n * s * s * 3, 5, -1, 1);
  test_fill_uniform(w, n * cfg.num_classes, 6, -1, 1);
  GradCtx g = {&net, &dev, TENSOR(x, DT_F32, DEVICE_CPU, n, s, s, 3), w};

  weighted_logits(&g);
  Tensor dlogits = TENSOR(w, DT_F32, DEVICE_CPU, n, cfg.num_classes);
  memset(ps->grads, 0, (size_t)ps->total_numel * sizeof(float));
  ReadyLog log = {ps, calloc((size_t)ps->count, sizeof(int)), malloc((size_t)ps->total_numel * sizeof(float))};
  resnet_backward(&net, &dev, &dlogits, (GradHook){log_ready, &log});
  // The hook heard of every tensor exactly once, and each gradient was final
  // by then: nothing was added to it afterwards.
  int missed = 0, changed = 0;
  for (int i = 0; i < ps->count; i++) {
    missed += log.calls[i] != 1;
    changed += memcmp(log.snapshot + ps->offsets[i], ps->grads + ps->offsets[i],
                      (size_t)ps->numels[i] * sizeof(float)) != 0;
  }
  CHECK_MSG(missed == 0, "%d tensors not announced exactly once", missed);
  CHECK_MSG(changed == 0, "%d gradients changed after they were announced", changed);
  free(log.calls);
  free(log.snapshot);

  // Every parameter tensor, a few points each. The forward is fp32 and
  // piecewise smooth: a ReLU or max-pool kink inside +-eps spoils a
  // difference by O(eps / the gradient's scale), fp32 rounding by
  // O(1e-7 / eps). Measured on these nets: worst 5.6% at eps 1e-2, 0.8% at
  // 3e-3, 1.2% at 1e-3 (rounding); a wrong backward is off by O(1).
  double worst = 0;
  int worst_i = 0;
  for (int i = 0; i < ps->count; i++) {
    double e = test_gradcheck(weighted_logits, &g, ps->params + ps->offsets[i],
                              ps->grads + ps->offsets[i], ps->numels[i], 3e-3f, 4, 1e-2);
    if (!(e <= worst)) worst_i = i;  // NaN included
    worst = test_worst(worst, e);
  }
  CHECK_MSG(worst < tol, "worst relative gradient error %.3g in %s", worst, ps->specs[worst_i].name);
  free(x);
  free(w);
  resnet_free(&net);
  device_close(&dev);
}

static void basic_blocks_backward(void) {
  check_gradients(tiny_config(RESNET_BASIC, false, "1,1", 8), 2, 0.03);
}

static void bottleneck_stem_7x7_backward(void) {
  check_gradients(tiny_config(RESNET_BOTTLENECK, true, "1,1", 16), 2, 0.03);
}

// A backbone (num_classes 0, SSD's use) backward from the gradient of its
// output: the classifier network of the same seed (the same parameters, fc
// last) backward from dlogits, with that gradient worked out by hand through
// fc and the global average pool, must give the same parameter gradients.
static void backbone_backward_matches_classifier(void) {
  ResnetConfig cfg = tiny_config(RESNET_BASIC, false, "1,1", 8), bone_cfg = cfg;
  bone_cfg.num_classes = 0;
  const int64_t n = 2;
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  Resnet a, b;
  resnet_init(&a, &cfg, n, 0, DEVICE_CPU, 3);
  resnet_init(&b, &bone_cfg, n, 0, DEVICE_CPU, 3);
  REQUIRE(b.params.count == a.params.count - 2);
  float x[2 * 8 * 8 * 3], w[2 * 5];
  test_fill_uniform(x, 2 * 8 * 8 * 3, 5, -1, 1);
  test_fill_uniform(w, 2 * 5, 6, -1, 1);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, n, 8, 8, 3);
  resnet_forward(&a, &dev, &tx, true);
  const Tensor *out = resnet_forward(&b, &dev, &tx, true);
  int64_t c = b.out_channels, area = out->shape[1] * out->shape[2];
  REQUIRE(out->ndim == 4 && out->shape[3] == c);
  const float *fc = paramset_param(&a.params, a.fc_w).data;  // (5, c)
  float *dout = calloc((size_t)tensor_numel(out), sizeof(float));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      float d = 0;
      for (int k = 0; k < 5; k++) d += w[i * 5 + k] * fc[k * c + j];
      for (int64_t p = 0; p < area; p++) dout[(i * area + p) * c + j] = d / (float)area;
    }
  Tensor dlogits = TENSOR(w, DT_F32, DEVICE_CPU, n, 5), tdout = *out;
  tdout.data = dout;
  resnet_backward(&a, &dev, &dlogits, (GradHook){0});
  resnet_backward(&b, &dev, &tdout, (GradHook){0});
  for (int i = 0; i < b.params.count; i++) {
    double err = test_rel_error(b.params.grads + b.params.offsets[i],
                                a.params.grads + a.params.offsets[i], b.params.numels[i]);
    CHECK_MSG(err < 1e-4, "%s: relative error %.3g", b.specs[i].name, err);
  }
  free(dout);
  resnet_free(&a);
  resnet_free(&b);
  device_close(&dev);
}

static void running_statistics_and_eval(void) {
  ResnetConfig cfg = tiny_config(RESNET_BASIC, false, "1", 8);
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  Resnet net;
  resnet_init(&net, &cfg, 4, 0, DEVICE_CPU, 1);
  float x[4 * 8 * 8 * 3];
  test_fill_uniform(x, 4 * 8 * 8 * 3, 9, 2, 4);  // mean 3: the running mean must move
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 4, 8, 8, 3);
  const float *rm = net.stem.bn.running_mean.data;
  const float *rv = net.stem.bn.running_var.data;
  CHECK(rm[0] == 0 && rv[0] == 1);
  resnet_forward(&net, &dev, &tx, true);
  CHECK(rm[0] != 0 && rv[0] != 1);
  // Eval of a smaller batch is the same per image as eval of the whole one.
  float full[4 * 5], part[2 * 5];
  memcpy(full, resnet_forward(&net, &dev, &tx, false)->data, sizeof full);
  Tensor half = TENSOR(x, DT_F32, DEVICE_CPU, 2, 8, 8, 3);
  const Tensor *l = resnet_forward(&net, &dev, &half, false);
  CHECK_EQ_INT(l->shape[0], 2);
  memcpy(part, l->data, sizeof part);
  CHECK(test_rel_error(part, full, 10) < 1e-6);
  resnet_free(&net);
  device_close(&dev);
}

// Logits (n, 5) and parameter gradients of the network from seed 7 on
// input x, with w as the logits' gradient. With weights_dt not fp32, the CPU
// network's weights are first rounded to that dtype: the probe below.
typedef struct LowpRun {
  float logits[3 * 5];
  float *grads;  // (params.total_numel), malloc'd
  ParamSet *params;
} LowpRun;

static const int64_t kLowpBatch = 3;

static ResnetConfig lowp_config(void) {
  ResnetConfig cfg = tiny_config(RESNET_BOTTLENECK, true, "1,2", 32);
  // Width 8: every channel count but the 3-channel input is a multiple of 8,
  // as in ResNet-50 (cuDNN's fp16/bf16 NHWC kernels favour such counts).
  cfg.width = 8;
  return cfg;
}

static void run_cpu(Resnet *net, const float *x, const float *w, DType weights_dt, LowpRun *out) {
  Device cpu;
  device_open(&cpu, DEVICE_CPU, 0);
  ResnetConfig cfg = lowp_config();
  resnet_init(net, &cfg, kLowpBatch, 0, DEVICE_CPU, 7);
  round_all(weights_dt, net->params.params, net->params.total_numel);
  Tensor tx = TENSOR((float *)x, DT_F32, DEVICE_CPU, kLowpBatch, 32, 32, 3);
  memcpy(out->logits, resnet_forward(net, &cpu, &tx, true)->data, sizeof out->logits);
  Tensor tw = TENSOR((float *)w, DT_F32, DEVICE_CPU, kLowpBatch, 5);
  resnet_backward(net, &cpu, &tw, (GradHook){0});
  out->grads = net->params.grads;
  out->params = &net->params;
  device_close(&cpu);
}

// The same on the GPU in compute dtype dt; x is already representable in dt.
static void run_gpu(Resnet *net, const float *x, const float *w, DType dt, LowpRun *out) {
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  ResnetConfig cfg = lowp_config();
  cfg.dtype = dt;
  resnet_init(net, &cfg, kLowpBatch, 0, DEVICE_CUDA, 7);
  void *dx = upload(x, kLowpBatch * 32 * 32 * 3, dt);
  Tensor gx = TENSOR(dx, dt, DEVICE_CUDA, kLowpBatch, 32, 32, 3);
  const Tensor *logits = resnet_forward(net, &gpu, &gx, true);
  REQUIRE(logits->dtype == DT_F32);
  device_sync(&gpu);
  device_copy(DEVICE_CPU, out->logits, DEVICE_CUDA, logits->data, sizeof out->logits);
  void *dw = upload(w, kLowpBatch * 5, DT_F32);
  Tensor tw = TENSOR(dw, DT_F32, DEVICE_CUDA, kLowpBatch, 5);
  resnet_backward(net, &gpu, &tw, (GradHook){0});
  device_sync(&gpu);
  size_t gb = (size_t)net->params.total_numel * sizeof(float);
  out->grads = malloc(gb);
  device_copy(DEVICE_CPU, out->grads, DEVICE_CUDA, net->params.grads, gb);
  out->params = &net->params;
  device_free(DEVICE_CUDA, dx);
  device_free(DEVICE_CUDA, dw);
  device_close(&gpu);
}

static double grads_error(const LowpRun *got, const LowpRun *want) {
  return test_rel_error(got->grads, want->grads, want->params->total_numel);
}

// The GPU network in compute dtype dt against the fp32 CPU network from the
// same seed, on the same input (rounded to dt first, so that both see the
// same numbers): the training-mode logits and the parameter gradients, as
// relative L2 errors.
//
// The tolerance on the gradients is measured, not guessed. This small
// network's gradients are sensitive: a perturbation flips ReLU and
// max-pool decisions, so the error does not shrink in proportion to the
// rounding. The probe measures that sensitivity. It takes the fp32 CPU
// network with only its weights rounded to dt; under the CUDA emulation
// (tests/emu) that alone moves the gradients 0.059 (bf16) and 0.035 (fp16).
// The GPU network rounds activations and gradients too, and measured 0.083
// (1.4x the probe) and 0.040 (1.2x). It must stay within 2.5x the probe.
//
// Each tensor's gradient must also keep its direction and size, error below
// 0.6 (bf16) or 0.3 (fp16); the largest measured were 0.46 and 0.15. A
// tensor whose gradient is missing, zero, doubled or of the wrong sign
// scores 1 or more.
static void gpu_matches_cpu_in(DType dt, double logits_tol, double grads_tol,
                               double tensor_tol) {
  if (!test_have_gpu()) test_skip("no GPU");
  // The input rounded to dt, so that both sides see the same numbers.
  float *x = random_array(kLowpBatch * 32 * 32 * 3, 1, -1, 1, dt);
  float w[3 * 5];
  test_fill_uniform(w, 15, 2, -1, 1);

  Resnet ref_net, gpu_net;
  LowpRun ref, gpu;
  run_cpu(&ref_net, x, w, DT_F32, &ref);
  run_gpu(&gpu_net, x, w, dt, &gpu);
  test_check_error("resnet logits vs fp32 CPU", dtype_name(dt),
                   test_rel_error(gpu.logits, ref.logits, 15), logits_tol);
  double tol = grads_tol;
  if (dt != DT_F32) {
    Resnet probe_net;
    LowpRun probe;
    run_cpu(&probe_net, x, w, dt, &probe);
    double sensitivity = grads_error(&probe, &ref);
    printf("resnet %s: rounding only the weights moves the fp32 gradients %.3g\n",
           dtype_name(dt), sensitivity);
    tol = 2.5 * sensitivity;
    resnet_free(&probe_net);
  }
  test_check_error("resnet gradients vs fp32 CPU", dtype_name(dt), grads_error(&gpu, &ref), tol);
  const ParamSet *ps = ref.params;
  for (int i = 0; i < ps->count; i++) {
    double err = test_rel_error(gpu.grads + ps->offsets[i], ref.grads + ps->offsets[i],
                                ps->numels[i]);
    CHECK_MSG(err <= tensor_tol, "%s gradient (%s): relative error %.3g > %.3g",
              ps->specs[i].name, dtype_name(dt), err, tensor_tol);
  }
  free(gpu.grads);
  free(x);
  resnet_free(&ref_net);
  resnet_free(&gpu_net);
}

// fp32 on both sides (cuDNN may use TF32-free fp32 algorithms; op tests
// bound each op at ~1e-5); a dozen layers compound that to ~1e-4.
static void gpu_matches_cpu(void) { gpu_matches_cpu_in(DT_F32, 1e-3, 1e-3, 1e-2); }

// bf16 keeps 8 significant bits (2^-9 relative per rounding); fp16 11 bits.
// The logits: BN renormalises every layer, so a dozen roundings add to
// about 1e-2 (bf16) and 8x less (fp16). The gradients: see above.
static void gpu_bf16_matches_cpu_fp32(void) { gpu_matches_cpu_in(DT_BF16, 3e-2, 0, 0.6); }
static void gpu_fp16_matches_cpu_fp32(void) { gpu_matches_cpu_in(DT_F16, 5e-3, 0, 0.3); }

// A training step on the GPU, as image_classification/train.c takes it:
// input bytes to the compute dtype, forward, loss, backward, then unscaling
// with the overflow check and the fused LARS step (run_update). After a
// first step (cuDNN's algorithm search, which waits for the device), a step
// queues all its work on the compute stream, allocates nothing and never
// makes the host wait, so that the host runs ahead of the GPU: no wait in
// bf16, one in fp16, where the loss scaler reads its overflow flag to decide
// whether the step counts (amp.h). Only the CUDA emulation counts waits;
// elsewhere the case skips.
static void gpu_step_waits_in(DType dt, long waits) {
  if (!test_have_gpu()) test_skip("no GPU");
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  ResnetConfig cfg = lowp_config();
  cfg.dtype = dt;
  Resnet net;
  OptConfig oc = optim_defaults(OPT_LARS);
  resnet_init(&net, &cfg, kLowpBatch, optim_state_count(OPT_LARS), DEVICE_CUDA, 7);
  Optimizer opt;
  optim_init(&opt, &oc, &net.params);
  AmpConfig ac = {.precision = dt == DT_F16 ? PREC_FP16 : PREC_BF16, .scale_init = 1024,
                  .growth_interval = 1000, .growth_factor = 2, .backoff = 0.5f, .scale_min = 1};
  LossScaler scaler;
  amp_scaler_init(&scaler, &ac, DEVICE_CUDA);
  Dist one = {.rank = 0, .size = 1};
  int64_t pixels = kLowpBatch * 32 * 32 * 3;
  uint8_t *bytes_host = malloc((size_t)pixels);
  for (int64_t i = 0; i < pixels; i++) bytes_host[i] = (uint8_t)(i * 37 % 251);
  const int32_t labels_host[3] = {0, 3, 4};  // kLowpBatch of them
  uint8_t *bytes = device_upload(DEVICE_CUDA, bytes_host, (size_t)pixels);
  int32_t *labels = device_upload(DEVICE_CUDA, labels_host, sizeof labels_host);
  void *images = device_alloc(DEVICE_CUDA, (size_t)pixels * dtype_size(dt));
  float *loss = device_alloc(DEVICE_CUDA, sizeof(float));
  float *dlogits = device_alloc(DEVICE_CUDA, kLowpBatch * 5 * sizeof(float));
  Tensor tb = TENSOR(bytes, DT_U8, DEVICE_CUDA, kLowpBatch, 32, 32, 3);
  Tensor tx = TENSOR(images, dt, DEVICE_CUDA, kLowpBatch, 32, 32, 3);
  Tensor ty = TENSOR(labels, DT_I32, DEVICE_CUDA, kLowpBatch);
  Tensor tl = TENSOR(loss, DT_F32, DEVICE_CUDA, 1);
  Tensor td = TENSOR(dlogits, DT_F32, DEVICE_CUDA, kLowpBatch, 5);
  const ChannelAffine norm = {{1 / 58.0f, 1 / 57.0f, 1 / 57.5f}, {-2.1f, -2.0f, -1.8f}};
  EmuActivity counts = {0};
  bool counting = false;
  for (int step = 0; step < 3; step++) {
    if (step == 2) counting = test_device_watch_begin(&gpu);
    optim_grads_zero(&gpu, &net.params);
    op_affine_u8(&gpu, &tb, &norm, &tx);
    const Tensor *logits = resnet_forward(&net, &gpu, &tx, true);
    op_softmax_xent(&gpu, logits, &ty, 0.1f, -1, amp_loss_scale(&scaler), &tl, NULL, &td);
    resnet_backward(&net, &gpu, &td, (GradHook){0});
    run_update(&gpu, &one, &scaler, &opt, &net.params, 0.1f);
    if (counting) counts = test_device_watch_end();
  }
  device_sync(&gpu);
  float final_loss;
  device_copy(DEVICE_CPU, &final_loss, DEVICE_CUDA, loss, sizeof final_loss);
  CHECK_MSG(isfinite(final_loss), "%s: loss %g after 3 steps", dtype_name(dt), final_loss);
  void *owned[] = {bytes, labels, images, loss, dlogits};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) device_free(DEVICE_CUDA, owned[i]);
  free(bytes_host);
  amp_scaler_free(&scaler);
  optim_free(&opt);
  resnet_free(&net);
  device_close(&gpu);
  char what[32];
  snprintf(what, sizeof what, "%s step", dtype_name(dt));
  test_check_device_activity(what, counting ? &counts : NULL, waits);
}

static void gpu_bf16_step_never_waits(void) { gpu_step_waits_in(DT_BF16, 0); }
static void gpu_fp16_step_waits_once_for_overflow(void) { gpu_step_waits_in(DT_F16, 1); }

// fp16/bf16 are CUDA-only; asking for them on the CPU is refused, by name.
static void lowp_on_cpu_dies(void *ctx) {
  (void)ctx;
  ResnetConfig cfg = tiny_config(RESNET_BASIC, false, "1", 8);
  cfg.dtype = DT_BF16;
  Resnet net;
  resnet_init(&net, &cfg, 2, 0, DEVICE_CPU, 1);
}

static void wrong_input_dtype_dies(void *ctx) {
  (void)ctx;
  ResnetConfig cfg = tiny_config(RESNET_BASIC, false, "1", 8);
  Resnet net;
  resnet_init(&net, &cfg, 2, 0, DEVICE_CPU, 1);
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  uint16_t x[2 * 8 * 8 * 3] = {0};
  Tensor tx = TENSOR(x, DT_BF16, DEVICE_CPU, 2, 8, 8, 3);
  resnet_forward(&net, &dev, &tx, true);
}

static void precision_misuse_dies(void) {
  CHECK_DIES_WITH(lowp_on_cpu_dies, NULL, "bf16 compute needs a CUDA device");
  CHECK_DIES_WITH(wrong_input_dtype_dies, NULL, "input is bf16, the network computes in fp32");
}

int main(void) {
  TEST_RUN(parameter_counts);
  TEST_RUN(conv_init_statistics);
  TEST_RUN(basic_blocks_backward);
  TEST_RUN(bottleneck_stem_7x7_backward);
  TEST_RUN(backbone_backward_matches_classifier);
  TEST_RUN(running_statistics_and_eval);
  TEST_RUN(precision_misuse_dies);
  TEST_RUN(gpu_matches_cpu);
  TEST_RUN(gpu_bf16_matches_cpu_fp32);
  TEST_RUN(gpu_fp16_matches_cpu_fp32);
  TEST_RUN(gpu_bf16_step_never_waits);
  TEST_RUN(gpu_fp16_step_waits_once_for_overflow);
  return test_finish();
}
