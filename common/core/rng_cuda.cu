// rng_cuda.cu: the GPU fills; same numbers as rng_fill_*_cpu.
#include "core/check_cuda.h"
#include "core/rng.h"

static __global__ void rng_uniform_kernel(float *out, int64_t n, uint64_t seed,
                                          uint64_t stream, uint64_t offset, float lo,
                                          float hi) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // Rounded multiply, then add: an FMA (nvcc contracts by default) would
  // round once and differ from the CPU's lo + (hi - lo) u in the last bit.
  if (i < n)
    out[i] = __fadd_rn(lo, __fmul_rn(hi - lo, rng_uniform(seed, stream, offset + (uint64_t)i)));
}

static __global__ void rng_normal_kernel(float *out, int64_t n, uint64_t seed,
                                         uint64_t stream, uint64_t offset, float mean,
                                         float std) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mean + std * rng_normal(seed, stream, offset + (uint64_t)i);
}

static unsigned blocks_for(int64_t n, int threads) {
  return (unsigned)((n + threads - 1) / threads);
}

extern "C" void rng_fill_uniform_cuda(float *out, int64_t n, uint64_t seed,
                                      uint64_t stream, uint64_t offset, float lo,
                                      float hi, cudaStream_t cuda_stream) {
  if (n == 0) return;
  rng_uniform_kernel<<<blocks_for(n, 256), 256, 0, cuda_stream>>>(out, n, seed, stream,
                                                                   offset, lo, hi);
  CHECK_LAUNCH();
}

extern "C" void rng_fill_normal_cuda(float *out, int64_t n, uint64_t seed,
                                     uint64_t stream, uint64_t offset, float mean,
                                     float std, cudaStream_t cuda_stream) {
  if (n == 0) return;
  rng_normal_kernel<<<blocks_for(n, 256), 256, 0, cuda_stream>>>(out, n, seed, stream,
                                                                  offset, mean, std);
  CHECK_LAUNCH();
}
