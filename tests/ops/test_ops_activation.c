// GELU, softmax and dropout: against PyTorch (tests/golden/seq.gld),
// dropout against the RNG, backward against finite differences, the CUDA
// path against the CPU reference for every float dtype.
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

// GELU or softmax (which) on (m, c): loss sum(y r).
typedef struct RowCase {
  int which;
  int64_t m, c;
  float *x, *y, *r;
} RowCase;

static double row_loss(void *ctx) {
  RowCase *c = ctx;
  Tensor tx = TENSOR(c->x, DT_F32, DEVICE_CPU, c->m, c->c);
  Tensor ty = TENSOR(c->y, DT_F32, DEVICE_CPU, c->m, c->c);
  if (c->which == 0)
    op_gelu_fwd(&cpu, &tx, &ty);
  else
    op_softmax_fwd(&cpu, &tx, &ty);
  double sum = 0;
  for (int64_t i = 0; i < c->m * c->c; i++) sum += (double)c->y[i] * c->r[i];
  return sum;
}

static void gelu_softmax_gradcheck(void) {
  const int64_t shapes[][2] = {{3, 7}, {1, 1}, {5, 31}};
  for (int which = 0; which < 2; which++)
    for (int s = 0; s < 3; s++) {
      RowCase c = {.which = which, .m = shapes[s][0], .c = shapes[s][1]};
      int64_t n = c.m * c.c;
      c.x = random_array(n, 50 + s, -3, 3, DT_F32),
      c.r = random_array(n, 60 + s, -1, 1, DT_F32);
      c.y = out_buf(n);
      float *dx = out_buf(n);
      row_loss(&c);
      Tensor tx = TENSOR(c.x, DT_F32, DEVICE_CPU, c.m, c.c),
             ty = TENSOR(c.y, DT_F32, DEVICE_CPU, c.m, c.c);
      Tensor tr = TENSOR(c.r, DT_F32, DEVICE_CPU, c.m, c.c),
             tdx = TENSOR(dx, DT_F32, DEVICE_CPU, c.m, c.c);
      if (which == 0)
        op_gelu_bwd(&cpu, &tx, &tr, &tdx);
      else
        op_softmax_bwd(&cpu, &ty, &tr, &tdx);
      double e = test_gradcheck(row_loss, &c, c.x, dx, n, FD_EPS, 60, FD_FLOOR);
      CHECK_MSG(e < FD_TOL, "%s shape %d: %.3g", which ? "softmax" : "gelu", s, e);
      free(c.x), free(c.r), free(c.y), free(dx);
    }
}

static void pointwise_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t m = 37, c = 1000;  // softmax rows wider than a block
  for (int d = 0; d < N_FLOAT_DTYPES; d++) {
    DType dt = kFloatDtypes[d];
    TestPair x = PAIR(dt, 1, -4, 4, m, c), y = PAIR(dt, 0, 0, 0, m, c);
    TestPair dy = PAIR(dt, 2, -1, 1, m, c), dx = PAIR(dt, 0, 0, 0, m, c);
    op_gelu_fwd(&cpu, &x.h, &y.h), op_gelu_fwd(&gpu, &x.d, &y.d);
    op_gelu_bwd(&cpu, &x.h, &dy.h, &dx.h), op_gelu_bwd(&gpu, &x.d, &dy.d, &dx.d);
    device_sync(&gpu);
    // erff and expf on the GPU are within 2 ulp of the host's.
    pair_check("gelu y", &y, tol_rounded(dt));
    pair_check("gelu dx", &dx, tol_rounded(dt));
    // Views one element in: not 16-byte aligned, the one-by-one path.
    size_t skip = dtype_size(dt);
    Tensor hx1 = TENSOR(x.host + 1, DT_F32, DEVICE_CPU, x.n - 1);
    Tensor hy1 = TENSOR(y.host + 1, DT_F32, DEVICE_CPU, x.n - 1);
    Tensor dx1 = TENSOR((char *)x.dev + skip, dt, DEVICE_CUDA, x.n - 1);
    Tensor dy1 = TENSOR((char *)y.dev + skip, dt, DEVICE_CUDA, x.n - 1);
    op_gelu_fwd(&cpu, &hx1, &hy1), op_gelu_fwd(&gpu, &dx1, &dy1);
    device_sync(&gpu);
    pair_check("gelu y (unaligned)", &y, tol_rounded(dt));
    // Softmax bwd on the GPU reads its own (rounded) y: feed the CPU the same.
    op_softmax_fwd(&gpu, &x.d, &y.d);
    device_sync(&gpu);
    op_softmax_fwd(&cpu, &x.h, &y.h);
    pair_check("softmax y", &y, tol_rounded(dt));
    download(y.host, y.dev, y.n, dt);
    op_softmax_bwd(&cpu, &y.h, &dy.h, &dx.h), op_softmax_bwd(&gpu, &y.d, &dy.d, &dx.d);
    device_sync(&gpu);
    pair_check("softmax dx", &dx, tol_rounded(dt));
    // Dropout: the same elements dropped, the kept ones scaled alike.
    op_dropout_fwd(&cpu, &x.h, &y.h, 0.8f, 9, 3),
        op_dropout_fwd(&gpu, &x.d, &y.d, 0.8f, 9, 3);
    op_dropout_bwd(&cpu, &dy.h, &dx.h, 0.8f, 9, 3),
        op_dropout_bwd(&gpu, &dy.d, &dx.d, 0.8f, 9, 3);
    device_sync(&gpu);
    pair_check("dropout y", &y, tol_rounded(dt));
    pair_check("dropout dx", &dx, tol_rounded(dt));
    float *got = out_buf(y.n);
    download(got, y.dev, y.n, dt);
    int64_t mismatched = 0;
    for (int64_t i = 0; i < y.n; i++)
      mismatched += (got[i] == 0.0f) != (y.host[i] == 0.0f);
    CHECK_MSG(mismatched == 0, "dropout (%s): %lld elements masked differently",
              dtype_name(dt), (long long)mismatched);
    free(got);
    TestPair *all[] = {&x, &y, &dy, &dx};
    for (int i = 0; i < 4; i++) pair_free(all[i]);
  }
  device_close(&gpu);
}

int main(void) {
  TEST_RUN(gelu_softmax_match_torch);
  TEST_RUN(dropout_follows_rng);
  TEST_RUN(gelu_softmax_gradcheck);
  TEST_RUN(pointwise_cuda_matches_cpu);
  return test_finish();
}
