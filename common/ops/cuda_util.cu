// cuda_util.cu: the host halves of cuda.cuh - the cuBLAS GEMM call
// and the fixed-order reductions shared by the op families.
#include <limits.h>

#include "ops/cuda.cuh"

cudaDataType_t ops_cuda_dtype(DType dtype) {
  switch (dtype) {
    case DT_F32:
      return CUDA_R_32F;
    case DT_F16:
      return CUDA_R_16F;
    case DT_BF16:
      return CUDA_R_16BF;
    default:
      DIE("cuBLAS: dtype %s is not a GEMM dtype", dtype_name(dtype));
  }
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

void ops_gemm_raw(const Device *dev, const OpsGemm *g) {
  OP_REQUIRE("op_gemm", fits_int(g->m) && fits_int(g->n) && fits_int(g->k));
  OP_REQUIRE("op_gemm", fits_int(g->lda) && fits_int(g->ldb) && fits_int(g->ldc));
  OP_REQUIRE("op_gemm", fits_int(g->batch) && g->batch >= 1);
  OP_REQUIRE("op_gemm", g->c_dtype == DT_F32 || g->c_dtype == g->ab_dtype);
  if (g->m == 0 || g->n == 0) return;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (g->ab_dtype == DT_F32) {
    cublasMath_t mode;
    CHECK_CUBLAS(cublasGetMathMode(dev->cublas, &mode));
    int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base == CUBLAS_TF32_TENSOR_OP_MATH) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  cudaDataType_t ab = ops_cuda_dtype(g->ab_dtype), c = ops_cuda_dtype(g->c_dtype);
  // cuBLAS is column-major: the row-major c (m, n) is the column-major c^T,
  // and c^T = op(b)^T op(a)^T, so the operands swap places.
  CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      dev->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &g->alpha,
      g->b, ab, (int)g->ldb, g->stride_b, g->a, ab, (int)g->lda, g->stride_a, &g->beta,
      g->c, c, (int)g->ldc, g->stride_c, (int)g->batch, compute, CUBLAS_GEMM_DEFAULT));
}

float *ops_workspace_floats(const Device *dev, int64_t count, const char *op) {
  if ((size_t)count * sizeof(float) > dev->workspace_bytes)
    DIE("%s: needs %lld bytes of workspace, the device has %zu", op,
        (long long)count * (long long)sizeof(float), dev->workspace_bytes);
  return (float *)dev->workspace;
}

static __global__ void colsum_finalize_kernel(const float *partials, int groups,
                                              int64_t cols, float *out, bool accumulate) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
       j += (int64_t)gridDim.x * blockDim.x) {
    float sum = accumulate ? out[j] : 0.0f;
    for (int g = 0; g < groups; g++) sum += partials[g * cols + j];
    out[j] = sum;
  }
}

void ops_colsum_finalize(const Device *dev, const float *partials, int groups,
                         int64_t cols, float *out, bool accumulate) {
  if (cols == 0) return;
  colsum_finalize_kernel<<<ops_blocks(cols, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(
      partials, groups, cols, out, accumulate);
  CHECK_LAUNCH();
}
