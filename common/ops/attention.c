// attention.c: CPU reference of multi-head scaled dot-product attention
// (attention.h) and the shape checks both backends share.
#include "ops/attention.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/activation.h"

// ---------------------------------------------------------------- attention
AttnShape op_attention_shape(const Tensor *q, const Tensor *k, const Tensor *v,
                             const Tensor *probs, const Tensor *out) {
  OP_REQUIRE("op_attention", q->ndim == 4 && k->ndim == 4 && v->ndim == 4);
  AttnShape s = {q->shape[0], q->shape[2], q->shape[1], k->shape[1], q->shape[3]};
  OP_REQUIRE("op_attention", tensor_same_shape(k, v));
  OP_REQUIRE("op_attention",
             k->shape[0] == s.b && k->shape[2] == s.h && k->shape[3] == s.dh);
  OP_REQUIRE("op_attention", tensor_same_shape(out, q));
  OP_REQUIRE("op_attention", probs->ndim == 4 && probs->shape[0] == s.b &&
                                 probs->shape[1] == s.h && probs->shape[2] == s.tq &&
                                 probs->shape[3] == s.tk);
  OP_REQUIRE("op_attention", k->dtype == q->dtype && v->dtype == q->dtype &&
                                 probs->dtype == q->dtype && out->dtype == q->dtype);
  return s;
}

void op_attention_mask_check(const AttnShape *s, const Tensor *key_len, bool causal) {
  OP_REQUIRE("op_attention", !causal || s->tq == s->tk);
  OP_REQUIRE("op_attention",
             !key_len || (key_len->dtype == DT_I32 && tensor_numel(key_len) == s->b));
}

bool op_attention_dropout_check(const char *name, const AttnDropout *drop,
                                const Tensor *probs, const Tensor *scratch) {
  if (!drop || drop->keep_prob >= 1.0f) return false;
  OP_REQUIRE(name, drop->keep_prob > 0.0f);
  OP_REQUIRE(name, scratch && tensor_same_shape(scratch, probs) && scratch->dtype == probs->dtype);
  return true;
}

// Head h of batch entry b of a (B, T, H, Dh) tensor: a T x Dh matrix with
// row stride H Dh (attn_ld), which BLAS reads in place.
static float *head_of(const Tensor *t, const AttnShape *s, int64_t b, int64_t h) {
  return (float *)t->data + (b * t->shape[1] * s->h + h) * s->dh;
}
static int attn_ld(const AttnShape *s) { return (int)(s->h * s->dh); }

// The (Tq, Tk) matrix of (b, h) in a (B, H, Tq, Tk) tensor.
static float *scores_of(const Tensor *t, const AttnShape *s, int64_t b, int64_t h) {
  return (float *)t->data + (b * s->h + h) * s->tq * s->tk;
}

// C = alpha op(A) op(B) (+ beta C), row-major, through OpenBLAS.
static void attn_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m,
              (int)n, (int)k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The multiply-adds of one of the per-head products, over all heads: the
// heads go on the team when it is worth waking (each head's product is one
// single-threaded OpenBLAS call whichever thread runs it, so the bits do not
// depend on the team).
static int64_t attn_head_work(const AttnShape *s) { return s->b * s->h * s->tq * s->tk * s->dh; }

// The valid keys of batch entry b (key_len, checked), and of its query row i.
static int64_t keys_valid(const AttnShape *s, const Tensor *key_len, int64_t b) {
  int64_t valid = key_len ? ((const int32_t *)key_len->data)[b] : s->tk;
  if (valid < 0 || valid > s->tk)
    die_input("attention", "key length %lld of sequence %lld is outside [0, %lld]", (long long)valid,
              (long long)b, (long long)s->tk);
  return valid;
}
static int64_t keys_seen(int64_t valid, bool causal, int64_t i) {
  return causal && i + 1 < valid ? i + 1 : valid;
}

// Per (b, h), with the head matrices read in place: S = Q K^T / sqrt(Dh)
// over the valid keys, the masked softmax row by row (masked entries 0),
// then O = W V, W the probabilities after dropout.
void op_attention_fwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *key_len, bool causal,
                          const AttnDropout *drop, const Tensor *probs, const Tensor *scratch,
                          const Tensor *out) {
  AttnShape s = op_attention_shape(q, k, v, probs, out);
  op_attention_mask_check(&s, key_len, causal);
  bool dropout = op_attention_dropout_check("op_attention_fwd", drop, probs, scratch);
  float scale = 1.0f / sqrtf((float)s.dh);
  int ld = attn_ld(&s);
  int64_t heads = s.b * s.h, work = attn_head_work(&s);
  (void)work;  // read by the pragmas alone (a build without OpenMP ignores them)
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) {
    int64_t b = bh / s.h, h = bh % s.h, valid = keys_valid(&s, key_len, b);
    if (valid > 0)
      attn_gemm(false, true, s.tq, valid, s.dh, scale, head_of(q, &s, b, h), ld,
                head_of(k, &s, b, h), ld, 0.0f, scores_of(probs, &s, b, h), (int)s.tk);
  }
  // Each row of scores (b, h, i) to its probabilities, on the team's threads.
  int64_t rows = s.b * s.h * s.tq;
