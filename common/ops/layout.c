// layout.c: CPU reference of concat, split, permute and the detection heads'
// moves (layout.h), and the shape checks both backends share. Any dtype:
// these only move bytes.
#include "ops/layout.h"

#include <string.h>

#include "core/parallel.h"

// ---------------------------------------------------------------- shape checks

void layout_concat_geometry(const char *op, const Tensor *whole, const Tensor *parts, int count,
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

void layout_permute_strides(const Tensor *x, const int *perm, const Tensor *y,
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

HeadsGeometry layout_heads_geometry(const char *op, const Tensor *xs, const int *anchors,
                                    int count, const Tensor *y) {
  OP_REQUIRE(op, count >= 1 && count <= LAYOUT_MAX_HEADS && y->ndim == 3);
  HeadsGeometry g = {.count = count, .n = y->shape[0], .boxes = y->shape[1], .d = y->shape[2]};
  int64_t first = 0;
  for (int k = 0; k < count; k++) {
    const Tensor *x = &xs[k];
    OP_REQUIRE(op, anchors[k] >= 1 && x->ndim == 4 && x->dtype == y->dtype);
    OP_REQUIRE(op, x->shape[0] == g.n && x->shape[3] == g.d * anchors[k]);
    g.positions[k] = x->shape[1] * x->shape[2];
    g.anchors[k] = anchors[k];
    g.first[k] = first;
    first += g.positions[k] * anchors[k];
  }
  OP_REQUIRE(op, first == g.boxes);
  return g;
}

// ---------------------------------------------------------------- CPU: data movement

// Copies between the whole tensor (outer, total, inner) and one part
// (outer, len, inner) that starts at `offset` along the axis.
static void layout_copy_part(uint8_t *whole, uint8_t *part, int64_t outer, int64_t total,
                           int64_t offset, int64_t len, size_t inner_bytes, bool to_whole) {
  size_t run_bytes = (size_t)len * inner_bytes;
#pragma omp parallel for if ((int64_t)((size_t)outer * run_bytes / 4) >= parallel_min_work)
  for (int64_t o = 0; o < outer; o++) {
    uint8_t *w = whole + ((size_t)o * (size_t)total + (size_t)offset) * inner_bytes;
    uint8_t *p = part + (size_t)o * run_bytes;
    if (to_whole)
      memcpy(w, p, run_bytes);
    else
      memcpy(p, w, run_bytes);
  }
}

// Concat (to_whole) or split: one layout_copy_part per part.
static void layout_copy_parts_cpu(const char *op, const Tensor *whole, const Tensor *parts,
                                int count, int axis, bool to_whole) {
  int64_t outer, inner, offset = 0;
  layout_concat_geometry(op, whole, parts, count, axis, &outer, &inner);
  size_t inner_bytes = (size_t)inner * dtype_size(whole->dtype);
  for (int p = 0; p < count; p++) {
    layout_copy_part(whole->data, parts[p].data, outer, whole->shape[axis], offset,
                   parts[p].shape[axis], inner_bytes, to_whole);
    offset += parts[p].shape[axis];
  }
}

void op_concat_cpu(const Device *dev, const Tensor *xs, int count, int axis, const Tensor *y) {
  (void)dev;
  layout_copy_parts_cpu("op_concat", y, xs, count, axis, true);
}

void op_split_cpu(const Device *dev, const Tensor *x, int axis, const Tensor *ys, int count) {
  (void)dev;
  layout_copy_parts_cpu("op_split", x, ys, count, axis, false);
}

// One output row (the last dimension): `count` elements gathered from in,
// the first at element offset src, the next `step` elements on.
static void layout_permute_row(uint8_t *out, const uint8_t *in, int64_t src, int64_t step,
                               int64_t count, size_t es) {
  if (es == 4) {
    const uint32_t *from = (const uint32_t *)in + src;
    for (int64_t j = 0; j < count; j++) ((uint32_t *)out)[j] = from[j * step];
  } else if (es == 2) {
    const uint16_t *from = (const uint16_t *)in + src;
    for (int64_t j = 0; j < count; j++) ((uint16_t *)out)[j] = from[j * step];
  } else {
    for (int64_t j = 0; j < count; j++)
      memcpy(out + (size_t)j * es, in + (size_t)(src + j * step) * es, es);
  }
}

// The output's rows go on the team: each finds its first element's input
// offset from its coordinates, then gathers the row.
void op_permute_cpu(const Device *dev, const Tensor *x, const int *perm, const Tensor *y) {
  (void)dev;
  int64_t in_strides[TENSOR_MAX_DIMS];
  layout_permute_strides(x, perm, y, in_strides);
  size_t es = dtype_size(x->dtype);
  int64_t n = tensor_numel(y);
  if (y->ndim == 0 || n == 0) {
    if (n) memcpy(y->data, x->data, es);
    return;
  }
  int last = y->ndim - 1;
  int64_t row = y->shape[last], rows = n / row;
  const uint8_t *in = x->data;
  uint8_t *out = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t r = 0; r < rows; r++) {
    int64_t src = 0, rest = r;
    for (int d = last - 1; d >= 0; d--) {
      src += rest % y->shape[d] * in_strides[d];
      rest /= y->shape[d];
    }
    layout_permute_row(out + (size_t)(r * row) * es, in, src, in_strides[last], row, es);
  }
}

// Heads to boxes (to_boxes) or back: y's rows (sample, box) on the team, each
// moving its D values from or to its head.
static void layout_heads_cpu(const char *op, const Tensor *xs, const int *anchors, int count,
                             const Tensor *y, bool to_boxes) {
  HeadsGeometry g = layout_heads_geometry(op, xs, anchors, count, y);
  size_t es = dtype_size(y->dtype);
  int64_t rows = g.n * g.boxes;
  uint8_t *yd = y->data;
#pragma omp parallel for if (rows * g.d >= parallel_min_work)
  for (int64_t r = 0; r < rows; r++) {
    int64_t i = r / g.boxes, b = r % g.boxes;
    for (int64_t j = 0; j < g.d; j++) {
      int k;
      int64_t at = layout_head_offset(&g, i, b, j, &k);
      uint8_t *head = (uint8_t *)xs[k].data + (size_t)at * es;
      uint8_t *box = yd + (size_t)(r * g.d + j) * es;
      if (to_boxes)
        memcpy(box, head, es);
      else
        memcpy(head, box, es);
    }
  }
}

void op_heads_to_boxes_cpu(const Device *dev, const Tensor *xs, const int *anchors, int count,
                           const Tensor *y) {
  (void)dev;
  layout_heads_cpu("op_heads_to_boxes", xs, anchors, count, y, true);
}

void op_boxes_to_heads_cpu(const Device *dev, const Tensor *y, const int *anchors, const Tensor *xs,
                           int count) {
  (void)dev;
  layout_heads_cpu("op_boxes_to_heads", xs, anchors, count, y, false);
}
