// NCF trainer pieces: NeuMF's backward against finite differences (every
// parameter tensor), its initialisation statistics, the epoch order (a
// bijection), and the training batches (each positive once per epoch,
// negatives never among the user's training items, fresh each epoch).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../recommendation/ncf_data.h"
#include "../recommendation/ncf_metric.h"
#include "../recommendation/ncf_model.h"
#include "tests/harness/test.h"
#include "train/amp.h"
#include "train/optim.h"
#include "train/run.h"

static const Device CPU = {.kind = DEVICE_CPU};

typedef struct GradCtx {
  NcfModel *m;
  int64_t rows;
} GradCtx;

static double model_loss(void *ctx) {
  GradCtx *g = ctx;
  ncf_model_forward(g->m, &CPU, g->rows);
  ncf_model_backward(g->m, &CPU, g->rows, 1.0f, false, (GradHook){0});
  return *(float *)g->m->a.loss.data;
}

static void backward_matches_finite_differences(void) {
  NcfShape shape = {.n_users = 5, .n_items = 7, .mf_dim = 3, .n_layers = 3,
                    .layers = {6, 5, 4}};
  NcfModel m;
  ncf_model_init(&m, &shape, 0, 8, 3, DEVICE_CPU);
  // Larger weights than the N(0, 0.01) start, so every term is well above
  // the fp32 rounding of the loss; 8 rows with repeated users and items, so
  // the embedding gradients sum over rows.
  test_fill_uniform(m.ps.params, m.ps.total_numel, 11, -0.8f, 0.8f);
  const int32_t users[8] = {0, 1, 2, 3, 4, 0, 1, 0}, items[8] = {0, 6, 2, 2, 5, 1, 6, 3};
  const float labels[8] = {1, 0, 1, 0, 0, 1, 0, 1};
  memcpy(m.a.users.data, users, sizeof users);
  memcpy(m.a.items.data, items, sizeof items);
  memcpy(m.a.labels.data, labels, sizeof labels);
  GradCtx ctx = {&m, 8};
  model_loss(&ctx);
  float *grad = malloc((size_t)m.ps.total_numel * sizeof(float));
  memcpy(grad, m.ps.grads, (size_t)m.ps.total_numel * sizeof(float));
  // Central differences with eps 1e-3 on O(1) weights: truncation O(eps^2)
  // and fp32 rounding of the ~0.7 loss (6e-8 / 2e-3 = 3e-5) stay far below
  // 1e-2; a larger eps lets the ReLU kinks of the 8 rows show (1e-2 gives 10%).
  for (int i = 0; i < m.ps.count; i++) {
    double err = test_gradcheck(model_loss, &ctx, m.ps.params + m.ps.offsets[i],
                                grad + m.ps.offsets[i], m.ps.numels[i], 1e-3f, 40, 1e-2);
    CHECK_MSG(err < 1e-2, "%s: relative gradient error %.3g", m.specs[i].name, err);
  }
  free(grad);
  ncf_model_free(&m);
}

// A model of the finite-difference test's shape with its O(1) weights and 8
// rows, on `device` in compute dtype dt.
static void small_model_with(NcfModel *m, DType dt, DeviceKind device, int n_state) {
  NcfShape shape = {.n_users = 5, .n_items = 7, .mf_dim = 3, .n_layers = 3,
                    .layers = {6, 5, 4}, .dtype = dt};
  ncf_model_init(m, &shape, n_state, 8, 3, device);
  float *p = malloc((size_t)m->ps.total_numel * sizeof(float));
  test_fill_uniform(p, m->ps.total_numel, 11, -0.8f, 0.8f);
  device_copy(device, m->ps.params, DEVICE_CPU, p, (size_t)m->ps.total_numel * sizeof(float));
  free(p);
  const int32_t users[8] = {0, 1, 2, 3, 4, 0, 1, 0}, items[8] = {0, 6, 2, 2, 5, 1, 6, 3};
  const float labels[8] = {1, 0, 1, 0, 0, 1, 0, 1};
  device_copy(device, m->a.users.data, DEVICE_CPU, users, sizeof users);
  device_copy(device, m->a.items.data, DEVICE_CPU, items, sizeof items);
  device_copy(device, m->a.labels.data, DEVICE_CPU, labels, sizeof labels);
}

