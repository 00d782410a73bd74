// Masked multi-head attention: against PyTorch (tests/golden/seq.gld), bad
// input. CUDA against CPU and the gradient checks: test_ops_table.c.
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

int main(void) {
  TEST_RUN(attention_matches_torch);
  TEST_RUN(bad_input_dies);
  return test_finish();
}
