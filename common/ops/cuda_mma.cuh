// cuda_mma.cuh: the warp-wide tensor-core product the fused kernels are built
// from, mma.sync m16n8k16 (fp16 or bf16 inputs, fp32 accumulators), and the
// register packing around it. Included by .cu files only.
//
// A warp multiplies a 16 x 16 tile A by a 16 x 8 tile B into a 16 x 8 tile
// of fp32 accumulators D (D += A B). Each lane holds a fixed part of each
// tile (PTX ISA, "Matrix Fragments for mma.m16n8k16"); with g = lane / 4 and
// c = lane % 4:
//   A: 4 registers of two 16-bit values each (the lower index in the low
//      half): a[0] row g, columns 2c and 2c+1; a[1] row g+8, the same
//      columns; a[2] row g, columns 2c+8 and 2c+9; a[3] row g+8, those.
//   B: 2 registers: b[0] rows 2c and 2c+1 of column g; b[1] rows 2c+8 and
//      2c+9 of column g.
//   D: 4 floats: d[0], d[1] row g, columns 2c and 2c+1; d[2], d[3] row g+8.
// So the accumulators of two side-by-side products (columns 0-7 and 8-15)
// are, packed in pairs, the A registers of a product over those 16 columns
// (mma_pack_a): the scores of attention feed the next product without
// passing through memory.
//
// On the GPU this is one instruction. The CPU emulation (tests/emu) has no
// tensor cores: there each lane gathers its rows of A and columns of B from
// the other lanes by shuffles, in the layout above, and sums the 16 products
// in order; so a kernel that puts a value in the wrong lane or register
// computes a wrong product there as it would on the GPU.
#pragma once
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "ops/cuda.cuh"

// The 16 bits of x rounded to T (fp16 or bf16), and two of them in a register.
template <typename T>
static __device__ __forceinline__ uint32_t mma_bits(float x) {
  T h = ops_from_f32<T>(x);
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}
template <typename T>
static __device__ __forceinline__ uint32_t mma_pack(float lo, float hi) {
  return mma_bits<T>(lo) | (mma_bits<T>(hi) << 16);
}
template <typename T>
static __device__ __forceinline__ float mma_unpack(uint32_t r, int half) {
  uint16_t u = (uint16_t)(half ? r >> 16 : r & 0xffffu);
  T h;
  memcpy((void *)&h, &u, sizeof u);  // T has no public bits member on every toolkit
  return ops_f32(h);
}

// Two adjacent 16-bit values at p (4-byte aligned) as one register.
template <typename T>
static __device__ __forceinline__ uint32_t mma_load2(const T *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

// The A registers of a 16 x 16 tile from the accumulators of its two 16 x 8
// halves, columns 0-7 (lo) and 8-15 (hi), rounded to T.
template <typename T>
static __device__ __forceinline__ void mma_pack_a(const float lo[4], const float hi[4],
                                                  uint32_t a[4]) {
  a[0] = mma_pack<T>(lo[0], lo[1]);
  a[1] = mma_pack<T>(lo[2], lo[3]);
  a[2] = mma_pack<T>(hi[0], hi[1]);
  a[3] = mma_pack<T>(hi[2], hi[3]);
}

// d += a b for the warp's tiles (every lane of the warp calls it together).
template <typename T>
static __device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                "mma_16816 takes fp16 or bf16");
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, __half>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  float rows[2][16], cols[2][16];  // A's rows g, g+8; B's columns 2c, 2c+1
  for (int j = 0; j < 4; j++) {    // the lanes holding columns (A) / rows (B) 2j, 2j+1
    for (int r = 0; r < 4; r++) {
      uint32_t x = __shfl_sync(0xffffffffu, a[r], g * 4 + j);
      for (int e = 0; e < 2; e++) rows[r & 1][(r >> 1) * 8 + 2 * j + e] = mma_unpack<T>(x, e);
    }
    for (int n = 0; n < 2; n++)
      for (int r = 0; r < 2; r++) {
        uint32_t x = __shfl_sync(0xffffffffu, b[r], (2 * c + n) * 4 + j);
        for (int e = 0; e < 2; e++) cols[n][r * 8 + 2 * j + e] = mma_unpack<T>(x, e);
      }
  }
  for (int m = 0; m < 2; m++)
    for (int n = 0; n < 2; n++) {
      float sum = 0.0f;
      for (int k = 0; k < 16; k++) sum += rows[m][k] * cols[n][k];
      d[m * 2 + n] += sum;
    }
#endif
}