static void small_model(NcfModel *m, DType dt, DeviceKind device) {
  small_model_with(m, dt, device, 0);
}

// loss_scale multiplies every gradient (fp16's loss scaling), not the loss.
static void loss_scale_scales_gradients(void) {
  NcfModel m;
  small_model(&m, DT_F32, DEVICE_CPU);
  size_t bytes = (size_t)m.ps.total_numel * sizeof(float);
  float *g1 = malloc(bytes);
  ncf_model_forward(&m, &CPU, 8);
  ncf_model_backward(&m, &CPU, 8, 1.0f, false, (GradHook){0});
  float loss1 = *(float *)m.a.loss.data;
  memcpy(g1, m.ps.grads, bytes);
  ncf_model_backward(&m, &CPU, 8, 1024.0f, false, (GradHook){0});
  CHECK(*(float *)m.a.loss.data == loss1);
  // A power of two scales every product exactly.
  int exact = 1;
  for (int64_t i = 0; i < m.ps.total_numel; i++) exact &= m.ps.grads[i] == 1024.0f * g1[i];
  CHECK_MSG(exact, "gradients under loss scale 1024 are not 1024 times the unscaled ones");
  free(g1);
  ncf_model_free(&m);
}

// A batch in micro-batches (grad_accumulation): rows 0-4, then 5-7 added
// on, each scaled by its share of the 8 rows, gives the whole batch's
// gradient but for the order of the sums (fp32 rounding: 1e-6 relative; on
// CUDA the embedding gradients' atomic adds reorder them too).
static void micro_batches_on(DeviceKind kind) {
  Device dev;
  if (kind == DEVICE_CUDA) {
    if (!test_have_gpu()) test_skip("no GPU");
    device_open(&dev, DEVICE_CUDA, 0);
  } else {
    dev = CPU;
  }
  NcfModel m;
  small_model(&m, DT_F32, kind);
  size_t bytes = (size_t)m.ps.total_numel * sizeof(float);
  float *whole = malloc(bytes), *micro = malloc(bytes);
  ncf_model_forward(&m, &dev, 8);
  ncf_model_backward(&m, &dev, 8, 1.0f, false, (GradHook){0});
  device_copy(DEVICE_CPU, whole, kind, m.ps.grads, bytes);
  int32_t users[8], items[8];
  float labels[8];
  device_copy(DEVICE_CPU, users, kind, m.a.users.data, sizeof users);
  device_copy(DEVICE_CPU, items, kind, m.a.items.data, sizeof items);
  device_copy(DEVICE_CPU, labels, kind, m.a.labels.data, sizeof labels);
  ncf_model_forward(&m, &dev, 5);
  ncf_model_backward(&m, &dev, 5, 5.0f / 8.0f, false, (GradHook){0});
  device_copy(kind, m.a.users.data, DEVICE_CPU, users + 5, 3 * sizeof *users);
  device_copy(kind, m.a.items.data, DEVICE_CPU, items + 5, 3 * sizeof *items);
  device_copy(kind, m.a.labels.data, DEVICE_CPU, labels + 5, 3 * sizeof *labels);
  ncf_model_forward(&m, &dev, 3);
  ncf_model_backward(&m, &dev, 3, 3.0f / 8.0f, true, (GradHook){0});
  device_sync(&dev);
  device_copy(DEVICE_CPU, micro, kind, m.ps.grads, bytes);
  for (int i = 0; i < m.ps.count; i++) {
    double err = test_rel_error(micro + m.ps.offsets[i], whole + m.ps.offsets[i], m.ps.numels[i]);
    CHECK_MSG(err <= 1e-5, "%s: micro-batched gradient off by %.3g", m.specs[i].name, err);
  }
  free(whole);
  free(micro);
  ncf_model_free(&m);
  if (kind == DEVICE_CUDA) device_close(&dev);
}
static void micro_batches_sum_to_the_batch_gradient(void) { micro_batches_on(DEVICE_CPU); }
static void gpu_micro_batches_sum_to_the_batch_gradient(void) { micro_batches_on(DEVICE_CUDA); }

