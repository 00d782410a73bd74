// Masked multi-head attention: against PyTorch (tests/golden/seq.gld), dropout
// on the probabilities, the fused op against the unfused, bad input. CUDA against CPU and the gradient checks
// (with and without dropout): test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/activation.h"
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
    op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, c.causal, NULL, &tp, NULL, &to);
    op_attention_bwd(&cpu, &tq, &tk, &tv, &tp, NULL, &tdo, &ts, &tdq, &tdk, &tdv);
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

// ---------------------------------------------------------------- dropout
// With dropout the probabilities stay the softmax's (the same as without),
// and out is op_dropout of them times v: every output element against that
// composition, computed here; keep_prob 1 is no dropout, bit for bit.
static void dropout_weighs_values_with_dropped_probs(void) {
  enum { B = 2, H = 2, TQ = 5, TK = 7, D = 3 };
  int64_t nq = B * TQ * H * D, nk = B * TK * H * D, np = B * H * TQ * TK;
  float *q = random_array(nq, 1, -1.5f, 1.5f, DT_F32), *k = random_array(nk, 2, -1.5f, 1.5f, DT_F32);
  float *v = random_array(nk, 3, -1, 1, DT_F32);
  int32_t len[B] = {7, 4};
  float *p0 = out_buf(np), *o0 = out_buf(nq), *p1 = out_buf(np), *o1 = out_buf(nq);
  float *dropped = out_buf(np), *ref = out_buf(np), *p2 = out_buf(np), *o2 = out_buf(nq);
  Tensor tq = TENSOR(q, DT_F32, DEVICE_CPU, B, TQ, H, D), tk = TENSOR(k, DT_F32, DEVICE_CPU, B, TK, H, D);
  Tensor tv = TENSOR(v, DT_F32, DEVICE_CPU, B, TK, H, D), tl = TENSOR(len, DT_I32, DEVICE_CPU, B);
  Tensor tp0 = TENSOR(p0, DT_F32, DEVICE_CPU, B, H, TQ, TK), to0 = TENSOR(o0, DT_F32, DEVICE_CPU, B, TQ, H, D);
  Tensor tp1 = tp0, to1 = to0, ts = tp0, tr = tp0, tp2 = tp0, to2 = to0;
  tp1.data = p1, to1.data = o1, ts.data = dropped, tr.data = ref, tp2.data = p2, to2.data = o2;
  op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, false, NULL, &tp0, NULL, &to0);
  AttnDropout drop = {0.6f, 17, 4};
  op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, false, &drop, &tp1, &ts, &to1);
  CHECK(memcmp(p0, p1, (size_t)np * sizeof(float)) == 0);
  op_dropout_fwd(&cpu, &tp0, &tr, drop.keep_prob, drop.seed, drop.stream);
  int64_t zeros = 0, valid = 0;
  for (int64_t i = 0; i < np; i++) {
    CHECK(dropped[i] == ref[i]);
    if (p0[i] != 0) valid++, zeros += dropped[i] == 0;
  }
  // Some valid probabilities dropped, most kept: the mask is really applied.
  printf("  %lld of %lld valid probabilities dropped (keep 0.6)\n", (long long)zeros,
         (long long)valid);
  CHECK(zeros > valid / 5 && zeros < valid * 3 / 5);
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < TQ; i++)
        for (int d = 0; d < D; d++) {
          double want = 0;
          for (int j = 0; j < TK; j++)
            want += (double)ref[((b * H + h) * TQ + i) * TK + j] * v[((b * TK + j) * H + h) * D + d];
          double got = o1[((b * TQ + i) * H + h) * D + d];
          double err = fabs(got - want);
          worst = err > worst || isnan(err) ? err : worst;
        }
  // Sums of 7 products of numbers under 4 in size: fp32 rounding, far under 1e-5.
  printf("  out against dropout(probs) v: worst error %.3g\n", worst);
  CHECK(worst < 1e-5);
  AttnDropout none = {1.0f, 17, 4};
  op_attention_fwd(&cpu, &tq, &tk, &tv, &tl, false, &none, &tp2, &ts, &to2);
  CHECK(memcmp(o0, o2, (size_t)nq * sizeof(float)) == 0);
  free(q), free(k), free(v), free(p0), free(o0), free(p1), free(o1), free(dropped), free(ref);
  free(p2), free(o2);
}

