// ops_elem.c: dispatchers, shared shape checks and the CPU reference of the
// elementwise, data-movement, reduction, cast and top-k ops.
#include "ops/elem.h"

#include <math.h>
#include <string.h>

// ---------------------------------------------------------------- dispatch

void op_add(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  OP_DISPATCH(dev, op_add, a, b, y);
}
void op_mul(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  OP_DISPATCH(dev, op_mul, a, b, y);
}
void op_scale(const Device *dev, const Tensor *x, float alpha, const Tensor *y) {
  OP_DISPATCH(dev, op_scale, x, alpha, y);
}
void op_axpy(const Device *dev, float alpha, const Tensor *x, const Tensor *y) {
  OP_DISPATCH(dev, op_axpy, alpha, x, y);
}
void op_concat(const Device *dev, const Tensor *xs, int count, int axis, const Tensor *y) {
  OP_DISPATCH(dev, op_concat, xs, count, axis, y);
}
void op_split(const Device *dev, const Tensor *x, int axis, const Tensor *ys, int count) {
  OP_DISPATCH(dev, op_split, x, axis, ys, count);
}
void op_permute(const Device *dev, const Tensor *x, const int *perm, const Tensor *y) {
  OP_DISPATCH(dev, op_permute, x, perm, y);
}
void op_sum(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  OP_DISPATCH(dev, op_sum, x, lead_axes, y);
}
void op_mean(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  OP_DISPATCH(dev, op_mean, x, lead_axes, y);
}
void op_cast(const Device *dev, const Tensor *x, const Tensor *y) {
  OP_DISPATCH(dev, op_cast, x, y);
}
void op_affine_u8(const Device *dev, const Tensor *x, const ChannelAffine *a, const Tensor *y) {
  OP_DISPATCH(dev, op_affine_u8, x, a, y);
}
void op_topk(const Device *dev, const Tensor *x, int k, const Tensor *values,
             const Tensor *indices) {
  OP_DISPATCH(dev, op_topk, x, k, values, indices);
}

// ---------------------------------------------------------------- shape checks

int64_t elem_affine_u8_channels(const Tensor *x, const Tensor *y) {
  OP_REQUIRE("op_affine_u8", x->dtype == DT_U8);
  OP_REQUIRE("op_affine_u8", y->dtype == DT_F32 || y->dtype == DT_F16 || y->dtype == DT_BF16);
  OP_REQUIRE("op_affine_u8", x->ndim >= 1 && tensor_numel(x) == tensor_numel(y));
  int64_t channels = x->shape[x->ndim - 1];
  OP_REQUIRE("op_affine_u8", channels >= 1 && channels <= 4);
  return channels;
}

void elem_concat_geometry(const char *op, const Tensor *whole, const Tensor *parts, int count,
                          int axis, int64_t *outer, int64_t *inner) {
  OP_REQUIRE(op, count >= 1 && axis >= 0 && axis < whole->ndim);
  int64_t along = 0;
  for (int p = 0; p < count; p++) {
    OP_REQUIRE(op, parts[p].ndim == whole->ndim && parts[p].dtype == whole->dtype);
    for (int d = 0; d < whole->ndim; d++)
      OP_REQUIRE(op, d == axis || parts[p].shape[d] == whole->shape[d]);
    along += parts[p].shape[axis];
  }
  OP_REQUIRE(op, along == whole->shape[axis]);
  *outer = 1;
  *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= whole->shape[d];
  for (int d = axis + 1; d < whole->ndim; d++) *inner *= whole->shape[d];
}

void elem_permute_strides(const Tensor *x, const int *perm, const Tensor *y,
                          int64_t *in_strides) {
  OP_REQUIRE("op_permute", x->ndim == y->ndim && x->dtype == y->dtype);
  int64_t stride[TENSOR_MAX_DIMS];
  int64_t s = 1;
  for (int d = x->ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= x->shape[d];
  }
  unsigned seen = 0;
  for (int k = 0; k < x->ndim; k++) {
    OP_REQUIRE("op_permute", perm[k] >= 0 && perm[k] < x->ndim && !(seen & (1u << perm[k])));
    seen |= 1u << perm[k];
    OP_REQUIRE("op_permute", y->shape[k] == x->shape[perm[k]]);
    in_strides[k] = stride[perm[k]];
  }
}

