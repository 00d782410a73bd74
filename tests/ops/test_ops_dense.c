// Dense ops: GEMM, linear and embedding against PyTorch (tests/golden/dense.gld,
// from gen_dense.py), backward against finite differences, bad input, and the
// CUDA path against the CPU reference for every float dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
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

// ---------------------------------------------------------------- finite differences
typedef struct LinearCase {
  int64_t m, in, out;
  float *x, *w, *b, *y, *r;  // r: (M, out) weights of the scalar loss sum(y r)
} LinearCase;

static double linear_loss(void *ctx) {
  LinearCase *c = ctx;
  Tensor tx = TENSOR(c->x, DT_F32, DEVICE_CPU, c->m, c->in);
  Tensor tw = TENSOR(c->w, DT_F32, DEVICE_CPU, c->out, c->in);
  Tensor tb = TENSOR(c->b, DT_F32, DEVICE_CPU, c->out);
  Tensor ty = TENSOR(c->y, DT_F32, DEVICE_CPU, c->m, c->out);
  op_linear_fwd(&cpu, &tx, &tw, &tb, &ty);
  double sum = 0;
  for (int64_t i = 0; i < c->m * c->out; i++) sum += (double)c->y[i] * c->r[i];
  return sum;
}

static void linear_gradcheck(void) {
  const int64_t shapes[][3] = {{3, 5, 4}, {1, 7, 1}, {6, 3, 11}};
  for (int s = 0; s < 3; s++) {
    LinearCase c = {.m = shapes[s][0], .in = shapes[s][1], .out = shapes[s][2]};
    c.x = random_array(c.m * c.in, 1 + s, -1, 1, DT_F32);
    c.w = random_array(c.out * c.in, 2 + s, -1, 1, DT_F32);
    c.b = random_array(c.out, 3 + s, -1, 1, DT_F32);
    c.r = random_array(c.m * c.out, 4 + s, -1, 1, DT_F32);
    c.y = malloc((size_t)(c.m * c.out) * sizeof(float));
    float *dx = malloc((size_t)(c.m * c.in) * sizeof(float));
    float *dw = malloc((size_t)(c.out * c.in) * sizeof(float));
    float *db = malloc((size_t)c.out * sizeof(float));
    Tensor tx = TENSOR(c.x, DT_F32, DEVICE_CPU, c.m, c.in);
    Tensor tw = TENSOR(c.w, DT_F32, DEVICE_CPU, c.out, c.in);
    Tensor tr = TENSOR(c.r, DT_F32, DEVICE_CPU, c.m, c.out);
    Tensor tdx = TENSOR(dx, DT_F32, DEVICE_CPU, c.m, c.in);
    Tensor tdw = TENSOR(dw, DT_F32, DEVICE_CPU, c.out, c.in);
    Tensor tdb = TENSOR(db, DT_F32, DEVICE_CPU, c.out);
    op_linear_bwd(&cpu, &tx, &tw, &tr, &tdx, &tdw, &tdb, false);
    // The loss is linear in each input, so central differences are exact up
    // to fp32 rounding of the loss (~1e-7 |loss| / eps).
    double ex = test_gradcheck(linear_loss, &c, c.x, dx, c.m * c.in, 1e-2f, 50, 1e-1);
    double ew = test_gradcheck(linear_loss, &c, c.w, dw, c.out * c.in, 1e-2f, 50, 1e-1);
    double eb = test_gradcheck(linear_loss, &c, c.b, db, c.out, 1e-2f, 50, 1e-1);
    CHECK_MSG(ex < 1e-3 && ew < 1e-3 && eb < 1e-3, "shape %d: dx %.3g dw %.3g db %.3g", s,
              ex, ew, eb);
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y), free(dx), free(dw), free(db);
  }
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

// ---------------------------------------------------------------- CUDA against CPU
// Tolerances: tol_gemm (fp32, TF32, fp16, bf16; ops_test_util.h). The
// linear bias and the sums of bf16/fp16 column data add one more rounding
// at most, within the same bounds.

