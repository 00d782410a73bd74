// activation.h: GELU, softmax along the last axis and inverted dropout,
// forward and backward, on CPU and CUDA.
//
// Conventions (ops.h, dense.h): row-major contiguous tensors, outputs
// allocated by the caller; fp32 on CPU and fp32/fp16/bf16 on CUDA (all
// tensors of one call in one dtype, arithmetic in fp32). "Rows" are all
// dimensions but the last.
#pragma once
#include <stdint.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_ACTIVATION(X)                                                               \
  /* GELU, exact erf form: y = x * (1 + erf(x / sqrt(2))) / 2. Any shape. */            \
  X(op_gelu_fwd, (const Device *dev, const Tensor *x, const Tensor *y), (dev, x, y))    \
  X(op_gelu_bwd, (const Device *dev, const Tensor *x, const Tensor *dy, const Tensor *dx), \
    (dev, x, dy, dx))                                                                   \
  /* Softmax along the last axis. x, y, dy, dx: (M, C); bwd needs only y. */            \
  X(op_softmax_fwd, (const Device *dev, const Tensor *x, const Tensor *y), (dev, x, y)) \
  X(op_softmax_bwd,                                                                     \
    (const Device *dev, const Tensor *y, const Tensor *dy, const Tensor *dx),           \
    (dev, y, dy, dx))                                                                   \
  /* Inverted dropout: element i (row-major index) is kept, as x[i] / keep_prob,        \
     when rng_uniform(seed, stream, i) < keep_prob, and zeroed otherwise - the          \
     same elements on CPU and GPU. bwd recomputes the mask from (seed, stream):         \
     nothing is saved. Callers give each dropout site and step its own stream.          \
     Any shape; keep_prob in (0, 1]. */                                                 \
  X(op_dropout_fwd,                                                                     \
    (const Device *dev, const Tensor *x, const Tensor *y, float keep_prob, uint64_t seed, \
     uint64_t stream),                                                                  \
    (dev, x, y, keep_prob, seed, stream))                                               \
  X(op_dropout_bwd,                                                                     \
    (const Device *dev, const Tensor *dy, const Tensor *dx, float keep_prob,            \
     uint64_t seed, uint64_t stream),                                                   \
    (dev, dy, dx, keep_prob, seed, stream))                                             \
  /* A feed-forward layer's middle: y = dropout(gelu(x)), and dx = gelu'(x) times       \
     dropout's backward of dy, with op_dropout's mask for (seed, stream). On CUDA       \
     each is one pass (gelu's value not rounded to the dtype before the dropout);       \
     the CPU composes the ops above, so its bits are theirs. y may be x, dx dy. */      \
  X(op_gelu_dropout_fwd,                                                                \
    (const Device *dev, const Tensor *x, const Tensor *y, float keep_prob, uint64_t seed, \
     uint64_t stream),                                                                  \
    (dev, x, y, keep_prob, seed, stream))                                               \
  X(op_gelu_dropout_bwd,                                                                \
    (const Device *dev, const Tensor *x, const Tensor *dy, const Tensor *dx,            \
     float keep_prob, uint64_t seed, uint64_t stream),                                  \
    (dev, x, dy, dx, keep_prob, seed, stream))
OPS_DECLARE(OPS_ACTIVATION)

// Shared by the two backends and attention (activation.c); each dies naming
// the op.
void op_dropout_check(const char *op, const Tensor *x, const Tensor *y, float keep_prob);
// One fp32 row: y = softmax(x) over the first kept_cols columns, 0 elsewhere
// (all zeros when none is kept); y may be x.
void op_softmax_row(const float *x, float *y, int64_t cols, int64_t kept_cols);
// One fp32 row: dx = scale y (dy - sum(dy y)); dx may be dy.
void op_softmax_bwd_row(const float *y, const float *dy, float *dx, int64_t cols,
                        float scale);

#ifdef __cplusplus
}
#endif
