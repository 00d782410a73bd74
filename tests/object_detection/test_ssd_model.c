// The SSD network (object_detection/ssd_model.c): SSD300's shapes and
// parameter count, the map sizes against a default-box config, the order in
// which the heads' outputs land (ssd_boxes.h's box order), the backward of a
// small network against finite differences, and CUDA against CPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "object_detection/ssd_model.h"
#include "tests/harness/test.h"
#include "tests/ops/ops_test_util.h"

static const Device CPU = {.kind = DEVICE_CPU};

// ---------------------------------------------------------------- SSD300
static void ssd300_shapes_and_parameters(void) {
  SsdModelConfig cfg = ssd_model_config_300(81);
  int sizes[SSD_MAX_MAPS];
  CHECK_EQ_INT(ssd_model_map_sizes(&cfg, sizes), 6);
  const int want[6] = {38, 19, 10, 5, 3, 1};
  for (int k = 0; k < 6; k++) CHECK_EQ_INT(sizes[k], want[k]);
  ssd_model_check_boxes(&cfg, &kSsd300Boxes);  // dies on a mismatch
  SsdModel m;
  ssd_model_init(&m, &cfg, 1, 0, DEVICE_CPU, 1);
  CHECK_EQ_INT(m.n_boxes, 8732);
  // torchvision's ResNet-34 to layer3 (its 21,797,672 less layer4 and fc):
  // 8,170,304; the extras 3,574,400; the heads 8,227,830 (81 classes). The
  // reference's SSD300 has the same 19,972,534.
  CHECK_EQ_INT(paramset_count_params(&m.params), 19972534);
  CHECK_EQ_INT(m.first_own, m.backbone.n_params);
  CHECK(paramset_find(&m.params, "head5.conf.bias") == m.params.count - 1);
  CHECK((m.params.specs[paramset_find(&m.params, "extra0.a.bias")].flags & PARAM_NO_DECAY) != 0);
  CHECK(m.params.specs[paramset_find(&m.params, "extra0.a.weight")].flags == 0);
  float *x = calloc(300 * 300 * 3, sizeof(float));
  test_fill_uniform(x, 300 * 300 * 3, 1, -1, 1);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 1, 300, 300, 3);
  const Tensor *loc, *logits;
  ssd_model_forward(&m, &CPU, &tx, false, &loc, &logits);
  CHECK(loc->ndim == 3 && loc->shape[0] == 1 && loc->shape[1] == 8732 && loc->shape[2] == 4);
  CHECK(logits->ndim == 3 && logits->shape[1] == 8732 && logits->shape[2] == 81);
  CHECK(isfinite(((float *)logits->data)[8731 * 81 + 80]));
  free(x);
  ssd_model_free(&m);
}

static void wrong_map_size_dies(void *ctx) {
  (void)ctx;
  SsdModelConfig cfg = ssd_model_config_300(81);
  cfg.backbone.stage_stride[2] = 2;  // layer3 at stride 2: 19, 10, 5, 3, 1, then empty
  ssd_model_check_boxes(&cfg, &kSsd300Boxes);
}

static void wrong_box_count_dies(void *ctx) {
  (void)ctx;
  SsdModelConfig cfg = ssd_model_config_300(81);
  cfg.boxes[1] = 4;
  ssd_model_check_boxes(&cfg, &kSsd300Boxes);
}

static void wrong_last_map_dies(void *ctx) {
  (void)ctx;
  SsdModelConfig cfg = ssd_model_config_300(81);
  cfg.extra_pad[4] = 1;  // 3 -> 3
  ssd_model_check_boxes(&cfg, &kSsd300Boxes);
}