static void lowp_on_cpu_dies(void *ctx) {
  (void)ctx;
  NcfModel m;
  small_model(&m, DT_BF16, DEVICE_CPU);
}

static void precision_misuse_dies(void) {
  CHECK_DIES_WITH(lowp_on_cpu_dies, NULL, "bf16 compute needs a CUDA device");
}

// The GPU model in dtype dt against the fp32 CPU model: loss and every
// gradient as relative errors (printed). Tolerances: bf16 rounds the MLP's
// inputs, weights and activations to 8 significant bits (2^-9 relative
// each); three linear layers forward and back compound that to about 1e-2 in
// the gradients, less in the loss; fp16 (2^-12) is 8x tighter. fp32 on both
// sides differs only in summation order (1e-5).
static void gpu_matches_cpu_in(DType dt, double loss_tol, double grads_tol) {
  if (!test_have_gpu()) test_skip("no GPU");
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  NcfModel a, b;
  small_model(&a, DT_F32, DEVICE_CPU);
  small_model(&b, dt, DEVICE_CUDA);
  ncf_model_forward(&a, &CPU, 8);
  ncf_model_backward(&a, &CPU, 8, 1.0f, false, (GradHook){0});
  ncf_model_forward(&b, &gpu, 8);
  ncf_model_backward(&b, &gpu, 8, 1.0f, false, (GradHook){0});
  device_sync(&gpu);
  float loss_b;
  device_copy(DEVICE_CPU, &loss_b, DEVICE_CUDA, b.a.loss.data, sizeof loss_b);
  size_t bytes = (size_t)a.ps.total_numel * sizeof(float);
  float *grads = malloc(bytes);
  device_copy(DEVICE_CPU, grads, DEVICE_CUDA, b.ps.grads, bytes);
  double loss_err = test_rel_error(&loss_b, a.a.loss.data, 1);
  double grads_err = test_rel_error(grads, a.ps.grads, a.ps.total_numel);
  test_check_error("neumf loss vs fp32 CPU", dtype_name(dt), loss_err, loss_tol);
  test_check_error("neumf gradients vs fp32 CPU", dtype_name(dt), grads_err, grads_tol);
  free(grads);
  ncf_model_free(&a);
  ncf_model_free(&b);
  device_close(&gpu);
}

static void gpu_fp32_matches_cpu(void) { gpu_matches_cpu_in(DT_F32, 1e-5, 1e-5); }
static void gpu_bf16_matches_cpu_fp32(void) { gpu_matches_cpu_in(DT_BF16, 1e-2, 3e-2); }
static void gpu_fp16_matches_cpu_fp32(void) { gpu_matches_cpu_in(DT_F16, 2e-3, 5e-3); }

typedef struct ReadyLog {
  int order[32], count;
} ReadyLog;

static void log_ready(void *ctx, int tensor) {
  ReadyLog *l = ctx;
  if (l->count < 32) l->order[l->count] = tensor;
  l->count++;
}

// The all-reduce hook hears of every tensor once, last tensor first (the
// order dist.h launches its buckets in).
static void gradients_announced_last_first(void) {
  NcfShape shape = {.n_users = 3, .n_items = 4, .mf_dim = 2, .n_layers = 4,
                    .layers = {4, 6, 5, 3}};
  NcfModel m;
  ncf_model_init(&m, &shape, 0, 2, 1, DEVICE_CPU);
  memset(m.a.users.data, 0, 2 * sizeof(int32_t));
  memset(m.a.items.data, 0, 2 * sizeof(int32_t));
  memset(m.a.labels.data, 0, 2 * sizeof(float));
  ncf_model_forward(&m, &CPU, 2);
  ReadyLog l = {{0}, 0};
  ncf_model_backward(&m, &CPU, 2, 1.0f, false, (GradHook){log_ready, &l});
  REQUIRE(l.count == m.ps.count);
  for (int i = 0; i < l.count; i++) CHECK_EQ_INT(l.order[i], m.ps.count - 1 - i);
  ncf_model_free(&m);
}