// ---------------------------------------------------------------- fused
// The fused op is the same attention: its out and gradients against the
// unfused op's on the CPU (fp32 both; the unfused sums through OpenBLAS and
// the fused in plain loops, so only the order of fp32 sums differs: ~1e-7,
// bound 1e-5), with padding (a sequence with no key at all: zero output and
// gradients, lse +inf), causal masking and dropout (the same elements
// dropped: with the masks shifted by one element the outputs differ).
static void fused_matches_unfused(void) {
  enum { B = 3, H = 2, T = 9, D = 4 };
  int64_t n = B * T * H * D, np = B * H * T * T, nr = B * H * T;
  int32_t len[B] = {9, 5, 0};
  Tensor tl = TENSOR(len, DT_I32, DEVICE_CPU, B);
  float *in[4];
  Tensor x[4];  // q, k, v, dout
  for (int i = 0; i < 4; i++)
    in[i] = random_array(n, 40 + i, -1.5f, 1.5f, DT_F32),
    x[i] = TENSOR(in[i], DT_F32, DEVICE_CPU, B, T, H, D);
  for (int variant = 0; variant < 3; variant++) {  // padding; causal; both with dropout
    bool causal = variant >= 1;
    AttnDropout drop = {0.7f, 9, 2}, *d = variant == 2 ? &drop : NULL;
    float *p = out_buf(np), *scratch = out_buf(np), *lse = out_buf(nr), *delta = out_buf(nr);
    float *r[2][4];  // [unfused, fused][out, dq, dk, dv]
    Tensor t[2][4];
    for (int f = 0; f < 2; f++)
      for (int i = 0; i < 4; i++)
        r[f][i] = out_buf(n), t[f][i] = TENSOR(r[f][i], DT_F32, DEVICE_CPU, B, T, H, D);
    Tensor tp = TENSOR(p, DT_F32, DEVICE_CPU, B, H, T, T), ts = tp;
    ts.data = scratch;
    Tensor tlse = TENSOR(lse, DT_F32, DEVICE_CPU, B, H, T), tdelta = tlse;
    tdelta.data = delta;
    const Tensor *lens = causal && variant == 1 ? NULL : &tl;
    op_attention_fwd(&cpu, &x[0], &x[1], &x[2], lens, causal, d, &tp, &ts, &t[0][0]);
    op_attention_bwd(&cpu, &x[0], &x[1], &x[2], &tp, d, &x[3], &ts, &t[0][1], &t[0][2], &t[0][3]);
    op_attention_fused_fwd(&cpu, &x[0], &x[1], &x[2], lens, causal, d, &tlse, &t[1][0]);
    op_attention_fused_bwd(&cpu, &x[0], &x[1], &x[2], lens, causal, d, &t[1][0], &tlse, &x[3],
                           &tdelta, &t[1][1], &t[1][2], &t[1][3]);
    const char *names[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++)
      test_check_error(names[i], variant == 0 ? "padding" : variant == 1 ? "causal" : "dropout",
                       test_rel_error(r[1][i], r[0][i], n), 1e-5);
    if (lens) {  // the empty sequence
      int64_t empty = 0;
      for (int64_t e = 2 * T * H * D; e < n; e++)
        empty += r[1][0][e] == 0.0f && r[1][1][e] == 0.0f && r[1][2][e] == 0.0f;
      CHECK(empty == T * H * D);
      for (int64_t e = 2 * H * T; e < nr; e++) CHECK(isinf(lse[e]) && lse[e] > 0);
    }
    free(p), free(scratch), free(lse), free(delta);
    for (int f = 0; f < 2; f++)
      for (int i = 0; i < 4; i++) free(r[f][i]);
  }
  for (int i = 0; i < 4; i++) free(in[i]);
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
  op_attention_fwd(&cpu, &tq, &tq, &tq, &tl, false, NULL, &tp, NULL, &to);
}

static void attn_fused_bad_length(void *ctx) {
  (void)ctx;
  float q[2 * 4 * 1 * 2] = {0}, lse[2 * 1 * 4], o[2 * 4 * 1 * 2];
  int32_t len[2] = {4, -1};
  Tensor tq = TENSOR(q, DT_F32, DEVICE_CPU, 2, 4, 1, 2), tlse = TENSOR(lse, DT_F32, DEVICE_CPU, 2, 1, 4);
  Tensor to = TENSOR(o, DT_F32, DEVICE_CPU, 2, 4, 1, 2), tl = TENSOR(len, DT_I32, DEVICE_CPU, 2);
  op_attention_fused_fwd(&cpu, &tq, &tq, &tq, &tl, false, NULL, &tlse, &to);
}

static void bad_input_dies(void) {
  CHECK_DIES_WITH(attn_bad_length, NULL, "key length 5 of sequence 1 is outside [0, 4]");
  CHECK_DIES_WITH(attn_fused_bad_length, NULL, "key length -1 of sequence 1 is outside [0, 4]");
}

int main(void) {
  TEST_RUN(attention_matches_torch);
  TEST_RUN(dropout_weighs_values_with_dropped_probs);
  TEST_RUN(fused_matches_unfused);
  TEST_RUN(bad_input_dies);
  return test_finish();
}
