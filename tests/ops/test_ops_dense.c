// Dense ops: GEMM, linear and embedding against PyTorch (tests/golden/dense.gld,
// from gen_dense.py), empty GEMMs, bad input. CUDA against CPU (TF32 and
// the empty inner dimension included) and the gradient checks:
// test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dense.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};


static void gemm_matches_torch(void) {
  GoldenFile *g = golden_load("dense.gld");
  int64_t n;
  float *a = golden_get(g, "gemm.a", &n), *bt = golden_get(g, "gemm.bt", &n);
  float *c = golden_copy(g, "gemm.c0", &n);  // (2, 5, 3), updated in place
  Tensor ta = TENSOR(a, DT_F32, DEVICE_CPU, 2, 5, 7);
  Tensor tbt = TENSOR(bt, DT_F32, DEVICE_CPU, 2, 3, 7);
  Tensor tc = TENSOR(c, DT_F32, DEVICE_CPU, 2, 5, 3);
  op_gemm(&cpu, &ta, false, &tbt, true, &tc, 0.5f, 2.0f);
  check_golden(g, "gemm.c", c, 30, TOL_GOLDEN);
  // A 2-D transposed a shared by both batch entries; beta 0 ignores c.
  float *at = golden_get(g, "gemm.at", &n), *b = golden_get(g, "gemm.b", &n);
  Tensor tat = TENSOR(at, DT_F32, DEVICE_CPU, 7, 5);
  Tensor tb = TENSOR(b, DT_F32, DEVICE_CPU, 2, 7, 3);
  for (int i = 0; i < 30; i++) c[i] = NAN;
  op_gemm(&cpu, &tat, true, &tb, false, &tc, 1.0f, 0.0f);
  check_golden(g, "gemm.c2", c, 30, TOL_GOLDEN);
  free(c);
  golden_free(g);
}

// An empty batch (3-D operands with batch 0) is no product: the output
// buffer is not touched, and a 2-D output cannot stand for an empty batch.
static void gemm_empty_batch_is_nothing(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 1, 1, 1, 1, 1}, c[4] = {7, 7, 7, 7};
  Tensor ta = TENSOR(a, DT_F32, DEVICE_CPU, 0, 2, 3), tb = TENSOR(b, DT_F32, DEVICE_CPU, 3, 2);
  Tensor tc = TENSOR(c, DT_F32, DEVICE_CPU, 0, 2, 2);
  GemmShape s = op_gemm_shape(&ta, false, &tb, false, &tc);
  CHECK_EQ_INT(s.batch, 0);
  op_gemm(&cpu, &ta, false, &tb, false, &tc, 1.0f, 0.0f);
  CHECK(c[0] == 7 && c[3] == 7);
  // 2-D operands: one product.
  Tensor a2 = TENSOR(a, DT_F32, DEVICE_CPU, 2, 3), c2 = TENSOR(c, DT_F32, DEVICE_CPU, 2, 2);
  CHECK_EQ_INT(op_gemm_shape(&a2, false, &tb, false, &c2).batch, 1);
  op_gemm(&cpu, &a2, false, &tb, false, &c2, 1.0f, 0.0f);
  CHECK(c[0] == 6 && c[1] == 6 && c[2] == 15 && c[3] == 15);
}

// An empty inner dimension (k = 0) is a product of zeros: c = beta c.
static void gemm_empty_inner_dim_scales_c(void) {
  float a[1], b[1], c[6] = {1, 2, 3, 4, 5, 6};
  Tensor ta = TENSOR(a, DT_F32, DEVICE_CPU, 2, 0), tb = TENSOR(b, DT_F32, DEVICE_CPU, 0, 3);
  Tensor tc = TENSOR(c, DT_F32, DEVICE_CPU, 2, 3);
  op_gemm(&cpu, &ta, false, &tb, false, &tc, 1.0f, 0.5f);
  for (int i = 0; i < 6; i++) CHECK(c[i] == 0.5f * (float)(i + 1));
  Tensor tat = TENSOR(a, DT_F32, DEVICE_CPU, 0, 2), tbt = TENSOR(b, DT_F32, DEVICE_CPU, 3, 0);
  op_gemm(&cpu, &tat, true, &tbt, true, &tc, 1.0f, 0.0f);
  for (int i = 0; i < 6; i++) CHECK(c[i] == 0.0f);
}

