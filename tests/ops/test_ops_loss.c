// Losses: softmax cross-entropy (label smoothing, ignore index), BCE with
// logits and smooth L1 against PyTorch (tests/golden/loss.gld, from
// gen_dense.py), gradients against finite differences, edge cases, bad input,
// and the CUDA path against the CPU reference for every float dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/loss.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

#define IGNORE (-100)

static void xent_matches_torch(void) {
  GoldenFile *g = golden_load("loss.gld");
  int64_t n;
  float *logits = golden_get(g, "xent.logits", &n),
        *labels_f = golden_get(g, "xent.labels", &n);
  int32_t l32[9];
  int64_t l64[9];
  for (int i = 0; i < 9; i++) l64[i] = l32[i] = (int32_t)labels_f[i];
  Tensor labels[2] = {TENSOR(l32, DT_I32, DEVICE_CPU, 9),
                      TENSOR(l64, DT_I64, DEVICE_CPU, 9)};
  float loss, rows[9], d[63];
  Tensor tx = TENSOR(logits, DT_F32, DEVICE_CPU, 9, 7),
         td = TENSOR(d, DT_F32, DEVICE_CPU, 9, 7);
  Tensor tl = TENSOR(&loss, DT_F32, DEVICE_CPU, 1),
         tr = TENSOR(rows, DT_F32, DEVICE_CPU, 9);
  const char *names[2] = {"xent", "xent_ls"};
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 2; k++) {
      char key[64];
      op_softmax_xent(&cpu, &tx, &labels[k], s ? 0.1f : 0.0f, IGNORE, 1.0f, &tl, &tr,
                      &td);
      snprintf(key, sizeof key, "%s.loss", names[s]);
      check_golden(g, key, &loss, 1, TOL_GOLDEN);
      snprintf(key, sizeof key, "%s.dlogits", names[s]);
      check_golden(g, key, d, 63, TOL_GOLDEN);
      // Rows 1 and 5 are ignored: zero row loss; the others average to loss.
      double sum = 0;
      for (int i = 0; i < 9; i++) sum += rows[i];
      CHECK(rows[1] == 0.0f && rows[5] == 0.0f);
      CHECK_NEAR(sum / 7, loss, 1e-6);
      // grad_scale multiplies the gradient, not the loss.
      float loss1 = loss;
      op_softmax_xent(&cpu, &tx, &labels[k], s ? 0.1f : 0.0f, IGNORE, 8.0f, &tl, NULL,
                      &td);
      for (int i = 0; i < 63; i++) d[i] /= 8.0f;
      check_golden(g, key, d, 63, TOL_GOLDEN);
      CHECK(loss == loss1);
    }
  golden_free(g);
}

static void bce_smooth_l1_match_torch(void) {
  GoldenFile *g = golden_load("loss.gld");
  int64_t n;
  float *x = golden_get(g, "bce.x", &n), *t = golden_get(g, "bce.t", &n);
  float loss, d[23];
  Tensor tl = TENSOR(&loss, DT_F32, DEVICE_CPU, 1);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 4, 5),
         tt = TENSOR(t, DT_F32, DEVICE_CPU, 4, 5);
  Tensor td = TENSOR(d, DT_F32, DEVICE_CPU, 4, 5);
  op_bce_logits(&cpu, &tx, &tt, 1.0f, &tl, &td);
  check_golden(g, "bce.loss", &loss, 1, TOL_GOLDEN);
  check_golden(g, "bce.dx", d, 20, TOL_GOLDEN);
  float *p = golden_get(g, "sl1.p", &n);
  t = golden_get(g, "sl1.t", &n);
  Tensor tp = TENSOR(p, DT_F32, DEVICE_CPU, 23);
  tt = TENSOR(t, DT_F32, DEVICE_CPU, 23), td = TENSOR(d, DT_F32, DEVICE_CPU, 23);
  op_smooth_l1(&cpu, &tp, &tt, 0.5f, 1.0f, &tl, &td);
  check_golden(g, "sl1.loss", &loss, 1, TOL_GOLDEN);
  check_golden(g, "sl1.dp", d, 23, TOL_GOLDEN);
  golden_free(g);
}