static void box_config_mismatch_dies(void) {
  // map_sizes itself reports the first empty map, so a trainer can name its flag.
  SsdModelConfig cfg = ssd_model_config_300(81);
  cfg.backbone.stage_stride[2] = 2;
  int sizes[SSD_MAX_MAPS];
  CHECK_EQ_INT(ssd_model_map_sizes(&cfg, sizes), 5);
  CHECK(sizes[0] == 19 && sizes[4] == 1);
  CHECK_DIES_WITH(wrong_map_size_dies, NULL, "feature map 5 is empty for a 300-pixel input");
  CHECK_DIES_WITH(wrong_box_count_dies, NULL, "map 1 has 4 boxes per location, the default boxes 6");
  CHECK_DIES_WITH(wrong_last_map_dies, NULL, "feature map 5 is 3x3, the default boxes' feat_size is 1");
}

// ---------------------------------------------------------------- a small SSD
// 12-pixel input, basic blocks 1,1 of width 4 (3x3 stem): maps 6, 3 (3x3/2
// pad 1), 1 (3x3 pad 0), so both kinds of extra block run; 3 classes.
static SsdModelConfig small_config(void) {
  SsdModelConfig c = ssd_model_config_300(3);
  ResnetConfig *b = &c.backbone;
  b->stem_7x7 = false;
  b->width = 4;
  b->image_size = 12;
  b->stage_stride[2] = 0;
  REQUIRE(resnet_parse_stages(b, "1,1"));
  c.n_maps = 3;
  c.extra_mid[0] = 4, c.extra_out[0] = 6, c.extra_stride[0] = 2, c.extra_pad[0] = 1;
  c.extra_mid[1] = 5, c.extra_out[1] = 4, c.extra_stride[1] = 1, c.extra_pad[1] = 0;
  c.boxes[0] = 2, c.boxes[1] = 4, c.boxes[2] = 2;
  return c;
}

// The matching default boxes: 6^2 * 2 + 3^2 * 4 + 1 * 2 = 110.
static SsdBoxConfig small_boxes(void) {
  SsdBoxConfig b = {.image_size = 12, .n_maps = 3, .feat_size = {6, 3, 1}, .step = {2, 4, 12},
                    .scale = {2, 5, 8, 11}, .n_ratios = {0, 1, 0}, .ratio = {{0}, {2}, {0}}};
  return b;
}

static const int64_t kBatch = 2;

