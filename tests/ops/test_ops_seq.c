// Sequence ops: layer norm, GELU, softmax and masked attention against
// PyTorch (tests/golden/seq.gld, from gen_dense.py), backward against finite
// differences, dropout against the RNG, bad input, and the CUDA path against
// the CPU reference for every float dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/seq.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

// fp32 against fp32 PyTorch; different summation orders and erf/exp
// implementations differ by a few ulp (relative L2 ~1e-7).
#define GOLDEN_TOL 1e-5

static float *out_buf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

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
  check_golden(g, "ln.y", y, 91, GOLDEN_TOL);
  check_golden(g, "ln.mean", mean, 7, GOLDEN_TOL);
  check_golden(g, "ln.rstd", rstd, 7, GOLDEN_TOL);
  for (int i = 0; i < 13; i++) dgamma[i] = dbeta[i] = NAN;  // overwritten
  op_layernorm_bwd(&cpu, &tx, &tg, &tm, &tr, &tdy, &tdx, &tdg, &tdb, false);
  check_golden(g, "ln.dx", dx, 91, GOLDEN_TOL);
  check_golden(g, "ln.dgamma", dgamma, 13, GOLDEN_TOL);
  check_golden(g, "ln.dbeta", dbeta, 13, GOLDEN_TOL);
  op_layernorm_bwd(&cpu, &tx, &tg, &tm, &tr, &tdy, &tdx, &tdg, &tdb, true);
  for (int i = 0; i < 13; i++) dgamma[i] *= 0.5f, dbeta[i] *= 0.5f;
  check_golden(g, "ln.dgamma", dgamma, 13, GOLDEN_TOL);
  check_golden(g, "ln.dbeta", dbeta, 13, GOLDEN_TOL);
  golden_free(g);
}

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
  check_golden(g, "gelu.y", y, 50, GOLDEN_TOL);
  check_golden(g, "gelu.dx", dx, 50, GOLDEN_TOL);
  x = golden_get(g, "softmax.x", &n), dy = golden_get(g, "softmax.dy", &n);
  tx = TENSOR(x, DT_F32, DEVICE_CPU, 6, 17), ty = TENSOR(y, DT_F32, DEVICE_CPU, 6, 17);
  tdy = TENSOR(dy, DT_F32, DEVICE_CPU, 6, 17),
  tdx = TENSOR(dx, DT_F32, DEVICE_CPU, 6, 17);
  op_softmax_fwd(&cpu, &tx, &ty);
  op_softmax_bwd(&cpu, &ty, &tdy, &tdx);
  check_golden(g, "softmax.y", y, 102, GOLDEN_TOL);
  check_golden(g, "softmax.dx", dx, 102, GOLDEN_TOL);
  golden_free(g);
}

// An attention problem on the host: q (B, Tq, H, D), k and v (B, Tk, H, D).
typedef struct AttnCase {
  int64_t b, h, tq, tk, d;
  bool causal;
  int32_t key_len[4];
  float *q, *k, *v, *probs, *out, *r;  // r: weights of the loss sum(out r)
} AttnCase;

static void attn_tensors(AttnCase *c, Tensor *q, Tensor *k, Tensor *v, Tensor *probs,
                         Tensor *out, Tensor *len) {
  *q = TENSOR(c->q, DT_F32, DEVICE_CPU, c->b, c->tq, c->h, c->d);
  *k = TENSOR(c->k, DT_F32, DEVICE_CPU, c->b, c->tk, c->h, c->d);
  *v = TENSOR(c->v, DT_F32, DEVICE_CPU, c->b, c->tk, c->h, c->d);
  *probs = TENSOR(c->probs, DT_F32, DEVICE_CPU, c->b, c->h, c->tq, c->tk);
  *out = TENSOR(c->out, DT_F32, DEVICE_CPU, c->b, c->tq, c->h, c->d);
  *len = TENSOR(c->key_len, DT_I32, DEVICE_CPU, c->b);
}

