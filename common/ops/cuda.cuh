// cuda.cuh: what the CUDA halves of the op families share:
// dtype dispatch, fp32 widening and rounding, block reductions, the raw
// strided-batched GEMM, fixed-order (deterministic) partial-sum reductions
// and the masked row softmax.
// Included by .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check_cuda.h"
#include "ops/ops.h"

// Runs the statement with `scalar_t` bound to the C++ type of a float dtype.
#define OPS_FLOAT_DISPATCH(op, dtype, ...)                               \
  do {                                                                   \
    switch (dtype) {                                                     \
      case DT_F32: {                                                     \
        typedef float scalar_t;                                          \
        __VA_ARGS__;                                                     \
      } break;                                                           \
      case DT_F16: {                                                     \
        typedef __half scalar_t;                                         \
        __VA_ARGS__;                                                     \
      } break;                                                           \
      case DT_BF16: {                                                    \
        typedef __nv_bfloat16 scalar_t;                                  \
        __VA_ARGS__;                                                     \
      } break;                                                           \
      default:                                                           \
        DIE("%s: dtype %s is not a float dtype", op, dtype_name(dtype)); \
    }                                                                    \
  } while (0)

static __device__ __forceinline__ float ops_f32(float x) { return x; }
static __device__ __forceinline__ float ops_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float ops_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round to nearest even, as tensor.h's f32_to_f16 / f32_to_bf16 on the host.
template <typename T>
static __device__ __forceinline__ T ops_from_f32(float x);
template <>
__device__ __forceinline__ float ops_from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half ops_from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 ops_from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

#define OPS_THREADS 256
// Grid size of the fixed-order reductions: a constant, so the partial sums
// (and the result bits) do not depend on the GPU model.
#define OPS_REDUCE_GROUPS 256

static inline unsigned ops_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

// Sum (or max) of v over the block; every thread gets the result. blockDim.x
// is a multiple of 32, at most 1024; `shared` holds 32 floats.
static __device__ __forceinline__ float ops_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float ops_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <bool kMax>
static __device__ __forceinline__ float ops_block_reduce(float v, float *shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? ops_warp_max(v) : ops_warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? ops_warp_max(v) : ops_warp_sum(v);
}
static __device__ __forceinline__ float ops_block_sum(float v, float *shared) {
  return ops_block_reduce<false>(v, shared);
}
static __device__ __forceinline__ float ops_block_max(float v, float *shared) {
  return ops_block_reduce<true>(v, shared);
}

cudaDataType_t ops_cuda_dtype(DType dtype);

// Row-major, strided-batched c = alpha op(a) op(b) + beta c on dev->stream
// (cublasGemmStridedBatchedEx, fp32 accumulation; TF32 for fp32 inputs when
// op_gemm_set_tf32 allowed it). a, b in ab_dtype; c in c_dtype (fp32 or
// ab_dtype). lda/ldb/ldc: row strides in elements; stride_*: elements between
// batch entries (0 repeats the operand).
typedef struct OpsGemm {
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  const void *a;
  int64_t lda, stride_a;
  const void *b;
  int64_t ldb, stride_b;
  void *c;
  int64_t ldc, stride_c;
  DType ab_dtype, c_dtype;
  float alpha, beta;
} OpsGemm;
void ops_gemm_raw(const Device *dev, const OpsGemm *g);

// A product of batch 1 through cuBLASLt with an epilogue:
//   OPS_GEMM_BIAS     c[i, j] = alpha op(a) op(b) + beta c + bias[j] (bias: n),
//                     added before the rounding to c's dtype;
//   OPS_GEMM_BGRAD_A  as ops_gemm_raw, and bias[i] = sum over l of op(a)[i, l]
//                     (bias: m; a linear layer's bias gradient when op(a) = dy^T).
// bias is fp32 or c's dtype. Returns false, having done nothing, where cuBLASLt
// offers no algorithm for the problem (the caller then takes separate passes).
// Its workspace is the first OPS_LT_WORKSPACE_BYTES of dev->workspace.
typedef enum { OPS_GEMM_BIAS, OPS_GEMM_BGRAD_A } OpsGemmEpilogue;
#define OPS_LT_WORKSPACE_BYTES ((size_t)32 << 20)
bool ops_gemm_lt(const Device *dev, const OpsGemm *g, OpsGemmEpilogue epilogue, void *bias,
                 DType bias_dtype);
// count floats of dev->workspace past cuBLASLt's part, checked against its size.
float *ops_workspace_floats_after_lt(const Device *dev, int64_t count, const char *op);

// out[j] (+)= sum_g partials[g, j] over groups in order g = 0, 1, ...
//   partials: (groups, cols) fp32 in dev->workspace; out: (cols) fp32.
// out (cols) (+)= scale * the column sums of x (rows, cols) in dtype, in a
// fixed order: row parts over the GPU, then ops_colsum_finalize. For
// sum/mean reductions and bias gradients.
void ops_colsum(const Device *dev, const char *op, const void *x, DType dtype, int64_t rows,
                int64_t cols, float scale, float *out, bool accumulate);
void ops_colsum_finalize(const Device *dev, const float *partials, int groups,
                         int64_t cols, float *out, bool accumulate);
// Workspace for `count` floats of partial sums, checked against its size.
float *ops_workspace_floats(const Device *dev, int64_t count, const char *op);

// ---------------------------------------------------------------- masked softmax
// Which columns of a row take part: all of them, or (attention) the keys below
// the sequence's valid length and, when causal, at or before the query.
typedef struct OpsRowMask {
  const int32_t *key_len;  // (B) or NULL
  int64_t rows_per_seq;    // H * Tq
  int64_t tq;
  bool causal;
} OpsRowMask;

// y = softmax(x) over each row's kept columns, 0 elsewhere (y may be x);
// dx = scale y (dy - sum(dy y)) (dx may be dy). One block per row
// (activation_cuda.cu): op_softmax_fwd/bwd with no mask, attention with one.
void ops_softmax_fwd_launch(const Device *dev, const Tensor *x, const Tensor *y, OpsRowMask mask);
void ops_softmax_bwd_launch(const Device *dev, const Tensor *y, const Tensor *dy,
                            const Tensor *dx, float scale);
