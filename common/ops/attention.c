// attention.c: CPU reference of multi-head scaled dot-product attention
// (attention.h) and the shape checks both backends share.
#include "ops/attention.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
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

// Element (t, h, d) of a (B, T, H, Dh) tensor of batch entry b.
static float *head_at(const Tensor *t, const AttnShape *s, int64_t b, int64_t h,
                      int64_t pos) {
  int64_t len = t->shape[1];
  return (float *)t->data + ((b * len + pos) * s->h + h) * s->dh;
}

// The valid keys of query row i of batch entry b.
static int64_t keys_seen(const AttnShape *s, const Tensor *key_len, bool causal, int64_t b,
                         int64_t i) {
  int64_t valid = key_len ? ((const int32_t *)key_len->data)[b] : s->tk;
  return causal && i + 1 < valid ? i + 1 : valid;
}

void op_attention_fwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *key_len, bool causal,
                          const AttnDropout *drop, const Tensor *probs, const Tensor *scratch,
                          const Tensor *out) {
  AttnShape s = op_attention_shape(q, k, v, probs, out);
  op_attention_mask_check(&s, key_len, causal);
  bool dropout = op_attention_dropout_check("op_attention_fwd", drop, probs, scratch);
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
        int64_t kept = keys_seen(&s, key_len, causal, b, i);
        for (int64_t j = 0; j < kept; j++) {
          const float *kj = head_at(k, &s, b, h, j);
          float dot = 0;
          for (int64_t d = 0; d < s.dh; d++) dot += qi[d] * kj[d];
          p[j] = dot * scale;
        }
        op_softmax_row(p, p, s.tk, kept);
      }
  }
  // The probabilities that weigh the values: dropped ones in scratch.
  if (dropout) op_dropout_fwd_cpu(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
  for (int64_t b = 0; b < s.b; b++)
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        const float *p = (const float *)weights->data + ((b * s.h + h) * s.tq + i) * s.tk;
        int64_t kept = keys_seen(&s, key_len, causal, b, i);
        float *o = head_at(out, &s, b, h, i);  // (Dh)
        memset(o, 0, (size_t)s.dh * sizeof(float));
        for (int64_t j = 0; j < kept; j++) {
          const float *vj = head_at(v, &s, b, h, j);
          for (int64_t d = 0; d < s.dh; d++) o[d] += p[j] * vj[d];
        }
      }
}

// With S the scaled scores, P = softmax(S) and W = dropout(P) (W = P
// without dropout): dV = W^T dO, dW = dO V^T, dP = dropout_bwd(dW),
// dS = P (dP - rowsum(dP P)) / sqrt(Dh), dQ = dS K, dK = dS^T Q. Masked
// entries of P are 0, so their dS is too.
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
  memset(dk->data, 0, tensor_bytes(dk));
  memset(dv->data, 0, tensor_bytes(dv));
  // dV = W^T dO, W drawn again into scratch.
  if (dropout) op_dropout_fwd_cpu(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
  for (int64_t b = 0; b < s.b; b++)
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        const float *w = (const float *)weights->data + ((b * s.h + h) * s.tq + i) * s.tk;
        const float *doi = head_at(dout, &s, b, h, i);  // (Dh)
        for (int64_t j = 0; j < s.tk; j++) {
          float *dvj = head_at(dv, &s, b, h, j);
          for (int64_t d = 0; d < s.dh; d++) dvj[d] += w[j] * doi[d];
        }
      }
  // dW = dO V^T into scratch (W is no longer needed), then dP.
  for (int64_t b = 0; b < s.b; b++)
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        float *ds = (float *)scratch->data + ((b * s.h + h) * s.tq + i) * s.tk;  // (Tk)
        const float *doi = head_at(dout, &s, b, h, i);
        for (int64_t j = 0; j < s.tk; j++) {
          const float *vj = head_at(v, &s, b, h, j);
          float dot = 0;
          for (int64_t d = 0; d < s.dh; d++) dot += doi[d] * vj[d];
          ds[j] = dot;
        }
      }
  if (dropout) op_dropout_bwd_cpu(dev, scratch, scratch, drop->keep_prob, drop->seed, drop->stream);
  for (int64_t b = 0; b < s.b; b++)
    for (int64_t h = 0; h < s.h; h++)
      for (int64_t i = 0; i < s.tq; i++) {
        int64_t row = ((b * s.h + h) * s.tq + i) * s.tk;
        const float *p = (const float *)probs->data + row;  // (Tk)
        float *ds = (float *)scratch->data + row;           // (Tk)
        op_softmax_bwd_row(p, ds, ds, s.tk, scale);
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
