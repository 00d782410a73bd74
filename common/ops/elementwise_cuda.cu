// elementwise_cuda.cu: the CUDA side of elementwise.h. Everything runs on
// dev->stream without a host synchronisation.
#include "ops/cuda_binary.cuh"
#include "ops/elementwise.h"

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

// ---------------------------------------------------------------- input bytes

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