// One GEMM case on both backends: a (batch_a, rows_a, cols_a) etc.
static void gemm_case(const Device *gpu, DType dtype, bool tf32, int64_t batch, int64_t m,
                      int64_t n, int64_t k, bool ta, bool tb, bool shared_b, float beta,
                      uint64_t seed) {
  int64_t na = batch * m * k, nb = (shared_b ? 1 : batch) * k * n, nc = batch * m * n;
  float *a = random_array(na, seed, -1, 1, dtype),
        *b = random_array(nb, seed + 1, -1, 1, dtype);
  float *c = random_array(nc, seed + 2, -1, 1, dtype);
  void *da = upload(a, na, dtype), *db = upload(b, nb, dtype), *dc = upload(c, nc, dtype);
  Tensor ha = TENSOR(a, DT_F32, DEVICE_CPU, batch, ta ? k : m, ta ? m : k);
  Tensor hb = shared_b ? TENSOR(b, DT_F32, DEVICE_CPU, tb ? n : k, tb ? k : n)
                       : TENSOR(b, DT_F32, DEVICE_CPU, batch, tb ? n : k, tb ? k : n);
  Tensor hc = TENSOR(c, DT_F32, DEVICE_CPU, batch, m, n);
  Tensor ga = ha, gb = hb, gc = hc;
  ga.data = da, gb.data = db, gc.data = dc;
  ga.dtype = gb.dtype = gc.dtype = dtype;
  ga.device = gb.device = gc.device = DEVICE_CUDA;
  op_gemm(&cpu, &ha, ta, &hb, tb, &hc, 0.75f, beta);
  op_gemm_set_tf32(gpu, tf32);
  op_gemm(gpu, &ga, ta, &gb, tb, &gc, 0.75f, beta);
  op_gemm_set_tf32(gpu, false);
  device_sync(gpu);
  check_close(tf32 ? "gemm (tf32)" : "gemm", dtype, dc, c, nc, tol_gemm(dtype, tf32));
  device_free(DEVICE_CUDA, da), device_free(DEVICE_CUDA, db),
      device_free(DEVICE_CUDA, dc);
  free(a), free(b), free(c);
}

static void gemm_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  for (int d = 0; d < N_FLOAT_DTYPES; d++)
    for (int t = 0; t < 4; t++) {
      bool ta = t & 1, tb = t & 2;
      gemm_case(&gpu, kFloatDtypes[d], false, 3, 37, 19, 65, ta, tb, false, 0.0f, 10 + t);
      gemm_case(&gpu, kFloatDtypes[d], false, 2, 8, 129, 33, ta, tb, true, 0.5f, 20 + t);
      gemm_case(&gpu, kFloatDtypes[d], false, 1, 256, 128, 512, ta, tb, false, 1.0f,
                30 + t);
    }
  gemm_case(&gpu, DT_F32, true, 2, 97, 61, 300, false, true, false, 0.0f, 40);
  for (int t = 0; t < 4; t++)  // an empty inner dimension: c = beta c
    gemm_case(&gpu, DT_F32, false, 2, 5, 7, 0, t & 1, t & 2, false, 0.5f, 50 + t);
  device_close(&gpu);
}

