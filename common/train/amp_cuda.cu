// amp_cuda.cu: the unscale-and-check pass and the weight cast on the GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check_cuda.h"
#include "train/amp.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads * 8 - 1) / (kThreads * 8);  // 8 elements a thread
  return (unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// Every thread that sees inf or nan stores 1: the same value, so the race
// between them is harmless, and no atomic is needed.
__global__ void k_unscale(float *g, int64_t n, float factor, int *found_inf) {
  bool bad = false;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float x = g[i] * factor;
    g[i] = x;
    bad |= !isfinite(x);
  }
  if (found_inf && bad) *found_inf = 1;
}

template <class T, T (*Convert)(float)>
__global__ void k_cast(const float *src, T *dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = Convert(src[i]);
}

template <class T, float (*Convert)(T)>
__global__ void k_accumulate(const T *src, float *grads, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    grads[i] += Convert(src[i]);
}

__device__ float from_half(__half x) { return __half2float(x); }
__device__ float from_bf16(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float from_f32(float x) { return x; }

// A NaN keeps tensor.h's encoding (its sign; for bf16 also its payload); the
// hardware conversions return a canonical NaN.
__device__ __half to_half(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __ushort_as_half((unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(x);
}
__device__ __nv_bfloat16 to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x40u));
  return __float2bfloat16_rn(x);
}

}  // namespace

extern "C" void amp_unscale_cuda(const Device *dev, float *grads, int64_t n, float factor,
                                 int *found_inf) {
  if (n == 0) return;
  k_unscale<<<grid_for(n), kThreads, 0, dev->stream>>>(grads, n, factor, found_inf);
  CHECK_LAUNCH();
}

extern "C" int amp_take_flag_cuda(const Device *dev, int *found_inf) {
  int flag = 0;
  CHECK_CUDA(cudaMemcpyAsync(&flag, found_inf, sizeof flag, cudaMemcpyDeviceToHost, dev->stream));
  CHECK_CUDA(cudaMemsetAsync(found_inf, 0, sizeof(int), dev->stream));
  CHECK_CUDA(cudaStreamSynchronize(dev->stream));
  return flag;
}

extern "C" void amp_cast_cuda(const Device *dev, const float *src, void *dst, DType dtype,
                              int64_t n) {
  if (n == 0) return;
  switch (dtype) {
    case DT_F16:
      k_cast<__half, to_half><<<grid_for(n), kThreads, 0, dev->stream>>>(src, (__half *)dst, n);
      break;
    case DT_BF16:
      k_cast<__nv_bfloat16, to_bf16>
          <<<grid_for(n), kThreads, 0, dev->stream>>>(src, (__nv_bfloat16 *)dst, n);
      break;
    default:
      CHECK_CUDA(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                 dev->stream));
      return;
  }
  CHECK_LAUNCH();
}

extern "C" void amp_accumulate_grads_cuda(const Device *dev, const void *src, DType dtype,
                                          float *grads, int64_t n) {
  if (n == 0) return;
  unsigned grid = grid_for(n);
  switch (dtype) {
    case DT_F16:
      k_accumulate<__half, from_half>
          <<<grid, kThreads, 0, dev->stream>>>((const __half *)src, grads, n);
      break;
    case DT_BF16:
      k_accumulate<__nv_bfloat16, from_bf16>
          <<<grid, kThreads, 0, dev->stream>>>((const __nv_bfloat16 *)src, grads, n);
      break;
    default:
      k_accumulate<float, from_f32><<<grid, kThreads, 0, dev->stream>>>((const float *)src, grads, n);
      break;
  }
  CHECK_LAUNCH();
}