static void attention_matches_torch(void) {
  GoldenFile *g = golden_load("seq.gld");
  const char *names[] = {"attn_pad", "attn_causal"};
  for (int t = 0; t < 2; t++) {
    char key[64];
    int64_t n;
#define GET(field) \
  (snprintf(key, sizeof key, "%s.%s", names[t], field), golden_get(g, key, &n))
    AttnCase c = {.b = 2, .h = 3, .tq = 5, .tk = t ? 5 : 6, .d = 4, .causal = t == 1};
    float *len = GET("key_len");
    c.key_len[0] = (int32_t)len[0], c.key_len[1] = (int32_t)len[1];
    c.q = GET("q"), c.k = GET("k"), c.v = GET("v");
    float *dout = GET("dy");
    int64_t nq = c.b * c.tq * c.h * c.d, nk = c.b * c.tk * c.h * c.d;
    int64_t np = c.b * c.h * c.tq * c.tk;
    c.probs = out_buf(np), c.out = out_buf(nq);
    float *scratch = out_buf(np), *dq = out_buf(nq), *dk = out_buf(nk), *dv = out_buf(nk);
    Tensor tq, tk, tv, tp, to, tl;
    attn_tensors(&c, &tq, &tk, &tv, &tp, &to, &tl);
    Tensor tdo = to, ts = tp, tdq = tq, tdk = tk, tdv = tv;
    tdo.data = dout, ts.data = scratch, tdq.data = dq, tdk.data = dk, tdv.data = dv;
    op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, c.causal, &tp, &to);
    op_attention_bwd(&cpu, &tq, &tk, &tv, &tp, &tdo, &ts, &tdq, &tdk, &tdv);
    const char *outs[] = {"probs", "out", "dq", "dk", "dv"};
    float *got[] = {c.probs, c.out, dq, dk, dv};
    int64_t sizes[] = {np, nq, nq, nk, nk};
    for (int i = 0; i < 5; i++) {
      snprintf(key, sizeof key, "%s.%s", names[t], outs[i]);
      check_golden(g, key, got[i], sizes[i], GOLDEN_TOL);
    }
#undef GET
    free(c.probs), free(c.out), free(scratch), free(dq), free(dk), free(dv);
  }
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

// Central differences of the fp32 forward with eps 1e-2: truncation error
// O(eps^2 f''') ~1e-4 and rounding ~1e-7 |loss| / eps ~1e-5, relative to
// gradients of order 1 (floor 1e-2 for the near-zero ones): 1e-2 passes
// every correct gradient and fails any wrong term.
#define FD_EPS 1e-2f
#define FD_TOL 1e-2

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
    double ex = test_gradcheck(ln_loss, &c, c.x, dx, n, FD_EPS, 60, 1e-2);
    double eg = test_gradcheck(ln_loss, &c, c.gamma, dg, c.c, FD_EPS, 60, 1e-2);
    double eb = test_gradcheck(ln_loss, &c, c.beta, db, c.c, FD_EPS, 60, 1e-2);
    CHECK_MSG(ex < FD_TOL && eg < FD_TOL && eb < FD_TOL,
              "shape %d: dx %.3g dgamma %.3g dbeta %.3g", s, ex, eg, eb);
    free(c.x), free(c.r), free(c.gamma), free(c.beta), free(c.y), free(c.mean),
        free(c.rstd);
    free(dx), free(dg), free(db);
  }
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
      double e = test_gradcheck(row_loss, &c, c.x, dx, n, FD_EPS, 60, 1e-2);
      CHECK_MSG(e < FD_TOL, "%s shape %d: %.3g", which ? "softmax" : "gelu", s, e);
      free(c.x), free(c.r), free(c.y), free(dx);
    }
}

static double attn_loss(void *ctx) {
  AttnCase *c = ctx;
  Tensor tq, tk, tv, tp, to, tl;
  attn_tensors(c, &tq, &tk, &tv, &tp, &to, &tl);
  op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, c->causal, &tp, &to);
  double sum = 0;
  for (int64_t i = 0; i < c->b * c->tq * c->h * c->d; i++)
    sum += (double)c->out[i] * c->r[i];
  return sum;
}

static void attention_gradcheck(void) {
  // Cross-attention with padding (one sequence fully padded but for 1 key),
  // and causal self-attention with padding; odd sizes.
  AttnCase cases[] = {
      {.b = 2, .h = 2, .tq = 3, .tk = 7, .d = 5, .causal = false, .key_len = {7, 1}},
      {.b = 3, .h = 1, .tq = 6, .tk = 6, .d = 3, .causal = true, .key_len = {6, 4, 2}},
  };
  for (int t = 0; t < 2; t++) {
    AttnCase c = cases[t];
    int64_t nq = c.b * c.tq * c.h * c.d, nk = c.b * c.tk * c.h * c.d,
            np = c.b * c.h * c.tq * c.tk;
    c.q = random_array(nq, 70 + t, -1.5f, 1.5f, DT_F32);
    c.k = random_array(nk, 80 + t, -1.5f, 1.5f, DT_F32);
    c.v = random_array(nk, 90 + t, -1, 1, DT_F32),
    c.r = random_array(nq, 100 + t, -1, 1, DT_F32);
    c.probs = out_buf(np), c.out = out_buf(nq);
    float *scratch = out_buf(np), *dq = out_buf(nq), *dk = out_buf(nk), *dv = out_buf(nk);
    Tensor tq, tk, tv, tp, to, tl;
    attn_tensors(&c, &tq, &tk, &tv, &tp, &to, &tl);
    attn_loss(&c);
    Tensor tdo = to, ts = tp, tdq = tq, tdk = tk, tdv = tv;
    tdo.data = c.r, ts.data = scratch, tdq.data = dq, tdk.data = dk, tdv.data = dv;
    op_attention_bwd(&cpu, &tq, &tk, &tv, &tp, &tdo, &ts, &tdq, &tdk, &tdv);
    double eq = test_gradcheck(attn_loss, &c, c.q, dq, nq, FD_EPS, 60, 1e-2);
    double ek = test_gradcheck(attn_loss, &c, c.k, dk, nk, FD_EPS, 60, 1e-2);
    double ev = test_gradcheck(attn_loss, &c, c.v, dv, nk, FD_EPS, 60, 1e-2);
    CHECK_MSG(eq < FD_TOL && ek < FD_TOL && ev < FD_TOL,
              "case %d: dq %.3g dk %.3g dv %.3g", t, eq, ek, ev);
    free(c.q), free(c.k), free(c.v), free(c.r), free(c.probs), free(c.out);
    free(scratch), free(dq), free(dk), free(dv);
  }
}

