// emu_libs.cpp: the CPU stand-ins for the cuBLAS, cuBLASLt, cuDNN and NCCL
// entry points this project calls, used by the CUDA emulator under tests/emu
// and built only for `make EMU=1`. Results are emulated, never GPU results.
//
// Each function has its real header's signature and C linkage (the program
// links no vendor library). "Device memory" is host memory. GEMMs,
// convolutions and tensor adds are checked at the call and queued on the
// handle's stream (emu_internal.h), with their descriptors and scaling
// factors as they were at the call. The Find calls run at once after all
// queued work; the NCCL collectives at once after the work queued on their
// stream and what it waits for (deferring a collective could deadlock ranks
// that a GPU would not). Workspaces are accepted and not used. Arguments are
// checked as the libraries document; the arithmetic accumulates in fp32
// (GEMMs through OpenBLAS, convolutions in plain loops) and is rounded once
// to the output type (nearest even). fp32 inputs are rounded to TF32 wherever
// the real library would run them on TF32 tensor cores, so TF32 effects show
// up here too. What is not emulated returns the library's NOT_SUPPORTED
// status, never a wrong answer.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cblas.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>
#include <nccl.h>
#if HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#endif

#include "emu_internal.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

// ---------------------------------------------------------------- elements

// The element types the emulated libraries read and write.
enum class Elem { F32, F16, BF16 };

static float elem_load(const void *base, Elem t, int64_t i) {
  switch (t) {
    case Elem::F16: return __half2float(static_cast<const __half *>(base)[i]);
    case Elem::BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
    case Elem::F32: break;
  }
  return static_cast<const float *>(base)[i];
}

static void elem_store(void *base, Elem t, int64_t i, float v) {
  switch (t) {
    case Elem::F16: static_cast<__half *>(base)[i] = __float2half_rn(v); return;
    case Elem::BF16: static_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(v); return;
    case Elem::F32: static_cast<float *>(base)[i] = v; return;
  }
}

// out[i] = alpha acc + beta in[i] + add (in is out in place). With beta == 0
// in[i] is not read: the libraries allow it to be uninitialised, so a NaN
// there must not leak.
static void elem_blend(void *out, const void *in, Elem t, int64_t i, float alpha, float acc,
                       float beta, float add = 0.0f) {
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * elem_load(in, t, i);
  elem_store(out, t, i, v + add);
}

// What the multipliers see of an fp32 input: all of it, or the input rounded
// to the narrower format the tensor cores take.
enum class Narrow { None, TF32, F16, BF16 };

// TF32 keeps fp32's 8-bit exponent and the top 10 of its 23 mantissa bits;
// the 13 dropped bits round to nearest even. Infinities and NaNs pass as
// they are (the carry would turn a NaN's payload into an infinity).
static float tf32_round(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;
  u += 0x0fffu + ((u >> 13) & 1u);
  u &= ~0x1fffu;
  memcpy(&v, &u, sizeof v);
  return v;
}

static float narrow(float v, Narrow n) {
  switch (n) {
    case Narrow::TF32: return tf32_round(v);
    case Narrow::F16: return __half2float(__float2half_rn(v));
    case Narrow::BF16: return __bfloat162float(__float2bfloat16_rn(v));
    case Narrow::None: break;
  }
  return v;
}

// ---------------------------------------------------------------- cuBLAS

struct cublasContext {
  cudaStream_t stream;
  cublasMath_t math;
};

struct cublasLtContext {
  int unused;
};

static bool cublas_elem(cudaDataType_t t, Elem *e) {
  switch (t) {
    case CUDA_R_32F: *e = Elem::F32; return true;
    case CUDA_R_16F: *e = Elem::F16; return true;
    case CUDA_R_16BF: *e = Elem::BF16; return true;
    default: return false;
  }
}

// The narrowing of the inputs for this compute type and math mode; false
// where cuBLAS does not support the types (cublasGemmEx's table) or the
// emulator does not implement the compute type.
static bool gemm_narrowing(cublasComputeType_t compute, cublasMath_t math, Elem ab, Elem c,
                           Narrow *out) {
  bool all_f32 = ab == Elem::F32 && c == Elem::F32;
  switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_TF32: *out = Narrow::TF32; return all_f32;
    case CUBLAS_COMPUTE_32F_FAST_16F: *out = Narrow::F16; return all_f32;
    case CUBLAS_COMPUTE_32F_FAST_16BF: *out = Narrow::BF16; return all_f32;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: break;
    default: return false;
  }
  if (c != Elem::F32 && c != ab) return false;
  *out = Narrow::None;
  if (ab != Elem::F32 || compute == CUBLAS_COMPUTE_32F_PEDANTIC) return true;
  // For plain CUBLAS_COMPUTE_32F on fp32 inputs the handle's math mode decides.
  int base = (int)math & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base == CUBLAS_TF32_TENSOR_OP_MATH) *out = Narrow::TF32;
  if (base == CUBLAS_TENSOR_OP_MATH) *out = Narrow::F16;  // documented as _FAST_16F
  return true;
}

