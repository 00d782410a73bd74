// Layer norm: against PyTorch (tests/golden/seq.gld, from gen_dense.py),
// backward against finite differences, the CUDA path against the CPU
// reference for every float dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/norm.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

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

// ---------------------------------------------------------------- finite differences
typedef struct LnCase {
  int64_t m, c;
  float *x, *gamma, *beta, *y, *mean, *rstd, *r;
} LnCase;

static double ln_loss(void *ctx) {
  LnCase *c = ctx;
  Tensor tx = TENSOR(c->x, DT_F32, DEVICE_CPU, c->m, c->c);
  Tensor ty = TENSOR(c->y, DT_F32, DEVICE_CPU, c->m, c->c);
  Tensor tg = TENSOR(c->gamma, DT_F32, DEVICE_CPU, c->c);
  Tensor tb = TENSOR(c->beta, DT_F32, DEVICE_CPU, c->c);
  Tensor tm = TENSOR(c->mean, DT_F32, DEVICE_CPU, c->m);
  Tensor tr = TENSOR(c->rstd, DT_F32, DEVICE_CPU, c->m);
  op_layernorm_fwd(&cpu, &tx, &tg, &tb, 1e-5f, &ty, &tm, &tr);
  double sum = 0;
  for (int64_t i = 0; i < c->m * c->c; i++) sum += (double)c->y[i] * c->r[i];
  return sum;
}

static void layernorm_gradcheck(void) {
  const int64_t shapes[][2] = {{3, 7}, {1, 5}, {4, 33}};
  for (int s = 0; s < 3; s++) {
    LnCase c = {.m = shapes[s][0], .c = shapes[s][1]};
    int64_t n = c.m * c.c;
    c.x = random_array(n, 10 + s, -2, 2, DT_F32),
    c.r = random_array(n, 20 + s, -1, 1, DT_F32);
    c.gamma = random_array(c.c, 30 + s, 0.5f, 1.5f, DT_F32);
    c.beta = random_array(c.c, 40 + s, -1, 1, DT_F32);
    c.y = out_buf(n), c.mean = out_buf(c.m), c.rstd = out_buf(c.m);
    float *dx = out_buf(n), *dg = out_buf(c.c), *db = out_buf(c.c);
    ln_loss(&c);
    Tensor tx = TENSOR(c.x, DT_F32, DEVICE_CPU, c.m, c.c),
           tr = TENSOR(c.r, DT_F32, DEVICE_CPU, c.m, c.c);
    Tensor tg = TENSOR(c.gamma, DT_F32, DEVICE_CPU, c.c);
    Tensor tm = TENSOR(c.mean, DT_F32, DEVICE_CPU, c.m),
           ts = TENSOR(c.rstd, DT_F32, DEVICE_CPU, c.m);
    Tensor tdx = TENSOR(dx, DT_F32, DEVICE_CPU, c.m, c.c);
    Tensor tdg = TENSOR(dg, DT_F32, DEVICE_CPU, c.c),
           tdb = TENSOR(db, DT_F32, DEVICE_CPU, c.c);
    op_layernorm_bwd(&cpu, &tx, &tg, &tm, &ts, &tr, &tdx, &tdg, &tdb, false);
    double ex = test_gradcheck(ln_loss, &c, c.x, dx, n, FD_EPS, 60, FD_FLOOR);
    double eg = test_gradcheck(ln_loss, &c, c.gamma, dg, c.c, FD_EPS, 60, FD_FLOOR);
    double eb = test_gradcheck(ln_loss, &c, c.beta, db, c.c, FD_EPS, 60, FD_FLOOR);
    CHECK_MSG(ex < FD_TOL && eg < FD_TOL && eb < FD_TOL,
              "shape %d: dx %.3g dgamma %.3g dbeta %.3g", s, ex, eg, eb);
    free(c.x), free(c.r), free(c.gamma), free(c.beta), free(c.y), free(c.mean),
        free(c.rstd);
    free(dx), free(dg), free(db);
  }
}

// ---------------------------------------------------------------- CUDA against CPU
// Where an op rounds its result once from an fp32 value computed like the
// CPU's, the tolerance is rounding_tol (ops_test_util.h).
static void layernorm_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t m = 301, c = 1031;  // more rows than reduction groups, odd width
  for (int d = 0; d < N_FLOAT_DTYPES; d++) {
    DType dt = kFloatDtypes[d];
    TestPair x = PAIR(dt, 1, -2, 2, m, c), y = PAIR(dt, 0, 0, 0, m, c);
    TestPair gamma = PAIR(DT_F32, 2, 0.5f, 1.5f, c), beta = PAIR(DT_F32, 3, -1, 1, c);
    TestPair mean = PAIR(DT_F32, 0, 0, 0, m), rstd = PAIR(DT_F32, 0, 0, 0, m);
    TestPair dy = PAIR(dt, 4, -1, 1, m, c), dx = PAIR(dt, 0, 0, 0, m, c);
    TestPair dg = PAIR(DT_F32, 5, -1, 1, c), db = PAIR(DT_F32, 6, -1, 1, c);
    op_layernorm_fwd(&cpu, &x.h, &gamma.h, &beta.h, 1e-5f, &y.h, &mean.h, &rstd.h);
    op_layernorm_fwd(&gpu, &x.d, &gamma.d, &beta.d, 1e-5f, &y.d, &mean.d, &rstd.d);
    op_layernorm_bwd(&cpu, &x.h, &gamma.h, &mean.h, &rstd.h, &dy.h, &dx.h, &dg.h, &db.h,
                     true);
    op_layernorm_bwd(&gpu, &x.d, &gamma.d, &mean.d, &rstd.d, &dy.d, &dx.d, &dg.d, &db.d,
                     true);
    device_sync(&gpu);
    // rsqrtf is within 2 ulp of 1/sqrt: fp32 results agree to ~1e-6; the
    // fp32 column sums over 301 rows differ only in order.
    pair_check("layernorm y", &y, tol_rounded(dt));
    pair_check("layernorm mean", &mean, 1e-5);
    pair_check("layernorm rstd", &rstd, 1e-5);
    pair_check("layernorm dx", &dx, tol_rounded(dt));
    pair_check("layernorm dgamma", &dg, 1e-5);
    pair_check("layernorm dbeta", &db, 1e-5);
    TestPair *all[] = {&x, &y, &gamma, &beta, &mean, &rstd, &dy, &dx, &dg, &db};
    for (int i = 0; i < 10; i++) pair_free(all[i]);
  }
  device_close(&gpu);
}

int main(void) {
  TEST_RUN(layernorm_matches_torch);
  TEST_RUN(layernorm_gradcheck);
  TEST_RUN(layernorm_cuda_matches_cpu);
  return test_finish();
}