static void linear_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t m = 45, in = 67, out = 23;  // odd sizes
  for (int d = 0; d < N_FLOAT_DTYPES; d++) {
    DType dt = kFloatDtypes[d];
    float *x = random_array(m * in, 1, -1, 1, dt),
          *w = random_array(out * in, 2, -1, 1, dt);
    float *b = random_array(out, 3, -1, 1, DT_F32),
          *dy = random_array(m * out, 4, -1, 1, dt);
    float *y = malloc(m * out * sizeof(float)), *dx = malloc(m * in * sizeof(float));
    float *dw = random_array(out * in, 5, -1, 1, DT_F32),
          *db = random_array(out, 6, -1, 1, DT_F32);
    void *gx = upload(x, m * in, dt), *gw = upload(w, out * in, dt),
         *gb = upload(b, out, DT_F32);
    void *gdy = upload(dy, m * out, dt);
    void *gy = device_alloc(DEVICE_CUDA, m * out * dtype_size(dt));
    void *gdx = device_alloc(DEVICE_CUDA, m * in * dtype_size(dt));
    void *gdw = upload(dw, out * in, DT_F32), *gdb = upload(db, out, DT_F32);
    Tensor hx = TENSOR(x, DT_F32, DEVICE_CPU, m, in),
           hw = TENSOR(w, DT_F32, DEVICE_CPU, out, in);
    Tensor hb = TENSOR(b, DT_F32, DEVICE_CPU, out),
           hy = TENSOR(y, DT_F32, DEVICE_CPU, m, out);
    Tensor hdy = TENSOR(dy, DT_F32, DEVICE_CPU, m, out),
           hdx = TENSOR(dx, DT_F32, DEVICE_CPU, m, in);
    Tensor hdw = TENSOR(dw, DT_F32, DEVICE_CPU, out, in),
           hdb = TENSOR(db, DT_F32, DEVICE_CPU, out);
    Tensor tx = TENSOR(gx, dt, DEVICE_CUDA, m, in),
           tw = TENSOR(gw, dt, DEVICE_CUDA, out, in);
    Tensor tb = TENSOR(gb, DT_F32, DEVICE_CUDA, out),
           ty = TENSOR(gy, dt, DEVICE_CUDA, m, out);
    Tensor tdy = TENSOR(gdy, dt, DEVICE_CUDA, m, out),
           tdx = TENSOR(gdx, dt, DEVICE_CUDA, m, in);
    Tensor tdw = TENSOR(gdw, DT_F32, DEVICE_CUDA, out, in),
           tdb = TENSOR(gdb, DT_F32, DEVICE_CUDA, out);
    op_linear_fwd(&cpu, &hx, &hw, &hb, &hy);
    op_linear_fwd(&gpu, &tx, &tw, &tb, &ty);
    // Accumulating into random fp32 gradients checks the beta path as well.
    op_linear_bwd(&cpu, &hx, &hw, &hdy, &hdx, &hdw, &hdb, true);
    op_linear_bwd(&gpu, &tx, &tw, &tdy, &tdx, &tdw, &tdb, true);
    device_sync(&gpu);
    double tol = tol_gemm(dt, false);
    check_close("linear y", dt, gy, y, m * out, tol);
    check_close("linear dx", dt, gdx, dx, m * in, tol);
    // fp32 outputs: only the inputs were rounded, and the CPU saw the same.
    check_close("linear dw", DT_F32, gdw, dw, out * in, 1e-5);
    check_close("linear db", DT_F32, gdb, db, out, 1e-5);
    void *bufs[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb};
    for (int i = 0; i < 8; i++) device_free(DEVICE_CUDA, bufs[i]);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
  }
  device_close(&gpu);
}

// NCF's last layer: bf16 / fp16 x and w, an fp32 y (and so an fp32 dy that
// the trainer casts back to x's dtype before the backward). Only the inputs
// are rounded and the CPU sees the same values: fp32 tolerance.
static void linear_fp32_out_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t m = 1029, in = 65, out = 1;  // one output column, as NCF's logit
  for (int d = 1; d < N_FLOAT_DTYPES; d++) {
    DType dt = kFloatDtypes[d];
    float *x = random_array(m * in, 1, -1, 1, dt), *w = random_array(out * in, 2, -1, 1, dt);
    float *b = random_array(out, 3, -1, 1, DT_F32), *y = malloc(m * out * sizeof(float));
    void *gx = upload(x, m * in, dt), *gw = upload(w, out * in, dt), *gb = upload(b, out, DT_F32);
    void *gy = device_alloc(DEVICE_CUDA, m * out * sizeof(float));
    Tensor hx = TENSOR(x, DT_F32, DEVICE_CPU, m, in), hw = TENSOR(w, DT_F32, DEVICE_CPU, out, in);
    Tensor hb = TENSOR(b, DT_F32, DEVICE_CPU, out), hy = TENSOR(y, DT_F32, DEVICE_CPU, m, out);
    Tensor tx = TENSOR(gx, dt, DEVICE_CUDA, m, in), tw = TENSOR(gw, dt, DEVICE_CUDA, out, in);
    Tensor tb = TENSOR(gb, DT_F32, DEVICE_CUDA, out), ty = TENSOR(gy, DT_F32, DEVICE_CUDA, m, out);
    op_linear_fwd(&cpu, &hx, &hw, &hb, &hy);
    op_linear_fwd(&gpu, &tx, &tw, &tb, &ty);
    device_sync(&gpu);
    check_close("linear y (fp32 out)", DT_F32, gy, y, m * out, 1e-5);
    void *bufs[] = {gx, gw, gb, gy};
    for (int i = 0; i < 4; i++) device_free(DEVICE_CUDA, bufs[i]);
    free(x), free(w), free(b), free(y);
  }
  device_close(&gpu);
}

