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
        op_softmax_row(p, p, s.tk, kept);
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
