// GELU, softmax and dropout: against PyTorch (tests/golden/seq.gld),
// dropout against the RNG (which elements it keeps, how many, the scale).
// CUDA against CPU and the gradient checks: test_ops_table.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/activation.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

static void gelu_softmax_match_torch(void) {
  GoldenFile *g = golden_load("seq.gld");
  int64_t n;
  float y[102], dx[102];
  float *x = golden_get(g, "gelu.x", &n), *dy = golden_get(g, "gelu.dy", &n);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 50), ty = TENSOR(y, DT_F32, DEVICE_CPU, 50);
  Tensor tdy = TENSOR(dy, DT_F32, DEVICE_CPU, 50),
         tdx = TENSOR(dx, DT_F32, DEVICE_CPU, 50);
  op_gelu_fwd(&cpu, &tx, &ty);
  op_gelu_bwd(&cpu, &tx, &tdy, &tdx);
  check_golden(g, "gelu.y", y, 50, TOL_GOLDEN);
  check_golden(g, "gelu.dx", dx, 50, TOL_GOLDEN);
  x = golden_get(g, "softmax.x", &n), dy = golden_get(g, "softmax.dy", &n);
  tx = TENSOR(x, DT_F32, DEVICE_CPU, 6, 17), ty = TENSOR(y, DT_F32, DEVICE_CPU, 6, 17);
  tdy = TENSOR(dy, DT_F32, DEVICE_CPU, 6, 17),
  tdx = TENSOR(dx, DT_F32, DEVICE_CPU, 6, 17);
  op_softmax_fwd(&cpu, &tx, &ty);
  op_softmax_bwd(&cpu, &ty, &tdy, &tdx);
  check_golden(g, "softmax.y", y, 102, TOL_GOLDEN);
  check_golden(g, "softmax.dx", dx, 102, TOL_GOLDEN);
  golden_free(g);
}

// GELU and its derivative against double precision (erfc, exp) at every
// 1/4096 of [-12, 12], element by element. The bound follows the fp32
// evaluation in common/ops/activation.c, u = 2^-24: z = |x| / sqrt 2 is
// rounded (u relative) and e^(-z^2) turns that into 2 z^2 u = x^2 u, the
// rounding of -z^2 + P(t) adds as much again; t, P's terms, the exponential
// and the products add 16 u or less. So (2 x^2 + 16) u relative, and 1e-30
// absolute where the result leaves fp32's normal range. Measured here:
// 4e-7 for |x| <= 1, 1.1e-6 for |x| <= 3, 6e-6 for |x| <= 8. libm's erff
// misses the bound from x = -3 down, where 1 + erff(x / sqrt 2) keeps only
// a few bits of Phi.
static void gelu_matches_double_precision(void) {
  enum { N = 24 * 4096 + 1 };
  float *x = out_buf(N), *y = out_buf(N), *dy = out_buf(N), *dx = out_buf(N);
  for (int i = 0; i < N; i++) x[i] = -12.0f + (float)i / 4096.0f, dy[i] = 1.0f;
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, N), ty = TENSOR(y, DT_F32, DEVICE_CPU, N);
  Tensor tdy = TENSOR(dy, DT_F32, DEVICE_CPU, N), tdx = TENSOR(dx, DT_F32, DEVICE_CPU, N);
  op_gelu_fwd(&cpu, &tx, &ty);
  op_gelu_bwd(&cpu, &tx, &tdy, &tdx);
  double worst_y = 0, worst_dx = 0;  // error over the bound
  int bad = 0;
  for (int i = 0; i < N; i++) {
    double v = x[i], cdf = 0.5 * erfc(-v * M_SQRT1_2), pdf = exp(-0.5 * v * v) / sqrt(2 * M_PI);
    double bound = (2 * v * v + 16) * 0x1p-24;
    // dx = Phi + x phi, each term within the bound: their sizes add.
    double err_y = fabs(y[i] - v * cdf) / (bound * fabs(v) * cdf + 1e-30);
    double err_dx = fabs(dx[i] - (cdf + v * pdf)) / (bound * (cdf + fabs(v) * pdf) + 1e-30);
    bad += !(err_y <= 1) || !(err_dx <= 1);
    worst_y = fmax(worst_y, err_y), worst_dx = fmax(worst_dx, err_dx);
  }
  printf("    gelu: worst error %.2f (y), %.2f (dx) of the bound\n", worst_y, worst_dx);
  CHECK_EQ_INT(bad, 0);
  // NaN stays NaN (its gradient too); GELU(+inf) = +inf.
  float special[2] = {NAN, INFINITY}, out[2], grad[2], ones[2] = {1.0f, 1.0f};
  Tensor ts = TENSOR(special, DT_F32, DEVICE_CPU, 2), to = TENSOR(out, DT_F32, DEVICE_CPU, 2);
  Tensor tg = TENSOR(grad, DT_F32, DEVICE_CPU, 2), t1 = TENSOR(ones, DT_F32, DEVICE_CPU, 2);
  op_gelu_fwd(&cpu, &ts, &to);
  op_gelu_bwd(&cpu, &ts, &t1, &tg);
  CHECK(isnan(out[0]) && isnan(grad[0]));
  CHECK(out[1] == INFINITY);
  free(x), free(y), free(dy), free(dx);
}

static void dropout_follows_rng(void) {
  enum { N = 10007 };
  float *x = random_array(N, 3, 0.5f, 1.5f, DT_F32), *y = out_buf(N), *dx = out_buf(N);
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, N), ty = TENSOR(y, DT_F32, DEVICE_CPU, N);
  Tensor tdx = TENSOR(dx, DT_F32, DEVICE_CPU, N);
  op_dropout_fwd(&cpu, &tx, &ty, 0.9f, 77, 5);
  op_dropout_bwd(&cpu, &tx, &tdx, 0.9f, 77, 5);  // dy = x: the same mask and scale
  int kept = 0, wrong = 0;
  for (int i = 0; i < N; i++) {
    bool keep = rng_uniform(77, 5, (uint64_t)i) < 0.9f;
    kept += keep;
    wrong += y[i] != (keep ? x[i] * (1.0f / 0.9f) : 0.0f) || dx[i] != y[i];
  }
  CHECK_EQ_INT(wrong, 0);
  // Binomial(N, 0.9): 5 standard deviations.
  CHECK_NEAR(kept, 0.9 * N, 5 * sqrt(N * 0.09));
  op_dropout_fwd(&cpu, &tx, &ty, 1.0f, 77, 5);
  CHECK(memcmp(x, y, sizeof(float) * N) == 0);
  free(x), free(y), free(dx);
}

int main(void) {
  TEST_RUN(gelu_softmax_match_torch);
  TEST_RUN(gelu_matches_double_precision);
  TEST_RUN(dropout_follows_rng);
  return test_finish();
}
