// ops_seq.c: CPU reference of the sequence-model ops, the shape checks both
// backends share, and the dispatchers.
#include "ops/seq.h"

#include <math.h>
#include <string.h>

#include "core/rng.h"

// ---------------------------------------------------------------- layer norm
void op_layernorm_check(const Tensor *x, const Tensor *gamma, const Tensor *y,
                        const Tensor *mean, const Tensor *rstd) {
  int64_t c = op_last_dim(x), m = op_rows(x);
  OP_REQUIRE("op_layernorm", tensor_numel(y) == m * c && y->dtype == x->dtype);
  OP_REQUIRE("op_layernorm", tensor_numel(gamma) == c && gamma->dtype == DT_F32);
  OP_REQUIRE("op_layernorm", tensor_numel(mean) == m && mean->dtype == DT_F32);
  OP_REQUIRE("op_layernorm", tensor_numel(rstd) == m && rstd->dtype == DT_F32);
}

void op_layernorm_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *beta, float eps, const Tensor *y,
                          const Tensor *mean, const Tensor *rstd) {
  (void)dev;
  op_layernorm_check(x, gamma, y, mean, rstd);
  OP_REQUIRE("op_layernorm_fwd", tensor_same_shape(beta, gamma));
  int64_t m = op_rows(x), c = op_last_dim(x);
  const float *g = gamma->data, *b = beta->data;  // (C)
  for (int64_t i = 0; i < m; i++) {
    const float *row = (const float *)x->data + i * c;  // (C)
    float *out = (float *)y->data + i * c;              // (C)
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < c; j++) sum += row[j];
    double mu = sum / c;
    for (int64_t j = 0; j < c; j++) sq += (row[j] - mu) * (row[j] - mu);
    float rs = (float)(1.0 / sqrt(sq / c + eps));
    for (int64_t j = 0; j < c; j++) out[j] = ((row[j] - (float)mu) * rs) * g[j] + b[j];
    ((float *)mean->data)[i] = (float)mu;
    ((float *)rstd->data)[i] = rs;
  }
}

// With xhat = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),
//   dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy.
void op_layernorm_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                          const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate) {
  (void)dev;
  op_layernorm_check(x, gamma, dy, mean, rstd);
  OP_REQUIRE("op_layernorm_bwd", tensor_same_shape(dx, dy));
  OP_REQUIRE("op_layernorm_bwd",
             tensor_same_shape(dgamma, gamma) && tensor_same_shape(dbeta, gamma));
  int64_t m = op_rows(x), c = op_last_dim(x);
  const float *gam = gamma->data;               // (C)
  float *dg = dgamma->data, *db = dbeta->data;  // (C)
  if (!accumulate) {
    memset(dg, 0, (size_t)c * sizeof(float));
    memset(db, 0, (size_t)c * sizeof(float));
  }
  for (int64_t i = 0; i < m; i++) {
    const float *row = (const float *)x->data + i * c,
                *g = (const float *)dy->data + i * c;
    float *out = (float *)dx->data + i * c;
    float mu = ((const float *)mean->data)[i], rs = ((const float *)rstd->data)[i];
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < c; j++) {
      float xhat = (row[j] - mu) * rs;
      mean_g += g[j] * gam[j];
      mean_gx += g[j] * gam[j] * xhat;
      dg[j] += g[j] * xhat;
      db[j] += g[j];
    }
    mean_g /= c;
    mean_gx /= c;
    for (int64_t j = 0; j < c; j++) {
      float xhat = (row[j] - mu) * rs;
      out[j] = rs * (g[j] * gam[j] - (float)mean_g - xhat * (float)mean_gx);
    }
  }
}

// ---------------------------------------------------------------- GELU
void op_same_size_check(const char *op, const Tensor *a, const Tensor *b) {
  if (tensor_numel(a) != tensor_numel(b) || a->dtype != b->dtype)
    DIE("%s: tensors of %lld %s and %lld %s elements", op, (long long)tensor_numel(a),
        dtype_name(a->dtype), (long long)tensor_numel(b), dtype_name(b->dtype));
}

void op_gelu_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  op_same_size_check("op_gelu_fwd", x, y);
  const float *in = x->data;
  float *out = y->data;
  for (int64_t i = 0, n = tensor_numel(x); i < n; i++)
    out[i] = 0.5f * in[i] * (1.0f + erff(in[i] * (float)M_SQRT1_2));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x).
void op_gelu_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                     const Tensor *dx) {
  (void)dev;
  op_same_size_check("op_gelu_bwd", x, dy);
  op_same_size_check("op_gelu_bwd", x, dx);
  const float *in = x->data, *g = dy->data;
  float *out = dx->data;
  const float inv_sqrt_2pi = 0.3989422804014327f;
  for (int64_t i = 0, n = tensor_numel(x); i < n; i++) {
    float cdf = 0.5f * (1.0f + erff(in[i] * (float)M_SQRT1_2));
    float pdf = inv_sqrt_2pi * expf(-0.5f * in[i] * in[i]);
    out[i] = g[i] * (cdf + in[i] * pdf);
  }
}