void elem_topk_geometry(const Tensor *x, int k, const Tensor *values, const Tensor *indices,
                        int64_t *rows, int64_t *cols) {
  OP_REQUIRE("op_topk", x->ndim >= 1 && values->dtype == x->dtype && indices->dtype == DT_I32);
  *cols = x->shape[x->ndim - 1];
  *rows = *cols ? tensor_numel(x) / *cols : 0;
  OP_REQUIRE("op_topk", k >= 1 && k <= *cols && *cols <= INT32_MAX);
  OP_REQUIRE("op_topk", tensor_numel(values) == *rows * k && tensor_numel(indices) == *rows * k);
}

void elem_reduce_geometry(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                          int64_t *rows, int64_t *cols) {
  OP_REQUIRE(op, lead_axes >= 0 && lead_axes <= x->ndim && y->dtype == DT_F32);
  *rows = 1;
  *cols = 1;
  for (int d = 0; d < x->ndim; d++) *(d < lead_axes ? rows : cols) *= x->shape[d];
  OP_REQUIRE(op, tensor_numel(y) == *cols);
}

// ---------------------------------------------------------------- CPU: arithmetic

static int64_t elem_binary_count(const char *op, const Tensor *a, const Tensor *b,
                                 const Tensor *y) {
  int64_t n = tensor_numel(y);
  OP_REQUIRE(op, a->dtype == DT_F32 && b->dtype == DT_F32 && y->dtype == DT_F32);
  OP_REQUIRE(op, tensor_numel(a) == n && tensor_numel(b) == n);
  return n;
}

void op_add_cpu(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_add", a, b, y);
  const float *pa = a->data, *pb = b->data;
  float *py = y->data;
  for (int64_t i = 0; i < n; i++) py[i] = pa[i] + pb[i];
}

void op_mul_cpu(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_mul", a, b, y);
  const float *pa = a->data, *pb = b->data;
  float *py = y->data;
  for (int64_t i = 0; i < n; i++) py[i] = pa[i] * pb[i];
}

void op_scale_cpu(const Device *dev, const Tensor *x, float alpha, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_scale", x, x, y);
  const float *px = x->data;
  float *py = y->data;
  for (int64_t i = 0; i < n; i++) py[i] = alpha * px[i];
}

void op_axpy_cpu(const Device *dev, float alpha, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_axpy", x, x, y);
  const float *px = x->data;
  float *py = y->data;
  for (int64_t i = 0; i < n; i++) py[i] += alpha * px[i];
}

// ---------------------------------------------------------------- CPU: data movement

// Copies between the whole tensor (outer, total, inner) and one part
// (outer, len, inner) that starts at `offset` along the axis.
static void elem_copy_part(uint8_t *whole, uint8_t *part, int64_t outer, int64_t total,
                           int64_t offset, int64_t len, size_t inner_bytes, bool to_whole) {
  size_t run_bytes = (size_t)len * inner_bytes;
  for (int64_t o = 0; o < outer; o++) {
    uint8_t *w = whole + ((size_t)o * (size_t)total + (size_t)offset) * inner_bytes;
    uint8_t *p = part + (size_t)o * run_bytes;
    if (to_whole)
      memcpy(w, p, run_bytes);
    else
      memcpy(p, w, run_bytes);
  }
}

// Concat (to_whole) or split: one elem_copy_part per part.
static void elem_copy_parts_cpu(const char *op, const Tensor *whole, const Tensor *parts,
                                int count, int axis, bool to_whole) {
  int64_t outer, inner, offset = 0;
  elem_concat_geometry(op, whole, parts, count, axis, &outer, &inner);
  size_t inner_bytes = (size_t)inner * dtype_size(whole->dtype);
  for (int p = 0; p < count; p++) {
    elem_copy_part(whole->data, parts[p].data, outer, whole->shape[axis], offset,
                   parts[p].shape[axis], inner_bytes, to_whole);
    offset += parts[p].shape[axis];
  }
}

void op_concat_cpu(const Device *dev, const Tensor *xs, int count, int axis, const Tensor *y) {
  (void)dev;
  elem_copy_parts_cpu("op_concat", y, xs, count, axis, true);
}

void op_split_cpu(const Device *dev, const Tensor *x, int axis, const Tensor *ys, int count) {
  (void)dev;
  elem_copy_parts_cpu("op_split", x, ys, count, axis, false);
}

