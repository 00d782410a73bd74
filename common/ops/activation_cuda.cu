// activation_cuda.cu: GELU, softmax, dropout, and GELU with dropout in one
// pass, on the GPU. Softmax runs one block per row; its masked form is the
// middle of attention_cuda.cu.
#include "core/rng.h"
#include "ops/activation.h"
#include "ops/cuda.cuh"
#include "ops/cuda_pointwise.cuh"

// ---------------------------------------------------------------- GELU
struct GeluFwd {
  __device__ float operator()(float x, float, int64_t) const {
    return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
  }
};

// d/dx [x Phi(x)] = Phi(x) + x phi(x), times dy.
struct GeluBwd {
  __device__ float operator()(float x, float dy, int64_t) const {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
    return dy * (cdf + x * inv_sqrt_2pi * expf(-0.5f * x * x));
  }
};

extern "C" void op_gelu_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  op_same_size_check("op_gelu_fwd", x, y);
  OPS_FLOAT_DISPATCH(
      "op_gelu_fwd", x->dtype,
      ops_pointwise<scalar_t>(dev, x->data, NULL, y->data, tensor_numel(x), GeluFwd()));
}

extern "C" void op_gelu_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *dy,
                                 const Tensor *dx) {
  op_same_size_check("op_gelu_bwd", x, dy);
  op_same_size_check("op_gelu_bwd", x, dx);
  OPS_FLOAT_DISPATCH("op_gelu_bwd", x->dtype,
                     ops_pointwise<scalar_t>(dev, x->data, dy->data, dx->data,
                                             tensor_numel(x), GeluBwd()));
}

// ---------------------------------------------------------------- softmax
static __device__ __forceinline__ int64_t kept_cols(const OpsRowMask &mask, int64_t row,
                                                    int64_t cols) {
  int64_t kept = cols;
  if (mask.key_len) {
    int64_t len = mask.key_len[row / mask.rows_per_seq];
    kept = len < 0 ? 0 : len < cols ? len : cols;
  }
  if (mask.causal) {
    int64_t i = row % mask.tq;
    if (i + 1 < kept) kept = i + 1;
  }
  return kept;
}

// y = softmax(x) over the kept columns, 0 elsewhere; y may be x.
template <typename T>
static __global__ void softmax_fwd_kernel(const T *x, T *y, int64_t cols, OpsRowMask mask) {
  __shared__ float shared[32];
  int64_t kept = kept_cols(mask, blockIdx.x, cols);
  const T *in = x + blockIdx.x * cols;
  T *out = y + blockIdx.x * cols;
  float max = -INFINITY;
  for (int64_t j = threadIdx.x; j < kept; j += blockDim.x)
    max = fmaxf(max, ops_f32(in[j]));
  max = ops_block_max(max, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < kept; j += blockDim.x)
    sum += expf(ops_f32(in[j]) - max);
  float inv = 1.0f / ops_block_sum(sum, shared);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = ops_from_f32<T>(j < kept ? expf(ops_f32(in[j]) - max) * inv : 0.0f);
}

// dx = scale y (dy - sum(dy y)); dx may be dy.
template <typename T>
static __global__ void softmax_bwd_kernel(const T *y, const T *dy, T *dx, int64_t cols,
                                          float scale) {
  __shared__ float shared[32];
  int64_t base = blockIdx.x * cols;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    dot += ops_f32(dy[base + j]) * ops_f32(y[base + j]);
  dot = ops_block_sum(dot, shared);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    dx[base + j] =
        ops_from_f32<T>(scale * ops_f32(y[base + j]) * (ops_f32(dy[base + j]) - dot));
}

void ops_softmax_fwd_launch(const Device *dev, const Tensor *x, const Tensor *y,
                            OpsRowMask mask) {
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  if (rows == 0) return;
  OPS_FLOAT_DISPATCH("softmax", x->dtype, {
    softmax_fwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)x->data, (scalar_t *)y->data, cols, mask);
  });
  CHECK_LAUNCH();
}

