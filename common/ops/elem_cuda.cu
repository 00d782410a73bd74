// ops_elem_cuda.cu: the CUDA side of ops_elem.h. Everything runs on
// dev->stream without a host synchronisation.
#include "ops/cuda_binary.cuh"
#include "ops/elem.h"

// ---------------------------------------------------------------- arithmetic

struct ElemAdd {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct ElemMul {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct ElemScale {  // f(x, unused) = alpha x
  float alpha;
  __device__ float operator()(float x, float) const { return alpha * x; }
};
struct ElemAxpy {  // f(x, y) = y + alpha x
  float alpha;
  __device__ float operator()(float x, float y) const { return y + alpha * x; }
};

static int64_t elem_binary_count_cuda(const char *op, const Tensor *a, const Tensor *b,
                                      const Tensor *y) {
  int64_t n = tensor_numel(y);
  OP_REQUIRE(op, a->dtype == y->dtype && b->dtype == y->dtype);
  OP_REQUIRE(op, tensor_numel(a) == n && tensor_numel(b) == n);
  return n;
}

extern "C" void op_add_cuda(const Device *dev, const Tensor *a, const Tensor *b,
                            const Tensor *y) {
  int64_t n = elem_binary_count_cuda("op_add", a, b, y);
  ops_binary_launch(dev, "op_add", y->dtype, a->data, b->data, y->data, n, ElemAdd());
}

extern "C" void op_mul_cuda(const Device *dev, const Tensor *a, const Tensor *b,
                            const Tensor *y) {
  int64_t n = elem_binary_count_cuda("op_mul", a, b, y);
  ops_binary_launch(dev, "op_mul", y->dtype, a->data, b->data, y->data, n, ElemMul());
}

extern "C" void op_scale_cuda(const Device *dev, const Tensor *x, float alpha, const Tensor *y) {
  int64_t n = elem_binary_count_cuda("op_scale", x, x, y);
  ops_binary_launch(dev, "op_scale", y->dtype, x->data, x->data, y->data, n, ElemScale{alpha});
}

extern "C" void op_axpy_cuda(const Device *dev, float alpha, const Tensor *x, const Tensor *y) {
  int64_t n = elem_binary_count_cuda("op_axpy", x, x, y);
  ops_binary_launch(dev, "op_axpy", y->dtype, x->data, y->data, y->data, n, ElemAxpy{alpha});
}

// ---------------------------------------------------------------- data movement

// Each part is one strided 2-D copy: `outer` rows of len * inner elements.
static void elem_copy_parts_cuda(const Device *dev, const char *op, const Tensor *whole,
                                 const Tensor *parts, int count, int axis, bool to_whole) {
  int64_t outer, inner, offset = 0;
  elem_concat_geometry(op, whole, parts, count, axis, &outer, &inner);
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
  elem_copy_parts_cuda(dev, "op_concat", y, xs, count, axis, true);
}

extern "C" void op_split_cuda(const Device *dev, const Tensor *x, int axis, const Tensor *ys,
                              int count) {
  elem_copy_parts_cuda(dev, "op_split", x, ys, count, axis, false);
}

struct PermuteGeometry {
  int ndim;
  int64_t out_shape[TENSOR_MAX_DIMS];
  int64_t in_strides[TENSOR_MAX_DIMS];  // input stride of each output axis
};

// One thread per output element (consecutive threads write consecutive
// outputs, so the stores coalesce).
template <typename E>
__global__ void elem_permute_kernel(const E *x, E *y, int64_t n, PermuteGeometry g) {
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

// One thread per byte (grid-stride: ops_blocks caps the grid); the channel is
// the position along the last axis.
template <typename T>
static __global__ void elem_affine_u8_kernel(const uint8_t *x, T *y, int64_t n, int channels,
                                             ChannelAffine a) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int c = (int)(i % channels);
    y[i] = ops_from_f32<T>((float)x[i] * a.scale[c] + a.shift[c]);
  }
}

extern "C" void op_affine_u8_cuda(const Device *dev, const Tensor *x, const ChannelAffine *a,
                                  const Tensor *y) {
  int channels = (int)elem_affine_u8_channels(x, y);
  int64_t n = tensor_numel(x);
  if (n == 0) return;
  OPS_FLOAT_DISPATCH("op_affine_u8", y->dtype, {
    elem_affine_u8_kernel<scalar_t><<<ops_blocks(n, 256), 256, 0, dev->stream>>>(
        (const uint8_t *)x->data, (scalar_t *)y->data, n, channels, *a);
  });
  CHECK_LAUNCH();
}

extern "C" void op_permute_cuda(const Device *dev, const Tensor *x, const int *perm,
                                const Tensor *y) {
  PermuteGeometry g;
  elem_permute_strides(x, perm, y, g.in_strides);
  g.ndim = y->ndim;
  for (int d = 0; d < y->ndim; d++) g.out_shape[d] = y->shape[d];
  int64_t n = tensor_numel(y);
  if (n == 0) return;
  unsigned grid = ops_blocks(n, 256);
  cudaStream_t s = dev->stream;
  switch (dtype_size(x->dtype)) {
    case 1: elem_permute_kernel<<<grid, 256, 0, s>>>((const uint8_t *)x->data, (uint8_t *)y->data, n, g); break;
    case 2: elem_permute_kernel<<<grid, 256, 0, s>>>((const uint16_t *)x->data, (uint16_t *)y->data, n, g); break;
    case 4: elem_permute_kernel<<<grid, 256, 0, s>>>((const uint32_t *)x->data, (uint32_t *)y->data, n, g); break;
    default: elem_permute_kernel<<<grid, 256, 0, s>>>((const uint64_t *)x->data, (uint64_t *)y->data, n, g); break;
  }
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------- reductions

// x (rows, cols) -> out (parts, cols): block (cw, 256 / cw) sums the rows
// [p * rows_per_part, ...) of columns [blockIdx.x * cw, ...) for p =
// blockIdx.y. Lanes along y add up in a fixed tree, so the result does not
// depend on timing.
template <typename T>
__global__ void elem_colsum_kernel(const T *x, float *out, int64_t rows, int64_t cols,
                                   int64_t rows_per_part, float scale) {
  extern __shared__ float lane_sums[];  // (blockDim.y, blockDim.x)
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t r0 = (int64_t)blockIdx.y * rows_per_part;
  int64_t r1 = min(rows, r0 + rows_per_part);
  float acc = 0;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) acc += ops_f32(x[r * cols + c]);
  lane_sums[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half)
      lane_sums[threadIdx.y * blockDim.x + threadIdx.x] +=
          lane_sums[(threadIdx.y + half) * blockDim.x + threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) out[(int64_t)blockIdx.y * cols + c] = scale * lane_sums[threadIdx.x];
}

void ops_colsum(const Device *dev, const char *op, const void *x, DType dtype, int64_t rows,
                int64_t cols, float scale, float *out, bool accumulate) {
  if (cols == 0) return;
  unsigned cw = 1;
  while (cw < 32 && cw < cols) cw *= 2;
  dim3 block(cw, 256 / cw);
  int64_t col_blocks = (cols + cw - 1) / cw;
  // Enough row parts to fill the GPU, each of at least 256 rows, and no more
  // than the workspace holds.
  int64_t parts = (rows + 255) / 256;
  int64_t want = (4 * (int64_t)dev->sm_count + col_blocks - 1) / col_blocks;
  int64_t fit = (int64_t)(dev->workspace_bytes / sizeof(float)) / cols;
  parts = parts < want ? parts : want;
  parts = parts < fit ? parts : fit;
  parts = parts < 65535 ? parts : 65535;
  if (parts < 1) parts = 1;
  int64_t rows_per_part = (rows + parts - 1) / parts;
  // One part that overwrites goes straight to out; otherwise the parts are
  // added (to out's old values when accumulating) in a fixed order.
  bool direct = parts == 1 && !accumulate;
  float *dst = direct ? out : ops_workspace_floats(dev, parts * cols, op);
  size_t shmem = 256 * sizeof(float);
  OPS_FLOAT_DISPATCH(op, dtype, {
    typedef scalar_t T;
    elem_colsum_kernel<T><<<dim3((unsigned)col_blocks, (unsigned)parts), block, shmem,
                            dev->stream>>>((const T *)x, dst, rows, cols, rows_per_part, scale);
  });
  CHECK_LAUNCH();
  if (!direct) ops_colsum_finalize(dev, dst, (int)parts, cols, out, accumulate);
}

static void elem_reduce_cuda(const Device *dev, const char *op, const Tensor *x, int lead_axes,
                             const Tensor *y, bool mean) {
  int64_t rows, cols;
  elem_reduce_geometry(op, x, lead_axes, y, &rows, &cols);
  float scale = mean ? 1.0f / (float)rows : 1.0f;  // an empty mean is NaN, as on the CPU
  ops_colsum(dev, op, x->data, x->dtype, rows, cols, scale, (float *)y->data, false);
}

extern "C" void op_sum_cuda(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  elem_reduce_cuda(dev, "op_sum", x, lead_axes, y, false);
}

extern "C" void op_mean_cuda(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  elem_reduce_cuda(dev, "op_mean", x, lead_axes, y, true);
}

// ---------------------------------------------------------------- casts

// ops_from_f32 rounds as tensor.h does; a cast also keeps tensor.h's NaN
// encodings, so it matches the CPU cast bit for bit on every input.
template <typename T>
__device__ __forceinline__ T elem_cast_store(float v) {
  return ops_from_f32<T>(v);
}
template <>
__device__ __forceinline__ __half elem_cast_store<__half>(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_half((unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 elem_cast_store<__nv_bfloat16>(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x40u));
  return __float2bfloat16_rn(v);
}

// The widening keeps a NaN's sign and payload as tensor.h's f16_to_f32 and
// bf16_to_f32 do; the hardware conversions (cvt.f32.f16, and cvt.f32.bf16 on
// sm_90) need not, and a NaN's bits reach the output through the store above.
__device__ __forceinline__ float elem_cast_load(float v) { return v; }
__device__ __forceinline__ float elem_cast_load(__nv_bfloat16 v) {
  return __uint_as_float((uint32_t)__bfloat16_as_ushort(v) << 16);
}
__device__ __forceinline__ float elem_cast_load(__half v) {
  uint32_t h = __half_as_ushort(v);
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
    return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
  return __half2float(v);
}

template <typename TI, typename TO>
__global__ void elem_cast_kernel(const TI *x, TO *y, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = elem_cast_store<TO>(elem_cast_load(x[i]));
}

extern "C" void op_cast_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  int64_t n = tensor_numel(x);
  OP_REQUIRE("op_cast", tensor_numel(y) == n);
  if (n == 0) return;
  unsigned grid = ops_blocks(n, 256);
  OPS_FLOAT_DISPATCH("op_cast", x->dtype, {
    typedef scalar_t TI;
    OPS_FLOAT_DISPATCH("op_cast", y->dtype, {
    typedef scalar_t TO;
      elem_cast_kernel<TI, TO><<<grid, 256, 0, dev->stream>>>((const TI *)x->data,
                                                             (TO *)y->data, n);
    });
  });
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------- top-k

// One block per row, k rounds; round j takes the largest key below round
// j-1's pick (see elem_topk_key), so nothing is stored between rounds.
template <typename T>
__global__ void elem_topk_kernel(const T *x, T *values, int32_t *indices, int64_t cols, int k) {
  __shared__ unsigned long long warp_best[32];
  __shared__ unsigned long long pick;
  const T *row = x + (int64_t)blockIdx.x * cols;
  unsigned long long bound = 0;
  for (int j = 0; j < k; j++) {
    unsigned long long best = 0;  // below every real key: index term is >= 2^32 - cols
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      unsigned long long key = elem_topk_key(__float_as_uint(ops_f32(row[c])), c);
      if ((j == 0 || key < bound) && key > best) best = key;
    }
    for (int off = 16; off > 0; off /= 2) {
      unsigned long long other = __shfl_down_sync(0xffffffffu, best, off);
      best = other > best ? other : best;
    }
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < blockDim.x / 32; w++)
        best = warp_best[w] > best ? warp_best[w] : best;
      pick = best;
      int64_t c = 0xffffffffu - (uint32_t)best;
      values[(int64_t)blockIdx.x * k + j] = row[c];
      indices[(int64_t)blockIdx.x * k + j] = (int32_t)c;
    }
    __syncthreads();
    bound = pick;
  }
}

extern "C" void op_topk_cuda(const Device *dev, const Tensor *x, int k, const Tensor *values,
                             const Tensor *indices) {
  int64_t rows, cols;
  elem_topk_geometry(x, k, values, indices, &rows, &cols);
  if (rows == 0) return;
  OP_REQUIRE("op_topk", rows <= INT32_MAX);
  OPS_FLOAT_DISPATCH("op_topk", x->dtype, {
    typedef scalar_t T;
    elem_topk_kernel<T><<<(unsigned)rows, 256, 0, dev->stream>>>(
        (const T *)x->data, (T *)values->data, (int32_t *)indices->data, cols, k);
  });
  CHECK_LAUNCH();
}