static bool cublas_op_ok(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static bool cublas_algo_ok(cublasGemmAlgo_t a) {
  return a == CUBLAS_GEMM_DEFAULT || a == CUBLAS_GEMM_AUTOTUNE ||
         (a >= CUBLAS_GEMM_ALGO0 && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

static int max1(int v) { return v > 1 ? v : 1; }

// One operand as cuBLAS sees it: column-major, ld elements between columns,
// op() applied by index, batch entries stride elements apart.
struct GemmOperand {
  const void *data;
  Elem type;
  bool trans;
  int64_t ld, stride;
};

// op(X)(row, col) of batch entry e.
static float gemm_at(const GemmOperand &x, int64_t e, int64_t row, int64_t col) {
  int64_t i = x.trans ? col + row * x.ld : row + col * x.ld;
  return elem_load(x.data, x.type, e * x.stride + i);
}

// cuBLASLt's epilogues that the emulation runs (batch 1): a bias per row of
// the column-major D added before the rounding, or the bias gradient, the
// sums of op(B) over k (one per column of D), from B's stored values.
enum class Epilogue { None, Bias, BgradB };

struct GemmArgs {
  int64_t m, n, k, batch;
  float alpha, beta;
  GemmOperand a, b;
  void *c;
  Elem c_type;
  int64_t ldc, stride_c;
  Narrow narrow;
  const void *c_in = nullptr;  // C when it is not D (cuBLASLt), else nullptr
  Epilogue epilogue = Epilogue::None;
  void *bias = nullptr;
  Elem bias_type = Elem::F32;
};

// C = alpha op(A) op(B) + beta C per batch entry. Each entry's inputs are
// narrowed once into row-major op(A) (m, k) and op(B)^T (n, k); OpenBLAS
// multiplies them in fp32 (the order of its sums differs from a GPU's, as
// GPUs differ among themselves). As in reference BLAS, alpha == 0 or k == 0
// reads neither A nor B and leaves C = beta C.
static void gemm_run(const GemmArgs &g) {
  bool products = g.k > 0 && g.alpha != 0.0f;
  std::vector<float> a_rows(products ? (size_t)(g.m * g.k) : 0);
  std::vector<float> b_rows(products ? (size_t)(g.n * g.k) : 0);
  std::vector<float> acc((size_t)(g.m * g.n), 0.0f);  // (m, n) row-major
  for (int64_t e = 0; e < g.batch; e++) {
    if (products) {
      for (int64_t i = 0; i < g.m; i++)
        for (int64_t l = 0; l < g.k; l++)
          a_rows[i * g.k + l] = narrow(gemm_at(g.a, e, i, l), g.narrow);
      for (int64_t j = 0; j < g.n; j++)
        for (int64_t l = 0; l < g.k; l++)
          b_rows[j * g.k + l] = narrow(gemm_at(g.b, e, l, j), g.narrow);
      if (g.m > 0 && g.n > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g.m, (int)g.n, (int)g.k, 1.0f,
                    a_rows.data(), (int)g.k, b_rows.data(), (int)g.k, 0.0f, acc.data(), (int)g.n);
    }
    const void *c_in = g.c_in ? g.c_in : g.c;
    for (int64_t j = 0; j < g.n; j++)
      for (int64_t i = 0; i < g.m; i++) {
        float add = g.epilogue == Epilogue::Bias ? elem_load(g.bias, g.bias_type, i) : 0.0f;
        int64_t at = e * g.stride_c + i + j * g.ldc;
        elem_blend(g.c, c_in, g.c_type, at, g.alpha, acc[i * g.n + j], g.beta, add);
      }
  }
  if (g.epilogue == Epilogue::BgradB)
    for (int64_t j = 0; j < g.n; j++) {
      float sum = 0.0f;
      for (int64_t l = 0; l < g.k; l++) sum += gemm_at(g.b, 0, l, j);
      elem_store(g.bias, g.bias_type, j, sum);
    }
}

static const char *cublas_status_text(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS: success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED: no valid handle";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED: allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE: an argument is invalid";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH: not on this architecture";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR: memory access failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED: execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR: internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED: not supported (or not emulated on the CPU)";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR: license error";
  }
  return "unknown cuBLAS status";
}

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext();
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

// The emulated GEMM needs no workspace, but the pointer is checked as cuBLAS
// checks it: aligned to 256 bytes (what cudaMalloc guarantees).
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((uintptr_t)workspace % 256 != 0 || (!workspace && workspaceSizeInBytes > 0))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// Modes 4 (BF16x9 emulation of fp32) and 8 (fp64 emulation) are not emulated.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) {
    bool known =
        base == CUBLAS_FP32_EMULATED_BF16X9_MATH || base == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH;
    return known ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status) { return cublas_status_text(status); }

// Host pointer mode only: alpha and beta are host floats (every supported
// compute type is a 32F one).
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || !cublas_op_ok(transa) || !cublas_op_ok(transb))
    return CUBLAS_STATUS_INVALID_VALUE;
  bool trans_a = transa != CUBLAS_OP_N, trans_b = transb != CUBLAS_OP_N;  // C is T for reals
  if (lda < max1(trans_a ? k : m) || ldb < max1(trans_b ? n : k) || ldc < max1(m) || !alpha ||
      !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  Elem a_type, b_type, c_type;
  Narrow nar;
  if (!cublas_elem(Atype, &a_type) || !cublas_elem(Btype, &b_type) ||
      !cublas_elem(Ctype, &c_type) || a_type != b_type ||
      !gemm_narrowing(computeType, handle->math, a_type, c_type, &nar) || !cublas_algo_ok(algo))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  GemmArgs g = {m, n, k, batchCount,
                *static_cast<const float *>(alpha), *static_cast<const float *>(beta),
                {A, a_type, trans_a, lda, strideA}, {B, b_type, trans_b, ldb, strideB},
                C, c_type, ldc, strideC, nar};
  // In stream order, alpha and beta read now.
  return emu::enqueue(handle->stream, [g]() { gemm_run(g); }) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new (std::nothrow) cublasLtContext();
  return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// cuBLASLt's descriptors are opaque structs of 64-bit words; the emulation
// keeps its own fields in their words. Matmuls: batch 1, column-major, the
// 32F compute types with 32F scaling, and the epilogues DEFAULT, BIAS and
// BGRADB; anything else is NOT_SUPPORTED.
struct LtMatmul {
  cublasComputeType_t compute;
  cublasOperation_t trans_a, trans_b;
  uint32_t epilogue;
  void *bias;
  int32_t bias_type;  // a cudaDataType_t, -1 for the library's default
};
struct LtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct LtPreference {
  uint64_t max_workspace;
};
static_assert(sizeof(LtMatmul) <= sizeof(cublasLtMatmulDescOpaque_t), "descriptor fits");
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
static_assert(sizeof(LtPreference) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference fits");

template <typename Fields, typename Opaque>
static Fields *lt_fields(Opaque *o) {
  return reinterpret_cast<Fields *>(o->data);
}

template <typename Fields, typename Opaque>
static cublasStatus_t lt_create(Opaque **out, const Fields &init) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new (std::nothrow) Opaque();
  if (!*out) return CUBLAS_STATUS_ALLOC_FAILED;
  new ((*out)->data) Fields(init);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename Opaque>
static cublasStatus_t lt_destroy(Opaque *o) {
  delete o;  // NULL is allowed
  return CUBLAS_STATUS_SUCCESS;
}

// Copies an attribute's value after checking its size, as the library does.
template <typename T>
static cublasStatus_t lt_set(T *field, const void *buf, size_t bytes) {
  if (!buf || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (scaleType != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return lt_create(matmulDesc, LtMatmul{computeType, CUBLAS_OP_N, CUBLAS_OP_N,
                                        CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1});
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return lt_destroy(matmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  LtMatmul *d = lt_fields<LtMatmul>(matmulDesc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return lt_set(&d->trans_a, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return lt_set(&d->trans_b, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return lt_set(&d->epilogue, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return lt_set(&d->bias, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return lt_set(&d->bias_type, buf, sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return lt_create(matLayout, LtLayout{type, rows, cols, ld});
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return lt_destroy(matLayout);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  return lt_create(pref, LtPreference{0});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return lt_destroy(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return lt_set(&lt_fields<LtPreference>(pref)->max_workspace, buf, sizeInBytes);
}

static bool lt_layout_is(const LtLayout &l, uint64_t rows, uint64_t cols) {
  return l.rows == rows && l.cols == cols && l.rows <= INT_MAX && l.cols <= INT_MAX &&
         l.ld >= max1((int)l.rows);
}

// The problem a descriptor and four layouts describe, checked as cublasLtMatmul
// checks it: the shapes agree with op(A) (m, k), op(B) (k, n), C and D (m, n);
// A and B of one type, C of D's; the bias (or its gradient) of D's type or
// fp32. NOT_SUPPORTED for what the emulation does not run.
static cublasStatus_t lt_problem(const LtMatmul &d, const LtLayout &A, const LtLayout &B,
                                 const LtLayout &C, const LtLayout &D, GemmArgs *g) {
  if (!cublas_op_ok(d.trans_a) || !cublas_op_ok(d.trans_b)) return CUBLAS_STATUS_INVALID_VALUE;
  bool ta = d.trans_a != CUBLAS_OP_N, tb = d.trans_b != CUBLAS_OP_N;
  uint64_t m = D.rows, n = D.cols, k = ta ? A.rows : A.cols;
  if (!lt_layout_is(A, ta ? k : m, ta ? m : k) || !lt_layout_is(B, tb ? n : k, tb ? k : n) ||
      !lt_layout_is(C, m, n) || !lt_layout_is(D, m, n) || C.ld != D.ld)
    return CUBLAS_STATUS_INVALID_VALUE;
  Elem a_type, b_type, c_type, d_type, bias_type;
  Narrow nar;
  if (!cublas_elem(A.type, &a_type) || !cublas_elem(B.type, &b_type) ||
      !cublas_elem(C.type, &c_type) || !cublas_elem(D.type, &d_type) || a_type != b_type ||
      c_type != d_type || !gemm_narrowing(d.compute, CUBLAS_DEFAULT_MATH, a_type, d_type, &nar))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  Epilogue epi;
  switch (d.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: epi = Epilogue::None; break;
    case CUBLASLT_EPILOGUE_BIAS: epi = Epilogue::Bias; break;
    case CUBLASLT_EPILOGUE_BGRADB: epi = Epilogue::BgradB; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (epi != Epilogue::None) {
    cudaDataType_t bt = d.bias_type == -1 ? D.type : (cudaDataType_t)d.bias_type;
    if (!cublas_elem(bt, &bias_type) || (bias_type != Elem::F32 && bias_type != d_type))
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!d.bias) return CUBLAS_STATUS_INVALID_VALUE;
  }
  *g = GemmArgs{(int64_t)m, (int64_t)n, (int64_t)k, 1, 0.0f, 0.0f,
                {nullptr, a_type, ta, A.ld, 0}, {nullptr, b_type, tb, B.ld, 0},
                nullptr, d_type, D.ld, 0, nar};
  g->epilogue = epi;
  g->bias = d.bias;
  g->bias_type = bias_type;
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm for every problem the emulation runs, needing no workspace.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
      requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  GemmArgs g;
  cublasStatus_t status = lt_problem(*lt_fields<LtMatmul>(operationDesc), *lt_fields<LtLayout>(Adesc),
                                     *lt_fields<LtLayout>(Bdesc), *lt_fields<LtLayout>(Cdesc),
                                     *lt_fields<LtLayout>(Ddesc), &g);
  *returnAlgoCount = 0;
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// Host pointer mode only: alpha and beta are host floats. D = alpha op(A)
// op(B) + beta C (+ the bias), rounded once; or with BGRADB also the bias
// gradient. C may be D (in place).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *,
                              void *, size_t, cudaStream_t stream) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  GemmArgs g;
  cublasStatus_t status = lt_problem(*lt_fields<LtMatmul>(computeDesc), *lt_fields<LtLayout>(Adesc),
                                     *lt_fields<LtLayout>(Bdesc), *lt_fields<LtLayout>(Cdesc),
                                     *lt_fields<LtLayout>(Ddesc), &g);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  g.alpha = *static_cast<const float *>(alpha);
  g.beta = *static_cast<const float *>(beta);
  g.a.data = A;
  g.b.data = B;
  g.c = D;
  g.c_in = C;
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  return emu::enqueue(stream, [g]() { gemm_run(g); }) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_INVALID_VALUE;
}

}  // extern "C"

// ---------------------------------------------------------------- cuDNN

struct cudnnContext {
  cudaStream_t stream;
};

// A 4-D tensor or filter: element type, sizes of the logical axes (n, c, h, w)
// or (k, c, r, s), and each axis's stride in elements as the format lays it out.
struct Desc4 {
  bool set;
  cudnnDataType_t dtype;
  Elem elem;
  int dim[4];
  int64_t stride[4];
};

struct cudnnTensorStruct {
  Desc4 d;
};

struct cudnnFilterStruct {
  Desc4 d;
};

struct cudnnConvolutionStruct {
  bool set;
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
  cudnnMathType_t math;
};

static bool cudnn_elem(cudnnDataType_t t, Elem *e) {
  switch (t) {
    case CUDNN_DATA_FLOAT: *e = Elem::F32; return true;
    case CUDNN_DATA_HALF: *e = Elem::F16; return true;
    case CUDNN_DATA_BFLOAT16: *e = Elem::BF16; return true;
    default: return false;
  }
}

static cudnnStatus_t desc4_set(Desc4 *d, cudnnTensorFormat_t format, cudnnDataType_t dtype,
                               int d0, int d1, int d2, int d3) {
  if (!d || d0 <= 0 || d1 <= 0 || d2 <= 0 || d3 <= 0) return CUDNN_STATUS_BAD_PARAM;
  if ((int64_t)d0 * d1 * d2 * d3 > INT_MAX) return CUDNN_STATUS_NOT_SUPPORTED;  // 2 Gi elements
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return format == CUDNN_TENSOR_NCHW_VECT_C ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  Elem e;
  if (!cudnn_elem(dtype, &e)) return CUDNN_STATUS_NOT_SUPPORTED;
  // Innermost axis: w (d3) in NCHW; c (d1) in NHWC, which for a filter is KRSC.
  int64_t s3 = format == CUDNN_TENSOR_NCHW ? 1 : d1;
  int64_t s2 = (int64_t)d3 * s3;
  int64_t s1 = format == CUDNN_TENSOR_NCHW ? (int64_t)d2 * d3 : 1;
  *d = {true, dtype, e, {d0, d1, d2, d3}, {(int64_t)d1 * d2 * d3, s1, s2, s3}};
  return CUDNN_STATUS_SUCCESS;
}

static size_t desc4_numel(const Desc4 &d) {
  return (size_t)d.dim[0] * d.dim[1] * d.dim[2] * d.dim[3];
}

// Calls f(index, memory offset) for every element, in logical order.
template <typename F>
static void desc4_for_each(const Desc4 &d, F f) {
  int i[4];
  for (i[0] = 0; i[0] < d.dim[0]; i[0]++)
    for (i[1] = 0; i[1] < d.dim[1]; i[1]++)
      for (i[2] = 0; i[2] < d.dim[2]; i[2]++)
        for (i[3] = 0; i[3] < d.dim[3]; i[3]++)
          f(i, i[0] * d.stride[0] + i[1] * d.stride[1] + i[2] * d.stride[2] +
                   i[3] * d.stride[3]);
}

// The elements in logical order, narrowed for the multipliers.
static std::vector<float> desc4_gather(const Desc4 &d, const void *data, Narrow nar) {
  std::vector<float> v;
  v.reserve(desc4_numel(d));
  desc4_for_each(d, [&](const int *, int64_t at) {
    v.push_back(narrow(elem_load(data, d.elem, at), nar));
  });
  return v;
}

// data = alpha v + beta data, v in logical order.
static void desc4_blend(const Desc4 &d, void *data, const std::vector<float> &v, float alpha,
                        float beta) {
  size_t next = 0;
  desc4_for_each(d, [&](const int *, int64_t at) {
    elem_blend(data, data, d.elem, at, alpha, v[next++], beta);
  });
}

// The Find functions' outputs hold "arbitrary values" afterwards, as the docs
// warn; NaN makes a caller that relies on the old contents fail loudly.
static void desc4_poison(const Desc4 &d, void *data) {
  desc4_for_each(d, [&](const int *, int64_t at) { elem_store(data, d.elem, at, NAN); });
}

// A convolution's sizes, checked against each other as cuDNN checks them;
// the three directions share it.
struct ConvGeom {
  int n, c, h, w, k, r, s, p, q;
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  bool flip;      // CUDNN_CONVOLUTION: the filter is applied rotated by 180 degrees
  Narrow narrow;  // TF32 for fp32 data unless the math type asks for plain FMA
};

// floor((in + 2 pad - dilated filter) / stride) + 1; 0 when the filter does
// not fit in the padded input.
static int conv_out_extent(int in, int pad, int filter, int dil, int stride) {
  int64_t room = (int64_t)in + 2 * (int64_t)pad - ((int64_t)(filter - 1) * dil + 1);
  return room < 0 ? 0 : (int)(room / stride + 1);
}

static cudnnStatus_t conv_geom(const cudnnTensorStruct *x, const cudnnFilterStruct *w,
                               const cudnnConvolutionStruct *cv, const cudnnTensorStruct *y,
                               ConvGeom *g) {
  if (!x || !w || !cv || !y || !x->d.set || !w->d.set || !cv->set || !y->d.set)
    return CUDNN_STATUS_BAD_PARAM;
  const Desc4 &xd = x->d, &wd = w->d, &yd = y->d;
  if (xd.dtype != wd.dtype || xd.dtype != yd.dtype) return CUDNN_STATUS_BAD_PARAM;
  // fp32 accumulation is the only configuration emulated; half data with
  // half compute (TRUE_HALF_CONFIG) is valid cuDNN but not emulated.
  if (cv->compute != CUDNN_DATA_FLOAT)
    return cv->compute == CUDNN_DATA_HALF && xd.dtype == CUDNN_DATA_HALF
               ? CUDNN_STATUS_NOT_SUPPORTED
               : CUDNN_STATUS_BAD_PARAM;
  *g = {xd.dim[0], xd.dim[1], xd.dim[2], xd.dim[3], wd.dim[0], wd.dim[2], wd.dim[3], 0, 0,
        cv->pad_h, cv->pad_w, cv->stride_h, cv->stride_w, cv->dil_h, cv->dil_w,
        cv->mode == CUDNN_CONVOLUTION,
        xd.elem == Elem::F32 && cv->math != CUDNN_FMA_MATH ? Narrow::TF32 : Narrow::None};
  g->p = conv_out_extent(g->h, g->pad_h, g->r, g->dil_h, g->stride_h);
  g->q = conv_out_extent(g->w, g->pad_w, g->s, g->dil_w, g->stride_w);
  if (wd.dim[1] != g->c || yd.dim[0] != g->n || yd.dim[1] != g->k) return CUDNN_STATUS_BAD_PARAM;
  if (g->p < 1 || g->q < 1 || yd.dim[2] != g->p || yd.dim[3] != g->q) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// Logical-order offsets of x (n, c, h, w), w (k, c, r, s) and y (n, k, p, q).
static size_t conv_x_at(const ConvGeom &g, int n, int c, int h, int w) {
  return (((size_t)n * g.c + c) * g.h + h) * g.w + w;
}
static size_t conv_w_at(const ConvGeom &g, int k, int c, int r, int s) {
  if (g.flip) r = g.r - 1 - r, s = g.s - 1 - s;
  return (((size_t)k * g.c + c) * g.r + r) * g.s + s;
}
static size_t conv_y_at(const ConvGeom &g, int n, int k, int p, int q) {
  return (((size_t)n * g.k + k) * g.p + p) * g.q + q;
}

// y(n, k, p, q) = sum over c, r, s of x(n, c, p u - pad + r dil, ...) w(k, c, r, s).
static void conv_fwd(const ConvGeom &g, const float *x, const float *w, float *y) {
  for (int n = 0; n < g.n; n++)
    for (int k = 0; k < g.k; k++)
      for (int p = 0; p < g.p; p++)
        for (int q = 0; q < g.q; q++) {
          float acc = 0.0f;
          for (int c = 0; c < g.c; c++)
            for (int r = 0; r < g.r; r++)
              for (int s = 0; s < g.s; s++) {
                int ih = p * g.stride_h - g.pad_h + r * g.dil_h;
                int iw = q * g.stride_w - g.pad_w + s * g.dil_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                acc += x[conv_x_at(g, n, c, ih, iw)] * w[conv_w_at(g, k, c, r, s)];
              }
          y[conv_y_at(g, n, k, p, q)] = acc;
        }
}

// dx(n, c, h, w) = sum of dy(n, k, p, q) w(k, c, r, s) over the taps that
// read x(n, c, h, w): h = p u - pad + r dil, likewise for w. A gather, so
// each input's sum has one fixed order.
static void conv_bwd_data(const ConvGeom &g, const float *dy, const float *w, float *dx) {
  for (int n = 0; n < g.n; n++)
    for (int c = 0; c < g.c; c++)
      for (int ih = 0; ih < g.h; ih++)
        for (int iw = 0; iw < g.w; iw++) {
          float acc = 0.0f;
          for (int k = 0; k < g.k; k++)
            for (int r = 0; r < g.r; r++)
              for (int s = 0; s < g.s; s++) {
                int th = ih + g.pad_h - r * g.dil_h, tw = iw + g.pad_w - s * g.dil_w;
                if (th < 0 || tw < 0 || th % g.stride_h != 0 || tw % g.stride_w != 0) continue;
                int p = th / g.stride_h, q = tw / g.stride_w;
                if (p >= g.p || q >= g.q) continue;
                acc += dy[conv_y_at(g, n, k, p, q)] * w[conv_w_at(g, k, c, r, s)];
              }
          dx[conv_x_at(g, n, c, ih, iw)] = acc;
        }
}

// dw(k, c, r, s) = sum over n, p, q of x(n, c, p u - pad + r dil, ...) dy(n, k, p, q).
static void conv_bwd_filter(const ConvGeom &g, const float *x, const float *dy, float *dw) {
  for (int k = 0; k < g.k; k++)
    for (int c = 0; c < g.c; c++)
      for (int r = 0; r < g.r; r++)
        for (int s = 0; s < g.s; s++) {
          float acc = 0.0f;
          for (int n = 0; n < g.n; n++)
            for (int p = 0; p < g.p; p++)
              for (int q = 0; q < g.q; q++) {
                int ih = p * g.stride_h - g.pad_h + r * g.dil_h;
                int iw = q * g.stride_w - g.pad_w + s * g.dil_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                acc += x[conv_x_at(g, n, c, ih, iw)] * dy[conv_y_at(g, n, k, p, q)];
              }
          dw[conv_w_at(g, k, c, r, s)] = acc;
        }
}

// The checks every convolution call shares: handle, scaling factors, data
// pointers, geometry, algorithm enumerant.
static cudnnStatus_t conv_call_check(cudnnHandle_t handle, const void *alpha, const void *beta,
                                     const void *in1, const void *in2, const void *out,
                                     int algo, int algo_count) {
  if (!handle || !alpha || !beta || !in1 || !in2 || !out) return CUDNN_STATUS_BAD_PARAM;
  if (algo < 0 || algo >= algo_count) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// The one result every Find returns: algorithm 0 of its enum, measured
// "fast", needing no workspace, with the descriptor's math type.
template <typename Perf, typename Algo>
static cudnnStatus_t conv_find_result(const cudnnConvolutionStruct *cv, int requested,
                                      int *returned, Perf *perf, Algo algo) {
  if (requested < 1 || !returned || !perf) return CUDNN_STATUS_BAD_PARAM;
  Perf r;
  memset(&r, 0, sizeof r);
  r.algo = algo;
  r.status = CUDNN_STATUS_SUCCESS;
  r.time = 0.001f;  // milliseconds
  r.memory = 0;
  r.determinism = CUDNN_DETERMINISTIC;
  r.mathType = cv->math;
  perf[0] = r;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}

// The heuristic queries' result: the same as a Find's, from the
// descriptors alone (host work: no wait, no data touched).
template <typename Perf, typename Algo>
static cudnnStatus_t conv_heuristic_result(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                           cudnnFilterDescriptor_t w,
                                           cudnnConvolutionDescriptor_t cv,
                                           cudnnTensorDescriptor_t y, int requested,
                                           int *returned, Perf *perf, Algo algo) {
  ConvGeom g;
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = conv_geom(x, w, cv, y, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return conv_find_result(cv, requested, returned, perf, algo);
}

#define CUDNN_STATUS_ENTRY(s) {s, #s}
static const struct {
  cudnnStatus_t status;
  const char *name;
} kCudnnStatusNames[] = {
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_SUCCESS),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_INITIALIZED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_DEPRECATED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_LICENSE_ERROR),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_RUNTIME_IN_PROGRESS),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_RUNTIME_FP_OVERFLOW),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_SHAPE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_PADDING),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_EXECUTION_FAILED),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_EXECUTION_FAILED_CUDART),
    CUDNN_STATUS_ENTRY(CUDNN_STATUS_EXECUTION_FAILED_CURAND),
};
#undef CUDNN_STATUS_ENTRY

extern "C" {

const char *cudnnGetErrorString(cudnnStatus_t status) {
  for (const auto &e : kCudnnStatusNames)
    if (e.status == status) return e.name;
  return "CUDNN_STATUS_UNKNOWN (not a cuDNN status code)";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = new (std::nothrow) cudnnContext();
  return *handle ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc) {
  if (!tensorDesc) return CUDNN_STATUS_BAD_PARAM;
  *tensorDesc = new (std::nothrow) cudnnTensorStruct();
  return *tensorDesc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                         int n, int c, int h, int w) {
  if (!tensorDesc) return CUDNN_STATUS_BAD_PARAM;
  return desc4_set(&tensorDesc->d, format, dataType, n, c, h, w);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  delete tensorDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc) {
  if (!filterDesc) return CUDNN_STATUS_BAD_PARAM;
  *filterDesc = new (std::nothrow) cudnnFilterStruct();
  return *filterDesc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

// NCHW means KCRS, NHWC means KRSC.
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (!filterDesc) return CUDNN_STATUS_BAD_PARAM;
  return desc4_set(&filterDesc->d, format, dataType, k, c, h, w);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  delete filterDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc) {
  if (!convDesc) return CUDNN_STATUS_BAD_PARAM;
  *convDesc = new (std::nothrow) cudnnConvolutionStruct();
  if (!*convDesc) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  (*convDesc)->math = CUDNN_DEFAULT_MATH;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (!convDesc || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
      dilation_w <= 0 || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
    return CUDNN_STATUS_BAD_PARAM;
  cudnnConvolutionStruct *cv = convDesc;
  cv->set = true;
  cv->pad_h = pad_h, cv->pad_w = pad_w, cv->stride_h = u, cv->stride_w = v;
  cv->dil_h = dilation_h, cv->dil_w = dilation_w;
  cv->mode = mode;
  cv->compute = computeType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType) {
  if (!convDesc || mathType < CUDNN_DEFAULT_MATH || mathType > CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  convDesc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  delete convDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void * /*workSpace*/,
    size_t /*workSpaceSizeInBytes*/) {
  emu::note_host_wait("cudnnFindConvolutionForwardAlgorithmEx");
  emu::flush();  // a Find blocks the host: after all queued work
  ConvGeom g;
  if (!handle || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = conv_geom(xDesc, wDesc, convDesc, yDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = conv_find_result(convDesc, requestedAlgoCount, returnedAlgoCount, perfResults,
                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  if (st == CUDNN_STATUS_SUCCESS) desc4_poison(yDesc->d, y);
  return st;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void * /*workSpace*/,
    size_t /*workSpaceSizeInBytes*/) {
  emu::note_host_wait("cudnnFindConvolutionBackwardDataAlgorithmEx");
  emu::flush();  // a Find blocks the host: after all queued work
  ConvGeom g;
  if (!handle || !w || !dy || !dx) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = conv_geom(dxDesc, wDesc, convDesc, dyDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = conv_find_result(convDesc, requestedAlgoCount, returnedAlgoCount, perfResults,
                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
  if (st == CUDNN_STATUS_SUCCESS) desc4_poison(dxDesc->d, dx);
  return st;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void * /*workSpace*/,
    size_t /*workSpaceSizeInBytes*/) {
  emu::note_host_wait("cudnnFindConvolutionBackwardFilterAlgorithmEx");
  emu::flush();  // a Find blocks the host: after all queued work
  ConvGeom g;
  if (!handle || !x || !y || !dw) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = conv_geom(xDesc, dwDesc, convDesc, dyDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = conv_find_result(convDesc, requestedAlgoCount, returnedAlgoCount, perfResults,
                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  if (st == CUDNN_STATUS_SUCCESS) desc4_poison(dwDesc->d, dw);
  return st;
}

// cuDNN's heuristic queries (conv_heuristic_result).
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  return conv_heuristic_result(handle, srcDesc, filterDesc, convDesc, destDesc,
                               requestedAlgoCount, returnedAlgoCount, perfResults,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  return conv_heuristic_result(handle, gradDesc, filterDesc, convDesc, diffDesc,
                               requestedAlgoCount, returnedAlgoCount, perfResults,
                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
  return conv_heuristic_result(handle, srcDesc, gradDesc, convDesc, diffDesc,
                               requestedAlgoCount, returnedAlgoCount, perfResults,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
}

// Host float alpha and beta (float, half and bfloat16 data); any algorithm
// enumerant computes the same; the workspace is not needed.
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void *x,
                                      const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void * /*workSpace*/,
                                      size_t /*workSpaceSizeInBytes*/, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y) {
  ConvGeom g;
  cudnnStatus_t st = conv_call_check(handle, alpha, beta, x, w, y, algo,
                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  if (st == CUDNN_STATUS_SUCCESS) st = conv_geom(xDesc, wDesc, convDesc, yDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  // Queued: the descriptors and scaling factors as they are now.
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  Desc4 xd = xDesc->d, wd = wDesc->d, yd = yDesc->d;
  cudaError_t queued = emu::enqueue(handle->stream, [=]() {
    std::vector<float> xv = desc4_gather(xd, x, g.narrow);
    std::vector<float> wv = desc4_gather(wd, w, g.narrow);
    std::vector<float> yv(desc4_numel(yd));
    conv_fwd(g, xv.data(), wv.data(), yv.data());
    desc4_blend(yd, y, yv, al, be);
  });
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void *w,
                                           const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo,
                                           void * /*workSpace*/, size_t /*workSpaceSizeInBytes*/,
                                           const void *beta, const cudnnTensorDescriptor_t dxDesc,
                                           void *dx) {
  ConvGeom g;
  cudnnStatus_t st = conv_call_check(handle, alpha, beta, w, dy, dx, algo,
                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  if (st == CUDNN_STATUS_SUCCESS) st = conv_geom(dxDesc, wDesc, convDesc, dyDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  Desc4 dyd = dyDesc->d, wd = wDesc->d, dxd = dxDesc->d;
  cudaError_t queued = emu::enqueue(handle->stream, [=]() {
    std::vector<float> dyv = desc4_gather(dyd, dy, g.narrow);
    std::vector<float> wv = desc4_gather(wd, w, g.narrow);
    std::vector<float> dxv(desc4_numel(dxd));
    conv_bwd_data(g, dyv.data(), wv.data(), dxv.data());
    desc4_blend(dxd, dx, dxv, al, be);
  });
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void *x,
                                             const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                             void * /*workSpace*/,
                                             size_t /*workSpaceSizeInBytes*/, const void *beta,
                                             const cudnnFilterDescriptor_t dwDesc, void *dw) {
  ConvGeom g;
  cudnnStatus_t st = conv_call_check(handle, alpha, beta, x, dy, dw, algo,
                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  if (st == CUDNN_STATUS_SUCCESS) st = conv_geom(xDesc, dwDesc, convDesc, dyDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  Desc4 xd = xDesc->d, dyd = dyDesc->d, dwd = dwDesc->d;
  cudaError_t queued = emu::enqueue(handle->stream, [=]() {
    std::vector<float> xv = desc4_gather(xd, x, g.narrow);
    std::vector<float> dyv = desc4_gather(dyd, dy, g.narrow);
    std::vector<float> dwv(desc4_numel(dwd));
    conv_bwd_filter(g, xv.data(), dyv.data(), dwv.data());
    desc4_blend(dwd, dw, dwv, al, be);
  });
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

// C = alpha A + beta C, A broadcast along its axes of size 1.
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
                             const cudnnTensorDescriptor_t aDesc, const void *A, const void *beta,
                             const cudnnTensorDescriptor_t cDesc, void *C) {
  if (!handle || !alpha || !beta || !aDesc || !cDesc || !A || !C || !aDesc->d.set ||
      !cDesc->d.set)
    return CUDNN_STATUS_BAD_PARAM;
  Desc4 a = aDesc->d, c = cDesc->d;
  if (a.dtype != c.dtype) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < 4; i++)
    if (a.dim[i] != c.dim[i] && a.dim[i] != 1) return CUDNN_STATUS_BAD_PARAM;
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  cudaError_t queued = emu::enqueue(handle->stream, [=]() {
    desc4_for_each(c, [&](const int *i, int64_t at) {
      int64_t from = 0;
      for (int d = 0; d < 4; d++) from += (a.dim[d] == 1 ? 0 : i[d]) * a.stride[d];
      elem_blend(C, C, c.elem, at, al, elem_load(A, a.elem, from), be);
    });
  });
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

}  // extern "C"

// ---------------------------------------------------------------- NCCL

// One emulated process holds one rank. A communicator of more ranks needs
// the processes to be MPI ranks of one job (built with MPI, as the trainers
// run under mpirun): the collectives then go through MPI on a duplicate of
// MPI_COMM_WORLD, device memory being host memory here. Without MPI only
// one rank is possible.
struct ncclComm {
  int nranks, rank;
#if HAVE_MPI
  MPI_Comm mpi;  // MPI_COMM_NULL for one rank
#endif
  // The collective issued last, which the next one waits for: each rank
  // runs its collectives in issue order, whatever streams they are on.
  emu::WorkRef last;
};

// Marks ids made by ncclGetUniqueId, so an id that never arrived (zeros, say)
// fails ncclCommInitRank as it would on the real library.
static const char kNcclIdTag[] = "emu_libs ncclUniqueId";

static size_t nccl_type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

#if HAVE_MPI
// The MPI type of an NCCL type; MPI_DATATYPE_NULL for the 8- and 16-bit
// floats, which MPI cannot add.
static MPI_Datatype nccl_mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}
#endif

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId) return ncclInvalidArgument;
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, kNcclIdTag, sizeof kNcclIdTag);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (memcmp(commId.internal, kNcclIdTag, sizeof kNcclIdTag) != 0) return ncclInvalidArgument;
#if HAVE_MPI
  MPI_Comm mpi = MPI_COMM_NULL;
  if (nranks > 1) {
    int ready = 0, size = 0, me = -1;
    MPI_Initialized(&ready);
    if (!ready) return ncclInvalidUsage;  // the other ranks would be other processes
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != nranks || me != rank) return ncclInvalidUsage;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mpi) != MPI_SUCCESS) return ncclSystemError;
  }
  *comm = new (std::nothrow) ncclComm{nranks, rank, mpi, nullptr};
#else
  if (nranks > 1) return ncclInvalidUsage;  // the other ranks would be other processes
  *comm = new (std::nothrow) ncclComm{nranks, rank, nullptr};
#endif
  return *comm ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  emu::note_host_wait("ncclCommDestroy");
  if (comm) emu::sync_work(comm->last);
#if HAVE_MPI
  if (comm && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
#endif
  delete comm;
  return ncclSuccess;
}

// A collective is checked at the call and queued on its stream behind the
// communicator's previous one; the MPI call inside runs when the rank's
// device work reaches it. A failed MPI call then ends the process, as an
// asynchronous NCCL error would end the job.
static ncclResult_t nccl_enqueue(ncclComm_t comm, cudaStream_t stream, const char *name,
                                 std::function<int()> collective) {
  emu::WorkRef queued;
  cudaError_t rc = emu::enqueue(stream, [comm, name, collective]() {
    if (collective() != 0) {
      fprintf(stderr, "emu_libs: %s on rank %d of %d failed in MPI\n", name, comm->rank,
              comm->nranks);
      exit(1);
    }
  }, comm->last, &queued);
  if (rc != cudaSuccess) return ncclUnhandledCudaError;
  comm->last = queued;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (op < ncclSum || op >= ncclNumOps) return ncclInvalidArgument;  // no custom ops
  size_t bytes = nccl_type_bytes(datatype);
  if (!comm || bytes == 0 || (count > 0 && (!sendbuff || !recvbuff))) return ncclInvalidArgument;
  if (comm->nranks == 1 || count == 0)  // the sum, product, ... of one value
    return nccl_enqueue(comm, stream, "ncclAllReduce", [=]() {
      if (sendbuff != recvbuff && count > 0) memmove(recvbuff, sendbuff, count * bytes);
      return 0;
    });
#if HAVE_MPI
  MPI_Datatype type = nccl_mpi_type(datatype);
  if (type == MPI_DATATYPE_NULL || count > (size_t)INT_MAX) return ncclInvalidUsage;
  if (op == ncclAvg && datatype != ncclFloat32 && datatype != ncclFloat64)
    return ncclInvalidUsage;
  MPI_Op mpi_op = op == ncclProd ? MPI_PROD : op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN
                                                                                    : MPI_SUM;
  return nccl_enqueue(comm, stream, "ncclAllReduce", [=]() {
    if (sendbuff != recvbuff) memmove(recvbuff, sendbuff, count * bytes);
    int rc = PMPI_Allreduce(MPI_IN_PLACE, recvbuff, (int)count, type, mpi_op, comm->mpi);
    if (rc != MPI_SUCCESS || op != ncclAvg) return rc;
    // The sum over the ranks, divided as NCCL does for floats.
    if (datatype == ncclFloat32)
      for (size_t i = 0; i < count; i++) ((float *)recvbuff)[i] /= (float)comm->nranks;
    else
      for (size_t i = 0; i < count; i++) ((double *)recvbuff)[i] /= comm->nranks;
    return rc;
  });
#else
  return ncclInvalidUsage;
#endif
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  size_t bytes = nccl_type_bytes(datatype);
  if (!comm || bytes == 0 || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  // Only the root's send buffer is read.
  if (count > 0 && (!recvbuff || (comm->rank == root && !sendbuff))) return ncclInvalidArgument;
  bool root_copies = comm->rank == root && sendbuff != recvbuff && count > 0;
  if (comm->nranks == 1 || count == 0)
    return nccl_enqueue(comm, stream, "ncclBroadcast", [=]() {
      if (root_copies) memmove(recvbuff, sendbuff, count * bytes);
      return 0;
    });
#if HAVE_MPI
  if (count * bytes > (size_t)INT_MAX) return ncclInvalidUsage;
  return nccl_enqueue(comm, stream, "ncclBroadcast", [=]() {
    if (root_copies) memmove(recvbuff, sendbuff, count * bytes);
    return PMPI_Bcast(recvbuff, (int)(count * bytes), MPI_BYTE, root, comm->mpi);
  });
#else
  return ncclInvalidUsage;
#endif
}

}  // extern "C"

#if HAVE_MPI
// The host MPI calls the project makes. A queued collective is an MPI call
// that runs when its rank's device work reaches it: were a rank blocked in a
// host MPI call while its partner waited in a queued collective the first
// had yet to run, both would hang, where on GPUs the collective would run on
// the device meanwhile. So each of these runs the rank's queued device work
// first, and holds device work off while it is in MPI (one thread of the
// process in MPI at a time). They take the place of the MPI library's
// functions, which they call by their profiling names (PMPI_).
extern "C" {
// The queued collectives make their MPI calls on whichever host thread runs
// the device work: the trainer's, or a loader worker's waiting for a copy
// that waits for the compute stream. One at a time (above), but not always
// the main thread, which MPI_THREAD_SINGLE (what MPI_Init asks for) does not
// allow: ask for MPI_THREAD_SERIALIZED instead.
int MPI_Init(int *argc, char ***argv) {
  int provided = MPI_THREAD_SINGLE;
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (rc == MPI_SUCCESS && provided < MPI_THREAD_SERIALIZED) {
    fprintf(stderr, "emu_libs: MPI gives thread level %d, below MPI_THREAD_SERIALIZED\n",
            provided);
    return MPI_ERR_OTHER;
  }
  return rc;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm) {
  emu::note_host_wait("MPI_Allreduce");
  return emu::with_device_idle(
      [&]() { return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); });
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request) {
  return emu::with_device_idle(
      [&]() { return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request); });
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  emu::note_host_wait("MPI_Bcast");
  return emu::with_device_idle([&]() { return PMPI_Bcast(buffer, count, datatype, root, comm); });
}

int MPI_Barrier(MPI_Comm comm) {
  emu::note_host_wait("MPI_Barrier");
  return emu::with_device_idle([&]() { return PMPI_Barrier(comm); });
}

int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses) {
  emu::note_host_wait("MPI_Waitall");
  return emu::with_device_idle(
      [&]() { return PMPI_Waitall(count, array_of_requests, array_of_statuses); });
}

int MPI_Finalize(void) {
  emu::note_host_wait("MPI_Finalize");
  return emu::with_device_idle([]() { return PMPI_Finalize(); });
}
}  // extern "C"
#endif

extern "C" {

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (the CPU emulation of NCCL: more than one rank needs an MPI job of "
             "as many ranks, and sums only 32- and 64-bit types)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

}  // extern "C"