// Head k's raw NHWC output (n, H, W, D * boxes) at channel d * boxes + j
// (coordinate or class d of box shape j, the reference's channel meaning)
// must land at box first + j H W + row-major location of the concatenated
// output, coordinate d: every element of every map, both heads.
static void head_outputs_land_in_box_order(void) {
  SsdModelConfig cfg = small_config();
  SsdBoxConfig boxes = small_boxes();
  ssd_model_check_boxes(&cfg, &boxes);
  SsdModel m;
  ssd_model_init(&m, &cfg, kBatch, 0, DEVICE_CPU, 5);
  CHECK_EQ_INT(m.n_boxes, ssd_map_first_box(&boxes, 3));
  // Hand-set heads: zero weights, and a bias that names the channel, so that
  // every location of map k says (k, channel); plus the random forward
  // below, in which the locations differ too.
  ParamSet *ps = &m.params;
  for (int k = 0; k < cfg.n_maps; k++) {
    SsdConv *heads[2] = {&m.map[k].loc, &m.map[k].conf};
    for (int h = 0; h < 2; h++) {
      memset(ps->params + ps->offsets[heads[h]->w], 0, (size_t)ps->numels[heads[h]->w] * sizeof(float));
      float *bias = ps->params + ps->offsets[heads[h]->b];
      for (int64_t ch = 0; ch < heads[h]->out_c; ch++) bias[ch] = (float)(1000 * k + ch);
    }
  }
  float x[2 * 12 * 12 * 3];
  test_fill_uniform(x, 2 * 12 * 12 * 3, 3, -1, 1);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, kBatch, 12, 12, 3);
  const Tensor *loc, *logits;
  ssd_model_forward(&m, &CPU, &tx, true, &loc, &logits);
  int bad = 0;
  for (int k = 0; k < cfg.n_maps; k++) {
    int64_t first = ssd_map_first_box(&boxes, k), nb = m.map[k].boxes, s = m.map[k].side;
    for (int64_t j = 0; j < nb; j++)
      for (int64_t p = 0; p < s * s; p++) {
        const float *l = (const float *)loc->data + (first + j * s * s + p) * 4;
        for (int d = 0; d < 4; d++) bad += l[d] != (float)(1000 * k + d * nb + j);
        const float *c = (const float *)logits->data + (first + j * s * s + p) * 3;
        for (int d = 0; d < 3; d++) bad += c[d] != (float)(1000 * k + d * nb + j);
      }
  }
  CHECK_MSG(bad == 0, "%d hand-set head outputs out of place", bad);
  // Random heads: the same map from the raw outputs, locations included.
  ssd_model_free(&m);
  ssd_model_init(&m, &cfg, kBatch, 0, DEVICE_CPU, 5);
  ssd_model_forward(&m, &CPU, &tx, true, &loc, &logits);
  bad = 0;
  for (int k = 0; k < cfg.n_maps; k++) {
    const SsdMap *mp = &m.map[k];
    int64_t nb = mp->boxes, s = mp->side;
    const Tensor *out[2] = {loc, logits};
    const SsdConv *head[2] = {&mp->loc, &mp->conf};
    for (int h = 0; h < 2; h++) {
      int64_t dd = out[h]->shape[2];
      const float *raw = head[h]->y.data, *o = out[h]->data;
      for (int64_t b = 0; b < kBatch; b++)
        for (int64_t p = 0; p < s * s; p++)
          for (int64_t j = 0; j < nb; j++)
            for (int64_t d = 0; d < dd; d++)
              bad += o[(b * m.n_boxes + mp->first_box + j * s * s + p) * dd + d] !=
                     raw[(b * s * s + p) * dd * nb + d * nb + j];
    }
  }
  CHECK_MSG(bad == 0, "%d head outputs out of place", bad);
  ssd_model_free(&m);
}

// ---------------------------------------------------------------- gradients
typedef struct GradCtx {
  SsdModel *m;
  Tensor x;
  float *wl, *wc;  // loss weights of loc and logits
} GradCtx;

// loss = sum(loc * wl) + sum(logits * wc), in double.
static double weighted_outputs(void *p) {
  GradCtx *g = p;
  const Tensor *loc, *logits;
  ssd_model_forward(g->m, &CPU, &g->x, true, &loc, &logits);
  double s = 0;
  for (int64_t i = 0; i < tensor_numel(loc); i++) s += (double)((float *)loc->data)[i] * g->wl[i];
  for (int64_t i = 0; i < tensor_numel(logits); i++) s += (double)((float *)logits->data)[i] * g->wc[i];
  return s;
}

// The hook's calls per tensor and a copy of each gradient when announced.
typedef struct Heard {
  const ParamSet *ps;
  int *calls;
  float *at_call;
} Heard;

static void heard(void *ctx, int i) {
  Heard *h = ctx;
  h->calls[i]++;
  size_t off = (size_t)h->ps->offsets[i];
  memcpy(h->at_call + off, h->ps->grads + off, (size_t)h->ps->numels[i] * sizeof(float));
}