static void edge_cases(void) {
  // Every row ignored: loss 0 and no gradient (not 0/0).
  float x[6] = {1, 2, 3, 4, 5, 6}, d[6], loss = NAN;
  int32_t labels[2] = {IGNORE, IGNORE};
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 2, 3),
         td = TENSOR(d, DT_F32, DEVICE_CPU, 2, 3);
  Tensor tlab = TENSOR(labels, DT_I32, DEVICE_CPU, 2),
         tl = TENSOR(&loss, DT_F32, DEVICE_CPU, 1);
  op_softmax_xent(&cpu, &tx, &tlab, 0.1f, IGNORE, 1.0f, &tl, NULL, &td);
  CHECK(loss == 0.0f);
  for (int i = 0; i < 6; i++) CHECK(d[i] == 0.0f);
  // Huge logits: the stable form stays finite and exact.
  float big[4] = {100, -100, 100, -100}, t[4] = {0, 1, 1, 0};
  Tensor tb = TENSOR(big, DT_F32, DEVICE_CPU, 4), tt = TENSOR(t, DT_F32, DEVICE_CPU, 4);
  Tensor tdb = TENSOR(d, DT_F32, DEVICE_CPU, 4);
  op_bce_logits(&cpu, &tb, &tt, 1.0f, &tl, &tdb);
  CHECK_NEAR(loss, 50.0, 1e-4);  // (100 + 100 + ~0 + ~0) / 4
  CHECK_NEAR(d[0], 0.25, 1e-6);
  CHECK_NEAR(d[1], -0.25, 1e-6);
  CHECK_NEAR(d[2], 0.0, 1e-6);
}

// ---------------------------------------------------------------- finite differences
typedef struct LossCase {
  int which;  // 0 cross-entropy, 1 BCE, 2 smooth L1
  int64_t rows, cols;
  float *x, *t, *d;
  int32_t *labels;
} LossCase;

static double case_loss(void *ctx) {
  LossCase *c = ctx;
  float loss;
  Tensor tx = TENSOR(c->x, DT_F32, DEVICE_CPU, c->rows, c->cols);
  Tensor td = TENSOR(c->d, DT_F32, DEVICE_CPU, c->rows, c->cols);
  Tensor tt = TENSOR(c->t, DT_F32, DEVICE_CPU, c->rows, c->cols);
  Tensor tl = TENSOR(&loss, DT_F32, DEVICE_CPU, 1);
  Tensor tlab = TENSOR(c->labels, DT_I32, DEVICE_CPU, c->rows);
  if (c->which == 0)
    op_softmax_xent(&cpu, &tx, &tlab, 0.1f, IGNORE, 1.0f, &tl, NULL, &td);
  else if (c->which == 1)
    op_bce_logits(&cpu, &tx, &tt, 1.0f, &tl, &td);
  else
    op_smooth_l1(&cpu, &tx, &tt, 0.7f, 1.0f, &tl, &td);
  return loss;
}

static void losses_gradcheck(void) {
  const int64_t shapes[][2] = {{5, 7}, {1, 3}, {9, 31}};
  const char *names[] = {"cross-entropy", "bce", "smooth l1"};
  for (int which = 0; which < 3; which++)
    for (int s = 0; s < 3; s++) {
      LossCase c = {.which = which, .rows = shapes[s][0], .cols = shapes[s][1]};
      int64_t n = c.rows * c.cols;
      c.x = random_array(n, 10 + s, -3, 3, DT_F32);
      c.t = random_array(n, 20 + s, which == 1 ? 0 : -3, which == 1 ? 1 : 3, DT_F32);
      c.d = calloc((size_t)n, sizeof(float));
      c.labels = malloc((size_t)c.rows * sizeof(int32_t));
      Rng r = rng_make(30 + s, 0);
      for (int64_t i = 0; i < c.rows; i++)  // every third row ignored
        c.labels[i] = i % 3 == 1 ? IGNORE : (int32_t)rng_next_below(&r, (uint32_t)c.cols);
      case_loss(&c);
      float *grad = malloc((size_t)n * sizeof(float));
      memcpy(grad, c.d, (size_t)n * sizeof(float));
      // The loss is an fp32 mean, so its rounding (~1e-7 of order 1) over
      // 2 eps is ~1e-7 n / eps relative to gradients of order 1 / n: eps
      // 1e-2 keeps that below 3e-3 for n <= 279, and the truncation error
      // (eps^2 times the third derivative) is smaller still; the floor
      // 1 / n (the typical gradient) covers those near zero. Smooth L1's gradient is
      // continuous at its kink |d| = beta, so a sample that straddles it is
      // off by at most eps / (2 beta) relative: 7e-3.
      double e = test_gradcheck(case_loss, &c, c.x, grad, n, 1e-2f, 80, 1.0 / (double)n);
      CHECK_MSG(e < 2e-2, "%s shape %d: %.3g", names[which], s, e);
      free(c.x), free(c.t), free(c.d), free(c.labels), free(grad);
    }
}

// ---------------------------------------------------------------- bad input
static void xent_bad_label(void *ctx) {
  (void)ctx;
  float x[6] = {0}, d[6], loss;
  int64_t labels[2] = {1, 3};
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 2, 3),
         td = TENSOR(d, DT_F32, DEVICE_CPU, 2, 3);
  Tensor tlab = TENSOR(labels, DT_I64, DEVICE_CPU, 2),
         tl = TENSOR(&loss, DT_F32, DEVICE_CPU, 1);
  op_softmax_xent(&cpu, &tx, &tlab, 0.0f, IGNORE, 1.0f, &tl, NULL, &td);
}