static void init_follows_the_reference(void) {
  NcfShape shape = {.n_users = 2000, .n_items = 1000, .mf_dim = 16, .n_layers = 3,
                    .layers = {64, 32, 16}};
  NcfModel m;
  ncf_model_init(&m, &shape, 0, 4, 7, DEVICE_CPU);
  Tensor emb = paramset_param(&m.ps, NCF_MF_USER);
  const float *e = emb.data;
  double var = 0;
  for (int64_t i = 0; i < tensor_numel(&emb); i++) var += (double)e[i] * e[i];
  CHECK_NEAR(sqrt(var / (double)tensor_numel(&emb)), 0.01, 0.0005);  // N(0, 0.01)
  // Glorot: |w| <= sqrt(6 / (64 + 32)) = 0.25, and nearly reaching it.
  Tensor w1 = paramset_param(&m.ps, ncf_w(1));
  float wmax = 0;
  for (int64_t i = 0; i < tensor_numel(&w1); i++) wmax = (float)test_worst(wmax, fabsf(((float *)w1.data)[i]));
  CHECK(wmax <= 0.25f && wmax > 0.24f);
  // LeCun on the final layer: sqrt(3 / (16 + 16)).
  Tensor wf = paramset_param(&m.ps, ncf_final_w(&shape));
  float fmax_ = 0;
  for (int64_t i = 0; i < tensor_numel(&wf); i++) fmax_ = (float)test_worst(fmax_, fabsf(((float *)wf.data)[i]));
  CHECK(fmax_ <= (float)sqrt(3.0 / 32) && fmax_ > 0.5f * (float)sqrt(3.0 / 32));
  ncf_model_free(&m);
}

static void epoch_order_is_a_permutation(void) {
  const int64_t sizes[] = {1, 2, 3, 17, 64, 1000, 4097};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int64_t n = sizes[k];
    uint8_t *seen = calloc((size_t)n, 1);
    int64_t fixed = 0;
    for (int64_t s = 0; s < n; s++) {
      int64_t p = ncf_permute(s, n, 9, 2);
      REQUIRE(p >= 0 && p < n);
      CHECK_MSG(!seen[p], "n %lld: %lld hit twice", (long long)n, (long long)p);
      seen[p] = 1;
      fixed += p == s;
    }
    if (n >= 1000) CHECK_MSG(fixed < n / 50, "n %lld: %lld fixed points", (long long)n, (long long)fixed);
    free(seen);
  }
  // Another epoch, another order.
  int64_t same = 0;
  for (int64_t s = 0; s < 1000; s++) same += ncf_permute(s, 1000, 9, 2) == ncf_permute(s, 1000, 9, 3);
  CHECK(same < 20);
}

static void batches_follow_the_sampling_rules(void) {
  // Three users over 10 items; user 1 rated all but two.
  const int64_t offsets[4] = {0, 2, 10, 13};
  const int32_t items[13] = {1, 4, 0, 1, 2, 3, 5, 6, 8, 9, 0, 5, 9};
  const int32_t users[13] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2};
  NcfTrainView v = {offsets, items, users, 13, 10, 4, 21};
  int64_t n = ncf_epoch_samples(&v);
  REQUIRE(n == 65);
  int32_t u[65], it[65], first_negs[65];
  float lab[65];
  for (int epoch = 1; epoch <= 2; epoch++) {
    ncf_train_batch_cpu(&CPU, &v, epoch, 0, n, u, it, lab);
    int positives[13] = {0}, negatives = 0, changed = 0;
    for (int64_t b = 0; b < n; b++) {
      const int32_t *rated = items + offsets[u[b]];
      int64_t n_rated = offsets[u[b] + 1] - offsets[u[b]];
      if (lab[b] == 1.0f) {
        int64_t k = 0;
        while (k < 13 && !(users[k] == u[b] && items[k] == it[b])) k++;
        REQUIRE(k < 13);
        positives[k]++;
      } else {
        negatives++;
        CHECK_MSG(!ml_is_rated(rated, n_rated, it[b]) && it[b] >= 0 && it[b] < 10,
                  "user %d got negative %d", u[b], it[b]);
        if (u[b] == 1) CHECK(it[b] == 4 || it[b] == 7);
        if (epoch == 1) first_negs[b] = it[b];
        else changed += it[b] != first_negs[b];
      }
    }
    for (int k = 0; k < 13; k++) CHECK_EQ_INT(positives[k], 1);
    CHECK_EQ_INT(negatives, 52);
    if (epoch == 2) CHECK(changed > 10);
  }
  // A batch is a slice of the epoch: samples [20, 30) alone give the same.
  int32_t u2[10], it2[10];
  float lab2[10];
  ncf_train_batch_cpu(&CPU, &v, 2, 20, 10, u2, it2, lab2);
  CHECK(memcmp(u2, u + 20, sizeof u2) == 0 && memcmp(it2, it + 20, sizeof it2) == 0);
}