static void backward_matches_finite_differences(void) {
  SsdModelConfig cfg = small_config();
  SsdModel m;
  ssd_model_init(&m, &cfg, kBatch, 0, DEVICE_CPU, 3);
  ParamSet *ps = &m.params;
  // Non-trivial BN parameters, and biases that keep most of the extras'
  // ReLUs (no BN before them) well inside their linear part.
  for (int i = 0; i < ps->count; i++)
    if (ps->specs[i].ndim == 1)
      test_fill_uniform(ps->params + ps->offsets[i], ps->numels[i], 11 + (uint64_t)i, 0.5f, 1.5f);
  int64_t nl = kBatch * m.n_boxes * 4, nc = kBatch * m.n_boxes * 3;
  float x[2 * 12 * 12 * 3];
  float *wl = malloc((size_t)nl * sizeof(float)), *wc = malloc((size_t)nc * sizeof(float));
  test_fill_uniform(x, 2 * 12 * 12 * 3, 5, -1, 1);
  test_fill_uniform(wl, nl, 6, -1, 1);
  test_fill_uniform(wc, nc, 7, -1, 1);
  GradCtx g = {&m, TENSOR(x, DT_F32, DEVICE_CPU, kBatch, 12, 12, 3), wl, wc};
  weighted_outputs(&g);
  Tensor dloc = TENSOR(wl, DT_F32, DEVICE_CPU, kBatch, m.n_boxes, 4);
  Tensor dlogits = TENSOR(wc, DT_F32, DEVICE_CPU, kBatch, m.n_boxes, 3);
  Heard h = {ps, calloc((size_t)ps->count, sizeof(int)), malloc((size_t)ps->total_numel * sizeof(float))};
  ssd_model_backward(&m, &CPU, &dloc, &dlogits, (GradHook){heard, &h});
  int missed = 0, late = 0;
  for (int i = 0; i < ps->count; i++) {
    size_t off = (size_t)ps->offsets[i];
    missed += h.calls[i] != 1;
    late += memcmp(h.at_call + off, ps->grads + off, (size_t)ps->numels[i] * sizeof(float)) != 0;
  }
  CHECK_MSG(missed == 0, "%d tensors not announced exactly once", missed);
  CHECK_MSG(late == 0, "%d gradients changed after they were announced", late);
  // The forward is fp32 and piecewise smooth. Truncation is O(eps^2) off
  // the kinks; a ReLU kink inside +-eps spoils a point by O(eps / the
  // gradient's scale); rounding the outputs (~6e-8 of a loss of order 10)
  // over 2 eps adds ~3e-4 absolute against gradients floored at 1e-2.
  // Measured worst, eps 3e-3 / 1e-3 / 3e-4: extras and heads 0.03 / 0.016
  // / 0.017, the backbone 0.22 / 0.064 / 0.055 (its BN + ReLU sit below
  // the extras' ReLUs, so a perturbation there moves many kinks; the error
  // shrinks with eps, as a kink's does). At eps 1e-3 under the four
  // OpenBLAS kernel sets, 1 and 2 threads: backbone 0.061 to 0.070, extras
  // and heads 0.003 to 0.016. A wrong backward is off by O(1).
  double worst[2] = {0, 0};
  int worst_i[2] = {0, 0};
  for (int i = 0; i < ps->count; i++) {
    double e = test_gradcheck(weighted_outputs, &g, ps->params + ps->offsets[i],
                              ps->grads + ps->offsets[i], ps->numels[i], 1e-3f, 4, 1e-2);
    int part = i >= m.first_own;
    if (!(e <= worst[part])) worst_i[part] = i;  // NaN included
    worst[part] = test_worst(worst[part], e);
  }
  printf("ssd model: worst relative gradient error %.3g (backbone), %.3g (extras and heads)\n",
         worst[0], worst[1]);
  const double tol[2] = {0.15, 0.04};
  for (int part = 0; part < 2; part++)
    CHECK_MSG(worst[part] < tol[part], "worst relative gradient error %.3g in %s", worst[part],
              ps->specs[worst_i[part]].name);
  free(h.calls);
  free(h.at_call);
  free(wl);
  free(wc);
  ssd_model_free(&m);
}

