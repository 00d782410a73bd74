// ops_elem.h: elementwise arithmetic, concat/split, permutes, sum/mean
// reductions, dtype casts and top-k. Conventions: see ops.h.
//
// Dtypes. The CPU path takes fp32 everywhere except where noted (the data
// movers - concat, split, permute - and op_cast work on any dtype, so the CPU
// reference can also produce and check 16-bit data). The CUDA path takes fp32,
// fp16 and bf16 for the float ops and computes in fp32: each 16-bit input is
// widened, the result rounded once to nearest even on the store.
//
// Unless noted, every tensor argument of an op has the same dtype and the
// same number of elements; shapes are only compared by element count, so a
// (N, H, W, C) activation and its flat view mix freely. Outputs may alias
// inputs for the elementwise ops (y == a is an in-place update).
#pragma once
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- arithmetic
// y = a + b                           a, b, y: (n)
void op_add(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y);
// y = a * b                           a, b, y: (n)
void op_mul(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y);
// y = alpha * x                       x, y: (n)
void op_scale(const Device *dev, const Tensor *x, float alpha, const Tensor *y);
// y = y + alpha * x                   x, y: (n)
void op_axpy(const Device *dev, float alpha, const Tensor *x, const Tensor *y);

// ---------------------------------------------------------------- data movement
// Joins xs[0..count) along `axis` into y. Every input has y's shape except
// along axis, where the extents add up to y's. Any dtype (all equal).
void op_concat(const Device *dev, const Tensor *xs, int count, int axis, const Tensor *y);
// The inverse: cuts x along `axis` into ys[0..count), whose extents along
// axis add up to x's.
void op_split(const Device *dev, const Tensor *x, int axis, const Tensor *ys, int count);
// y[i_perm[0], ..., i_perm[d-1]] = x[i_0, ..., i_{d-1}]: output axis k is input
// axis perm[k], so y->shape[k] == x->shape[perm[k]]. Up to TENSOR_MAX_DIMS
// dims, any dtype. The ones the models use:
//   NCHW -> NHWC  {0, 2, 3, 1}       NHWC -> NCHW  {0, 3, 1, 2}
//   (B, T, H, D) <-> (B, H, T, D)    {0, 2, 1, 3}  (attention heads)
void op_permute(const Device *dev, const Tensor *x, const int *perm, const Tensor *y);

// ---------------------------------------------------------------- reductions
// x viewed as (M, N), M the product of its first `lead_axes` extents:
// y[j] = sum_i x[i, j] (op_sum) or that sum / M (op_mean). lead_axes ==
// x->ndim reduces everything into one element. y is fp32 (N elements)
// whatever x's dtype. Deterministic: the same input gives the same bits.
// The CUDA path uses dev->workspace for its partial sums.
void op_sum(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y);
void op_mean(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y);

// ---------------------------------------------------------------- casts
// y = x converted to y's dtype, between fp32, fp16 and bf16 (either way),
// rounding to nearest even: bit for bit what tensor.h's f32_to_f16 and
// f32_to_bf16 give. fp16 <-> bf16 goes through fp32 (exact widening, one
// rounding). The CPU path takes every pair too.
void op_cast(const Device *dev, const Tensor *x, const Tensor *y);

// ---------------------------------------------------------------- input bytes
// y = x * scale[c] + shift[c], c the position along the last axis (C <= 4):
// loader bytes to normalised network input on the device, e.g. the
// (x / 255 - mean) / std of torchvision: scale = 1 / (255 std), shift = -mean / std.
//   x: (..., C) uint8; y: x's shape, fp32, or fp16 / bf16 (the input of a
//   mixed-precision network; the fp32 result rounded to nearest even).
typedef struct ChannelAffine {
  float scale[4], shift[4];
} ChannelAffine;
void op_affine_u8(const Device *dev, const Tensor *x, const ChannelAffine *a, const Tensor *y);

// ---------------------------------------------------------------- top-k
// For each row of x (M, N) (all leading axes flattened), the k largest values
// in descending order and their column indices: values (M, k) in x's dtype,
// indices (M, k) int32. Equal values come out smallest index first; NaN
// counts as larger than every number (PyTorch's order). 1 <= k <= N.
void op_topk(const Device *dev, const Tensor *x, int k, const Tensor *values,
             const Tensor *indices);

// ---------------------------------------------------------------- backends
#define OPS_ELEM_BACKEND(sfx)                                                              \
  void op_add_##sfx(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y); \
  void op_mul_##sfx(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y); \
  void op_scale_##sfx(const Device *dev, const Tensor *x, float alpha, const Tensor *y);   \
  void op_axpy_##sfx(const Device *dev, float alpha, const Tensor *x, const Tensor *y);    \
  void op_concat_##sfx(const Device *dev, const Tensor *xs, int count, int axis,           \
                       const Tensor *y);                                                   \
  void op_split_##sfx(const Device *dev, const Tensor *x, int axis, const Tensor *ys,      \
                      int count);                                                          \
  void op_permute_##sfx(const Device *dev, const Tensor *x, const int *perm,              \
                        const Tensor *y);                                                  \
  void op_sum_##sfx(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y);   \
  void op_mean_##sfx(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y);  \
  void op_cast_##sfx(const Device *dev, const Tensor *x, const Tensor *y);                 \
  void op_affine_u8_##sfx(const Device *dev, const Tensor *x, const ChannelAffine *a,      \
                          const Tensor *y);                                                \
  void op_topk_##sfx(const Device *dev, const Tensor *x, int k, const Tensor *values,      \
                     const Tensor *indices);
OPS_ELEM_BACKEND(cpu)
#if HAVE_CUDA
OPS_ELEM_BACKEND(cuda)
#endif

// Shared shape logic of both backends (ops_elem.c).
// Checks the concat/split shapes; returns the per-part extents along axis in
// parts[0..count) and the (outer, inner) view: outer = product of the
// extents before axis, inner = product after it.
void elem_concat_geometry(const char *op, const Tensor *whole, const Tensor *parts, int count,
                          int axis, int64_t *outer, int64_t *inner);
// Checks a permute and returns, for each output axis k, the input stride (in
// elements) of that axis.
void elem_permute_strides(const Tensor *x, const int *perm, const Tensor *y,
                          int64_t *in_strides);
// Checks a top-k call and returns rows M and columns N.
void elem_topk_geometry(const Tensor *x, int k, const Tensor *values, const Tensor *indices,
                        int64_t *rows, int64_t *cols);
// Checks an op_affine_u8 call and returns C, the channels (last extent).
int64_t elem_affine_u8_channels(const Tensor *x, const Tensor *y);
// Checks a reduction and returns rows M and columns N of the (M, N) view.
void elem_reduce_geometry(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                          int64_t *rows, int64_t *cols);
// The sort key of op_topk: a larger key is a larger value, or the same value
// at a smaller index. Total order, so the r-th pick is the largest key below
// the (r-1)-th pick.
#if defined(__CUDACC__)
#define ELEM_INLINE static __host__ __device__ __forceinline__
#else
#define ELEM_INLINE static inline
#endif
ELEM_INLINE uint64_t elem_topk_key(uint32_t float_bits, int64_t index) {
  uint32_t ordered = (float_bits & 0x80000000u) ? ~float_bits : float_bits | 0x80000000u;
  if ((float_bits & 0x7fffffffu) > 0x7f800000u) ordered = 0xffffffffu;  // NaN on top
  return ((uint64_t)ordered << 32) | (uint32_t)(0xffffffffu - (uint32_t)index);
}

#ifdef __cplusplus
}
#endif