static void embedding_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const int64_t n = 1000, vocab = 37, dim = 129;  // ~27 hits per row
  float *idx = malloc(n * sizeof(float));
  int32_t *idx32 = malloc(n * sizeof(int32_t));
  Rng r = rng_make(7, 0);
  for (int64_t i = 0; i < n; i++)
    idx32[i] = (int32_t)(idx[i] = (float)rng_next_below(&r, vocab));
  float *out = malloc(n * dim * sizeof(float)),
        *dtable = malloc(vocab * dim * sizeof(float));
  for (int d = 0; d < N_FLOAT_DTYPES; d++)
    for (int wide = 0; wide < 2; wide++) {
      DType dt = kFloatDtypes[d], it = wide ? DT_I64 : DT_I32;
      float *table = random_array(vocab * dim, 1, -1, 1, dt);
      float *dout = random_array(n * dim, 2, -1, 1, dt);
      void *gi = upload(idx, n, it), *gt = upload(table, vocab * dim, dt);
      void *gdout = upload(dout, n * dim, dt);
      void *gout = device_alloc(DEVICE_CUDA, n * dim * dtype_size(dt));
      void *gdt = device_alloc(DEVICE_CUDA, vocab * dim * sizeof(float));
      Tensor hi = TENSOR(idx32, DT_I32, DEVICE_CPU, n);
      Tensor ht = TENSOR(table, DT_F32, DEVICE_CPU, vocab, dim);
      Tensor hout = TENSOR(out, DT_F32, DEVICE_CPU, n, dim);
      Tensor hdout = TENSOR(dout, DT_F32, DEVICE_CPU, n, dim);
      Tensor hdt = TENSOR(dtable, DT_F32, DEVICE_CPU, vocab, dim);
      Tensor ti = TENSOR(gi, it, DEVICE_CUDA, n),
             tt = TENSOR(gt, dt, DEVICE_CUDA, vocab, dim);
      Tensor tout = TENSOR(gout, dt, DEVICE_CUDA, n, dim);
      Tensor tdout = TENSOR(gdout, dt, DEVICE_CUDA, n, dim);
      Tensor tdt = TENSOR(gdt, DT_F32, DEVICE_CUDA, vocab, dim);
      op_embedding_fwd(&cpu, &hi, &ht, &hout);
      op_embedding_bwd(&cpu, &hi, &hdout, &hdt, false);
      op_embedding_fwd(&gpu, &ti, &tt, &tout);
      op_embedding_bwd(&gpu, &ti, &tdout, &tdt, false);
      device_sync(&gpu);
      check_close("embedding out", dt, gout, out, n * dim, TOL_EXACT);  // a copy: exact
      // fp32 sums of ~27 terms in another order: ~1e-7 relative.
      check_close("embedding dtable", DT_F32, gdt, dtable, vocab * dim, 1e-6);
      void *bufs[] = {gi, gt, gdout, gout, gdt};
      for (int i = 0; i < 5; i++) device_free(DEVICE_CUDA, bufs[i]);
      free(table), free(dout);
    }
  free(idx), free(idx32), free(out), free(dtable);
  device_close(&gpu);
}

int main(void) {
  TEST_RUN(gemm_matches_torch);
  TEST_RUN(gemm_empty_batch_is_nothing);
  TEST_RUN(gemm_empty_inner_dim_scales_c);
  TEST_RUN(linear_matches_torch);
  TEST_RUN(embedding_matches_torch);
  TEST_RUN(linear_gradcheck);
  TEST_RUN(bad_input_dies);
  TEST_RUN(gemm_cuda_matches_cpu);
  TEST_RUN(linear_cuda_matches_cpu);
  TEST_RUN(linear_fp32_out_cuda_matches_cpu);
  TEST_RUN(embedding_cuda_matches_cpu);
  return test_finish();
}
