// dense_cuda.cu: the dense ops on the GPU - products through cuBLAS
// (ops_gemm_raw); a linear layer's bias and its gradient in cuBLASLt's GEMM
// epilogues (ops_gemm_lt), or in own kernels where cuBLASLt declines or
// op_linear_set_epilogues turned them off; the embedding.
#include "ops/cuda.cuh"
#include "ops/cuda_pointwise.cuh"
#include "ops/dense.h"

extern "C" void op_gemm_set_tf32_cuda(const Device *dev, bool allow) {
  CHECK_CUBLAS(cublasSetMathMode(
      dev->cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// c = alpha op(a) op(b) + beta c as an OpsGemm (op_gemm_shape checks it);
// batch 0 when a 3-D operand has an empty batch.
static OpsGemm gemm_of(const Tensor *a, bool trans_a, const Tensor *b, bool trans_b,
                       const Tensor *c, float alpha, float beta) {
  GemmShape s = op_gemm_shape(a, trans_a, b, trans_b, c);
  return (OpsGemm){trans_a,  trans_b,  s.m,
                   s.n,      s.k,      s.batch,
                   a->data,  s.lda,    s.batch_a ? s.m * s.k : 0,
                   b->data,  s.ldb,    s.batch_b ? s.k * s.n : 0,
                   c->data,  s.n,      s.m * s.n,
                   a->dtype, c->dtype, alpha,
                   beta};
}

extern "C" void op_gemm_cuda(const Device *dev, const Tensor *a, bool trans_a,
                             const Tensor *b, bool trans_b, const Tensor *c, float alpha,
                             float beta) {
  OpsGemm g = gemm_of(a, trans_a, b, trans_b, c, alpha, beta);
  if (g.batch == 0) return;
  ops_gemm_raw(dev, &g);
}

// y (M, N) + b broadcast over rows, element by element.
template <typename B>
struct BiasAdd {
  const B *bias;
  int64_t cols;
  __device__ float operator()(float y, float, int64_t i) const {
    return y + ops_f32(bias[i % cols]);
  }
};

extern "C" void op_linear_set_epilogues_cuda(const Device *dev, bool allow) {
  // A setting of dev, as TF32 is of its cuBLAS handle (device.h).
  ((Device *)dev)->linear_unfused = !allow;
}

extern "C" void op_linear_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *w,
                                   const Tensor *b, const Tensor *y) {
  op_linear_check(x, w, b, y);
  OP_REQUIRE("op_linear_fwd", !b || b->dtype == DT_F32 || b->dtype == y->dtype);
  Tensor x2 = op_as_matrix(x), y2 = op_as_matrix(y);
  if (b && !dev->linear_unfused) {
    OpsGemm g = gemm_of(&x2, false, w, true, &y2, 1.0f, 0.0f);
    if (g.m == 0 || ops_gemm_lt(dev, &g, OPS_GEMM_BIAS, b->data, b->dtype)) return;
  }
  op_gemm_cuda(dev, &x2, false, w, true, &y2, 1.0f, 0.0f);
  if (!b) return;
  int64_t n = tensor_numel(y), cols = y2.shape[1];
  OPS_FLOAT_DISPATCH("op_linear_fwd", y->dtype, {
    if (b->dtype == DT_F32) {
      BiasAdd<float> fn = {(const float *)b->data, cols};
      ops_pointwise<scalar_t>(dev, y->data, NULL, y->data, n, fn);
    } else {
      BiasAdd<scalar_t> fn = {(const scalar_t *)b->data, cols};
      ops_pointwise<scalar_t>(dev, y->data, NULL, y->data, n, fn);
    }
  });
}

extern "C" void op_linear_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *w,
                                   const Tensor *dy, const Tensor *dx, const Tensor *dw,
                                   const Tensor *db, bool accumulate) {
  op_linear_check(x, w, db, dy);
  OP_REQUIRE("op_linear_bwd", tensor_same_shape(dw, w));
  Tensor x2 = op_as_matrix(x), dy2 = op_as_matrix(dy);
  if (dx) {
    Tensor dx2 = op_as_matrix(dx);
    op_gemm_cuda(dev, &dy2, false, w, false, &dx2, 1.0f, 0.0f);
  }
  OP_REQUIRE("op_linear_bwd", !db || db->dtype == DT_F32);
  float beta = accumulate ? 1.0f : 0.0f;
  if (db && !dev->linear_unfused && dy2.shape[0] > 0) {
    // dw and db in one product: db is the sums of dy^T's rows. Accumulating,
    // the epilogue writes the sums past cuBLASLt's workspace and they are
    // added to db after.
    int64_t out = dy2.shape[1];
    float *sums = accumulate ? ops_workspace_floats_after_lt(dev, out, "op_linear_bwd")
                             : (float *)db->data;
    OpsGemm g = gemm_of(&dy2, true, &x2, false, dw, 1.0f, beta);
    if (ops_gemm_lt(dev, &g, OPS_GEMM_BGRAD_A, sums, DT_F32)) {
      if (accumulate) ops_colsum_finalize(dev, sums, 1, out, (float *)db->data, true);
      return;
    }
  }
  op_gemm_cuda(dev, &dy2, true, &x2, false, dw, 1.0f, beta);
  if (!db) return;
  ops_colsum(dev, "op_linear_bwd", dy2.data, dy2.dtype, dy2.shape[0], dy2.shape[1], 1.0f,
             (float *)db->data, accumulate);
}

template <typename I>
static __device__ __forceinline__ bool row_of(const I *idx, int64_t n, int64_t vocab,
                                              int64_t *row) {
  *row = (int64_t)idx[n];
  return *row >= 0 && *row < vocab;
}

template <typename T, typename I>
static __global__ void embedding_fwd_kernel(const I *idx, const T *table, T *out,
                                            int64_t count, int64_t vocab, int64_t dim) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count * dim;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t row;
    out[i] = row_of(idx, i / dim, vocab, &row) ? table[row * dim + i % dim]
                                               : ops_from_f32<T>(0.0f);
  }
}

