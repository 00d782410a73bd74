// Layer norm: against PyTorch (tests/golden/seq.gld, from gen_dense.py),
// the accumulating backward included. CUDA against CPU and the gradient
// checks: test_ops_table.c.
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

int main(void) {
  TEST_RUN(layernorm_matches_torch);
  return test_finish();
}
