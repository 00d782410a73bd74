// GELU, softmax and dropout: against PyTorch (tests/golden/seq.gld),
// dropout against the RNG (which elements it keeps, how many, the scale).
// CUDA against CPU and the gradient checks: test_ops_table.c.
#include <math.h>
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
  TEST_RUN(dropout_follows_rng);
  return test_finish();
}
