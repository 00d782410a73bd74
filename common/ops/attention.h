// attention.h: multi-head scaled dot-product attention, forward and
// backward, on CPU and CUDA.
//
// Conventions (ops.h, dense.h): row-major contiguous tensors, outputs
// allocated by the caller; fp32 on CPU and fp32/fp16/bf16 on CUDA (q, k, v,
// probs and out of one call in one dtype, arithmetic in fp32).
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

// Dropout on the attention probabilities, after the softmax and before they
// weigh the values (inverted, as op_dropout: element i of probs, row-major,
// is kept when rng_uniform(seed, stream, i) < keep_prob). NULL, or keep_prob
// 1: none.
typedef struct AttnDropout {
  float keep_prob;
  uint64_t seed, stream;
} AttnDropout;

#define OPS_ATTENTION(X)                                                                \
  /* In the layout the projections produce (no permutes):                               \
       q: (B, Tq, H, Dh); k, v: (B, Tk, H, Dh); out: (B, Tq, H, Dh)                     \
       probs: (B, H, Tq, Tk), q's dtype: softmax(q k^T / sqrt(Dh) + mask),              \
         saved for bwd.                                                                 \
       key_len: (B) int32 valid key count per sequence (keys j >= key_len[b]            \
         are masked), or NULL; on the op's device.                                      \
       causal: key j > query i is masked (needs Tq == Tk).                              \
       drop: out = dropout(probs) v; probs keeps the undropped values (the              \
         softmax's backward needs them) and scratch, shaped as probs, receives the      \
         dropped ones (NULL without dropout).                                           \
     A query row whose keys are all masked gets zero probabilities (and output).        \
     CUDA: per head, cuBLAS strided-batched GEMMs (over the batch) for                  \
     q k^T / sqrt(Dh) and probs v, reading heads in place (row stride H Dh), and        \
     an own masked-softmax kernel in between (probs holds the scores first).            \
     A fused kernel (cuDNN's scaled dot-product attention through the backend           \
     API) would not write probs to memory; this path does, in exchange for              \
     pieces that are each checked against the CPU. */                                   \
  X(op_attention_fwd,                                                                   \
    (const Device *dev, const Tensor *q, const Tensor *k, const Tensor *v,              \
     const Tensor *key_len, bool causal, const AttnDropout *drop, const Tensor *probs,  \
     const Tensor *scratch, const Tensor *out),                                         \
    (dev, q, k, v, key_len, causal, drop, probs, scratch, out))                         \
  /* The masks live in probs (zeros), so bwd does not take them; the dropout            \
     mask is drawn again from drop's (seed, stream), as fwd drew it.                    \
       dout: (B, Tq, H, Dh); scratch: (B, H, Tq, Tk) in q's dtype, overwritten;         \
       dq, dk, dv: shaped as q, k, v, overwritten. */                                   \
  X(op_attention_bwd,                                                                   \
    (const Device *dev, const Tensor *q, const Tensor *k, const Tensor *v,              \
     const Tensor *probs, const AttnDropout *drop, const Tensor *dout,                  \
     const Tensor *scratch, const Tensor *dq, const Tensor *dk, const Tensor *dv),      \
    (dev, q, k, v, probs, drop, dout, scratch, dq, dk, dv))                            \
  /* The same attention fused (flash-attention style): the probabilities are            \
     never stored. q, k, v, key_len, causal, drop and out as op_attention_fwd;          \
       lse: (B, H, Tq) fp32, each query row's log-sum-exp of its scaled, masked         \
         scores (+inf for a row that sees no key), all the backward keeps.              \
     The dropout mask is op_attention_fwd's (element i of the (B, H, Tq, Tk)            \
     probabilities, row-major), drawn where each probability is made, so the two        \
     paths drop the same elements. CPU: a row at a time, the reference.                 \
     CUDA: fp16 and bf16 with head size 16, 32 or 64 (op_attention_fused_supported)     \
     on tensor cores (mma.sync m16n8k16, fp32 accumulation): one block per 64           \
     queries of a head, K and V in 64-key tiles through shared memory, the              \
     softmax online in registers. */                                                    \
  X(op_attention_fused_fwd,                                                             \
    (const Device *dev, const Tensor *q, const Tensor *k, const Tensor *v,              \
     const Tensor *key_len, bool causal, const AttnDropout *drop, const Tensor *lse,    \
     const Tensor *out),                                                                \
    (dev, q, k, v, key_len, causal, drop, lse, out))                                    \
  /* Its backward, from the forward's out and lse, with the forward's masks and         \
     dropout: delta (B, H, Tq) fp32 scratch receives rowsum(dout * out) (the            \
     softmax backward's row term); dq, dk, dv shaped as q, k, v, overwritten.           \
     CUDA: dK and dV in one kernel (a block per 64 keys, walking the queries),          \
     dQ in another (a block per 64 queries, walking the keys): each recomputes          \
     the probabilities from lse, and no gradient is summed by atomics, so the           \
     bits do not depend on the schedule. */                                             \
  X(op_attention_fused_bwd,                                                             \
    (const Device *dev, const Tensor *q, const Tensor *k, const Tensor *v,              \
     const Tensor *key_len, bool causal, const AttnDropout *drop, const Tensor *out,    \
     const Tensor *lse, const Tensor *dout, const Tensor *delta, const Tensor *dq,      \
     const Tensor *dk, const Tensor *dv),                                               \
    (dev, q, k, v, key_len, causal, drop, out, lse, dout, delta, dq, dk, dv))
OPS_DECLARE(OPS_ATTENTION)

// Whether the fused op runs on the device in dtype with head size dh (the CPU
// in fp32 at any head size; CUDA in fp16 and bf16 at head sizes 16, 32, 64).
bool op_attention_fused_supported(DeviceKind device, DType dtype, int64_t dh);

// Shape logic shared by the two backends (attention.c); each dies naming the op.
typedef struct AttnShape {
  int64_t b, h, tq, tk, dh;
} AttnShape;
AttnShape op_attention_shape(const Tensor *q, const Tensor *k, const Tensor *v,
                             const Tensor *probs, const Tensor *out);
void op_attention_mask_check(const AttnShape *s, const Tensor *key_len, bool causal);
// The fused op's shapes: as op_attention_shape, with lse (and delta, when
// not NULL) (B, H, Tq) fp32 in place of probs; dies naming the op.
AttnShape op_attention_fused_shape(const char *name, const Tensor *q, const Tensor *k,
                                   const Tensor *v, const Tensor *lse, const Tensor *delta,
                                   const Tensor *out);
// Whether drop asks for dropout; if so, checks it and that scratch is shaped
// as probs (name: the op, for the error).
bool op_attention_dropout_check(const char *name, const AttnDropout *drop,
                                const Tensor *probs, const Tensor *scratch);

#ifdef __cplusplus
}
#endif