template <typename T, typename I>
static __global__ void embedding_bwd_kernel(const I *idx, const T *dout, float *dtable,
                                            int64_t count, int64_t vocab, int64_t dim) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count * dim;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t row;
    if (row_of(idx, i / dim, vocab, &row))
      atomicAdd(&dtable[row * dim + i % dim], ops_f32(dout[i]));
  }
}

extern "C" void op_embedding_fwd_cuda(const Device *dev, const Tensor *idx,
                                      const Tensor *table, const Tensor *out) {
  op_embedding_check(idx, table, out);
  OP_REQUIRE("op_embedding_fwd", table->dtype == out->dtype);
  int64_t count = tensor_numel(idx), vocab = table->shape[0], dim = table->shape[1];
  if (count * dim == 0) return;
  unsigned blocks = ops_blocks(count * dim, OPS_THREADS);
  OPS_FLOAT_DISPATCH("op_embedding_fwd", table->dtype, {
    if (idx->dtype == DT_I64)
      embedding_fwd_kernel<<<blocks, OPS_THREADS, 0, dev->stream>>>(
          (const int64_t *)idx->data, (const scalar_t *)table->data,
          (scalar_t *)out->data, count, vocab, dim);
    else
      embedding_fwd_kernel<<<blocks, OPS_THREADS, 0, dev->stream>>>(
          (const int32_t *)idx->data, (const scalar_t *)table->data,
          (scalar_t *)out->data, count, vocab, dim);
  });
  CHECK_LAUNCH();
}

extern "C" void op_embedding_bwd_cuda(const Device *dev, const Tensor *idx,
                                      const Tensor *dout, const Tensor *dtable,
                                      bool accumulate) {
  op_embedding_check(idx, dtable, dout);
  OP_REQUIRE("op_embedding_bwd", dtable->dtype == DT_F32);
  int64_t count = tensor_numel(idx), vocab = dtable->shape[0], dim = dtable->shape[1];
  if (!accumulate)
    CHECK_CUDA(cudaMemsetAsync(dtable->data, 0, tensor_bytes(dtable), dev->stream));
  if (count * dim == 0) return;
  unsigned blocks = ops_blocks(count * dim, OPS_THREADS);
  OPS_FLOAT_DISPATCH("op_embedding_bwd", dout->dtype, {
    if (idx->dtype == DT_I64)
      embedding_bwd_kernel<<<blocks, OPS_THREADS, 0, dev->stream>>>(
          (const int64_t *)idx->data, (const scalar_t *)dout->data, (float *)dtable->data,
          count, vocab, dim);
    else
      embedding_bwd_kernel<<<blocks, OPS_THREADS, 0, dev->stream>>>(
          (const int32_t *)idx->data, (const scalar_t *)dout->data, (float *)dtable->data,
          count, vocab, dim);
  });
  CHECK_LAUNCH();
}
