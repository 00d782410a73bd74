// attention_cuda.cu: attention on the GPU - cuBLAS strided-batched GEMMs
// around the masked row softmax of activation_cuda.cu.
#include "ops/attention.h"
#include "ops/activation.h"
#include "ops/cuda.cuh"

// ---------------------------------------------------------------- attention
// One head's matrix in every batch entry: base pointer, row stride and the
// stride between batch entries, in elements.
typedef struct HeadView {
  const void *data;
  int64_t ld, stride;
} HeadView;

// Head h of a (B, T, H, Dh) tensor: rows of H * Dh, T rows per batch entry.
static HeadView head_view(const Tensor *t, int64_t h) {
  int64_t h_dh = t->shape[2] * t->shape[3];
  HeadView v = {(const char *)t->data + h * t->shape[3] * dtype_size(t->dtype), h_dh,
                t->shape[1] * h_dh};
  return v;
}

// Head h of a (B, H, Tq, Tk) tensor.
static HeadView score_view(const Tensor *t, int64_t h) {
  int64_t tq_tk = t->shape[2] * t->shape[3];
  HeadView v = {(const char *)t->data + h * tq_tk * dtype_size(t->dtype), t->shape[3],
                t->shape[1] * tq_tk};
  return v;
}

// For every batch entry: c = alpha op(a) op(b), (m, n) = (m, k) (k, n).
static void head_gemm(const Device *dev, DType dtype, int64_t batch, bool trans_a,
                      HeadView a, bool trans_b, HeadView b, HeadView c, int64_t m,
                      int64_t n, int64_t k, float alpha) {
  OpsGemm g = {trans_a,  trans_b,  m,      n,     k,        batch,          a.data,
               a.ld,     a.stride, b.data, b.ld,  b.stride, (void *)c.data, c.ld,
               c.stride, dtype,    dtype,  alpha, 0.0f};
  ops_gemm_raw(dev, &g);
}

extern "C" void op_attention_fwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                      const Tensor *v, const Tensor *key_len, bool causal,
                                      const AttnDropout *drop, const Tensor *probs,
                                      const Tensor *scratch, const Tensor *out) {
  AttnShape s = op_attention_shape(q, k, v, probs, out);
  op_attention_mask_check(&s, key_len, causal);
  bool dropout = op_attention_dropout_check("op_attention_fwd", drop, probs, scratch);
  if (s.b == 0) return;  // ops_gemm_raw takes batch >= 1
  // probs holds the scores q k^T / sqrt(Dh) first (scaled in the GEMM, so
  // fp16 scores stay in range), then the masked softmax replaces them.
  float scale = 1.0f / sqrtf((float)s.dh);
  for (int64_t h = 0; h < s.h; h++)
    head_gemm(dev, q->dtype, s.b, false, head_view(q, h), true, head_view(k, h),
              score_view(probs, h), s.tq, s.tk, s.dh, scale);
  OpsRowMask mask = {key_len ? (const int32_t *)key_len->data : NULL, s.h * s.tq, s.tq,
                  causal};
  ops_softmax_fwd_launch(dev, probs, probs, mask);
  // The probabilities that weigh the values: dropped ones in scratch.
  if (dropout) op_dropout_fwd_cuda(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
  for (int64_t h = 0; h < s.h; h++)
    head_gemm(dev, q->dtype, s.b, false, score_view(weights, h), false, head_view(v, h),
              head_view(out, h), s.tq, s.dh, s.tk, 1.0f);
}

// W = dropout(P), or P without dropout: dV = W^T dO, dW = dO V^T,
// dP = dropout_bwd(dW), then the softmax's backward (attention.c).
extern "C" void op_attention_bwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                      const Tensor *v, const Tensor *probs,
                                      const AttnDropout *drop, const Tensor *dout,
                                      const Tensor *scratch, const Tensor *dq,
                                      const Tensor *dk, const Tensor *dv) {
  AttnShape s = op_attention_shape(q, k, v, probs, dout);
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(scratch, probs));
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                                     tensor_same_shape(dv, v));
  bool dropout = op_attention_dropout_check("op_attention_bwd", drop, probs, scratch);
  if (s.b == 0) return;  // ops_gemm_raw takes batch >= 1
  DType dt = q->dtype;
  // dV = W^T dO, W drawn again into scratch.
  if (dropout) op_dropout_fwd_cuda(dev, probs, scratch, drop->keep_prob, drop->seed, drop->stream);
  const Tensor *weights = dropout ? scratch : probs;
  for (int64_t h = 0; h < s.h; h++)
    head_gemm(dev, dt, s.b, true, score_view(weights, h), false, head_view(dout, h),
              head_view(dv, h), s.tk, s.dh, s.tq, 1.0f);
  for (int64_t h = 0; h < s.h; h++)  // dW = dO V^T (W is no longer needed)
    head_gemm(dev, dt, s.b, false, head_view(dout, h), true, head_view(v, h),
              score_view(scratch, h), s.tq, s.tk, s.dh, 1.0f);
  if (dropout) op_dropout_bwd_cuda(dev, scratch, scratch, drop->keep_prob, drop->seed, drop->stream);
  // dS = P (dP - rowsum(dP P)) / sqrt(Dh), in place.
  ops_softmax_bwd_launch(dev, probs, scratch, scratch, 1.0f / sqrtf((float)s.dh));
  for (int64_t h = 0; h < s.h; h++) {  // dQ = dS K, dK = dS^T Q
    head_gemm(dev, dt, s.b, false, score_view(scratch, h), false, head_view(k, h),
              head_view(dq, h), s.tq, s.dh, s.tk, 1.0f);
    head_gemm(dev, dt, s.b, true, score_view(scratch, h), false, head_view(q, h),
              head_view(dk, h), s.tk, s.dh, s.tq, 1.0f);
  }
}
