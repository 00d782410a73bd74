// cuda_binary.cuh: the vectorised elementwise kernel y = f(a, b), computed in
// fp32 for fp32 / fp16 / bf16 tensors, behind op_add, op_scale, op_relu_fwd
// and friends. Included by .cu files only.
#pragma once
#include <stdint.h>

#include "ops/cuda.cuh"

// VEC elements in one 16-byte access when VEC * sizeof(T) == 16.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) OpsPack {
  T v[VEC];
};

// y[i] = f(a[i], b[i]) in fp32. Each thread moves VEC elements per access;
// the tail (n % VEC) goes one by one.
template <typename T, int VEC, typename F>
__global__ void ops_binary_kernel(const T *a, const T *b, T *y, int64_t n, F f) {
  typedef OpsPack<T, VEC> P;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t n_vec = n / VEC;
  for (int64_t i = tid; i < n_vec; i += stride) {
    P pa = ((const P *)a)[i], pb = ((const P *)b)[i], py;
#pragma unroll
    for (int j = 0; j < VEC; j++) py.v[j] = ops_from_f32<T>(f(ops_f32(pa.v[j]), ops_f32(pb.v[j])));
    ((P *)y)[i] = py;
  }
  for (int64_t i = n_vec * VEC + tid; i < n; i += stride)
    y[i] = ops_from_f32<T>(f(ops_f32(a[i]), ops_f32(b[i])));
}

// Launches ops_binary_kernel on dev->stream; 16-byte accesses when all three
// pointers allow them.
template <typename F>
void ops_binary_launch(const Device *dev, const char *op, DType dtype, const void *a,
                       const void *b, void *y, int64_t n, F f) {
  if (n == 0) return;
  bool aligned = (((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
  cudaStream_t s = dev->stream;
  OPS_FLOAT_DISPATCH(op, dtype, {
    typedef scalar_t T;
    constexpr int VEC = 16 / sizeof(T);
    if (aligned)
      ops_binary_kernel<T, VEC><<<ops_blocks(n / VEC, 256), 256, 0, s>>>(
          (const T *)a, (const T *)b, (T *)y, n, f);
    else
      ops_binary_kernel<T, 1><<<ops_blocks(n, 256), 256, 0, s>>>((const T *)a, (const T *)b,
                                                                   (T *)y, n, f);
  });
  CHECK_LAUNCH();
}