void op_permute_cpu(const Device *dev, const Tensor *x, const int *perm, const Tensor *y) {
  (void)dev;
  int64_t in_strides[TENSOR_MAX_DIMS];
  elem_permute_strides(x, perm, y, in_strides);
  size_t es = dtype_size(x->dtype);
  int64_t n = tensor_numel(y);
  int64_t idx[TENSOR_MAX_DIMS] = {0};  // output coordinates of element i
  int64_t src = 0;                     // its input offset
  for (int64_t i = 0; i < n; i++) {
    memcpy((uint8_t *)y->data + (size_t)i * es, (const uint8_t *)x->data + (size_t)src * es, es);
    // Odometer step over the output coordinates, keeping src in step.
    for (int d = y->ndim - 1; d >= 0; d--) {
      if (++idx[d] < y->shape[d]) {
        src += in_strides[d];
        break;
      }
      src -= in_strides[d] * (y->shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------- CPU: reductions

static void elem_reduce_cpu(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                            bool mean) {
  int64_t rows, cols;
  elem_reduce_geometry(op, x, lead_axes, y, &rows, &cols);
  OP_REQUIRE(op, x->dtype == DT_F32);
  const float *px = x->data;  // (rows, cols)
  float *py = y->data;        // (cols)
  // Columns in blocks, rows inner, so the reads run along memory and each sum
  // is accumulated in double.
  enum { BLOCK = 64 };
  for (int64_t c0 = 0; c0 < cols; c0 += BLOCK) {
    int64_t cn = cols - c0 < BLOCK ? cols - c0 : BLOCK;
    double acc[BLOCK] = {0};
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cn; c++) acc[c] += px[r * cols + c0 + c];
    for (int64_t c = 0; c < cn; c++) py[c0 + c] = (float)(mean ? acc[c] / (double)rows : acc[c]);
  }
}

void op_sum_cpu(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  (void)dev;
  elem_reduce_cpu("op_sum", x, lead_axes, y, false);
}

void op_mean_cpu(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  (void)dev;
  elem_reduce_cpu("op_mean", x, lead_axes, y, true);
}

// ---------------------------------------------------------------- CPU: casts

void op_affine_u8_cpu(const Device *dev, const Tensor *x, const ChannelAffine *a,
                      const Tensor *y) {
  (void)dev;
  int64_t channels = elem_affine_u8_channels(x, y), n = tensor_numel(x);
  const uint8_t *in = x->data;
  for (int64_t i = 0; i < n; i++)
    dtype_store_f32(y->data, y->dtype, i, (float)in[i] * a->scale[i % channels] + a->shift[i % channels]);
}

void op_cast_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t n = tensor_numel(x);
  OP_REQUIRE("op_cast", tensor_numel(y) == n);
  OP_REQUIRE("op_cast", x->dtype == DT_F32 || x->dtype == DT_F16 || x->dtype == DT_BF16);
  OP_REQUIRE("op_cast", y->dtype == DT_F32 || y->dtype == DT_F16 || y->dtype == DT_BF16);
  for (int64_t i = 0; i < n; i++) dtype_store_f32(y->data, y->dtype, i, dtype_load_f32(x->data, x->dtype, i));
}

// ---------------------------------------------------------------- CPU: top-k

void op_topk_cpu(const Device *dev, const Tensor *x, int k, const Tensor *values,
                 const Tensor *indices) {
  (void)dev;
  int64_t rows, cols;
  elem_topk_geometry(x, k, values, indices, &rows, &cols);
  OP_REQUIRE("op_topk", x->dtype == DT_F32);
  const float *px = x->data;   // (rows, cols)
  float *pv = values->data;    // (rows, k)
  int32_t *pi = indices->data; // (rows, k)
  // k rounds, each picking the largest key below the previous pick: the
  // same selection the CUDA kernel makes, without scratch memory.
  for (int64_t r = 0; r < rows; r++) {
    const float *row = px + r * cols;
    uint64_t bound = 0;  // the previous pick's key; unused in round 0
    for (int j = 0; j < k; j++) {
      uint64_t best = 0;
      int64_t best_c = -1;
      for (int64_t c = 0; c < cols; c++) {
        uint32_t bits;
        memcpy(&bits, &row[c], 4);
        uint64_t key = elem_topk_key(bits, c);
        if ((j == 0 || key < bound) && (best_c < 0 || key > best)) {
          best = key;
          best_c = c;
        }
      }
      bound = best;
      pv[r * k + j] = row[best_c];
      pi[r * k + j] = (int32_t)best_c;
    }
  }
}
