// norm.h: layer norm and batch norm (fused with ReLU and the residual add),
// forward and backward, on CPU and CUDA.
//
// Conventions (ops.h, dense.h): row-major contiguous tensors, outputs
// allocated by the caller; activations fp32 on CPU and fp32/fp16/bf16 on CUDA
// (all activations of one call in one dtype, arithmetic in fp32); statistics
// (layer norm's per row, batch norm's per channel) and parameters (gamma,
// beta and their gradients) always fp32. "Rows" are all dimensions but the
// last.
//
// Batch norm statistics are those of the batch this process sees (per
// replica; MLPerf's bn span = the local batch).
#pragma once
#include <stdbool.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- batch norm
// x viewed as (M, C), C the last axis (M = N*H*W for NHWC activations).
//   y = act(gamma (x - mean) / sqrt(var + eps) + beta [+ z])
// act is ReLU when `relu`; z (x's shape and dtype) is the residual branch or
// NULL. Training uses the batch's mean and biased variance and updates
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var + momentum var * M / (M - 1)
// (PyTorch's convention: momentum 0.1 is TensorFlow's decay 0.9). Inference
// uses the running statistics.
typedef struct BatchNorm {
  Tensor gamma, beta;                // (C) fp32 parameters
  Tensor running_mean, running_var;  // (C) fp32 buffers
  Tensor save_mean, save_invstd;     // (C) fp32: written by the training
                                     // forward, read by the backward
  float momentum, eps;
} BatchNorm;

// ---------------------------------------------------------------- the ops
#define OPS_NORM(X)                                                                     \
  /* ------------------------------------------------------------ layer norm            \
     y = (x - mean) * rstd * gamma + beta over the last axis, rstd =                    \
     1 / sqrt(var + eps) with the biased variance.                                      \
       x, y: (M, C); gamma, beta: (C) fp32; mean, rstd: (M) fp32, saved for bwd. */     \
  X(op_layernorm_fwd,                                                                   \
    (const Device *dev, const Tensor *x, const Tensor *gamma, const Tensor *beta,       \
     float eps, const Tensor *y, const Tensor *mean, const Tensor *rstd),               \
    (dev, x, gamma, beta, eps, y, mean, rstd))                                          \
  /*   dy, dx: (M, C); dgamma, dbeta: (C) fp32, added into when accumulate.             \
       On CUDA the column sums are deterministic (fixed-order partial sums in           \
       dev->workspace). */                                                              \
  X(op_layernorm_bwd,                                                                   \
    (const Device *dev, const Tensor *x, const Tensor *gamma, const Tensor *mean,       \
     const Tensor *rstd, const Tensor *dy, const Tensor *dx, const Tensor *dgamma,      \
     const Tensor *dbeta, bool accumulate),                                             \
    (dev, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, accumulate))                     \
  /* A post-norm sub-layer's end: sum = x + dropout(y) (op_dropout's mask on y's        \
     elements from (seed, stream); keep_prob 1: none), out = layer norm of sum (as      \
     op_layernorm_fwd, mean and rstd saved; sum is what its backward reads).            \
       x, y, sum, out: (M, C). CPU: those three ops in turn (the same bits); CUDA:       \
     one kernel, a block per row, sum rounded to the dtype once and normalised as       \
     stored. */                                                                         \
  X(op_residual_layernorm_fwd,                                                          \
    (const Device *dev, const Tensor *x, const Tensor *y, float keep_prob, uint64_t seed, \
     uint64_t stream, const Tensor *gamma, const Tensor *beta, float eps,               \
     const Tensor *sum, const Tensor *out, const Tensor *mean, const Tensor *rstd),     \
    (dev, x, y, keep_prob, seed, stream, gamma, beta, eps, sum, out, mean, rstd))       \
  /* ------------------------------------------------------------ batch norm            \
     (BatchNorm: above) Training and inference forwards. */                             \
  X(op_batchnorm_fwd_train,                                                             \
    (const Device *dev, const BatchNorm *bn, const Tensor *x, const Tensor *z,          \
     bool relu, const Tensor *y),                                                       \
    (dev, bn, x, z, relu, y))                                                           \
  X(op_batchnorm_fwd_infer,                                                             \
    (const Device *dev, const BatchNorm *bn, const Tensor *x, const Tensor *z,          \
     bool relu, const Tensor *y),                                                       \
    (dev, bn, x, z, relu, y))                                                           \
  /* Backward of the training forward. y is that forward's output (ReLU's mask          \
     comes from y > 0); dy its gradient. Writes dx, dz (when the forward had z;         \
     else NULL) and dgamma, dbeta ((C) fp32; added to when accumulate). dx or           \
     dz may alias dy (each element is read before it is written); y must not            \
     alias x. */                                                                        \
  X(op_batchnorm_bwd,                                                                   \
    (const Device *dev, const BatchNorm *bn, const Tensor *x, const Tensor *y,          \
     const Tensor *dy, bool relu, const Tensor *dx, const Tensor *dz,                   \
     const Tensor *dgamma, const Tensor *dbeta, bool accumulate),                       \
    (dev, bn, x, y, dy, relu, dx, dz, dgamma, dbeta, accumulate))
OPS_DECLARE(OPS_NORM)

// Shape logic shared by the two backends (norm.c); each dies naming the op.
void op_layernorm_check(const Tensor *x, const Tensor *gamma, const Tensor *y,
                        const Tensor *mean, const Tensor *rstd);
// Batch norm: returns M and C and checks the parameter tensors.
void batchnorm_geometry(const char *op, const BatchNorm *bn, const Tensor *x, int64_t *m,
                        int64_t *c);

#ifdef __cplusplus
}
#endif
