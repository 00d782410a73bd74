// Masked multi-head attention: against PyTorch (tests/golden/seq.gld),
// backward against finite differences, bad input, the CUDA path against the
// CPU reference for every float dtype.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static Device cpu = {.kind = DEVICE_CPU};

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
      check_golden(g, key, got[i], sizes[i], TOL_GOLDEN);
    }
#undef GET
    free(c.probs), free(c.out), free(scratch), free(dq), free(dk), free(dv);
  }
  golden_free(g);
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
    double eq = test_gradcheck(attn_loss, &c, c.q, dq, nq, FD_EPS, 60, FD_FLOOR);
    double ek = test_gradcheck(attn_loss, &c, c.k, dk, nk, FD_EPS, 60, FD_FLOOR);
    double ev = test_gradcheck(attn_loss, &c, c.v, dv, nk, FD_EPS, 60, FD_FLOOR);
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
  pair_check("attention probs", &probs, tol_attention(dt));
  pair_check("attention out", &out, tol_attention(dt));
  op_attention_bwd(&cpu, &q.h, &k.h, &v.h, &probs.h, &dout.h, &scratch.h, &dq.h, &dk.h,
                   &dv.h);
  op_attention_bwd(gpu, &q.d, &k.d, &v.d, &probs.d, &dout.d, &scratch.d, &dq.d, &dk.d,
                   &dv.d);
  device_sync(gpu);
  pair_check("attention dq", &dq, tol_attention(dt));
  pair_check("attention dk", &dk, tol_attention(dt));
  pair_check("attention dv", &dv, tol_attention(dt));
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
  TEST_RUN(attention_matches_torch);
  TEST_RUN(attention_gradcheck);
  TEST_RUN(bad_input_dies);
  TEST_RUN(attention_cuda_matches_cpu);
  return test_finish();
}