void ops_softmax_bwd_launch(const Device *dev, const Tensor *y, const Tensor *dy,
                            const Tensor *dx, float scale) {
  int64_t rows = op_rows(y), cols = op_last_dim(y);
  if (rows == 0) return;
  OPS_FLOAT_DISPATCH("softmax", y->dtype, {
    softmax_bwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)y->data, (const scalar_t *)dy->data, (scalar_t *)dx->data, cols,
        scale);
  });
  CHECK_LAUNCH();
}

extern "C" void op_softmax_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  op_same_size_check("op_softmax_fwd", x, y);
  OpsRowMask none = {NULL, 1, 1, false};
  ops_softmax_fwd_launch(dev, x, y, none);
}

extern "C" void op_softmax_bwd_cuda(const Device *dev, const Tensor *y, const Tensor *dy,
                                    const Tensor *dx) {
  op_same_size_check("op_softmax_bwd", y, dy);
  op_same_size_check("op_softmax_bwd", y, dx);
  ops_softmax_bwd_launch(dev, y, dy, dx, 1.0f);
}

// ---------------------------------------------------------------- dropout
// Element i is kept when number i of (seed, stream) is below keep_prob.
struct Dropout {
  float keep_prob, scale;
  uint64_t seed, stream;
  __device__ float operator()(float x, float, int64_t i) const {
    return rng_bernoulli(seed, stream, (uint64_t)i, keep_prob) ? x * scale : 0.0f;
  }
};

static void dropout_launch(const Device *dev, const Tensor *x, const Tensor *y,
                           float keep_prob, uint64_t seed, uint64_t stream) {
  Dropout fn = {keep_prob, 1.0f / keep_prob, seed, stream};
  OPS_FLOAT_DISPATCH(
      "op_dropout", x->dtype,
      ops_pointwise<scalar_t>(dev, x->data, NULL, y->data, tensor_numel(x), fn));
}

extern "C" void op_dropout_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                                    float keep_prob, uint64_t seed, uint64_t stream) {
  op_dropout_check("op_dropout_fwd", x, y, keep_prob);
  dropout_launch(dev, x, y, keep_prob, seed, stream);
}

extern "C" void op_dropout_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx,
                                    float keep_prob, uint64_t seed, uint64_t stream) {
  op_dropout_check("op_dropout_bwd", dy, dx, keep_prob);
  dropout_launch(dev, dy, dx, keep_prob, seed, stream);
}

// ---------------------------------------------------------------- GELU + dropout
struct GeluDropoutFwd {
  Dropout drop;
  __device__ float operator()(float x, float, int64_t i) const {
    return drop(GeluFwd()(x, 0.0f, i), 0.0f, i);
  }
};

struct GeluDropoutBwd {
  Dropout drop;
  __device__ float operator()(float x, float dy, int64_t i) const {
    return GeluBwd()(x, drop(dy, 0.0f, i), i);
  }
};

extern "C" void op_gelu_dropout_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                                         float keep_prob, uint64_t seed, uint64_t stream) {
  op_dropout_check("op_gelu_dropout_fwd", x, y, keep_prob);
  GeluDropoutFwd fn = {{keep_prob, 1.0f / keep_prob, seed, stream}};
  OPS_FLOAT_DISPATCH(
      "op_gelu_dropout_fwd", x->dtype,
      ops_pointwise<scalar_t>(dev, x->data, NULL, y->data, tensor_numel(x), fn));
}

extern "C" void op_gelu_dropout_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *dy,
                                         const Tensor *dx, float keep_prob, uint64_t seed,
                                         uint64_t stream) {
  op_dropout_check("op_gelu_dropout_bwd", dy, dx, keep_prob);
  op_same_size_check("op_gelu_dropout_bwd", x, dy);
  GeluDropoutBwd fn = {{keep_prob, 1.0f / keep_prob, seed, stream}};
  OPS_FLOAT_DISPATCH(
      "op_gelu_dropout_bwd", x->dtype,
      ops_pointwise<scalar_t>(dev, x->data, dy->data, dx->data, tensor_numel(x), fn));
}
