// layout.h: data movement - concat, split and permute. Conventions: see
// ops.h. Any dtype on both backends (all tensors of one call in one): these
// ops only move elements, so CUDA and CPU agree bit for bit.
#pragma once
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_LAYOUT(X)                                                                   \
  /* Joins xs[0..count) along `axis` into y. Every input has y's shape except           \
     along axis, where the extents add up to y's. */                                    \
  X(op_concat,                                                                          \
    (const Device *dev, const Tensor *xs, int count, int axis, const Tensor *y),        \
    (dev, xs, count, axis, y))                                                          \
  /* The inverse: cuts x along `axis` into ys[0..count), whose extents along            \
     axis add up to x's. */                                                             \
  X(op_split, (const Device *dev, const Tensor *x, int axis, const Tensor *ys, int count), \
    (dev, x, axis, ys, count))                                                          \
  /* y[i_perm[0], ..., i_perm[d-1]] = x[i_0, ..., i_{d-1}]: output axis k is input      \
     axis perm[k], so y->shape[k] == x->shape[perm[k]]. Up to TENSOR_MAX_DIMS           \
     dims. The ones the models use:                                                     \
       NCHW -> NHWC  {0, 2, 3, 1}       NHWC -> NCHW  {0, 3, 1, 2}                      \
       (B, T, H, D) <-> (B, H, T, D)    {0, 2, 1, 3}  (attention heads) */              \
  X(op_permute, (const Device *dev, const Tensor *x, const int *perm, const Tensor *y), \
    (dev, x, perm, y))
OPS_DECLARE(OPS_LAYOUT)

// Shared shape logic of both backends (layout.c).
// Checks the concat/split shapes; returns the per-part extents along axis in
// parts[0..count) and the (outer, inner) view: outer = product of the
// extents before axis, inner = product after it.
void layout_concat_geometry(const char *op, const Tensor *whole, const Tensor *parts,
                            int count, int axis, int64_t *outer, int64_t *inner);
// Checks a permute and returns, for each output axis k, the input stride (in
// elements) of that axis.
void layout_permute_strides(const Tensor *x, const int *perm, const Tensor *y,
                            int64_t *in_strides);

#ifdef __cplusplus
}
#endif