// Eval (running statistics) of a smaller batch gives each image what the
// eval of the whole batch gives it; a training forward moves the running
// statistics.
static void smaller_eval_batch_matches(void) {
  SsdModelConfig cfg = small_config();
  SsdModel m;
  ssd_model_init(&m, &cfg, kBatch, 0, DEVICE_CPU, 9);
  float x[2 * 12 * 12 * 3];
  test_fill_uniform(x, 2 * 12 * 12 * 3, 4, 1, 3);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, kBatch, 12, 12, 3);
  const Tensor *loc, *logits;
  const float *rm = m.backbone.stem.bn.running_mean.data;
  CHECK(rm[0] == 0);
  ssd_model_forward(&m, &CPU, &tx, true, &loc, &logits);
  CHECK(rm[0] != 0);
  ssd_model_forward(&m, &CPU, &tx, false, &loc, &logits);
  int64_t nl = m.n_boxes * 4, nc = m.n_boxes * 3;
  float *full = malloc((size_t)(nl + nc) * sizeof(float));
  memcpy(full, loc->data, (size_t)nl * sizeof(float));  // image 0 of each
  memcpy(full + nl, logits->data, (size_t)nc * sizeof(float));
  Tensor one = TENSOR(x, DT_F32, DEVICE_CPU, 1, 12, 12, 3);
  ssd_model_forward(&m, &CPU, &one, false, &loc, &logits);
  CHECK_EQ_INT(loc->shape[0], 1);
  CHECK(test_rel_error(loc->data, full, nl) < 1e-6);
  CHECK(test_rel_error(logits->data, full + nl, nc) < 1e-6);
  free(full);
  ssd_model_free(&m);
}

// ---------------------------------------------------------------- CUDA
typedef struct Run {
  float *loc, *logits, *grads;  // malloc'd host copies
} Run;

// host[0..n) in dtype on `device`: a plain copy for the CPU (fp32 only), an
// upload for the GPU (whose memory the host cannot read).
static void *put(DeviceKind device, const float *host, int64_t n, DType dt) {
  if (device == DEVICE_CUDA) return upload(host, n, dt);
  REQUIRE(dt == DT_F32);
  float *copy = device_alloc(DEVICE_CPU, (size_t)n * sizeof(float));
  memcpy(copy, host, (size_t)n * sizeof(float));
  return copy;
}

// Forward (training) and backward of the small SSD from seed 7 on `device`.
static Run run_small(DeviceKind device, DType dt, const float *x, const float *wl,
                     const float *wc, SsdModel *m) {
  Device dev;
  device_open(&dev, device, 0);
  SsdModelConfig cfg = small_config();
  cfg.dtype = dt;
  ssd_model_init(m, &cfg, kBatch, 0, device, 7);
  int64_t nx = kBatch * 12 * 12 * 3, nl = kBatch * m->n_boxes * 4, nc = kBatch * m->n_boxes * 3;
  void *dx = put(device, x, nx, dt), *dwl = put(device, wl, nl, DT_F32), *dwc = put(device, wc, nc, DT_F32);
  Tensor tx = TENSOR(dx, dt, device, kBatch, 12, 12, 3);
  const Tensor *loc, *logits;
  ssd_model_forward(m, &dev, &tx, true, &loc, &logits);
  Run r = {malloc((size_t)nl * sizeof(float)), malloc((size_t)nc * sizeof(float)),
           malloc((size_t)m->params.total_numel * sizeof(float))};
  Tensor tl = TENSOR(dwl, DT_F32, device, kBatch, m->n_boxes, 4);
  Tensor tc = TENSOR(dwc, DT_F32, device, kBatch, m->n_boxes, 3);
  ssd_model_backward(m, &dev, &tl, &tc, (GradHook){0});
  device_sync(&dev);
  device_copy(DEVICE_CPU, r.loc, device, loc->data, (size_t)nl * sizeof(float));
  device_copy(DEVICE_CPU, r.logits, device, logits->data, (size_t)nc * sizeof(float));
  device_copy(DEVICE_CPU, r.grads, device, m->params.grads,
              (size_t)m->params.total_numel * sizeof(float));
  void *owned[] = {dx, dwl, dwc};
  for (int i = 0; i < 3; i++) device_free(device, owned[i]);
  device_close(&dev);
  return r;
}

