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

static void gemm_check(const OpsGemm *g) {
  OP_REQUIRE("op_gemm", fits_int(g->m) && fits_int(g->n) && fits_int(g->k));
  OP_REQUIRE("op_gemm", fits_int(g->lda) && fits_int(g->ldb) && fits_int(g->ldc));
  OP_REQUIRE("op_gemm", fits_int(g->batch) && g->batch >= 1);
  OP_REQUIRE("op_gemm", g->c_dtype == DT_F32 || g->c_dtype == g->ab_dtype);
}

// fp32 accumulation; fp32 inputs on TF32 tensor cores where dev's math mode
// (op_gemm_set_tf32) allows them.
static cublasComputeType_t gemm_compute(const Device *dev, DType ab_dtype) {
  if (ab_dtype != DT_F32) return CUBLAS_COMPUTE_32F;
  cublasMath_t mode;
  CHECK_CUBLAS(cublasGetMathMode(dev->cublas, &mode));
  int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  return base == CUBLAS_TF32_TENSOR_OP_MATH ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

void ops_gemm_raw(const Device *dev, const OpsGemm *g) {
  gemm_check(g);
  if (g->m == 0 || g->n == 0) return;
  cublasComputeType_t compute = gemm_compute(dev, g->ab_dtype);
  cudaDataType_t ab = ops_cuda_dtype(g->ab_dtype), c = ops_cuda_dtype(g->c_dtype);
  // cuBLAS is column-major: the row-major c (m, n) is the column-major c^T,
  // and c^T = op(b)^T op(a)^T, so the operands swap places.
  CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      dev->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &g->alpha,
      g->b, ab, (int)g->ldb, g->stride_b, g->a, ab, (int)g->lda, g->stride_a, &g->beta,
      g->c, c, (int)g->ldc, g->stride_c, (int)g->batch, compute, CUBLAS_GEMM_DEFAULT));
}

// The descriptors of one cuBLASLt product, destroyed together.
typedef struct LtPlan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulPreference_t pref;
} LtPlan;

static void lt_plan_free(LtPlan *p) {
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(p->pref));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->c));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->b));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->a));
  CHECK_CUBLAS(cublasLtMatmulDescDestroy(p->desc));
}

bool ops_gemm_lt(const Device *dev, const OpsGemm *g, OpsGemmEpilogue epilogue, void *bias,
                 DType bias_dtype) {
  gemm_check(g);
  OP_REQUIRE("op_gemm", g->batch == 1 && bias);
  OP_REQUIRE("op_gemm", bias_dtype == DT_F32 || bias_dtype == g->c_dtype);
  if (g->m == 0 || g->n == 0) return false;
  // Column-major, as in ops_gemm_raw: c^T (n, m) = op(b)^T op(a)^T, so
  // cuBLASLt's A is our b, its B our a; our bias per column of c is its bias
  // per row of D, and the sums of op(a)'s rows are its BGRADB.
  LtPlan p;
  cudaDataType_t ab = ops_cuda_dtype(g->ab_dtype), c = ops_cuda_dtype(g->c_dtype);
  int32_t bias_type = (int32_t)ops_cuda_dtype(bias_dtype);
  int32_t op_a = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epi = epilogue == OPS_GEMM_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
  uint64_t workspace = OPS_LT_WORKSPACE_BYTES;
  OP_REQUIRE("op_gemm", dev->workspace_bytes > workspace);
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&p.desc, gemm_compute(dev, g->ab_dtype), CUDA_R_32F));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &bias_type, sizeof bias_type));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, ab, g->trans_b ? g->k : g->n,
                                          g->trans_b ? g->n : g->k, g->ldb));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, ab, g->trans_a ? g->m : g->k,
                                          g->trans_a ? g->k : g->m, g->lda));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.c, c, g->n, g->m, g->ldc));
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&p.pref));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  cublasLtMatmulHeuristicResult_t found;
  int count = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(dev->cublaslt, p.desc, p.a, p.b, p.c,
                                                          p.c, p.pref, 1, &found, &count);
  bool ok = status == CUBLAS_STATUS_SUCCESS && count > 0;
  // Declined (an unsupported combination, or an alignment it refuses): said
  // once a process, and the caller takes its separate passes.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE)
    CHECK_CUBLAS(status);
  static bool said;
  if (!ok && !said) {
    said = true;
    fprintf(stderr,
            "op_gemm: cuBLASLt offers no %s epilogue for %lld x %lld x %lld (%s in, %s out, "
            "%s bias): %s; separate passes instead (said once)\n",
            epilogue == OPS_GEMM_BIAS ? "BIAS" : "BGRADB", (long long)g->m, (long long)g->n,
            (long long)g->k, dtype_name(g->ab_dtype), dtype_name(g->c_dtype),
            dtype_name(bias_dtype), count == 0 && status == CUBLAS_STATUS_SUCCESS
                                        ? "no algorithm"
                                        : cublasGetStatusString(status));
  }
  if (ok)
    CHECK_CUBLAS(cublasLtMatmul(dev->cublaslt, p.desc, &g->alpha, g->b, p.a, g->a, p.b, &g->beta,
                                g->c, p.c, g->c, p.c, &found.algo, dev->workspace, workspace,
                                dev->stream));
  lt_plan_free(&p);
  return ok;
}

// count floats of dev->workspace from byte `offset`, checked against its size.
static float *workspace_floats_at(const Device *dev, size_t offset, int64_t count, const char *op) {
  if (offset + (size_t)count * sizeof(float) > dev->workspace_bytes)
    DIE("%s: needs %lld bytes of workspace (from byte %zu), the device has %zu", op,
        (long long)count * (long long)sizeof(float), offset, dev->workspace_bytes);
  return (float *)((char *)dev->workspace + offset);
}

float *ops_workspace_floats_after_lt(const Device *dev, int64_t count, const char *op) {
  return workspace_floats_at(dev, OPS_LT_WORKSPACE_BYTES, count, op);
}

float *ops_workspace_floats(const Device *dev, int64_t count, const char *op) {
  return workspace_floats_at(dev, 0, count, op);
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