static void bad_input_dies(void) {
  CHECK_DIES_WITH(xent_bad_label, NULL, "label 3 of row 1 is outside [0, 3)");
}

// ---------------------------------------------------------------- CUDA against CPU
// Gradients are computed in fp32 like the CPU's (expf/logf within 2 ulp)
// and rounded once to the dtype: rounding_tol (ops_test_util.h). The loss
// scalar is an fp32 sum in another order: 1e-5 relative.

static void xent_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t rows = 67, cols = 5003;
  for (int d = 0; d < N_FLOAT_DTYPES; d++)
    for (int wide = 0; wide < 2; wide++) {
      DType dt = kFloatDtypes[d], it = wide ? DT_I64 : DT_I32;
      TestPair x = PAIR(dt, 1, -5, 5, rows, cols), dx = PAIR(dt, 0, 0, 0, rows, cols);
      TestPair labels = PAIR(it, 2, 0, (float)cols, rows);
      for (int64_t i = 0; i < rows; i += 4) labels.host[i] = IGNORE;
      x.host[1] = INFINITY;  // in ignored row 0: its gradient is still exact zeros
      device_free(DEVICE_CUDA, x.dev);
      x.dev = x.d.data = upload(x.host, rows * cols, dt);
      device_free(DEVICE_CUDA, labels.dev);
      labels.dev = labels.d.data = upload(labels.host, rows, it);
      int32_t *l32 = malloc((size_t)rows * sizeof(int32_t));
      for (int64_t i = 0; i < rows; i++) l32[i] = (int32_t)labels.host[i];
      Tensor hl = TENSOR(l32, DT_I32, DEVICE_CPU, rows);
      TestPair loss = PAIR(DT_F32, 0, 0, 0, 1), row_loss = PAIR(DT_F32, 0, 0, 0, rows);
      op_softmax_xent(&cpu, &x.h, &hl, 0.1f, IGNORE, 4.0f, &loss.h, &row_loss.h, &dx.h);
      op_softmax_xent(&gpu, &x.d, &labels.d, 0.1f, IGNORE, 4.0f, &loss.d, &row_loss.d,
                      &dx.d);
      device_sync(&gpu);
      pair_check("cross-entropy loss", &loss, 1e-5);
      pair_check("cross-entropy row loss", &row_loss, 1e-5);
      pair_check("cross-entropy dlogits", &dx, tol_rounded(dt));
      TestPair *all[] = {&x, &dx, &labels, &loss, &row_loss};
      for (int i = 0; i < 5; i++) pair_free(all[i]);
      free(l32);
    }
  device_close(&gpu);
}

static void elementwise_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t n = 300007;  // more than the reduction grid covers in one sweep
  for (int d = 0; d < N_FLOAT_DTYPES; d++) {
    DType dt = kFloatDtypes[d];
    TestPair x = PAIR(dt, 1, -8, 8, n), dx = PAIR(dt, 0, 0, 0, n);
    TestPair t = PAIR(DT_F32, 2, 0, 1, n), loss = PAIR(DT_F32, 0, 0, 0, 1);
    op_bce_logits(&cpu, &x.h, &t.h, 1024.0f, &loss.h, &dx.h);
    op_bce_logits(&gpu, &x.d, &t.d, 1024.0f, &loss.d, &dx.d);
    device_sync(&gpu);
    pair_check("bce loss", &loss, 1e-5);
    pair_check("bce dlogits", &dx, tol_rounded(dt));
    op_smooth_l1(&cpu, &x.h, &t.h, 1.0f, 1024.0f, &loss.h, &dx.h);
    op_smooth_l1(&gpu, &x.d, &t.d, 1.0f, 1024.0f, &loss.d, &dx.d);
    device_sync(&gpu);
    pair_check("smooth l1 loss", &loss, 1e-5);
    pair_check("smooth l1 dpred", &dx, tol_rounded(dt));
    TestPair *all[] = {&x, &dx, &t, &loss};
    for (int i = 0; i < 4; i++) pair_free(all[i]);
  }
  device_close(&gpu);
}

int main(void) {
  TEST_RUN(xent_matches_torch);
  TEST_RUN(bce_smooth_l1_match_torch);
  TEST_RUN(edge_cases);
  TEST_RUN(losses_gradcheck);
  TEST_RUN(bad_input_dies);
  TEST_RUN(xent_cuda_matches_cpu);
  TEST_RUN(elementwise_cuda_matches_cpu);
  return test_finish();
}
