// cuda_channels.cuh: what the NHWC per-channel kernels of batch norm
// (norm_cuda.cu) and pooling (pool_cuda.cu) share. Each thread owns V
// neighbouring channels, moved as one 16-byte OpsPack (8 bf16 or fp16, 4
// fp32) when the channel count and the pointers allow it, else V = 1, and
// computes on them in fp32. Included by .cu files only.
#pragma once
#include <stdint.h>

#include <initializer_list>

#include "ops/cuda_binary.cuh"

template <typename T, int V>
__device__ __forceinline__ void ops_pack_load(const T *p, float (&out)[V]) {
  OpsPack<T, V> pack = *(const OpsPack<T, V> *)p;
#pragma unroll
  for (int v = 0; v < V; v++) out[v] = ops_f32(pack.v[v]);
}

template <typename T, int V>
__device__ __forceinline__ void ops_pack_store(T *p, const float (&in)[V]) {
  OpsPack<T, V> pack;
#pragma unroll
  for (int v = 0; v < V; v++) pack.v[v] = ops_from_f32<T>(in[v]);
  *(OpsPack<T, V> *)p = pack;
}

// The channels a thread owns: 16 bytes' worth when every row of every
// tensor starts 16-byte aligned, else 1.
template <typename T>
static int ops_channel_width(int64_t cols, std::initializer_list<const void *> ptrs) {
  const int wide = 16 / (int)sizeof(T);
  if (cols % wide != 0) return 1;
  for (const void *p : ptrs)
    if (p && ((uintptr_t)p & 15) != 0) return 1;
  return wide;
}