// ---------------------------------------------------------------- softmax
// One row: y = softmax(x) over the columns with keep(j) true, 0 elsewhere
// (all zeros when none is kept).
static void softmax_row(const float *x, float *y, int64_t cols, int64_t kept_cols) {
  float max = -INFINITY;
  for (int64_t j = 0; j < kept_cols; j++) max = fmaxf(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < kept_cols; j++) {
    y[j] = expf(x[j] - max);
    sum += y[j];
  }
  for (int64_t j = 0; j < kept_cols; j++) y[j] = (float)(y[j] / sum);
  for (int64_t j = kept_cols; j < cols; j++) y[j] = 0.0f;
}

// dx = y (dy - sum(dy y)), one row.
static void softmax_bwd_row(const float *y, const float *dy, float *dx, int64_t cols,
                            float scale) {
  double dot = 0;
  for (int64_t j = 0; j < cols; j++) dot += (double)dy[j] * y[j];
  for (int64_t j = 0; j < cols; j++) dx[j] = scale * y[j] * (dy[j] - (float)dot);
}

void op_softmax_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  op_same_size_check("op_softmax_fwd", x, y);
  int64_t m = op_rows(x), c = op_last_dim(x);
  for (int64_t i = 0; i < m; i++)
    softmax_row((const float *)x->data + i * c, (float *)y->data + i * c, c, c);
}

void op_softmax_bwd_cpu(const Device *dev, const Tensor *y, const Tensor *dy,
                        const Tensor *dx) {
  (void)dev;
  op_same_size_check("op_softmax_bwd", y, dy);
  op_same_size_check("op_softmax_bwd", y, dx);
  int64_t m = op_rows(y), c = op_last_dim(y);
  for (int64_t i = 0; i < m; i++)
    softmax_bwd_row((const float *)y->data + i * c, (const float *)dy->data + i * c,
                    (float *)dx->data + i * c, c, 1.0f);
}

// ---------------------------------------------------------------- dropout
void op_dropout_check(const char *op, const Tensor *x, const Tensor *y, float keep_prob) {
  op_same_size_check(op, x, y);
  OP_REQUIRE(op, keep_prob > 0.0f && keep_prob <= 1.0f);
}

// y = x * mask / keep_prob; the same for the gradient.
static void dropout_cpu(const Tensor *x, const Tensor *y, float keep_prob, uint64_t seed,
                        uint64_t stream) {
  const float *in = x->data;
  float *out = y->data;
  float scale = 1.0f / keep_prob;
  for (int64_t i = 0, n = tensor_numel(x); i < n; i++)
    out[i] = rng_bernoulli(seed, stream, (uint64_t)i, keep_prob) ? in[i] * scale : 0.0f;
}

void op_dropout_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y,
                        float keep_prob, uint64_t seed, uint64_t stream) {
  (void)dev;
  op_dropout_check("op_dropout_fwd", x, y, keep_prob);
  dropout_cpu(x, y, keep_prob, seed, stream);
}

void op_dropout_bwd_cpu(const Device *dev, const Tensor *dy, const Tensor *dx,
                        float keep_prob, uint64_t seed, uint64_t stream) {
  (void)dev;
  op_dropout_check("op_dropout_bwd", dy, dx, keep_prob);
  dropout_cpu(dy, dx, keep_prob, seed, stream);
}

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

// Element (t, h, d) of a (B, T, H, Dh) tensor of batch entry b.
static float *head_at(const Tensor *t, const AttnShape *s, int64_t b, int64_t h,
                      int64_t pos) {
  int64_t len = t->shape[1];
  return (float *)t->data + ((b * len + pos) * s->h + h) * s->dh;
}

void op_attention_fwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *key_len, bool causal,
                          const Tensor *probs, const Tensor *out) {
  (void)dev;
  AttnShape s = op_attention_shape(q, k, v, probs, out);
  op_attention_mask_check(&s, key_len, causal);
  float scale = 1.0f / sqrtf((float)s.dh);
  for (int64_t b = 0; b < s.b; b++) {
    int64_t valid = key_len ? ((const int32_t *)key_len->data)[b] : s.tk;
    if (valid < 0 || valid > s.tk)
      die_input("attention", "key length %lld of sequence %lld is outside [0, %lld]",
                (long long)valid, (long long)b, (long long)s.tk);
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        float *p = (float *)probs->data + ((b * s.h + h) * s.tq + i) * s.tk;  // (Tk)
        const float *qi = head_at(q, &s, b, h, i);                            // (Dh)
        int64_t kept = causal && i + 1 < valid ? i + 1 : valid;
        for (int64_t j = 0; j < kept; j++) {
          const float *kj = head_at(k, &s, b, h, j);
          float dot = 0;
          for (int64_t d = 0; d < s.dh; d++) dot += qi[d] * kj[d];
          p[j] = dot * scale;
        }
        softmax_row(p, p, s.tk, kept);
        float *o = head_at(out, &s, b, h, i);  // (Dh)
        memset(o, 0, (size_t)s.dh * sizeof(float));
        for (int64_t j = 0; j < kept; j++) {
          const float *vj = head_at(v, &s, b, h, j);
          for (int64_t d = 0; d < s.dh; d++) o[d] += p[j] * vj[d];
        }
      }
  }
}

