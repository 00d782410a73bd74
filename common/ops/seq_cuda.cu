// ops_seq_cuda.cu: the sequence-model ops on the GPU. Row-wise ops (layer
// norm, softmax) run one block per row; attention is cuBLAS strided-batched
// GEMMs around the masked row softmax.
#include "core/rng.h"
#include "ops/cuda.cuh"
#include "ops/cuda_pointwise.cuh"
#include "ops/seq.h"

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
// Which columns of a row take part: all of them, or (attention) the keys below
// the sequence's valid length and, when causal, at or before the query.
typedef struct RowMask {
  const int32_t *key_len;  // (B) or NULL
  int64_t rows_per_seq;    // H * Tq
  int64_t tq;
  bool causal;
} RowMask;

static __device__ __forceinline__ int64_t kept_cols(const RowMask &mask, int64_t row,
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
static __global__ void softmax_fwd_kernel(const T *x, T *y, int64_t cols, RowMask mask) {
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

static void softmax_fwd_launch(const Device *dev, const Tensor *x, const Tensor *y,
                               RowMask mask) {
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  if (rows == 0) return;
  OPS_FLOAT_DISPATCH("softmax", x->dtype, {
    softmax_fwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)x->data, (scalar_t *)y->data, cols, mask);
  });
  CHECK_LAUNCH();
}

static void softmax_bwd_launch(const Device *dev, const Tensor *y, const Tensor *dy,
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
  RowMask none = {NULL, 1, 1, false};
  softmax_fwd_launch(dev, x, y, none);
}

extern "C" void op_softmax_bwd_cuda(const Device *dev, const Tensor *y, const Tensor *dy,
                                    const Tensor *dx) {
  op_same_size_check("op_softmax_bwd", y, dy);
  op_same_size_check("op_softmax_bwd", y, dx);
  softmax_bwd_launch(dev, y, dy, dx, 1.0f);
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

// ---------------------------------------------------------------- attention
// One head's matrix in every batch entry: base pointer, row stride and the
// stride between batch entries, in elements.
typedef struct HeadView {
  const void *data;
  int64_t ld, stride;
} HeadView;

// Head h of a (B, T, H, Dh) tensor: rows of H * Dh, T rows per batch entry.
static HeadView head_view(const Tensor *t, int64_t h) {
  int64_t h_dh = t->shape[2] * t->shape[3];
  HeadView v = {(const char *)t->data + h * t->shape[3] * dtype_size(t->dtype), h_dh,
                t->shape[1] * h_dh};
  return v;
}

// Head h of a (B, H, Tq, Tk) tensor.
static HeadView score_view(const Tensor *t, int64_t h) {
  int64_t tq_tk = t->shape[2] * t->shape[3];
  HeadView v = {(const char *)t->data + h * tq_tk * dtype_size(t->dtype), t->shape[3],
                t->shape[1] * tq_tk};
  return v;
}

// For every batch entry: c = alpha op(a) op(b), (m, n) = (m, k) (k, n).
static void head_gemm(const Device *dev, DType dtype, int64_t batch, bool trans_a,
                      HeadView a, bool trans_b, HeadView b, HeadView c, int64_t m,
                      int64_t n, int64_t k, float alpha) {
  OpsGemm g = {trans_a,  trans_b,  m,      n,     k,        batch,          a.data,
               a.ld,     a.stride, b.data, b.ld,  b.stride, (void *)c.data, c.ld,
               c.stride, dtype,    dtype,  alpha, 0.0f};
  ops_gemm_raw(dev, &g);
}

extern "C" void op_attention_fwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                      const Tensor *v, const Tensor *key_len, bool causal,
                                      const Tensor *probs, const Tensor *out) {
  AttnShape s = op_attention_shape(q, k, v, probs, out);
  op_attention_mask_check(&s, key_len, causal);
  if (s.b == 0) return;  // ops_gemm_raw takes batch >= 1
  // probs holds the scores q k^T / sqrt(Dh) first (scaled in the GEMM, so
  // fp16 scores stay in range), then the masked softmax replaces them.
  float scale = 1.0f / sqrtf((float)s.dh);
  for (int64_t h = 0; h < s.h; h++)
    head_gemm(dev, q->dtype, s.b, false, head_view(q, h), true, head_view(k, h),
              score_view(probs, h), s.tq, s.tk, s.dh, scale);
  RowMask mask = {key_len ? (const int32_t *)key_len->data : NULL, s.h * s.tq, s.tq,
                  causal};
  softmax_fwd_launch(dev, probs, probs, mask);
  for (int64_t h = 0; h < s.h; h++)
    head_gemm(dev, q->dtype, s.b, false, score_view(probs, h), false, head_view(v, h),
              head_view(out, h), s.tq, s.dh, s.tk, 1.0f);
}

extern "C" void op_attention_bwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                      const Tensor *v, const Tensor *probs,
                                      const Tensor *dout, const Tensor *scratch,
                                      const Tensor *dq, const Tensor *dk,
                                      const Tensor *dv) {
  AttnShape s = op_attention_shape(q, k, v, probs, dout);
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(scratch, probs));
  OP_REQUIRE("op_attention_bwd", tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                                     tensor_same_shape(dv, v));
  if (s.b == 0) return;  // ops_gemm_raw takes batch >= 1
  DType dt = q->dtype;
  for (int64_t h = 0; h < s.h; h++) {  // dP = dO V^T, dV = P^T dO
    head_gemm(dev, dt, s.b, false, head_view(dout, h), true, head_view(v, h),
              score_view(scratch, h), s.tq, s.tk, s.dh, 1.0f);
    head_gemm(dev, dt, s.b, true, score_view(probs, h), false, head_view(dout, h),
              head_view(dv, h), s.tk, s.dh, s.tq, 1.0f);
  }
  // dS = P (dP - rowsum(dP P)) / sqrt(Dh), in place.
  softmax_bwd_launch(dev, probs, scratch, scratch, 1.0f / sqrtf((float)s.dh));
  for (int64_t h = 0; h < s.h; h++) {  // dQ = dS K, dK = dS^T Q
    head_gemm(dev, dt, s.b, false, score_view(scratch, h), false, head_view(k, h),
              head_view(dq, h), s.tq, s.dh, s.tk, 1.0f);
    head_gemm(dev, dt, s.b, true, score_view(scratch, h), false, head_view(q, h),
              head_view(dk, h), s.tk, s.dh, s.tq, 1.0f);
  }
}
