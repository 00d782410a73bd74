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
    (dev, x, perm, y))                                                                  \
  /* Detection heads to boxes, in one pass: xs[k] (N, H_k, W_k, D * A_k) is a         \
     convolution head's NHWC output whose channel d * A_k + a holds value d of        \
     anchor a at each position (anchors[k] = A_k, count <= LAYOUT_MAX_HEADS);         \
     y (N, sum_k A_k H_k W_k, D) holds head k's boxes after head k - 1's, in the      \
     order (a, h, w). The same as permuting each head, viewed (N, H, W, D, A), to     \
     (N, A, H, W, D) and concatenating them along the boxes. */                       \
  X(op_heads_to_boxes,                                                                  \
    (const Device *dev, const Tensor *xs, const int *anchors, int count, const Tensor *y), \
    (dev, xs, anchors, count, y))                                                       \
  /* The inverse: y's boxes back into each head's layout (the heads' gradients). */     \
  X(op_boxes_to_heads,                                                                  \
    (const Device *dev, const Tensor *y, const int *anchors, const Tensor *xs, int count), \
    (dev, y, anchors, xs, count))
OPS_DECLARE(OPS_LAYOUT)

// Shared shape logic of both backends (layout.c).
// Checks the concat/split shapes; returns the per-part extents along axis in
// parts[0..count) and the (outer, inner) view: outer = product of the
// extents before axis, inner = product after it.
void layout_concat_geometry(const char *op, const Tensor *whole, const Tensor *parts,
                            int count, int axis, int64_t *outer, int64_t *inner);
// The heads' shapes (op_heads_to_boxes), checked: per head its positions
// H W, anchors A and first box in y.
#define LAYOUT_MAX_HEADS 8
typedef struct HeadsGeometry {
  int count;
  int64_t n, boxes, d;  // y (n, boxes, d)
  int64_t positions[LAYOUT_MAX_HEADS], anchors[LAYOUT_MAX_HEADS], first[LAYOUT_MAX_HEADS];
} HeadsGeometry;
HeadsGeometry layout_heads_geometry(const char *op, const Tensor *xs, const int *anchors,
                                    int count, const Tensor *y);
// Where y's element (i, b, j) (sample, box, value) lives: its head, in *k,
// and its offset in that head's tensor. Both backends use it.
#if defined(__CUDACC__)
#define LAYOUT_INLINE static __host__ __device__ __forceinline__
#else
#define LAYOUT_INLINE static inline
#endif
LAYOUT_INLINE int64_t layout_head_offset(const HeadsGeometry *g, int64_t i, int64_t b, int64_t j,
                                         int *k) {
  int h = 0;
  while (h + 1 < g->count && b >= g->first[h + 1]) h++;
  int64_t local = b - g->first[h], a = local / g->positions[h], p = local % g->positions[h];
  *k = h;
  return (i * g->positions[h] + p) * (g->d * g->anchors[h]) + j * g->anchors[h] + a;
}

// Checks a permute and returns, for each output axis k, the input stride (in
// elements) of that axis.
void layout_permute_strides(const Tensor *x, const int *perm, const Tensor *y,
                            int64_t *in_strides);

#ifdef __cplusplus
}
#endif