// ---------------------------------------------------------------- bad input
static void attn_bad_length(void *ctx) {
  (void)ctx;
  float q[2 * 4 * 1 * 2] = {0}, p[2 * 1 * 4 * 4], o[2 * 4 * 1 * 2];
  int32_t len[2] = {4, 5};
  Tensor tq = TENSOR(q, DT_F32, DEVICE_CPU, 2, 4, 1, 2),
         tp = TENSOR(p, DT_F32, DEVICE_CPU, 2, 1, 4, 4);
  Tensor to = TENSOR(o, DT_F32, DEVICE_CPU, 2, 4, 1, 2),
         tl = TENSOR(len, DT_I32, DEVICE_CPU, 2);
  op_attention_fwd(&cpu, &tq, &tq, &tq, &tl, false, &tp, &to);
}

static void bad_input_dies(void) {
  CHECK_DIES_WITH(attn_bad_length, NULL, "key length 5 of sequence 1 is outside [0, 4]");
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
    pair_check("layernorm y", &y, rounding_tol(dt));
    pair_check("layernorm mean", &mean, 1e-5);
    pair_check("layernorm rstd", &rstd, 1e-5);
    pair_check("layernorm dx", &dx, rounding_tol(dt));
    pair_check("layernorm dgamma", &dg, 1e-5);
    pair_check("layernorm dbeta", &db, 1e-5);
    TestPair *all[] = {&x, &y, &gamma, &beta, &mean, &rstd, &dy, &dx, &dg, &db};
    for (int i = 0; i < 10; i++) pair_free(all[i]);
  }
  device_close(&gpu);
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
    pair_check("gelu y", &y, rounding_tol(dt));
    pair_check("gelu dx", &dx, rounding_tol(dt));
    // Views one element in: not 16-byte aligned, the one-by-one path.
    size_t skip = dtype_size(dt);
    Tensor hx1 = TENSOR(x.host + 1, DT_F32, DEVICE_CPU, x.n - 1);
    Tensor hy1 = TENSOR(y.host + 1, DT_F32, DEVICE_CPU, x.n - 1);
    Tensor dx1 = TENSOR((char *)x.dev + skip, dt, DEVICE_CUDA, x.n - 1);
    Tensor dy1 = TENSOR((char *)y.dev + skip, dt, DEVICE_CUDA, x.n - 1);
    op_gelu_fwd(&cpu, &hx1, &hy1), op_gelu_fwd(&gpu, &dx1, &dy1);
    device_sync(&gpu);
    pair_check("gelu y (unaligned)", &y, rounding_tol(dt));
    // Softmax bwd on the GPU reads its own (rounded) y: feed the CPU the same.
    op_softmax_fwd(&gpu, &x.d, &y.d);
    device_sync(&gpu);
    op_softmax_fwd(&cpu, &x.h, &y.h);
    pair_check("softmax y", &y, rounding_tol(dt));
    download(y.host, y.dev, y.n, dt);
    op_softmax_bwd(&cpu, &y.h, &dy.h, &dx.h), op_softmax_bwd(&gpu, &y.d, &dy.d, &dx.d);
    device_sync(&gpu);
    pair_check("softmax dx", &dx, rounding_tol(dt));
    // Dropout: the same elements dropped, the kept ones scaled alike.
    op_dropout_fwd(&cpu, &x.h, &y.h, 0.8f, 9, 3),
        op_dropout_fwd(&gpu, &x.d, &y.d, 0.8f, 9, 3);
    op_dropout_bwd(&cpu, &dy.h, &dx.h, 0.8f, 9, 3),
        op_dropout_bwd(&gpu, &dy.d, &dx.d, 0.8f, 9, 3);
    device_sync(&gpu);
    pair_check("dropout y", &y, rounding_tol(dt));
    pair_check("dropout dx", &dx, rounding_tol(dt));
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

