// ops_seq.h: the sequence-model layers - layer norm, GELU, softmax, dropout
// and multi-head scaled dot-product attention - on CPU and CUDA.
//
// Conventions (ops.h, ops_dense.h): row-major contiguous tensors, outputs
// allocated by the caller; activations fp32 on CPU and fp32/fp16/bf16 on CUDA
// (all activations of one call in one dtype, arithmetic in fp32); per-row
// statistics and parameters (gamma, beta and their gradients) always fp32.
// "Rows" are all dimensions but the last.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

// y = (x - mean) * rstd * gamma + beta over the last axis, rstd =
// 1 / sqrt(var + eps) with the biased variance.
//   x, y: (M, C); gamma, beta: (C) fp32; mean, rstd: (M) fp32, saved for bwd.
void op_layernorm_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *beta, float eps, const Tensor *y,
                          const Tensor *mean, const Tensor *rstd);
void op_layernorm_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *gamma,
                           const Tensor *beta, float eps, const Tensor *y,
                           const Tensor *mean, const Tensor *rstd);
//   dy, dx: (M, C); dgamma, dbeta: (C) fp32, added into when accumulate.
//   On CUDA the column sums are deterministic (fixed-order partial sums in
//   dev->workspace).
void op_layernorm_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                          const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate);
void op_layernorm_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *gamma,
                           const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                           const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                           bool accumulate);

// GELU, exact erf form: y = x * (1 + erf(x / sqrt(2))) / 2. Any shape.
void op_gelu_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y);
void op_gelu_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y);
void op_gelu_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                     const Tensor *dx);
void op_gelu_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *dy,
                      const Tensor *dx);

// Softmax along the last axis. x, y, dy, dx: (M, C); bwd needs only y.
void op_softmax_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y);
void op_softmax_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y);
void op_softmax_bwd_cpu(const Device *dev, const Tensor *y, const Tensor *dy,
                        const Tensor *dx);
void op_softmax_bwd_cuda(const Device *dev, const Tensor *y, const Tensor *dy,
                         const Tensor *dx);

// Inverted dropout: element i (row-major index) is kept, as x[i] / keep_prob,
// when rng_uniform(seed, stream, i) < keep_prob, and zeroed otherwise - the
// same elements on CPU and GPU. bwd recomputes the mask from (seed, stream):
// nothing is saved. Callers give each dropout site and step its own stream.
// Any shape; keep_prob in (0, 1].
void op_dropout_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y,
                        float keep_prob, uint64_t seed, uint64_t stream);
void op_dropout_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                         float keep_prob, uint64_t seed, uint64_t stream);
void op_dropout_bwd_cpu(const Device *dev, const Tensor *dy, const Tensor *dx,
                        float keep_prob, uint64_t seed, uint64_t stream);
void op_dropout_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx,
                         float keep_prob, uint64_t seed, uint64_t stream);

// Multi-head scaled dot-product attention, in the layout the projections
// produce (no permutes):
//   q: (B, Tq, H, Dh); k, v: (B, Tk, H, Dh); out: (B, Tq, H, Dh)
//   probs: (B, H, Tq, Tk), q's dtype: softmax(q k^T / sqrt(Dh) + mask),
//     saved for bwd.
//   key_len: (B) int32 valid key count per sequence (keys j >= key_len[b]
//     are masked), or NULL; on the op's device.
//   causal: key j > query i is masked (needs Tq == Tk).
// A query row whose keys are all masked gets zero probabilities (and output).
// CUDA: per head, cuBLAS strided-batched GEMMs (over the batch) for
// q k^T / sqrt(Dh) and probs v, reading heads in place (row stride H Dh), and
// an own masked-softmax kernel in between (probs holds the scores first).
// A fused kernel (cuDNN's scaled dot-product attention through the backend
// API) would not write probs to memory; this path does, in exchange for
// pieces that are each checked against the CPU.
void op_attention_fwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *key_len, bool causal,
                          const Tensor *probs, const Tensor *out);
void op_attention_fwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                           const Tensor *v, const Tensor *key_len, bool causal,
                           const Tensor *probs, const Tensor *out);
// The masks live in probs (zeros), so bwd does not take them.
//   dout: (B, Tq, H, Dh); scratch: (B, H, Tq, Tk) in q's dtype, overwritten;
//   dq, dk, dv: shaped as q, k, v, overwritten.
void op_attention_bwd_cpu(const Device *dev, const Tensor *q, const Tensor *k,
                          const Tensor *v, const Tensor *probs, const Tensor *dout,
                          const Tensor *scratch, const Tensor *dq, const Tensor *dk,
                          const Tensor *dv);
void op_attention_bwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                           const Tensor *v, const Tensor *probs, const Tensor *dout,
                           const Tensor *scratch, const Tensor *dq, const Tensor *dk,
                           const Tensor *dv);

// Dispatchers.
void op_layernorm_fwd(const Device *dev, const Tensor *x, const Tensor *gamma,
                      const Tensor *beta, float eps, const Tensor *y, const Tensor *mean,
                      const Tensor *rstd);
void op_layernorm_bwd(const Device *dev, const Tensor *x, const Tensor *gamma,
                      const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                      const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                      bool accumulate);
void op_gelu_fwd(const Device *dev, const Tensor *x, const Tensor *y);
void op_gelu_bwd(const Device *dev, const Tensor *x, const Tensor *dy, const Tensor *dx);
void op_softmax_fwd(const Device *dev, const Tensor *x, const Tensor *y);
void op_softmax_bwd(const Device *dev, const Tensor *y, const Tensor *dy,
                    const Tensor *dx);
void op_dropout_fwd(const Device *dev, const Tensor *x, const Tensor *y, float keep_prob,
                    uint64_t seed, uint64_t stream);
void op_dropout_bwd(const Device *dev, const Tensor *dy, const Tensor *dx,
                    float keep_prob, uint64_t seed, uint64_t stream);
void op_attention_fwd(const Device *dev, const Tensor *q, const Tensor *k,
                      const Tensor *v, const Tensor *key_len, bool causal,
                      const Tensor *probs, const Tensor *out);
void op_attention_bwd(const Device *dev, const Tensor *q, const Tensor *k,
                      const Tensor *v, const Tensor *probs, const Tensor *dout,
                      const Tensor *scratch, const Tensor *dq, const Tensor *dk,
                      const Tensor *dv);

// Shape logic shared by the two backends (ops_seq.c); each dies naming the op.
void op_layernorm_check(const Tensor *x, const Tensor *gamma, const Tensor *y,
                        const Tensor *mean, const Tensor *rstd);
// Same element count and dtype.
void op_same_size_check(const char *op, const Tensor *a, const Tensor *b);
void op_dropout_check(const char *op, const Tensor *x, const Tensor *y, float keep_prob);
typedef struct AttnShape {
  int64_t b, h, tq, tk, dh;
} AttnShape;
AttnShape op_attention_shape(const Tensor *q, const Tensor *k, const Tensor *v,
                             const Tensor *probs, const Tensor *out);
void op_attention_mask_check(const AttnShape *s, const Tensor *key_len, bool causal);

#ifdef __cplusplus
}
#endif
