// layout_cuda.cu: the CUDA side of layout.h: strided copies, a permute
// kernel and the detection heads' gather and scatter, on dev->stream without
// a host synchronisation.
#include "ops/cuda.cuh"
#include "ops/layout.h"

// ---------------------------------------------------------------- data movement

// Each part is one strided 2-D copy: `outer` rows of len * inner elements.
static void layout_copy_parts_cuda(const Device *dev, const char *op, const Tensor *whole,
                                 const Tensor *parts, int count, int axis, bool to_whole) {
  int64_t outer, inner, offset = 0;
  layout_concat_geometry(op, whole, parts, count, axis, &outer, &inner);
  size_t inner_bytes = (size_t)inner * dtype_size(whole->dtype);
  size_t whole_pitch = (size_t)whole->shape[axis] * inner_bytes;
  for (int p = 0; p < count; p++) {
    size_t run_bytes = (size_t)parts[p].shape[axis] * inner_bytes;
    char *w = (char *)whole->data + (size_t)offset * inner_bytes;
    offset += parts[p].shape[axis];
    if (run_bytes == 0 || outer == 0) continue;
    if (to_whole)
      CHECK_CUDA(cudaMemcpy2DAsync(w, whole_pitch, parts[p].data, run_bytes, run_bytes,
                                   (size_t)outer, cudaMemcpyDeviceToDevice, dev->stream));
    else
      CHECK_CUDA(cudaMemcpy2DAsync(parts[p].data, run_bytes, w, whole_pitch, run_bytes,
                                   (size_t)outer, cudaMemcpyDeviceToDevice, dev->stream));
  }
}

extern "C" void op_concat_cuda(const Device *dev, const Tensor *xs, int count, int axis,
                               const Tensor *y) {
  layout_copy_parts_cuda(dev, "op_concat", y, xs, count, axis, true);
}

extern "C" void op_split_cuda(const Device *dev, const Tensor *x, int axis, const Tensor *ys,
                              int count) {
  layout_copy_parts_cuda(dev, "op_split", x, ys, count, axis, false);
}

// The heads' data pointers, passed by value to the heads kernel.
template <typename E>
struct LayoutHeadPointers {
  E *p[LAYOUT_MAX_HEADS];
};

struct PermuteGeometry {
  int ndim;
  int64_t out_shape[TENSOR_MAX_DIMS];
  int64_t in_strides[TENSOR_MAX_DIMS];  // input stride of each output axis
};

// One thread per output element (consecutive threads write consecutive
// outputs, so the stores coalesce).
template <typename E>
__global__ void layout_permute_kernel(const E *x, E *y, int64_t n, PermuteGeometry g) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rest = i, src = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      src += (rest % g.out_shape[d]) * g.in_strides[d];
      rest /= g.out_shape[d];
    }
    y[i] = x[src];
  }
}

extern "C" void op_permute_cuda(const Device *dev, const Tensor *x, const int *perm,
                                const Tensor *y) {
  PermuteGeometry g;
  layout_permute_strides(x, perm, y, g.in_strides);
  g.ndim = y->ndim;
  for (int d = 0; d < y->ndim; d++) g.out_shape[d] = y->shape[d];
  int64_t n = tensor_numel(y);
  if (n == 0) return;
  unsigned grid = ops_blocks(n, 256);
  cudaStream_t s = dev->stream;
  switch (dtype_size(x->dtype)) {
    case 1: layout_permute_kernel<<<grid, 256, 0, s>>>((const uint8_t *)x->data, (uint8_t *)y->data, n, g); break;
    case 2: layout_permute_kernel<<<grid, 256, 0, s>>>((const uint16_t *)x->data, (uint16_t *)y->data, n, g); break;
    case 4: layout_permute_kernel<<<grid, 256, 0, s>>>((const uint32_t *)x->data, (uint32_t *)y->data, n, g); break;
    default: layout_permute_kernel<<<grid, 256, 0, s>>>((const uint64_t *)x->data, (uint64_t *)y->data, n, g); break;
  }
  CHECK_LAUNCH();
}

// Heads to boxes (to_boxes) or back: one thread per element of y (consecutive
// threads, consecutive boxes' values: y's side coalesces).
template <typename E>
__global__ void layout_heads_kernel(E *y, HeadsGeometry g, bool to_boxes,
                                    LayoutHeadPointers<E> heads) {
  int64_t n = g.n * g.boxes * g.d, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    int64_t j = e % g.d, r = e / g.d;
    int k;
    int64_t at = layout_head_offset(&g, r / g.boxes, r % g.boxes, j, &k);
    if (to_boxes)
      y[e] = heads.p[k][at];
    else
      heads.p[k][at] = y[e];
  }
}

template <typename E>
static void layout_heads_launch(const Device *dev, const Tensor *xs, const HeadsGeometry &g,
                                const Tensor *y, bool to_boxes) {
  LayoutHeadPointers<E> heads;
  for (int k = 0; k < g.count; k++) heads.p[k] = (E *)xs[k].data;
  int64_t n = g.n * g.boxes * g.d;
  layout_heads_kernel<E><<<ops_blocks(n, 256), 256, 0, dev->stream>>>((E *)y->data, g, to_boxes,
                                                                      heads);
  CHECK_LAUNCH();
}

static void layout_heads_cuda(const Device *dev, const char *op, const Tensor *xs,
                              const int *anchors, int count, const Tensor *y, bool to_boxes) {
  HeadsGeometry g = layout_heads_geometry(op, xs, anchors, count, y);
  if (g.n * g.boxes * g.d == 0) return;
  switch (dtype_size(y->dtype)) {
    case 1: layout_heads_launch<uint8_t>(dev, xs, g, y, to_boxes); break;
    case 2: layout_heads_launch<uint16_t>(dev, xs, g, y, to_boxes); break;
    case 4: layout_heads_launch<uint32_t>(dev, xs, g, y, to_boxes); break;
    default: layout_heads_launch<uint64_t>(dev, xs, g, y, to_boxes); break;
  }
}

extern "C" void op_heads_to_boxes_cuda(const Device *dev, const Tensor *xs, const int *anchors,
                                       int count, const Tensor *y) {
  layout_heads_cuda(dev, "op_heads_to_boxes", xs, anchors, count, y, true);
}

extern "C" void op_boxes_to_heads_cuda(const Device *dev, const Tensor *y, const int *anchors,
                                       const Tensor *xs, int count) {
  layout_heads_cuda(dev, "op_boxes_to_heads", xs, anchors, count, y, false);
}