// The CPU builds groups of samples with batched Philox (ncf_data.c): the
// same samples as ncf_train_sample one at a time (what the CUDA kernel runs),
// over 40 users with 5-60 rated items of 300, a 64-bit seed, epochs whose
// Feistel domain is 4x the samples (much cycle walking), slices that start
// and end inside a group.
static void cpu_batches_match_the_sample_function(void) {
  enum { USERS = 40, ITEMS = 300 };
  int64_t offsets[USERS + 1] = {0};
  int32_t *items = malloc(USERS * 60 * sizeof(int32_t)), *users = malloc(USERS * 60 * sizeof(int32_t));
  Rng r = rng_make(5, 0);
  for (int u = 0; u < USERS; u++) {
    int64_t k = offsets[u];
    int want = 5 + (int)rng_next_below(&r, 56);
    for (int i = 0; i < ITEMS && k - offsets[u] < want; i++)
      if (rng_next_below(&r, ITEMS) < (uint32_t)(2 * want)) items[k] = i, users[k++] = u;
    offsets[u + 1] = k;
  }
  NcfTrainView v = {offsets, items, users, offsets[USERS], ITEMS, 4, 0x123456789abcdefull};
  int64_t n = ncf_epoch_samples(&v), differ = 0;
  int32_t *bu = malloc((size_t)n * sizeof(int32_t)), *bi = malloc((size_t)n * sizeof(int32_t));
  float *bl = malloc((size_t)n * sizeof(float));
  for (int epoch = 1; epoch <= 3; epoch++) {
    int64_t s0 = epoch == 2 ? 7 : 0, count = n - s0 - (epoch == 3 ? 5 : 0);
    ncf_train_batch_cpu(&CPU, &v, epoch, s0, count, bu, bi, bl);
    for (int64_t b = 0; b < count; b++) {
      int32_t u, it;
      float label;
      ncf_train_sample(&v, epoch, s0 + b, &u, &it, &label);
      differ += u != bu[b] || it != bi[b] || label != bl[b];
    }
  }
  CHECK_MSG(differ == 0, "%lld of the samples differ", (long long)differ);
  free(items), free(users), free(bu), free(bi), free(bl);
}

// A host array's copy on the device.
static void *upload(const void *src, size_t bytes) { return device_upload(DEVICE_CUDA, src, bytes); }

