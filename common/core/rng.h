// rng.h: counter-based random numbers (Philox4x32-10), the same stream on CPU
// and GPU. Number i of (seed, stream) is a pure function of the three, so a
// kernel thread, a loader thread and the CPU reference all draw the same value
// for the same element without sharing state, and a run is reproducible from
// its seed whatever the thread count.
//
//   block b = philox(counter = (b lo, b hi, stream lo, stream hi), key = seed)
//   u32 number i = word i % 4 of block i / 4
#pragma once
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define RNG_FN static __host__ __device__ __forceinline__
#else
#define RNG_FN static inline
#endif

typedef struct RngBlock {
  uint32_t w[4];
} RngBlock;

RNG_FN uint32_t rng_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

// Philox4x32 with 10 rounds (Salmon et al., SC'11): the round multipliers
// and the key's increments (rng_blocks_cpu runs the same rounds).
#define RNG_PHILOX_M0 0xD2511F53u
#define RNG_PHILOX_M1 0xCD9E8D57u
#define RNG_PHILOX_W0 0x9E3779B9u
#define RNG_PHILOX_W1 0xBB67AE85u

RNG_FN RngBlock rng_philox(RngBlock ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = rng_mulhilo(RNG_PHILOX_M0, ctr.w[0], &hi0);
    uint32_t lo1 = rng_mulhilo(RNG_PHILOX_M1, ctr.w[2], &hi1);
    RngBlock next = {{hi1 ^ ctr.w[1] ^ k0, lo1, hi0 ^ ctr.w[3] ^ k1, lo0}};
    ctr = next;
    k0 += RNG_PHILOX_W0;
    k1 += RNG_PHILOX_W1;
  }
  return ctr;
}

RNG_FN RngBlock rng_block(uint64_t seed, uint64_t stream, uint64_t block) {
  RngBlock ctr = {{(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                   (uint32_t)(stream >> 32)}};
  return rng_philox(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

RNG_FN uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
  return rng_block(seed, stream, i >> 2).w[i & 3];
}

// 24 random bits: uniform on [0, 1) with every value exactly representable.
RNG_FN float rng_u32_to_unit(uint32_t u) { return (float)(u >> 8) * (1.0f / 16777216.0f); }

RNG_FN float rng_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return rng_u32_to_unit(rng_u32(seed, stream, i));
}

// True with probability p (dropout keeps an element when this is true for
// p = keep probability).
RNG_FN bool rng_bernoulli(uint64_t seed, uint64_t stream, uint64_t i, float p) {
  return rng_uniform(seed, stream, i) < p;
}

// Standard normal number i of (seed, stream): Box-Muller over u32 numbers 2i
// and 2i+1. The CPU and GPU may differ in the last bits of log and cos.
RNG_FN float rng_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  RngBlock b = rng_block(seed, stream, i >> 1);
  int half = (int)(i & 1) * 2;
  // 1 - u lies in (0, 1], so the log is finite.
  float u1 = 1.0f - rng_u32_to_unit(b.w[half]);
  float u2 = rng_u32_to_unit(b.w[half + 1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

// Sequential draws on the host (shuffles, augmentation parameters). The whole
// state is three integers, so it goes into a checkpoint as is.
typedef struct Rng {
  uint64_t seed;
  uint64_t stream;
  uint64_t counter;
} Rng;

Rng rng_make(uint64_t seed, uint64_t stream);
uint32_t rng_next_u32(Rng *r);
float rng_next_uniform(Rng *r);               // [0, 1)
uint32_t rng_next_below(Rng *r, uint32_t n);  // uniform on [0, n), unbiased
float rng_next_normal(Rng *r);
void rng_shuffle_u32(Rng *r, uint32_t *items, size_t count);  // Fisher-Yates

// Blocks first .. first+n-1 of (seed, stream), word w of block first+j at
// out[4 j + w]: what rng_block gives one at a time, many at once (the CPU's
// vector units run several blocks side by side; dropout draws this way).
void rng_blocks_cpu(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first);
// The same for any n blocks: block blocks[j] at out[4 j + w].
void rng_blocks_at_cpu(uint32_t *out, const uint64_t *blocks, int64_t n, uint64_t seed,
                       uint64_t stream);

// Fill out[0..n) with numbers offset .. offset+n-1 of (seed, stream).
void rng_fill_uniform_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream,
                          uint64_t offset, float lo, float hi);
void rng_fill_normal_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream,
                         uint64_t offset, float mean, float std);
#if HAVE_CUDA
struct CUstream_st;  // cudaStream_t
void rng_fill_uniform_cuda(float *out, int64_t n, uint64_t seed, uint64_t stream,
                           uint64_t offset, float lo, float hi,
                           struct CUstream_st *cuda_stream);
void rng_fill_normal_cuda(float *out, int64_t n, uint64_t seed, uint64_t stream,
                          uint64_t offset, float mean, float std,
                          struct CUstream_st *cuda_stream);
#endif

#ifdef __cplusplus
}
#endif