static void free_run(Run *r) {
  free(r->loc);
  free(r->logits);
  free(r->grads);
}

// The GPU network in compute dtype dt against the fp32 CPU network from the
// same seed on the same input (rounded to dt): outputs and gradients as
// relative L2 errors, and each tensor's gradient on its own.
static void cuda_matches_cpu_in(DType dt, double out_tol, double grads_tol, double tensor_tol) {
  if (!test_have_gpu()) test_skip("no GPU");
  SsdModelConfig cfg = small_config();
  SsdModel probe;
  ssd_model_init(&probe, &cfg, kBatch, 0, DEVICE_CPU, 7);
  int64_t nl = kBatch * probe.n_boxes * 4, nc = kBatch * probe.n_boxes * 3;
  ssd_model_free(&probe);
  float *x = random_array(kBatch * 12 * 12 * 3, 1, -1, 1, dt);
  float *wl = random_array(nl, 2, -1, 1, DT_F32), *wc = random_array(nc, 3, -1, 1, DT_F32);
  SsdModel cm, gm;
  Run c = run_small(DEVICE_CPU, DT_F32, x, wl, wc, &cm);
  Run g = run_small(DEVICE_CUDA, dt, x, wl, wc, &gm);
  const char *name = dtype_name(dt);
  test_check_error("ssd loc vs fp32 CPU", name, test_rel_error(g.loc, c.loc, nl), out_tol);
  test_check_error("ssd logits vs fp32 CPU", name, test_rel_error(g.logits, c.logits, nc), out_tol);
  test_check_error("ssd gradients vs fp32 CPU", name,
                   test_rel_error(g.grads, c.grads, cm.params.total_numel), grads_tol);
  const ParamSet *ps = &cm.params;
  double worst = 0;
  int worst_i = 0;
  for (int i = 0; i < ps->count; i++) {
    double err = test_rel_error(g.grads + ps->offsets[i], c.grads + ps->offsets[i], ps->numels[i]);
    if (!(err <= worst)) worst_i = i;
    worst = test_worst(worst, err);
  }
  printf("ssd %s: worst tensor gradient error %.3g (%s)\n", name, worst, ps->specs[worst_i].name);
  CHECK_MSG(worst <= tensor_tol, "%s gradient (%s): relative error %.3g > %.3g",
            ps->specs[worst_i].name, name, worst, tensor_tol);
  free_run(&c);
  free_run(&g);
  free(x);
  free(wl);
  free(wc);
  ssd_model_free(&cm);
  ssd_model_free(&gm);
}

// fp32 on both sides: each op matches the CPU to ~1e-5 (the op tests); the
// dozen layers here compound that to ~1e-4, as in test_resnet's fp32 case.
static void cuda_matches_cpu(void) { cuda_matches_cpu_in(DT_F32, 1e-3, 1e-3, 1e-2); }

// bf16 (8 significant bits, 2^-9 per rounding) through a dozen layers;
// BN renormalises the backbone but not the extras. Measured on the CUDA
// emulation: outputs 0.0079 (loc) and 0.0069 (logits), all gradients
// 0.0165, the worst tensor 0.054 (a BN bias of the backbone); the bounds
// are 3 to 4 times those. A missing, doubled or wrong-signed gradient
// scores 1 or more.
static void cuda_bf16_matches_cpu_fp32(void) { cuda_matches_cpu_in(DT_BF16, 3e-2, 0.05, 0.2); }

int main(void) {
  TEST_RUN(ssd300_shapes_and_parameters);
  TEST_RUN(box_config_mismatch_dies);
  TEST_RUN(head_outputs_land_in_box_order);
  TEST_RUN(backward_matches_finite_differences);
  TEST_RUN(smaller_eval_batch_matches);
  TEST_RUN(cuda_matches_cpu);
  TEST_RUN(cuda_bf16_matches_cpu_fp32);
  return test_finish();
}
