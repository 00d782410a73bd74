// cuda_pointwise.cuh: y[i] = fn(a[i], b[i], i) - the elementwise kernel of
// cuda_binary.cuh with the element index passed on (dropout draws number i of
// its RNG stream, a bias add reads column i % cols) and b optional. Included
// by .cu files only.
#pragma once
#include <stdint.h>

#include "ops/cuda_binary.cuh"

// y[i] = fn(a[i], b[i], i) in fp32 for i < n (b may be NULL: fn sees 0), each
// thread moving 16 bytes per operand at a time (4 fp32 or 8 fp16/bf16
// values) when every pointer is 16-byte aligned, one element at a time
// otherwise. fn is a functor: __device__ float operator()(float, float,
// int64_t) const. y may be a or b.
template <typename T, int kVec, typename Fn>
static __global__ void ops_pointwise_kernel(const T *a, const T *b, T *y, int64_t n,
                                            Fn fn) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t p = first; p < n / kVec; p += stride) {
    int64_t base = p * kVec;
    OpsPack<T, kVec> pa = *(const OpsPack<T, kVec> *)(a + base), pb, out;
    if (b) pb = *(const OpsPack<T, kVec> *)(b + base);
#pragma unroll
    for (int e = 0; e < kVec; e++)
      out.v[e] =
          ops_from_f32<T>(fn(ops_f32(pa.v[e]), b ? ops_f32(pb.v[e]) : 0.0f, base + e));
    *(OpsPack<T, kVec> *)(y + base) = out;
  }
  for (int64_t i = n / kVec * kVec + first; i < n; i += stride)  // the tail
    y[i] = ops_from_f32<T>(fn(ops_f32(a[i]), b ? ops_f32(b[i]) : 0.0f, i));
}

static inline bool ops_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T, typename Fn>
static void ops_pointwise(const Device *dev, const void *a, const void *b, void *y,
                          int64_t n, Fn fn) {
  if (n == 0) return;
  constexpr int kVec = 16 / sizeof(T);
  if (ops_aligned16(a) && ops_aligned16(b) && ops_aligned16(y))
    ops_pointwise_kernel<T, kVec>
        <<<ops_blocks(n / kVec + 1, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(
            (const T *)a, (const T *)b, (T *)y, n, fn);
  else
    ops_pointwise_kernel<T, 1>
        <<<ops_blocks(n, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(
            (const T *)a, (const T *)b, (T *)y, n, fn);
  CHECK_LAUNCH();
}
