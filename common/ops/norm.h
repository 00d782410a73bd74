// norm.h: layer norm, forward and backward, on CPU and CUDA. (Batch norm,
// fused with ReLU and the residual add, is with the convolutions: conv.h.)
//
// Conventions (ops.h, dense.h): row-major contiguous tensors, outputs
// allocated by the caller; activations fp32 on CPU and fp32/fp16/bf16 on CUDA
// (all activations of one call in one dtype, arithmetic in fp32); per-row
// statistics and parameters (gamma, beta and their gradients) always fp32.
// "Rows" are all dimensions but the last.
#pragma once
#include <stdbool.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_NORM(X)                                                                     \
  /* y = (x - mean) * rstd * gamma + beta over the last axis, rstd =                    \
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
    (dev, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, accumulate))
OPS_DECLARE(OPS_NORM)

// Shape logic shared by the two backends (norm.c); dies naming the op.
void op_layernorm_check(const Tensor *x, const Tensor *gamma, const Tensor *y,
                        const Tensor *mean, const Tensor *rstd);

#ifdef __cplusplus
}
#endif
