// reduce.h: reductions - column sums and means; top-k and log-sum-exp along rows.
// Conventions: see ops.h. CPU: fp32 input; CUDA: fp32, fp16 or bf16 input,
// arithmetic in fp32.
#pragma once
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_REDUCE(X)                                                                   \
  /* x viewed as (M, N), M the product of its first `lead_axes` extents:                \
     y[j] = sum_i x[i, j] (op_sum) or that sum / M (op_mean). lead_axes ==              \
     x->ndim reduces everything into one element. y is fp32 (N elements)                \
     whatever x's dtype. Deterministic: the same input gives the same bits.             \
     The CUDA path uses dev->workspace for its partial sums. */                         \
  X(op_sum, (const Device *dev, const Tensor *x, int lead_axes, const Tensor *y),       \
    (dev, x, lead_axes, y))                                                             \
  X(op_mean, (const Device *dev, const Tensor *x, int lead_axes, const Tensor *y),      \
    (dev, x, lead_axes, y))                                                             \
  /* For each row of x (M, N) (all leading axes flattened), the k largest values        \
     in descending order and their column indices: values (M, k) in x's dtype,          \
     indices (M, k) int32. Equal values come out smallest index first; NaN              \
     counts as larger than every number (PyTorch's order). 1 <= k <= N. */              \
  X(op_topk,                                                                            \
    (const Device *dev, const Tensor *x, int k, const Tensor *values,                   \
     const Tensor *indices),                                                            \
    (dev, x, k, values, indices))                                                       \
  /* For each row of x (M, N) (leading axes flattened): y[i] = log sum_j exp(x[i, j]),  \
     the log-softmax's norm, y (M) fp32: the row's maximum m plus the log of the sum    \
     of exp(x - m), summed in double. A row of -inf gives -inf, one holding +inf        \
     +inf, one holding NaN NaN. CUDA: a block per row. */                               \
  X(op_logsumexp, (const Device *dev, const Tensor *x, const Tensor *y), (dev, x, y))
OPS_DECLARE(OPS_REDUCE)

// Shared shape logic of both backends (reduce.c).
// Checks a top-k call and returns rows M and columns N.
void reduce_topk_geometry(const Tensor *x, int k, const Tensor *values,
                          const Tensor *indices, int64_t *rows, int64_t *cols);
// Checks a log-sum-exp call and returns rows M and columns N.
void reduce_logsumexp_geometry(const Tensor *x, const Tensor *y, int64_t *rows, int64_t *cols);
// Checks a reduction and returns rows M and columns N of the (M, N) view.
void reduce_geometry(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                     int64_t *rows, int64_t *cols);
// The sort key of op_topk: a larger key is a larger value, or the same value
// at a smaller index. Total order, so the r-th pick is the largest key below
// the (r-1)-th pick.
#if defined(__CUDACC__)
#define REDUCE_INLINE static __host__ __device__ __forceinline__
#else
#define REDUCE_INLINE static inline
#endif
REDUCE_INLINE uint64_t reduce_topk_key(uint32_t float_bits, int64_t index) {
  uint32_t ordered = (float_bits & 0x80000000u) ? ~float_bits : float_bits | 0x80000000u;
  if ((float_bits & 0x7fffffffu) > 0x7f800000u) ordered = 0xffffffffu;  // NaN on top
  return ((uint64_t)ordered << 32) | (uint32_t)(0xffffffffu - (uint32_t)index);
}

#ifdef __cplusplus
}
#endif