// With S the scaled scores and P = softmax(S): dV = P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dP P)) / sqrt(Dh), dQ = dS K, dK = dS^T Q. Masked
// entries of P are 0, so their dS is too.
void op_attention_bwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *probs, const Tensor *dout,
                          const Tensor *scratch, const Tensor *dq, const Tensor *dk,
                          const Tensor *dv) {
  (void)dev;
  AttnShape s = op_attention_shape(q, k, v, probs, dout);
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(scratch, probs));
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                                     tensor_same_shape(dv, v));
  float scale = 1.0f / sqrtf((float)s.dh);
  memset(dk->data, 0, tensor_bytes(dk));
  memset(dv->data, 0, tensor_bytes(dv));
  for (int64_t b = 0; b < s.b; b++)
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        int64_t row = ((b * s.h + h) * s.tq + i) * s.tk;
        const float *p = (const float *)probs->data + row;  // (Tk)
        float *ds = (float *)scratch->data + row;           // (Tk)
        const float *doi = head_at(dout, &s, b, h, i);      // (Dh)
        for (int64_t j = 0; j < s.tk; j++) {
          const float *vj = head_at(v, &s, b, h, j);
          float *dvj = head_at(dv, &s, b, h, j);
          float dot = 0;
          for (int64_t d = 0; d < s.dh; d++) {
            dot += doi[d] * vj[d];
            dvj[d] += p[j] * doi[d];
          }
          ds[j] = dot;
        }
        softmax_bwd_row(p, ds, ds, s.tk, scale);
        const float *qi = head_at(q, &s, b, h, i);
        float *dqi = head_at(dq, &s, b, h, i);
        memset(dqi, 0, (size_t)s.dh * sizeof(float));
        for (int64_t j = 0; j < s.tk; j++) {
          const float *kj = head_at(k, &s, b, h, j);
          float *dkj = head_at(dk, &s, b, h, j);
          for (int64_t d = 0; d < s.dh; d++) {
            dqi[d] += ds[j] * kj[d];
            dkj[d] += ds[j] * qi[d];
          }
        }
      }
}

// ---------------------------------------------------------------- dispatchers
void op_layernorm_fwd(const Device *dev, const Tensor *x, const Tensor *gamma,
                      const Tensor *beta, float eps, const Tensor *y, const Tensor *mean,
                      const Tensor *rstd) {
  OP_DISPATCH(dev, op_layernorm_fwd, x, gamma, beta, eps, y, mean, rstd);
}

void op_layernorm_bwd(const Device *dev, const Tensor *x, const Tensor *gamma,
                      const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                      const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                      bool accumulate) {
  OP_DISPATCH(dev, op_layernorm_bwd, x, gamma, mean, rstd, dy, dx, dgamma, dbeta,
              accumulate);
}

void op_gelu_fwd(const Device *dev, const Tensor *x, const Tensor *y) {
  OP_DISPATCH(dev, op_gelu_fwd, x, y);
}

void op_gelu_bwd(const Device *dev, const Tensor *x, const Tensor *dy, const Tensor *dx) {
  OP_DISPATCH(dev, op_gelu_bwd, x, dy, dx);
}

void op_softmax_fwd(const Device *dev, const Tensor *x, const Tensor *y) {
  OP_DISPATCH(dev, op_softmax_fwd, x, y);
}

void op_softmax_bwd(const Device *dev, const Tensor *y, const Tensor *dy,
                    const Tensor *dx) {
  OP_DISPATCH(dev, op_softmax_bwd, y, dy, dx);
}

void op_dropout_fwd(const Device *dev, const Tensor *x, const Tensor *y, float keep_prob,
                    uint64_t seed, uint64_t stream) {
  OP_DISPATCH(dev, op_dropout_fwd, x, y, keep_prob, seed, stream);
}

void op_dropout_bwd(const Device *dev, const Tensor *dy, const Tensor *dx,
                    float keep_prob, uint64_t seed, uint64_t stream) {
  OP_DISPATCH(dev, op_dropout_bwd, dy, dx, keep_prob, seed, stream);
}

void op_attention_fwd(const Device *dev, const Tensor *q, const Tensor *k,
                      const Tensor *v, const Tensor *key_len, bool causal,
                      const Tensor *probs, const Tensor *out) {
  OP_DISPATCH(dev, op_attention_fwd, q, k, v, key_len, causal, probs, out);
}

void op_attention_bwd(const Device *dev, const Tensor *q, const Tensor *k,
                      const Tensor *v, const Tensor *probs, const Tensor *dout,
                      const Tensor *scratch, const Tensor *dq, const Tensor *dk,
                      const Tensor *dv) {
  OP_DISPATCH(dev, op_attention_bwd, q, k, v, probs, dout, scratch, dq, dk, dv);
}