// The CUDA batch builders and metric against the CPU ones: the same batches
// bit for bit; the same hits and users, NDCG to rounding.
static void gpu_batches_and_metric_match_cpu(void) {
  if (!test_have_gpu()) test_skip("no GPU");
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  const int64_t offsets[4] = {0, 2, 10, 13};
  const int32_t items[13] = {1, 4, 0, 1, 2, 3, 5, 6, 8, 9, 0, 5, 9};
  const int32_t users[13] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2};
  NcfTrainView v = {offsets, items, users, 13, 10, 4, 21}, dv = v;
  dv.offsets = upload(offsets, sizeof offsets);
  dv.items = upload(items, sizeof items);
  dv.users = upload(users, sizeof users);
  // Samples [7, 57) of epoch 2.
  int32_t u[50], it[50], gu[50], git[50];
  float lab[50], glab[50];
  ncf_train_batch(&CPU, &v, 2, 7, 50, u, it, lab);
  int32_t *du = device_alloc(DEVICE_CUDA, sizeof gu), *dit = device_alloc(DEVICE_CUDA, sizeof git);
  float *dlab = device_alloc(DEVICE_CUDA, sizeof glab);
  ncf_train_batch(&gpu, &dv, 2, 7, 50, du, dit, dlab);
  device_sync(&gpu);
  device_copy(DEVICE_CPU, gu, DEVICE_CUDA, du, sizeof gu);
  device_copy(DEVICE_CPU, git, DEVICE_CUDA, dit, sizeof git);
  device_copy(DEVICE_CPU, glab, DEVICE_CUDA, dlab, sizeof glab);
  CHECK(memcmp(u, gu, sizeof u) == 0 && memcmp(it, git, sizeof it) == 0);
  CHECK(memcmp(lab, glab, sizeof lab) == 0);

  // Eval candidates of users [1, 3) of 3, 4 test negatives each.
  const int32_t test_items[3] = {7, 4, 1}, test_negs[12] = {2, 3, 3, 8, 4, 7, 7, 9, 2, 3, 4, 6};
  int32_t *dti = upload(test_items, sizeof test_items), *dtn = upload(test_negs, sizeof test_negs);
  int32_t eu[10], ei[10], geu[10], gei[10];
  ncf_eval_batch(&CPU, test_items, test_negs, 4, 1, 2, eu, ei);
  ncf_eval_batch(&gpu, dti, dtn, 4, 1, 2, du, dit);
  device_sync(&gpu);
  device_copy(DEVICE_CPU, geu, DEVICE_CUDA, du, sizeof geu);
  device_copy(DEVICE_CPU, gei, DEVICE_CUDA, dit, sizeof gei);
  CHECK(memcmp(eu, geu, sizeof eu) == 0 && memcmp(ei, gei, sizeof ei) == 0);

  // The metric over 300 users of 70 negatives (more than a warp's 32 lanes),
  // logits on a coarse grid so that ties are common, from 8 to 17.75 so that
  // the fp32 sigmoids the metric ranks round together and saturate (1 in 8),
  // repeated negatives.
  enum { U = 300, N = 70 };
  float *scores = malloc((size_t)U * (1 + N) * sizeof(float));
  int32_t *negs = malloc((size_t)U * N * sizeof(int32_t));
  Rng r = rng_make(5, 0);
  for (int64_t i = 0; i < (int64_t)U * (1 + N); i++)
    scores[i] = 8.0f + (float)rng_next_below(&r, 40) / 4;
  for (int64_t i = 0; i < U; i++) {
    int32_t item = 0;
    for (int64_t j = 0; j < N; j++) negs[i * N + j] = item += (int32_t)rng_next_below(&r, 3);
  }
  float *dscores = upload(scores, (size_t)U * (1 + N) * sizeof(float));
  int32_t *dnegs = upload(negs, (size_t)U * N * sizeof(int32_t));
  double *acc = device_alloc(DEVICE_CUDA, 2 * sizeof(double));
  NcfMetricSums cpu = {0}, dev = {0};
  ncf_metric_add(&CPU, scores, negs, U, N, 10, NULL, &cpu);
  ncf_metric_add(&gpu, dscores, dnegs, U, N, 10, acc, &dev);
  CHECK(cpu.hits > 0 && cpu.hits < U);
  CHECK(dev.hits == cpu.hits && dev.users == cpu.users);
  CHECK_NEAR(dev.ndcg, cpu.ndcg, 1e-9);
  free(scores);
  free(negs);
  void *owned[] = {(void *)dv.offsets, (void *)dv.items, (void *)dv.users, du, dit, dlab,
                   dti, dtn, dscores, dnegs, acc};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) device_free(DEVICE_CUDA, owned[i]);
  device_close(&gpu);
}

