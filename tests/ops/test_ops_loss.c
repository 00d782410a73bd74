// Losses: softmax cross-entropy (label smoothing, ignore index), BCE with
// logits and smooth L1 against PyTorch (tests/golden/loss.gld, from
// gen_dense.py), edge cases, bad input. CUDA against CPU and the gradient
// checks: test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
  TEST_RUN(xent_matches_torch);
  TEST_RUN(bce_smooth_l1_match_torch);
  TEST_RUN(edge_cases);
  TEST_RUN(bad_input_dies);
  return test_finish();
}
