// ops_cuda_kernels.cuh: device helpers shared by the CUDA op files: fp32 /
// fp16 / bf16 loads and stores, and the vectorised binary elementwise kernel
// (y = f(a, b)) behind op_add, op_scale, op_relu_fwd and friends.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "check_cuda.h"
#include "ops.h"

// Widening loads are exact. Narrowing stores round to nearest even and keep
// tensor.h's NaN encodings (f32_to_f16, f32_to_bf16), so a CUDA cast and the
// CPU cast agree bit for bit on every input, NaN included.
__device__ __forceinline__ float ops_load(float x) { return x; }
__device__ __forceinline__ float ops_load(__half x) { return __half2float(x); }
__device__ __forceinline__ float ops_load(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T ops_store(float v);
template <>
__device__ __forceinline__ float ops_store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half ops_store<__half>(float v) {
  if (isnan(v)) return __ushort_as_half((unsigned short)(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 ops_store<__nv_bfloat16>(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x40u));
  return __float2bfloat16_rn(v);
}

// Runs body<T>() with T the CUDA type of a float dtype.
#define OPS_FLOAT_DTYPE_SWITCH(op, dtype, T, ...)                         \
  switch (dtype) {                                                        \
    case DT_F32: { typedef float T; __VA_ARGS__; } break;                 \
    case DT_F16: { typedef __half T; __VA_ARGS__; } break;                \
    case DT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;        \
    default: DIE("%s: dtype %s is not a float type", op, dtype_name(dtype)); \
  }

static inline unsigned ops_grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return (unsigned)(blocks < 65536 ? blocks : 65536);  // grid-stride beyond
}

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
    for (int j = 0; j < VEC; j++) py.v[j] = ops_store<T>(f(ops_load(pa.v[j]), ops_load(pb.v[j])));
    ((P *)y)[i] = py;
  }
  for (int64_t i = n_vec * VEC + tid; i < n; i += stride)
    y[i] = ops_store<T>(f(ops_load(a[i]), ops_load(b[i])));
}

// Launches ops_binary_kernel on dev->stream; 16-byte accesses when all three
// pointers allow them.
template <typename F>
void ops_binary_launch(const Device *dev, const char *op, DType dtype, const void *a,
                       const void *b, void *y, int64_t n, F f) {
  if (n == 0) return;
  bool aligned = (((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
  cudaStream_t s = dev->stream;
  OPS_FLOAT_DTYPE_SWITCH(op, dtype, T, {
    constexpr int VEC = 16 / sizeof(T);
    if (aligned)
      ops_binary_kernel<T, VEC><<<ops_grid_for(n / VEC, 256), 256, 0, s>>>(
          (const T *)a, (const T *)b, (T *)y, n, f);
    else
      ops_binary_kernel<T, 1><<<ops_grid_for(n, 256), 256, 0, s>>>((const T *)a, (const T *)b,
                                                                   (T *)y, n, f);
  });
  CHECK_LAUNCH();
}