// Attention tolerances (relative L2). fp32: cuBLAS and the CPU loops sum in
// other orders (~1e-6): 1e-4. In 16 bits the scores are stored in the dtype
// before the softmax: a score s of magnitude up to ~4 carries an absolute
// error of 4 * 2^-11 (fp16) or 4 * 2^-8 (bf16), which becomes the relative
// error of the probabilities; the probabilities and the output round once
// more. fp16: ~3e-3, tolerance 1e-2; bf16: ~2.5e-2, tolerance 6e-2. The
// backward pass goes through dP and dS stored in the dtype too, same bounds.
static double attn_tol(DType dtype) {
  return dtype == DT_F32 ? 1e-4 : dtype == DT_F16 ? 1e-2 : 6e-2;
}

static void attention_cuda_case(const Device *gpu, DType dt, int64_t b, int64_t h,
                                int64_t tq, int64_t tk, int64_t dh, bool causal,
                                const float *lens) {
  TestPair q = PAIR(dt, 1, -1, 1, b, tq, h, dh), out = PAIR(dt, 0, 0, 0, b, tq, h, dh);
  TestPair k = PAIR(dt, 2, -1, 1, b, tk, h, dh), v = PAIR(dt, 3, -1, 1, b, tk, h, dh);
  TestPair probs = PAIR(dt, 0, 0, 0, b, h, tq, tk),
           scratch = PAIR(dt, 0, 0, 0, b, h, tq, tk);
  TestPair dout = PAIR(dt, 4, -1, 1, b, tq, h, dh), dq = PAIR(dt, 0, 0, 0, b, tq, h, dh);
  TestPair dk = PAIR(dt, 0, 0, 0, b, tk, h, dh), dv = PAIR(dt, 0, 0, 0, b, tk, h, dh);
  int32_t *len32 = malloc((size_t)b * sizeof(int32_t));
  for (int64_t i = 0; i < b; i++) len32[i] = (int32_t)lens[i];
  void *glen = upload(lens, b, DT_I32);
  Tensor hl = TENSOR(len32, DT_I32, DEVICE_CPU, b),
         dl = TENSOR(glen, DT_I32, DEVICE_CUDA, b);
  op_attention_fwd(&cpu, &q.h, &k.h, &v.h, &hl, causal, &probs.h, &out.h);
  op_attention_fwd(gpu, &q.d, &k.d, &v.d, &dl, causal, &probs.d, &out.d);
  device_sync(gpu);
  pair_check("attention probs", &probs, attn_tol(dt));
  pair_check("attention out", &out, attn_tol(dt));
  op_attention_bwd(&cpu, &q.h, &k.h, &v.h, &probs.h, &dout.h, &scratch.h, &dq.h, &dk.h,
                   &dv.h);
  op_attention_bwd(gpu, &q.d, &k.d, &v.d, &probs.d, &dout.d, &scratch.d, &dq.d, &dk.d,
                   &dv.d);
  device_sync(gpu);
  pair_check("attention dq", &dq, attn_tol(dt));
  pair_check("attention dk", &dk, attn_tol(dt));
  pair_check("attention dv", &dv, attn_tol(dt));
  TestPair *all[] = {&q, &out, &k, &v, &probs, &scratch, &dout, &dq, &dk, &dv};
  for (int i = 0; i < 10; i++) pair_free(all[i]);
  device_free(DEVICE_CUDA, glen);
  free(len32);
}

static void attention_cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const float pad_lens[3] = {45, 17, 1}, causal_lens[3] = {33, 20, 33};
  for (int d = 0; d < N_FLOAT_DTYPES; d++) {
    attention_cuda_case(&gpu, kFloatDtypes[d], 3, 4, 29, 45, 16, false, pad_lens);
    attention_cuda_case(&gpu, kFloatDtypes[d], 3, 2, 33, 33, 24, true, causal_lens);
  }
  device_close(&gpu);
}

int main(void) {
  TEST_RUN(layernorm_matches_torch);
  TEST_RUN(gelu_softmax_match_torch);
  TEST_RUN(attention_matches_torch);
  TEST_RUN(dropout_follows_rng);
  TEST_RUN(layernorm_gradcheck);
  TEST_RUN(gelu_softmax_gradcheck);
  TEST_RUN(attention_gradcheck);
  TEST_RUN(bad_input_dies);
  TEST_RUN(layernorm_cuda_matches_cpu);
  TEST_RUN(pointwise_cuda_matches_cpu);
  TEST_RUN(attention_cuda_matches_cpu);
  return test_finish();
}