#pragma omp parallel for if (rows * s.tk >= parallel_min_work)
  for (int64_t r = 0; r < rows; r++) {
    float *p = (float *)probs->data + r * s.tk;
    int64_t valid = keys_valid(&s, key_len, r / (s.h * s.tq));
    op_softmax_row(p, p, s.tk, keys_seen(valid, causal, r % s.tq));
  }
  // The probabilities that weigh the values: dropped ones in scratch.
  if (dropout) op_dropout_fwd_cpu(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) {
    int64_t b = bh / s.h, h = bh % s.h, valid = keys_valid(&s, key_len, b);
    float *o = head_of(out, &s, b, h);
    if (valid == 0) {
      for (int64_t i = 0; i < s.tq; i++) memset(o + i * ld, 0, (size_t)s.dh * sizeof(float));
      continue;
    }
    attn_gemm(false, false, s.tq, s.dh, valid, 1.0f, scores_of(weights, &s, b, h), (int)s.tk,
              head_of(v, &s, b, h), ld, 0.0f, o, ld);
  }
}

// With S the scaled scores, P = softmax(S) and W = dropout(P) (W = P
// without dropout): dV = W^T dO, dW = dO V^T, dP = dropout_bwd(dW),
// dS = P (dP - rowsum(dP P)) / sqrt(Dh), dQ = dS K, dK = dS^T Q. Masked
// entries of P are 0, so their dS is too: every product runs over all Tk
// keys (P's zeros take the masks' place).
void op_attention_bwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *probs, const AttnDropout *drop,
                          const Tensor *dout, const Tensor *scratch, const Tensor *dq,
                          const Tensor *dk, const Tensor *dv) {
  AttnShape s = op_attention_shape(q, k, v, probs, dout);
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(scratch, probs));
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                                     tensor_same_shape(dv, v));
  bool dropout = op_attention_dropout_check("op_attention_bwd", drop, probs, scratch);
  float scale = 1.0f / sqrtf((float)s.dh);
  int ld = attn_ld(&s), tk = (int)s.tk;
  // dV = W^T dO, W drawn again into scratch.
  if (dropout) op_dropout_fwd_cpu(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
  int64_t heads = s.b * s.h, work = attn_head_work(&s);
  (void)work;  // read by the pragmas alone
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) {
    int64_t b = bh / s.h, h = bh % s.h;
    attn_gemm(true, false, s.tk, s.dh, s.tq, 1.0f, scores_of(weights, &s, b, h), tk,
              head_of(dout, &s, b, h), ld, 0.0f, head_of(dv, &s, b, h), ld);
  }
  // dW = dO V^T into scratch (W is no longer needed), then dP, then dS.
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) {
    int64_t b = bh / s.h, h = bh % s.h;
    attn_gemm(false, true, s.tq, s.tk, s.dh, 1.0f, head_of(dout, &s, b, h), ld, head_of(v, &s, b, h),
              ld, 0.0f, scores_of(scratch, &s, b, h), tk);
  }
  if (dropout) op_dropout_bwd_cpu(dev, scratch, scratch, drop->keep_prob, drop->seed, drop->stream);
  int64_t rows = s.b * s.h * s.tq;
#pragma omp parallel for if (rows * s.tk >= parallel_min_work)
  for (int64_t r = 0; r < rows; r++) {
    const float *p = (const float *)probs->data + r * s.tk;
    float *ds = (float *)scratch->data + r * s.tk;
    op_softmax_bwd_row(p, ds, ds, s.tk, scale);
  }
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) {
    int64_t b = bh / s.h, h = bh % s.h;
    const float *ds = scores_of(scratch, &s, b, h);
    attn_gemm(false, false, s.tq, s.dh, s.tk, 1.0f, ds, tk, head_of(k, &s, b, h), ld, 0.0f,
              head_of(dq, &s, b, h), ld);
    attn_gemm(true, false, s.tk, s.dh, s.tq, 1.0f, ds, tk, head_of(q, &s, b, h), ld, 0.0f,
              head_of(dk, &s, b, h), ld);
  }
}

