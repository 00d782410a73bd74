// elementwise.h: elementwise arithmetic, dtype casts and the uint8 input
// normalisation. Conventions: see ops.h.
//
// Dtypes. The CPU path takes fp32 for the arithmetic; op_cast works on every
// pair of float dtypes, so the CPU reference can also produce and check
// 16-bit data. The CUDA path takes fp32, fp16 and bf16 and computes in fp32:
// each 16-bit input is widened, the result rounded once to nearest even on
// the store.
//
// Unless noted, every tensor argument of an op has the same dtype and the
// same number of elements; shapes are only compared by element count, so a
// (N, H, W, C) activation and its flat view mix freely. Outputs may alias
// inputs (y == a is an in-place update).
#pragma once
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// Per-channel affine map of op_affine_u8 (below).
typedef struct ChannelAffine {
  float scale[4], shift[4];
} ChannelAffine;
// The map of an image loader's normalisation of 3-channel bytes,
// (x / 255 - mean) / std, as one multiply-add per channel.
ChannelAffine channel_affine_normalize_u8(const float mean[3], const float std[3]);

#define OPS_ELEMENTWISE(X)                                                              \
  /* ------------------------------------------------------------ arithmetic            \
     y = a + b                           a, b, y: (n) */                                \
  X(op_add, (const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y),     \
    (dev, a, b, y))                                                                     \
  /* y = a * b                           a, b, y: (n) */                                \
  X(op_mul, (const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y),     \
    (dev, a, b, y))                                                                     \
  /* y = alpha * x                       x, y: (n) */                                   \
  X(op_scale, (const Device *dev, const Tensor *x, float alpha, const Tensor *y),       \
    (dev, x, alpha, y))                                                                 \
  /* y = y + alpha * x                   x, y: (n) */                                   \
  X(op_axpy, (const Device *dev, float alpha, const Tensor *x, const Tensor *y),        \
    (dev, alpha, x, y))                                                                 \
  /* ------------------------------------------------------------ casts                 \
     y = x converted to y's dtype, between fp32, fp16 and bf16 (either way),            \
     rounding to nearest even: bit for bit what tensor.h's f32_to_f16 and               \
     f32_to_bf16 give. fp16 <-> bf16 goes through fp32 (exact widening, one             \
     rounding). The CPU path takes every pair too. */                                   \
  X(op_cast, (const Device *dev, const Tensor *x, const Tensor *y), (dev, x, y))        \
  /* ------------------------------------------------------------ input bytes           \
     y = x * scale[c] + shift[c], c the position along the last axis (C <= 4):          \
     loader bytes to normalised network input on the device, e.g. the                  \
     (x / 255 - mean) / std of torchvision: scale = 1 / (255 std), shift =              \
     -mean / std.                                                                       \
       x: (..., C) uint8; y: x's shape, fp32, or fp16 / bf16 (the input of a            \
       mixed-precision network; the fp32 result rounded to nearest even). */            \
  X(op_affine_u8,                                                                       \
    (const Device *dev, const Tensor *x, const ChannelAffine *a, const Tensor *y),      \
    (dev, x, a, y))
OPS_DECLARE(OPS_ELEMENTWISE)

// Checks an op_affine_u8 call and returns C, the channels (last extent);
// shared by both backends (elementwise.c).
int64_t elem_affine_u8_channels(const Tensor *x, const Tensor *y);

#ifdef __cplusplus
}
#endif