static void linear_matches_torch(void) {
  GoldenFile *g = golden_load("dense.gld");
  int64_t n;
  float *x = golden_get(g, "linear.x", &n), *w = golden_get(g, "linear.w", &n);
  float *b = golden_get(g, "linear.b", &n), *dy = golden_get(g, "linear.dy", &n);
  float y[36], dx[54], dw[54], db[6];
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 2, 3, 9),
         tw = TENSOR(w, DT_F32, DEVICE_CPU, 6, 9);
  Tensor tb = TENSOR(b, DT_F32, DEVICE_CPU, 6),
         ty = TENSOR(y, DT_F32, DEVICE_CPU, 2, 3, 6);
  Tensor tdy = TENSOR(dy, DT_F32, DEVICE_CPU, 2, 3, 6);
  Tensor tdx = TENSOR(dx, DT_F32, DEVICE_CPU, 2, 3, 9);
  Tensor tdw = TENSOR(dw, DT_F32, DEVICE_CPU, 6, 9),
         tdb = TENSOR(db, DT_F32, DEVICE_CPU, 6);
  op_linear_fwd(&cpu, &tx, &tw, &tb, &ty);
  check_golden(g, "linear.y", y, 36, TOL_GOLDEN);
  for (int i = 0; i < 54; i++) dw[i] = NAN;  // overwritten without accumulate
  for (int i = 0; i < 6; i++) db[i] = NAN;
  op_linear_bwd(&cpu, &tx, &tw, &tdy, &tdx, &tdw, &tdb, false);
  check_golden(g, "linear.dx", dx, 54, TOL_GOLDEN);
  check_golden(g, "linear.dw", dw, 54, TOL_GOLDEN);
  check_golden(g, "linear.db", db, 6, TOL_GOLDEN);
  // A second micro-batch accumulates: the gradients double.
  op_linear_bwd(&cpu, &tx, &tw, &tdy, NULL, &tdw, &tdb, true);
  for (int i = 0; i < 54; i++) dw[i] *= 0.5f;
  for (int i = 0; i < 6; i++) db[i] *= 0.5f;
  check_golden(g, "linear.dw", dw, 54, TOL_GOLDEN);
  check_golden(g, "linear.db", db, 6, TOL_GOLDEN);
  golden_free(g);
}

static void embedding_matches_torch(void) {
  GoldenFile *g = golden_load("dense.gld");
  int64_t n;
  float *idx_f = golden_get(g, "emb.idx", &n), *table = golden_get(g, "emb.table", &n);
  float *dout = golden_get(g, "emb.dy", &n);
  int32_t idx32[11];
  int64_t idx64[11];
  for (int i = 0; i < 11; i++) idx64[i] = idx32[i] = (int32_t)idx_f[i];
  float out[55], dtable[40];
  Tensor ttable = TENSOR(table, DT_F32, DEVICE_CPU, 8, 5);
  Tensor tout = TENSOR(out, DT_F32, DEVICE_CPU, 11, 5);
  Tensor tdout = TENSOR(dout, DT_F32, DEVICE_CPU, 11, 5);
  Tensor tdtable = TENSOR(dtable, DT_F32, DEVICE_CPU, 8, 5);
  Tensor ids[2] = {TENSOR(idx32, DT_I32, DEVICE_CPU, 11),
                   TENSOR(idx64, DT_I64, DEVICE_CPU, 11)};
  for (int k = 0; k < 2; k++) {
    op_embedding_fwd(&cpu, &ids[k], &ttable, &tout);
    check_golden(g, "emb.out", out, 55, TOL_EXACT);  // a copy: exact
    for (int i = 0; i < 40; i++) dtable[i] = NAN;
    op_embedding_bwd(&cpu, &ids[k], &tdout, &tdtable, false);
    // Row 2 sums four gradient rows, row 5 three, rows 4 and 6 get none.
    check_golden(g, "emb.dtable", dtable, 40, TOL_GOLDEN);
  }
  golden_free(g);
}

// ---------------------------------------------------------------- bad input
static void embed_bad_index(void *ctx) {
  (void)ctx;
  int32_t idx[3] = {1, 9, 0};
  float table[4 * 2] = {0}, out[3 * 2];
  Tensor ti = TENSOR(idx, DT_I32, DEVICE_CPU, 3),
         tt = TENSOR(table, DT_F32, DEVICE_CPU, 4, 2);
  Tensor to = TENSOR(out, DT_F32, DEVICE_CPU, 3, 2);
  op_embedding_fwd(&cpu, &ti, &tt, &to);
}

static void gemm_bad_shape(void *ctx) {
  (void)ctx;
  float a[6], b[6], c[4];
  Tensor ta = TENSOR(a, DT_F32, DEVICE_CPU, 2, 3),
         tb = TENSOR(b, DT_F32, DEVICE_CPU, 2, 3);
  Tensor tc = TENSOR(c, DT_F32, DEVICE_CPU, 2, 2);
  op_gemm(&cpu, &ta, false, &tb, false, &tc, 1.0f, 0.0f);  // (2, 3) x (2, 3)
}

static void bad_input_dies(void) {
  CHECK_DIES_WITH(embed_bad_index, NULL,
                  "index 9 at position 1 is outside the table [0, 4)");
  CHECK_DIES_WITH(gemm_bad_shape, NULL, "op_gemm: precondition failed");
}

int main(void) {
  TEST_RUN(gemm_matches_torch);
  TEST_RUN(gemm_empty_batch_is_nothing);
  TEST_RUN(gemm_empty_inner_dim_scales_c);
  TEST_RUN(linear_matches_torch);
  TEST_RUN(embedding_matches_torch);
  TEST_RUN(bad_input_dies);
  return test_finish();
}
