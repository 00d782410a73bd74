// norm_cuda.cu: layer norm on the GPU, one block per row.
#include "ops/cuda.cuh"
#include "ops/norm.h"

// ---------------------------------------------------------------- layer norm
template <typename T>
static __global__ void layernorm_fwd_kernel(const T *x, const float *gamma,
                                            const float *beta, float eps, int64_t cols,
                                            T *y, float *mean, float *rstd) {
  __shared__ float shared[32];
  const T *row = x + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += ops_f32(row[j]);
  float mu = ops_block_sum(sum, shared) / (float)cols;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = ops_f32(row[j]) - mu;
    sq += d * d;
  }
  float rs = rsqrtf(ops_block_sum(sq, shared) / (float)cols + eps);
  T *out = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = ops_from_f32<T>((ops_f32(row[j]) - mu) * rs * gamma[j] + beta[j]);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}

extern "C" void op_layernorm_fwd_cuda(const Device *dev, const Tensor *x,
                                      const Tensor *gamma, const Tensor *beta, float eps,
                                      const Tensor *y, const Tensor *mean,
                                      const Tensor *rstd) {
  op_layernorm_check(x, gamma, y, mean, rstd);
  OP_REQUIRE("op_layernorm_fwd", tensor_same_shape(beta, gamma));
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  if (rows == 0) return;
  OPS_FLOAT_DISPATCH("op_layernorm_fwd", x->dtype, {
    layernorm_fwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)x->data, (const float *)gamma->data, (const float *)beta->data,
        eps, cols, (scalar_t *)y->data, (float *)mean->data, (float *)rstd->data);
  });
  CHECK_LAUNCH();
}

// Block g takes rows g, g + G, ...: writes their dx and its partial column
// sums of dy xhat (dgamma) and dy (dbeta) to partials[g] and partials[G + g].
// Each thread owns the columns j = threadIdx.x + k blockDim.x of the shared
// accumulators, so the sums need no atomics and their order is fixed.
template <typename T>
static __global__ void layernorm_bwd_kernel(const T *x, const float *gamma,
                                            const float *mean, const float *rstd,
                                            const T *dy, int64_t rows, int64_t cols,
                                            T *dx, float *partials) {
  extern __shared__ float acc[];  // (2, cols): dgamma, dbeta
  __shared__ float shared[32];
  for (int64_t j = threadIdx.x; j < 2 * cols; j += blockDim.x) acc[j] = 0.0f;
  __syncthreads();  // acc[cols + j] is zeroed by another thread than its owner
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols, *gr = dy + r * cols;
    float mu = mean[r], rs = rstd[r], sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float g = ops_f32(gr[j]) * gamma[j], xhat = (ops_f32(xr[j]) - mu) * rs;
      sum_g += g;
      sum_gx += g * xhat;
    }
    float mean_g = ops_block_sum(sum_g, shared) / (float)cols;
    float mean_gx = ops_block_sum(sum_gx, shared) / (float)cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float d = ops_f32(gr[j]), xhat = (ops_f32(xr[j]) - mu) * rs;
      dx[r * cols + j] = ops_from_f32<T>(rs * (d * gamma[j] - mean_g - xhat * mean_gx));
      acc[j] += d * xhat;
      acc[cols + j] += d;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    partials[blockIdx.x * cols + j] = acc[j];
    partials[(gridDim.x + blockIdx.x) * cols + j] = acc[cols + j];
  }
}

extern "C" void op_layernorm_bwd_cuda(const Device *dev, const Tensor *x,
                                      const Tensor *gamma, const Tensor *mean,
                                      const Tensor *rstd, const Tensor *dy,
                                      const Tensor *dx, const Tensor *dgamma,
                                      const Tensor *dbeta, bool accumulate) {
  op_layernorm_check(x, gamma, dy, mean, rstd);
  OP_REQUIRE("op_layernorm_bwd", tensor_same_shape(dx, dy));
  OP_REQUIRE("op_layernorm_bwd",
             tensor_same_shape(dgamma, gamma) && tensor_same_shape(dbeta, gamma));
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  size_t shared_bytes = 2 * (size_t)cols * sizeof(float);
  // 48 KiB per block without an opt-in, the kernel's static 32 floats included.
  OP_REQUIRE("op_layernorm_bwd", shared_bytes + 32 * sizeof(float) <= 48 * 1024);
  float *partials =
      ops_workspace_floats(dev, 2 * OPS_REDUCE_GROUPS * cols, "op_layernorm_bwd");
  OPS_FLOAT_DISPATCH("op_layernorm_bwd", x->dtype, {
    layernorm_bwd_kernel<<<OPS_REDUCE_GROUPS, OPS_THREADS, shared_bytes, dev->stream>>>(
        (const scalar_t *)x->data, (const float *)gamma->data, (const float *)mean->data,
        (const float *)rstd->data, (const scalar_t *)dy->data, rows, cols,
        (scalar_t *)dx->data, partials);
  });
  CHECK_LAUNCH();
  ops_colsum_finalize(dev, partials, OPS_REDUCE_GROUPS, cols, (float *)dgamma->data,
                      accumulate);
  ops_colsum_finalize(dev, partials + OPS_REDUCE_GROUPS * cols, OPS_REDUCE_GROUPS, cols,
                      (float *)dbeta->data, accumulate);
}
