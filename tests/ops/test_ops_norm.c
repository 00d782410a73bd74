// Layer norm: against PyTorch (tests/golden/seq.gld, from gen_dense.py),
// the accumulating backward included. Batch norm: training forward, running
// statistics, backward (in place too) and inference against PyTorch
// (tests/golden/conv.gld, from gen_conv.py), plain and with the fused add +
// ReLU; its bad-input case is with the convolution's (test_ops_conv.c). CUDA
// against CPU and the gradient checks: test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/norm.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

#define T4(p, a, b, c, d) TENSOR((p), DT_F32, DEVICE_CPU, (a), (b), (c), (d))
#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static void layernorm_matches_torch(void) {
  GoldenFile *g = golden_load("seq.gld");
  int64_t n;
  float *x = golden_get(g, "ln.x", &n), *gamma = golden_get(g, "ln.gamma", &n);
  float *beta = golden_get(g, "ln.beta", &n), *dy = golden_get(g, "ln.dy", &n);
  float y[91], mean[7], rstd[7], dx[91], dgamma[13], dbeta[13];
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 7, 13),
         ty = TENSOR(y, DT_F32, DEVICE_CPU, 7, 13);
  Tensor tg = TENSOR(gamma, DT_F32, DEVICE_CPU, 13),
         tb = TENSOR(beta, DT_F32, DEVICE_CPU, 13);
  Tensor tm = TENSOR(mean, DT_F32, DEVICE_CPU, 7),
         tr = TENSOR(rstd, DT_F32, DEVICE_CPU, 7);
  Tensor tdy = TENSOR(dy, DT_F32, DEVICE_CPU, 7, 13),
         tdx = TENSOR(dx, DT_F32, DEVICE_CPU, 7, 13);
  Tensor tdg = TENSOR(dgamma, DT_F32, DEVICE_CPU, 13),
         tdb = TENSOR(dbeta, DT_F32, DEVICE_CPU, 13);
  op_layernorm_fwd(&cpu, &tx, &tg, &tb, 1e-5f, &ty, &tm, &tr);
  check_golden(g, "ln.y", y, 91, TOL_GOLDEN);
  check_golden(g, "ln.mean", mean, 7, TOL_GOLDEN);
  check_golden(g, "ln.rstd", rstd, 7, TOL_GOLDEN);
  for (int i = 0; i < 13; i++) dgamma[i] = dbeta[i] = NAN;  // overwritten
  op_layernorm_bwd(&cpu, &tx, &tg, &tm, &tr, &tdy, &tdx, &tdg, &tdb, false);
  check_golden(g, "ln.dx", dx, 91, TOL_GOLDEN);
  check_golden(g, "ln.dgamma", dgamma, 13, TOL_GOLDEN);
  check_golden(g, "ln.dbeta", dbeta, 13, TOL_GOLDEN);
  op_layernorm_bwd(&cpu, &tx, &tg, &tm, &tr, &tdy, &tdx, &tdg, &tdb, true);
  for (int i = 0; i < 13; i++) dgamma[i] *= 0.5f, dbeta[i] *= 0.5f;
  check_golden(g, "ln.dgamma", dgamma, 13, TOL_GOLDEN);
  check_golden(g, "ln.dbeta", dbeta, 13, TOL_GOLDEN);
  golden_free(g);
}

// ---------------------------------------------------------------- golden: batch norm

typedef struct BnHost {
  float gamma[64], beta[64], rmean[64], rvar[64], smean[64], sinvstd[64];
  BatchNorm bn;
} BnHost;

static void bn_host_init(BnHost *h, int64_t c, const float *gamma, const float *beta,
                         const float *rmean, const float *rvar) {
  REQUIRE(c <= 64);
  memcpy(h->gamma, gamma, (size_t)c * 4);
  memcpy(h->beta, beta, (size_t)c * 4);
  memcpy(h->rmean, rmean, (size_t)c * 4);
  memcpy(h->rvar, rvar, (size_t)c * 4);
  h->bn = (BatchNorm){T1(h->gamma, c), T1(h->beta, c), T1(h->rmean, c), T1(h->rvar, c),
                      T1(h->smean, c), T1(h->sinvstd, c), 0.1f, 1e-5f};
}

static void bn_golden_case(const char *c, bool fused) {
  GoldenFile *g = golden_load("conv.gld");
  int32_t d[4];
  golden_i32(g, golden_key(c, "dims"), d, 4);
  int64_t n = d[0] * d[1] * d[2] * d[3], ch = d[3];
  BnHost h;
  bn_host_init(&h, ch, golden_get(g, golden_key(c, "gamma"), NULL),
               golden_get(g, golden_key(c, "beta"), NULL),
               golden_get(g, golden_key(c, "running_mean_in"), NULL),
               golden_get(g, golden_key(c, "running_var_in"), NULL));
  Tensor x = T4(golden_get(g, golden_key(c, "x"), NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = T4(golden_get(g, golden_key(c, "dy"), NULL), d[0], d[1], d[2], d[3]);
  Tensor z = T4(fused ? golden_get(g, golden_key(c, "z"), NULL) : NULL, d[0], d[1], d[2], d[3]);
  float *y = out_buf(n), *dx = out_buf(n), *dz = out_buf(n), dgamma[64], dbeta[64];
  Tensor ty = T4(y, d[0], d[1], d[2], d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  Tensor tdz = T4(dz, d[0], d[1], d[2], d[3]), tdg = T1(dgamma, ch), tdb = T1(dbeta, ch);

  op_batchnorm_fwd_train(&cpu, &h.bn, &x, fused ? &z : NULL, fused, &ty);
  check_golden(g, golden_key(c, "y"), y, n, TOL_GOLDEN);
  check_golden(g, golden_key(c, "running_mean"), h.rmean, ch, TOL_GOLDEN);
  check_golden(g, golden_key(c, "running_var"), h.rvar, ch, TOL_GOLDEN);
  op_batchnorm_bwd(&cpu, &h.bn, &x, &ty, &dy, fused, &tdx, fused ? &tdz : NULL, &tdg, &tdb, false);
  check_golden(g, golden_key(c, "dx"), dx, n, TOL_GOLDEN);
  check_golden(g, golden_key(c, "dgamma"), dgamma, ch, TOL_GOLDEN);
  check_golden(g, golden_key(c, "dbeta"), dbeta, ch, TOL_GOLDEN);
  if (fused) check_golden(g, golden_key(c, "dz"), dz, n, TOL_GOLDEN);
  // In place: the gradient overwrites dy (dx aliasing dy), same result.
  memcpy(dx, dy.data, (size_t)n * sizeof(float));
  op_batchnorm_bwd(&cpu, &h.bn, &x, &ty, &tdx, fused, &tdx, fused ? &tdz : NULL, &tdg, &tdb, false);
  check_golden(g, golden_key(c, "dx"), dx, n, TOL_GOLDEN);
  op_batchnorm_fwd_infer(&cpu, &h.bn, &x, fused ? &z : NULL, fused, &ty);
  check_golden(g, golden_key(c, "y_infer"), y, n, TOL_GOLDEN);
  free(y), free(dx), free(dz);
  golden_free(g);
}

static void batchnorm_matches_pytorch(void) { bn_golden_case("bn", false); }
static void batchnorm_add_relu_matches_pytorch(void) { bn_golden_case("bn_add_relu", true); }

int main(void) {
  TEST_RUN(layernorm_matches_torch);
  TEST_RUN(batchnorm_matches_pytorch);
  TEST_RUN(batchnorm_add_relu_matches_pytorch);
  return test_finish();
}