// ---------------------------------------------------------------- fused attention
AttnShape op_attention_fused_shape(const char *name, const Tensor *q, const Tensor *k,
                                   const Tensor *v, const Tensor *lse, const Tensor *delta,
                                   const Tensor *out) {
  OP_REQUIRE(name, q->ndim == 4 && k->ndim == 4 && v->ndim == 4);
  AttnShape s = {q->shape[0], q->shape[2], q->shape[1], k->shape[1], q->shape[3]};
  OP_REQUIRE(name, tensor_same_shape(k, v) && tensor_same_shape(out, q));
  OP_REQUIRE(name, k->shape[0] == s.b && k->shape[2] == s.h && k->shape[3] == s.dh);
  OP_REQUIRE(name, k->dtype == q->dtype && v->dtype == q->dtype && out->dtype == q->dtype);
  const Tensor *rows[2] = {lse, delta};
  for (int i = 0; i < 2; i++)
    OP_REQUIRE(name, !rows[i] || (rows[i]->dtype == DT_F32 && rows[i]->ndim == 3 &&
                                  rows[i]->shape[0] == s.b && rows[i]->shape[1] == s.h &&
                                  rows[i]->shape[2] == s.tq));
  return s;
}

bool op_attention_fused_supported(DeviceKind device, DType dtype, int64_t dh) {
  if (device != DEVICE_CUDA) return dtype == DT_F32;
  return (dtype == DT_F16 || dtype == DT_BF16) && (dh == 16 || dh == 32 || dh == 64);
}

// The keep probability of drop (1: no dropout), checked.
static float fused_keep(const char *name, const AttnDropout *drop) {
  if (!drop || drop->keep_prob >= 1.0f) return 1.0f;
  OP_REQUIRE(name, drop->keep_prob > 0.0f);
  return drop->keep_prob;
}

// One query row's probabilities over its `seen` keys: p[j] = exp(s_j - lse),
// s_j = scale q . k_j; returns lse (+inf when seen is 0).
static float fused_row_probs(const float *q, const float *k, int ld, int64_t dh, int64_t seen,
                             float scale, float *p) {
  float m = -INFINITY;
  for (int64_t j = 0; j < seen; j++) {
    float dot = 0.0f;
    for (int64_t c = 0; c < dh; c++) dot += q[c] * k[j * ld + c];
    p[j] = dot * scale;
    m = fmaxf(m, p[j]);
  }
  if (seen == 0) return INFINITY;
  float sum = 0.0f;
  for (int64_t j = 0; j < seen; j++) sum += expf(p[j] - m);
  float lse = m + logf(sum);
  for (int64_t j = 0; j < seen; j++) p[j] = expf(p[j] - lse);
  return lse;
}

// Dropout's factor for element (row r of the (B, H, Tq) rows, key j): 1 /
// keep_prob where kept, 0 where dropped (op_attention_fwd's mask).
static float fused_drop_factor(const AttnDropout *drop, float keep, int64_t r, int64_t tk,
                               int64_t j) {
  if (keep >= 1.0f) return 1.0f;
  return rng_bernoulli(drop->seed, drop->stream, (uint64_t)(r * tk + j), keep) ? 1.0f / keep : 0.0f;
}

// The fused op's arguments, for the per-head loops below.
typedef struct Fused {
  AttnShape s;
  const Tensor *q, *k, *v, *key_len, *out, *lse, *dout, *delta, *dq, *dk, *dv;
  bool causal;
  const AttnDropout *drop;
  float keep, scale;
} Fused;

// head(f, b, h) for every head, on the team's threads when worth waking
// (each head writes only its own rows: the same bits on any team).
static void fused_heads(const Fused *f, void (*head)(const Fused *, int64_t, int64_t)) {
  int64_t heads = f->s.b * f->s.h, work = attn_head_work(&f->s);
  (void)work;  // read by the pragma alone
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t bh = 0; bh < heads; bh++) head(f, bh / f->s.h, bh % f->s.h);
}

// Query row i of head (b, h): the row's probabilities (a Tk-float buffer),
// lse, and out_i = sum_j dropout(p)_j v_j.
static void fused_head_fwd(const Fused *f, int64_t b, int64_t h) {
  const AttnShape *s = &f->s;
  int ld = attn_ld(s);
  int64_t valid = keys_valid(s, f->key_len, b), bh = b * s->h + h;
  float *p = xmalloc((size_t)(s->tk > 0 ? s->tk : 1) * sizeof(float));
  const float *kh = head_of(f->k, s, b, h), *vh = head_of(f->v, s, b, h);
  for (int64_t i = 0; i < s->tq; i++) {
    int64_t seen = keys_seen(valid, f->causal, i), r = bh * s->tq + i;
    const float *qi = head_of(f->q, s, b, h) + i * ld;
    ((float *)f->lse->data)[r] = fused_row_probs(qi, kh, ld, s->dh, seen, f->scale, p);
    float *o = head_of(f->out, s, b, h) + i * ld;
    for (int64_t c = 0; c < s->dh; c++) o[c] = 0.0f;
    for (int64_t j = 0; j < seen; j++) {
      float w = p[j] * fused_drop_factor(f->drop, f->keep, r, s->tk, j);
      for (int64_t c = 0; c < s->dh; c++) o[c] += w * vh[j * ld + c];
    }
  }
  free(p);
}