// A training step on the GPU, as recommendation/train.c takes it: the batch
// with its sampled negatives built on the device, forward, loss, backward,
// then unscaling with the overflow check and Adam (run_update). It
// queues all its work on the compute stream, allocates nothing and never
// makes the host wait (bf16), or once in fp16, where the loss scaler reads
// its overflow flag (amp.h): the whole step stays on the GPU. Only the CUDA
// emulation counts waits; elsewhere the case skips.
static void gpu_step_waits_in(DType dt, long waits) {
  if (!test_have_gpu()) test_skip("no GPU");
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  NcfModel m;
  small_model_with(&m, dt, DEVICE_CUDA, optim_state_count(OPT_ADAM));
  OptConfig oc = optim_defaults(OPT_ADAM);
  Optimizer opt;
  optim_init(&opt, &oc, &m.ps);
  AmpConfig ac = {.precision = dt == DT_F16 ? PREC_FP16 : PREC_BF16, .scale_init = 1024,
                  .growth_interval = 1000, .growth_factor = 2, .backoff = 0.5f, .scale_min = 1};
  LossScaler scaler;
  amp_scaler_init(&scaler, &ac, DEVICE_CUDA);
  Dist one = {.rank = 0, .size = 1};
  // Users 0..4 with 1 or 2 of the 7 items each, one negative per positive:
  // 16 samples an epoch, two batches of 8.
  const int64_t offsets[6] = {0, 2, 3, 5, 6, 8};
  const int32_t items[8] = {1, 4, 0, 2, 6, 3, 0, 5}, users[8] = {0, 0, 1, 2, 2, 3, 4, 4};
  NcfTrainView v = {upload(offsets, sizeof offsets), upload(items, sizeof items),
                    upload(users, sizeof users), 8, 7, 1, 21};
  EmuActivity counts = {0};
  bool counting = false;
  for (int step = 0; step < 3; step++) {
    if (step == 2) counting = test_device_watch_begin(&gpu);
    ncf_train_batch(&gpu, &v, 1, (step % 2) * 8, 8, m.a.users.data, m.a.items.data,
                    m.a.labels.data);
    ncf_model_forward(&m, &gpu, 8);
    ncf_model_backward(&m, &gpu, 8, amp_loss_scale(&scaler), false, (GradHook){0});
    run_update(&gpu, &one, &scaler, &opt, &m.ps, 1e-3f);
    if (counting) counts = test_device_watch_end();
  }
  device_sync(&gpu);
  float loss;
  device_copy(DEVICE_CPU, &loss, DEVICE_CUDA, m.a.loss.data, sizeof loss);
  CHECK_MSG(isfinite(loss) && loss > 0, "%s: loss %g after 3 steps", dtype_name(dt), loss);
  void *owned[] = {(void *)v.offsets, (void *)v.items, (void *)v.users};
  for (size_t i = 0; i < 3; i++) device_free(DEVICE_CUDA, owned[i]);
  amp_scaler_free(&scaler);
  optim_free(&opt);
  ncf_model_free(&m);
  device_close(&gpu);
  char what[32];
  snprintf(what, sizeof what, "%s step", dtype_name(dt));
  test_check_device_activity(what, counting ? &counts : NULL, waits);
}

static void gpu_bf16_step_never_waits(void) { gpu_step_waits_in(DT_BF16, 0); }
static void gpu_fp16_step_waits_once_for_overflow(void) { gpu_step_waits_in(DT_F16, 1); }

int main(void) {
  TEST_RUN(backward_matches_finite_differences);
  TEST_RUN(gradients_announced_last_first);
  TEST_RUN(init_follows_the_reference);
  TEST_RUN(cpu_batches_match_the_sample_function);
  TEST_RUN(loss_scale_scales_gradients);
  TEST_RUN(micro_batches_sum_to_the_batch_gradient);
  TEST_RUN(gpu_micro_batches_sum_to_the_batch_gradient);
  TEST_RUN(precision_misuse_dies);
  TEST_RUN(gpu_fp32_matches_cpu);
  TEST_RUN(gpu_bf16_matches_cpu_fp32);
  TEST_RUN(gpu_fp16_matches_cpu_fp32);
  TEST_RUN(epoch_order_is_a_permutation);
  TEST_RUN(batches_follow_the_sampling_rules);
  TEST_RUN(gpu_batches_and_metric_match_cpu);
  TEST_RUN(gpu_bf16_step_never_waits);
  TEST_RUN(gpu_fp16_step_waits_once_for_overflow);
  return test_finish();
}