void op_attention_fused_fwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                                const Tensor *v, const Tensor *key_len, bool causal,
                                const AttnDropout *drop, const Tensor *lse, const Tensor *out) {
  (void)dev;
  const char *name = "op_attention_fused_fwd";
  Fused f = {.s = op_attention_fused_shape(name, q, k, v, lse, NULL, out),
             .q = q, .k = k, .v = v, .key_len = key_len, .out = out, .lse = lse,
             .causal = causal, .drop = drop, .keep = fused_keep(name, drop)};
  op_attention_mask_check(&f.s, key_len, causal);
  OP_REQUIRE(name, q->dtype == DT_F32);
  f.scale = 1.0f / sqrtf((float)f.s.dh);
  fused_heads(&f, fused_head_fwd);
}

// delta_i = dout_i . out_i; then per row i and seen key j: P recomputed from
// lse, W = dropout(P), dP = dropout_bwd(dout_i . v_j), dS = P (dP - delta_i)
// / sqrt(Dh); dq_i = sum_j dS k_j, dk_j += dS q_i, dv_j += W dout_i (rows in
// order).
static void fused_head_bwd(const Fused *f, int64_t b, int64_t h) {
  const AttnShape *s = &f->s;
  int ld = attn_ld(s);
  int64_t valid = keys_valid(s, f->key_len, b), bh = b * s->h + h;
  const float *kh = head_of(f->k, s, b, h), *vh = head_of(f->v, s, b, h);
  float *dkh = head_of(f->dk, s, b, h), *dvh = head_of(f->dv, s, b, h);
  for (int64_t j = 0; j < s->tk; j++)
    for (int64_t c = 0; c < s->dh; c++) dkh[j * ld + c] = dvh[j * ld + c] = 0.0f;
  for (int64_t i = 0; i < s->tq; i++) {
    int64_t seen = keys_seen(valid, f->causal, i), r = bh * s->tq + i;
    const float *qi = head_of(f->q, s, b, h) + i * ld, *oi = head_of(f->out, s, b, h) + i * ld;
    const float *doi = head_of(f->dout, s, b, h) + i * ld;
    float *dqi = head_of(f->dq, s, b, h) + i * ld, d = 0.0f;
    float row_lse = ((float *)f->lse->data)[r];
    for (int64_t c = 0; c < s->dh; c++) d += doi[c] * oi[c], dqi[c] = 0.0f;
    ((float *)f->delta->data)[r] = d;
    for (int64_t j = 0; j < seen; j++) {
      float dot = 0.0f, dp = 0.0f;
      for (int64_t c = 0; c < s->dh; c++) dot += qi[c] * kh[j * ld + c], dp += doi[c] * vh[j * ld + c];
      float p = expf(dot * f->scale - row_lse);
      float w = fused_drop_factor(f->drop, f->keep, r, s->tk, j), ds = p * (dp * w - d) * f->scale;
      for (int64_t c = 0; c < s->dh; c++) {
        dqi[c] += ds * kh[j * ld + c];
        dkh[j * ld + c] += ds * qi[c];
        dvh[j * ld + c] += p * w * doi[c];
      }
    }
  }
}

void op_attention_fused_bwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                                const Tensor *v, const Tensor *key_len, bool causal,
                                const AttnDropout *drop, const Tensor *out, const Tensor *lse,
                                const Tensor *dout, const Tensor *delta, const Tensor *dq,
                                const Tensor *dk, const Tensor *dv) {
  (void)dev;
  const char *name = "op_attention_fused_bwd";
  Fused f = {.s = op_attention_fused_shape(name, q, k, v, lse, delta, out),
             .q = q, .k = k, .v = v, .key_len = key_len, .out = out, .lse = lse, .dout = dout,
             .delta = delta, .dq = dq, .dk = dk, .dv = dv, .causal = causal, .drop = drop,
             .keep = fused_keep(name, drop)};
  op_attention_mask_check(&f.s, key_len, causal);
  OP_REQUIRE(name, q->dtype == DT_F32 && tensor_same_shape(dout, q) && dout->dtype == q->dtype);
  OP_REQUIRE(name, tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                       tensor_same_shape(dv, v));
  f.scale = 1.0f / sqrtf((float)f.s.dh);
  fused_heads(&f, fused_head_bwd);
}
