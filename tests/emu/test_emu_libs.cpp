// test_emu_libs.cpp: checks emu_libs.cpp (the CPU stand-ins for cuBLAS,
// cuDNN and NCCL) against naive computations written here, independently of
// it. Standalone: built with emu_libs.cpp only, no CUDA library, no GPU:
//   g++ -std=c++17 -I/usr/local/cuda/include tests/emu/test_emu_libs.cpp
//       tests/emu/emu_libs.cpp -o test_emu_libs
// Prints "PASS name" or "FAIL name: what" per check; exits 1 on any failure.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>
#include <nccl.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "emu_activity.h"
#include "emu_test.h"


// Uniform in [-1, 1), reproducible.
static float rnd() {
  static uint64_t s = 0x9e3779b97f4a7c15ull;
  s ^= s << 13, s ^= s >> 7, s ^= s << 17;
  return (float)((s >> 40) * (1.0 / (1u << 23)) - 1.0);
}

static std::vector<float> rnd_vec(size_t n) {
  std::vector<float> v(n);
  for (float &x : v) x = rnd();
  return v;
}

// |got - want| within rel * scale + 1e-30, scale = sum of |terms| + |want|.
static bool close(double got, double want, double scale, double rel) {
  return std::fabs(got - want) <= rel * (scale + std::fabs(want)) + 1e-30;
}

// ---------------------------------------------------------------- cuBLAS

// Column-major element (i, j) of op(X), X stored with leading dimension ld.
static double op_at(const std::vector<float> &x, size_t base, bool trans, int ld, int i, int j) {
  return trans ? x[base + j + (size_t)i * ld] : x[base + i + (size_t)j * ld];
}

static void test_gemm_f32_transposes(cublasHandle_t h) {
  const int m = 5, n = 4, k = 3, batch = 3;
  const float alpha = 1.25f, beta = -0.5f;
  const float sentinel = 12345.0f;
  for (int combo = 0; combo < 4; combo++) {
    bool ta = combo & 1, tb = combo & 2;
    int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1, ldc = m + 1;
    int a_cols = ta ? m : k, b_cols = tb ? k : n;
    // One operand is shared by every batch entry (stride 0).
    long long sa = combo % 2 ? (long long)lda * a_cols + 3 : 0;
    long long sb = combo % 2 ? 0 : (long long)ldb * b_cols + 5;
    long long sc = (long long)ldc * n + 2;
    std::vector<float> a = rnd_vec(sa * (batch - 1) + (size_t)lda * a_cols);
    std::vector<float> b = rnd_vec(sb * (batch - 1) + (size_t)ldb * b_cols);
    std::vector<float> c(sc * batch, sentinel);
    for (int e = 0; e < batch; e++)
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) c[e * sc + i + (size_t)j * ldc] = rnd();
    std::vector<float> c0 = c;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
        a.data(), CUDA_R_32F, lda, sa, b.data(), CUDA_R_32F, ldb, sb, &beta, c.data(), CUDA_R_32F,
        ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    char name[64];
    snprintf(name, sizeof name, "gemm_f32_%c%c_batch_stride0", ta ? 'T' : 'N', tb ? 'T' : 'N');
    if (st != CUBLAS_STATUS_SUCCESS) {
      check(false, name, "status %d", (int)st);
      continue;
    }
    double worst = 0;
    bool ok = true;
    for (int e = 0; e < batch; e++)
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
          double sum = 0, scale = 0;
          for (int l = 0; l < k; l++) {
            double t = op_at(a, e * sa, ta, lda, i, l) * op_at(b, e * sb, tb, ldb, l, j);
            sum += t;
            scale += std::fabs(t);
          }
          size_t at = e * sc + i + (size_t)j * ldc;
          double want = alpha * sum + beta * (double)c0[at];
          worst = worst_of(worst, std::fabs(c[at] - want));
          ok &= close(c[at], want, std::fabs(alpha) * scale + std::fabs(beta * c0[at]), 1e-6);
        }
    bool padding_kept = true;
    for (size_t i = 0; i < c.size(); i++)
      if (c0[i] == sentinel) padding_kept &= c[i] == sentinel;
    check(ok && padding_kept, name, "max error %g, padding %s", worst,
          padding_kept ? "kept" : "overwritten");
  }
}

// bf16 inputs, fp32 accumulation, fp32 and bf16 outputs.
static void test_gemm_bf16(cublasHandle_t h) {
  const int m = 7, n = 6, k = 33;
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<__nv_bfloat16> a(m * k), b(k * n);
  for (auto &x : a) x = __float2bfloat16_rn(rnd());
  for (auto &x : b) x = __float2bfloat16_rn(rnd());
  std::vector<float> c32(m * n);
  std::vector<__nv_bfloat16> c16(m * n);
  cublasStatus_t st32 = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, m, 0, b.data(),
      CUDA_R_16BF, k, 0, &beta, c32.data(), CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  cublasStatus_t st16 = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, m, 0, b.data(),
      CUDA_R_16BF, k, 0, &beta, c16.data(), CUDA_R_16BF, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  bool ok32 = st32 == CUBLAS_STATUS_SUCCESS, ok16 = st16 == CUBLAS_STATUS_SUCCESS;
  double worst32 = 0, worst16 = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double sum = 0, scale = 0;
      for (int l = 0; l < k; l++) {
        double t = (double)__bfloat162float(a[i + l * m]) * __bfloat162float(b[l + j * k]);
        sum += t;
        scale += std::fabs(t);
      }
      double got32 = c32[i + j * m], got16 = __bfloat162float(c16[i + j * m]);
      worst32 = worst_of(worst32, std::fabs(got32 - sum));
      worst16 = worst_of(worst16, std::fabs(got16 - sum));
      ok32 &= close(got32, sum, scale, 1e-6);
      // bf16 output: one rounding of the fp32 result (8 significant bits).
      ok16 &= close(got16, sum, 1e-6 * scale / 0x1p-8, 0x1p-8);
    }
  check(ok32, "gemm_bf16_in_f32_out", "status %d, max error %g", (int)st32, worst32);
  check(ok16, "gemm_bf16_in_bf16_out", "status %d, max error %g", (int)st16, worst16);
}

// 1x1x1 product x * 1: the result is exactly what the multiplier saw of x.
static float gemm_scalar(cublasHandle_t h, float x, cublasComputeType_t compute,
                         cublasStatus_t *st) {
  float one = 1.0f, zero = 0.0f, c = NAN;
  *st = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &x, CUDA_R_32F, 1,
                                   0, &one, CUDA_R_32F, 1, 0, &zero, &c, CUDA_R_32F, 1, 0, 1,
                                   compute, CUBLAS_GEMM_DEFAULT);
  return c;
}

static void test_gemm_tf32(cublasHandle_t h) {
  struct {
    const char *name;
    cublasMath_t mode;
    cublasComputeType_t compute;
    float x, want;
  } cases[] = {
      // 2^-12 is below TF32's half ulp at 1 (2^-11): the product loses it.
      {"gemm_tf32_off_default", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F, 1 + 0x1p-12f,
       1 + 0x1p-12f},
      {"gemm_tf32_math_mode", CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F, 1 + 0x1p-12f, 1.0f},
      {"gemm_tf32_compute_type", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, 1 + 0x1p-12f,
       1.0f},
      {"gemm_tf32_pedantic_wins", CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F_PEDANTIC,
       1 + 0x1p-12f, 1 + 0x1p-12f},
      {"gemm_tf32_flag_bit", (cublasMath_t)(CUBLAS_TF32_TENSOR_OP_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
       CUBLAS_COMPUTE_32F, 1 + 0x1p-12f, 1.0f},
      // Ties go to the even 10-bit mantissa.
      {"gemm_tf32_tie_down", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, 1 + 0x1p-11f,
       1.0f},
      {"gemm_tf32_tie_up", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, 1 + 0x3p-11f,
       1 + 0x1p-9f},
      {"gemm_tf32_above_half", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32,
       1 + 0x1p-11f + 0x1p-20f, 1 + 0x1p-10f},
      {"gemm_tf32_negative", CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, -(1 + 0x3p-11f),
       -(1 + 0x1p-9f)},
  };
  for (const auto &t : cases) {
    cublasStatus_t st = cublasSetMathMode(h, t.mode);
    cublasStatus_t st2 = CUBLAS_STATUS_SUCCESS;
    float got = st == CUBLAS_STATUS_SUCCESS ? gemm_scalar(h, t.x, t.compute, &st2) : NAN;
    check(st == CUBLAS_STATUS_SUCCESS && st2 == CUBLAS_STATUS_SUCCESS && got == t.want, t.name,
          "set %d gemm %d: got %.10g want %.10g", (int)st, (int)st2, got, t.want);
  }
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
}

static void test_gemm_beta_zero(cublasHandle_t h) {
  const int m = 3, n = 2, k = 4;
  std::vector<float> a = rnd_vec(m * k), b = rnd_vec(k * n), c(m * n, NAN);
  float alpha = 2.0f, beta = 0.0f;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_32F, m, 0, b.data(),
      CUDA_R_32F, k, 0, &beta, c.data(), CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  bool ok = st == CUBLAS_STATUS_SUCCESS;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double sum = 0, scale = 0;
      for (int l = 0; l < k; l++) {
        sum += (double)a[i + l * m] * b[l + j * k];
        scale += std::fabs((double)a[i + l * m] * b[l + j * k]);
      }
      ok &= close(c[i + j * m], alpha * sum, alpha * scale, 1e-6);
    }
  check(ok, "gemm_beta0_nan_in_c", "status %d, c[0] = %g", (int)st, c[0]);

  // alpha == 0 reads neither A nor B (reference BLAS): C = beta C.
  std::vector<float> a_nan(m * k, NAN), c1 = {1, 2, 3, 4, 5, 6};
  float zero = 0.0f, half = 0.5f;
  cublasStatus_t st1 = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &zero, a_nan.data(), CUDA_R_32F, m, 0, b.data(),
      CUDA_R_32F, k, 0, &half, c1.data(), CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  bool ok1 = st1 == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < m * n; i++) ok1 &= c1[i] == 0.5f * (i + 1);
  check(ok1, "gemm_alpha0_skips_ab", "status %d, c1[0] = %g", (int)st1, c1[0]);

  // k == 0: C = beta C (and beta == 0 gives zeros even over NaN).
  std::vector<float> c2 = {1, 2, 3, 4, 5, 6}, c3(m * n, NAN);
  cublasStatus_t st2 = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, &alpha, a.data(), CUDA_R_32F, m, 0, b.data(),
      CUDA_R_32F, 1, 0, &half, c2.data(), CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  cublasStatus_t st3 = cublasGemmStridedBatchedEx(
      h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, &alpha, a.data(), CUDA_R_32F, m, 0, b.data(),
      CUDA_R_32F, 1, 0, &beta, c3.data(), CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  bool ok2 = st2 == CUBLAS_STATUS_SUCCESS && st3 == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < m * n; i++) ok2 &= c2[i] == 0.5f * (i + 1) && c3[i] == 0.0f;
  check(ok2, "gemm_k0_scales_c", "status %d/%d, c2[0] = %g, c3[0] = %g", (int)st2, (int)st3,
        c2[0], c3[0]);
}

static void test_gemm_arguments(cublasHandle_t h) {
  float x[64] = {0}, one = 1.0f;
  auto call = [&](cublasOperation_t ta, int m, int n, int k, cudaDataType at, cudaDataType bt,
                  cudaDataType ct, int lda, int ldb, int ldc, cublasComputeType_t compute) {
    return cublasGemmStridedBatchedEx(h, ta, CUBLAS_OP_N, m, n, k, &one, x, at, lda, 0, x, bt,
                                      ldb, 0, &one, x, ct, ldc, 0, 1, compute,
                                      CUBLAS_GEMM_DEFAULT);
  };
  const cudaDataType F = CUDA_R_32F, B = CUDA_R_16BF, H = CUDA_R_16F;
  const cublasComputeType_t C32 = CUBLAS_COMPUTE_32F;
  struct {
    const char *name;
    cublasStatus_t got, want;
  } cases[] = {
      {"gemm_arg_negative_m", call(CUBLAS_OP_N, -1, 2, 2, F, F, F, 2, 2, 2, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_lda_lt_m", call(CUBLAS_OP_N, 4, 2, 2, F, F, F, 3, 2, 4, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_lda_lt_k_trans", call(CUBLAS_OP_T, 2, 2, 4, F, F, F, 3, 4, 2, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_ldb_lt_k", call(CUBLAS_OP_N, 2, 2, 4, F, F, F, 2, 3, 2, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_ldc_lt_m", call(CUBLAS_OP_N, 4, 2, 2, F, F, F, 4, 2, 3, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_lda_zero_k0", call(CUBLAS_OP_N, 2, 2, 0, F, F, F, 2, 0, 2, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_bad_op", call((cublasOperation_t)7, 2, 2, 2, F, F, F, 2, 2, 2, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_mixed_ab", call(CUBLAS_OP_N, 2, 2, 2, F, B, F, 2, 2, 2, C32),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"gemm_arg_bf16_to_f16", call(CUBLAS_OP_N, 2, 2, 2, B, B, H, 2, 2, 2, C32),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"gemm_arg_f32_to_bf16", call(CUBLAS_OP_N, 2, 2, 2, F, F, B, 2, 2, 2, C32),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"gemm_arg_tf32_on_bf16", call(CUBLAS_OP_N, 2, 2, 2, B, B, F, 2, 2, 2,
                                     CUBLAS_COMPUTE_32F_FAST_TF32),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"gemm_arg_compute_16f", call(CUBLAS_OP_N, 2, 2, 2, H, H, H, 2, 2, 2, CUBLAS_COMPUTE_16F),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"gemm_arg_m0_lda0", call(CUBLAS_OP_N, 0, 2, 2, F, F, F, 0, 2, 1, C32),
       CUBLAS_STATUS_INVALID_VALUE},
      {"gemm_arg_m0_ok", call(CUBLAS_OP_N, 0, 2, 2, F, F, F, 1, 2, 1, C32),
       CUBLAS_STATUS_SUCCESS},
  };
  for (const auto &t : cases)
    check(t.got == t.want, t.name, "got %s, want %s", cublasGetStatusString(t.got),
          cublasGetStatusString(t.want));
}

static void test_cublas_handle() {
  cublasHandle_t h = nullptr;
  cublasLtHandle_t lt = nullptr;
  bool ok =
      cublasCreate(&h) == CUBLAS_STATUS_SUCCESS && cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS;
  ok &= cublasSetStream(h, nullptr) == CUBLAS_STATUS_SUCCESS;
  void *ws = aligned_alloc(256, 4096);
  ok &= cublasSetWorkspace(h, ws, 4096) == CUBLAS_STATUS_SUCCESS;
  ok &= cublasSetWorkspace(h, (char *)ws + 16, 1024) == CUBLAS_STATUS_INVALID_VALUE;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  ok &= cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS &&
        cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS && mode == CUBLAS_TF32_TENSOR_OP_MATH;
  ok &= cublasSetMathMode(h, (cublasMath_t)5) == CUBLAS_STATUS_INVALID_VALUE;
  ok &= cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE) != nullptr;
  ok &= cublasLtDestroy(lt) == CUBLAS_STATUS_SUCCESS && cublasDestroy(h) == CUBLAS_STATUS_SUCCESS;
  ok &= cublasDestroy(nullptr) == CUBLAS_STATUS_NOT_INITIALIZED;
  free(ws);
  check(ok, "cublas_handle_stream_workspace_mode", "a handle call returned an unexpected status");
}

// ---------------------------------------------------------------- cuBLASLt

struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(desc);
  }
};

// D = alpha op(A) op(B) + beta C in place, with the BIAS epilogue (a bias
// per row of D, fp32 or D's bf16) or BGRADB (sums of op(B) over k, one per
// column of D), against sums in double.
static void test_lt_epilogues(cublasLtHandle_t lt) {
  const int m = 6, n = 5, k = 9;
  const float alpha = 0.75f, beta = 0.5f;
  for (int combo = 0; combo < 6; combo++) {
    bool ta = combo & 1, bgrad = combo >= 4, bias16 = combo >= 2 && combo < 4;
    bool tb = bgrad;  // a linear layer's dw = x^T dy: B transposed
    int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 1;
    std::vector<float> a = rnd_vec((size_t)lda * (ta ? m : k));
    std::vector<float> b = rnd_vec((size_t)ldb * (tb ? k : n));
    std::vector<float> c = rnd_vec((size_t)ldc * n), c0 = c;
    std::vector<float> bias = rnd_vec(bgrad ? n : m);
    std::vector<__nv_bfloat16> bias_bf(bias.size());
    for (size_t i = 0; i < bias.size(); i++) {
      bias_bf[i] = __float2bfloat16_rn(bias[i]);
      if (bias16) bias[i] = __bfloat162float(bias_bf[i]);
    }
    // bf16 D when the bias is bf16 (its type must be fp32 or D's).
    std::vector<__nv_bfloat16> c_bf(c.size());
    for (size_t i = 0; i < c.size(); i++) c_bf[i] = __float2bfloat16_rn(c[i]);
    std::vector<__nv_bfloat16> a_bf(a.size()), b_bf(b.size());
    for (size_t i = 0; i < a.size(); i++) a_bf[i] = __float2bfloat16_rn(a[i]);
    for (size_t i = 0; i < b.size(); i++) b_bf[i] = __float2bfloat16_rn(b[i]);
    if (bias16) {
      for (size_t i = 0; i < a.size(); i++) a[i] = __bfloat162float(a_bf[i]);
      for (size_t i = 0; i < b.size(); i++) b[i] = __bfloat162float(b_bf[i]);
      for (size_t i = 0; i < c.size(); i++) c0[i] = __bfloat162float(c_bf[i]);
    }
    cudaDataType_t t = bias16 ? CUDA_R_16BF : CUDA_R_32F;
    int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = bgrad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_type = bias16 ? CUDA_R_16BF : CUDA_R_32F;
    void *bias_ptr = bias16 ? (void *)bias_bf.data() : (void *)bias.data();
    LtCall l;
    bool ok = cublasLtMatmulDescCreate(&l.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok &= cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a) == 0;
    ok &= cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b) == 0;
    ok &= cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    ok &= cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                         sizeof bias_ptr) == 0;
    ok &= cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof bias_type) == 0;
    ok &= cublasLtMatrixLayoutCreate(&l.a, t, ta ? k : m, ta ? m : k, lda) == 0;
    ok &= cublasLtMatrixLayoutCreate(&l.b, t, tb ? n : k, tb ? k : n, ldb) == 0;
    ok &= cublasLtMatrixLayoutCreate(&l.c, t, m, n, ldc) == 0;
    ok &= cublasLtMatmulPreferenceCreate(&l.pref) == 0;
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    ok &= cublasLtMatmulAlgoGetHeuristic(lt, l.desc, l.a, l.b, l.c, l.c, l.pref, 1, &found,
                                         &count) == CUBLAS_STATUS_SUCCESS && count == 1;
    const void *A = bias16 ? (const void *)a_bf.data() : a.data();
    const void *B = bias16 ? (const void *)b_bf.data() : b.data();
    void *C = bias16 ? (void *)c_bf.data() : c.data();
    ok &= cublasLtMatmul(lt, l.desc, &alpha, A, l.a, B, l.b, &beta, C, l.c, C, l.c, &found.algo,
                         nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS;
    char name[64];
    snprintf(name, sizeof name, "lt_%s_%s_%c%c", bgrad ? "bgradb" : "bias",
             bias16 ? "bf16" : "f32", ta ? 'T' : 'N', tb ? 'T' : 'N');
    if (!ok) {
      check(false, name, "a cuBLASLt call failed");
      continue;
    }
    // bf16 D is rounded once: half a bf16 ulp, 2^-8 relative; fp32 sums in
    // another order: 1e-6.
    double rel = bias16 ? 1.0 / 256 : 1e-6, worst = 0;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double sum = 0, scale = 0;
        for (int l2 = 0; l2 < k; l2++) {
          double term = op_at(a, 0, ta, lda, i, l2) * op_at(b, 0, tb, ldb, l2, j);
          sum += term;
          scale += std::fabs(term);
        }
        size_t at = i + (size_t)j * ldc;
        double want = alpha * sum + beta * (double)c0[at] + (bgrad ? 0.0 : (double)bias[i]);
        double got = bias16 ? __bfloat162float(c_bf[at]) : c[at];
        worst = worst_of(worst, std::fabs(got - want));
        ok &= close(got, want, alpha * scale + std::fabs(beta * c0[at]) + std::fabs(bias[i]), rel);
      }
    if (bgrad)
      for (int j = 0; j < n; j++) {
        double sum = 0, scale = 0;
        for (int l2 = 0; l2 < k; l2++) {
          sum += op_at(b, 0, tb, ldb, l2, j);
          scale += std::fabs(op_at(b, 0, tb, ldb, l2, j));
        }
        double got = bias16 ? __bfloat162float(bias_bf[j]) : bias[j];
        worst = worst_of(worst, std::fabs(got - sum));
        ok &= close(got, sum, scale, rel);
      }
    check(ok, name, "max error %g", worst);
  }
}

// What the stand-ins refuse, as the library does: an attribute of the wrong
// size, an epilogue or a bias type they do not run, no bias pointer, shapes
// that disagree.
static void test_lt_arguments(cublasLtHandle_t lt) {
  float x[64] = {0};
  auto heuristic = [&](uint32_t epi, int32_t bias_type, bool bias, int a_rows) {
    LtCall l;
    void *ptr = bias ? x : nullptr;
    cublasLtMatmulDescCreate(&l.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr);
    cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                   sizeof bias_type);
    cublasLtMatrixLayoutCreate(&l.a, CUDA_R_16BF, a_rows, 3, 4);
    cublasLtMatrixLayoutCreate(&l.b, CUDA_R_16BF, 3, 2, 3);
    cublasLtMatrixLayoutCreate(&l.c, CUDA_R_16BF, 4, 2, 4);
    cublasLtMatmulPreferenceCreate(&l.pref);
    cublasLtMatmulHeuristicResult_t found;
    int count = -1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, l.desc, l.a, l.b, l.c, l.c, l.pref, 1,
                                                       &found, &count);
    return st == CUBLAS_STATUS_SUCCESS && count != 1 ? CUBLAS_STATUS_INTERNAL_ERROR : st;
  };
  cublasLtMatmulDesc_t d = nullptr;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  cublasStatus_t short_size = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 2);
  cublasLtMatmulDescDestroy(d);
  const int32_t F = CUDA_R_32F, H = CUDA_R_16F;
  struct {
    const char *name;
    cublasStatus_t got, want;
  } cases[] = {
      {"lt_arg_attribute_size", short_size, CUBLAS_STATUS_INVALID_VALUE},
      {"lt_arg_bias_ok", heuristic(CUBLASLT_EPILOGUE_BIAS, F, true, 4), CUBLAS_STATUS_SUCCESS},
      {"lt_arg_bgradb_ok", heuristic(CUBLASLT_EPILOGUE_BGRADB, F, true, 4), CUBLAS_STATUS_SUCCESS},
      {"lt_arg_gelu_not_run", heuristic(CUBLASLT_EPILOGUE_GELU_BIAS, F, true, 4),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"lt_arg_bias_f16_for_bf16", heuristic(CUBLASLT_EPILOGUE_BIAS, H, true, 4),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"lt_arg_no_bias_pointer", heuristic(CUBLASLT_EPILOGUE_BIAS, F, false, 4),
       CUBLAS_STATUS_INVALID_VALUE},
      {"lt_arg_shapes_disagree", heuristic(CUBLASLT_EPILOGUE_BIAS, F, true, 5),
       CUBLAS_STATUS_INVALID_VALUE},
  };
  for (const auto &t : cases)
    check(t.got == t.want, t.name, "got %s, want %s", cublasGetStatusString(t.got),
          cublasGetStatusString(t.want));
}

// ---------------------------------------------------------------- cuDNN

struct ConvCase {
  const char *name;
  int n, h, w, c, k, r, s, stride, pad, dil;
  cudnnConvolutionMode_t mode;
  int p() const { return (h + 2 * pad - dil * (r - 1) - 1) / stride + 1; }
  int q() const { return (w + 2 * pad - dil * (s - 1) - 1) / stride + 1; }
};

struct ConvDescs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

static ConvDescs conv_descs(const ConvCase &cc, cudnnTensorFormat_t fmt, cudnnDataType_t dt,
                            cudnnMathType_t math) {
  ConvDescs d;
  cudnnCreateTensorDescriptor(&d.x);
  cudnnCreateTensorDescriptor(&d.y);
  cudnnCreateFilterDescriptor(&d.w);
  cudnnCreateConvolutionDescriptor(&d.conv);
  cudnnSetTensor4dDescriptor(d.x, fmt, dt, cc.n, cc.c, cc.h, cc.w);
  cudnnSetTensor4dDescriptor(d.y, fmt, dt, cc.n, cc.k, cc.p(), cc.q());
  cudnnSetFilter4dDescriptor(d.w, dt, fmt, cc.k, cc.c, cc.r, cc.s);
  cudnnSetConvolution2dDescriptor(d.conv, cc.pad, cc.pad, cc.stride, cc.stride, cc.dil, cc.dil,
                                  cc.mode, CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(d.conv, math);
  return d;
}

static void conv_descs_free(ConvDescs d) {
  cudnnDestroyTensorDescriptor(d.x);
  cudnnDestroyTensorDescriptor(d.y);
  cudnnDestroyFilterDescriptor(d.w);
  cudnnDestroyConvolutionDescriptor(d.conv);
}

// The reference forward, NHWC x / KRSC w / NHWC y, in double, written as a
// scatter from each input element and filter tap to the output it feeds.
// scale receives the sum of |terms| per output.
static void ref_conv_nhwc(const ConvCase &cc, const std::vector<float> &x,
                          const std::vector<float> &w, std::vector<double> *y,
                          std::vector<double> *scale) {
  int P = cc.p(), Q = cc.q();
  y->assign((size_t)cc.n * P * Q * cc.k, 0.0);
  scale->assign(y->size(), 0.0);
  for (int n = 0; n < cc.n; n++)
    for (int ih = 0; ih < cc.h; ih++)
      for (int iw = 0; iw < cc.w; iw++)
        for (int r = 0; r < cc.r; r++)
          for (int s = 0; s < cc.s; s++) {
            int th = ih + cc.pad - r * cc.dil, tw = iw + cc.pad - s * cc.dil;
            if (th < 0 || tw < 0 || th % cc.stride || tw % cc.stride) continue;
            int p = th / cc.stride, q = tw / cc.stride;
            if (p >= P || q >= Q) continue;
            // CUDNN_CONVOLUTION reads the filter rotated by 180 degrees.
            int fr = cc.mode == CUDNN_CONVOLUTION ? cc.r - 1 - r : r;
            int fs = cc.mode == CUDNN_CONVOLUTION ? cc.s - 1 - s : s;
            for (int k = 0; k < cc.k; k++)
              for (int c = 0; c < cc.c; c++) {
                double t = (double)x[(((size_t)n * cc.h + ih) * cc.w + iw) * cc.c + c] *
                           w[(((size_t)k * cc.r + fr) * cc.s + fs) * cc.c + c];
                size_t o = (((size_t)n * P + p) * Q + q) * cc.k + k;
                (*y)[o] += t;
                (*scale)[o] += std::fabs(t);
              }
          }
}

static double dot(const std::vector<float> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * b[i];
  return s;
}

// NHWC (d0, d1, d2, d3) -> NCHW (d0, d3, d1, d2); also KRSC -> KCRS.
static std::vector<float> to_nchw(const std::vector<float> &v, int d0, int d1, int d2, int d3) {
  std::vector<float> out(v.size());
  for (int a = 0; a < d0; a++)
    for (int b = 0; b < d1; b++)
      for (int c = 0; c < d2; c++)
        for (int d = 0; d < d3; d++)
          out[(((size_t)a * d3 + d) * d1 + b) * d2 + c] =
              v[(((size_t)a * d1 + b) * d2 + c) * d3 + d];
  return out;
}

// Integers in [-3, 3]: every product and sum of a small convolution is
// exact in fp32, so results must match the double reference exactly and the
// adjoint identity must hold exactly, whatever the summation order.
static std::vector<float> small_int_vec(size_t n) {
  std::vector<float> v(n);
  for (float &x : v) x = std::nearbyint(rnd() * 3.49f);
  return v;
}

static void test_conv_case(cudnnHandle_t dnn, const ConvCase &cc) {
  const float one = 1.0f, zero = 0.0f;
  int P = cc.p(), Q = cc.q();
  std::vector<float> x = small_int_vec((size_t)cc.n * cc.h * cc.w * cc.c);
  std::vector<float> w = small_int_vec((size_t)cc.k * cc.r * cc.s * cc.c);
  std::vector<float> dy = small_int_vec((size_t)cc.n * P * Q * cc.k);
  std::vector<float> y(dy.size(), NAN), dx(x.size(), NAN), dw(w.size(), NAN);
  ConvDescs d = conv_descs(cc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  char name[96];

  // Forward against the reference; y starts as NaN and beta is 0.
  cudnnStatus_t st = cudnnConvolutionForward(dnn, &one, d.x, x.data(), d.w, w.data(), d.conv,
                                             CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                             &zero, d.y, y.data());
  std::vector<double> ref, scale;
  ref_conv_nhwc(cc, x, w, &ref, &scale);
  bool ok = st == CUDNN_STATUS_SUCCESS;
  double worst = 0;
  for (size_t i = 0; i < y.size(); i++) {
    worst = worst_of(worst, std::fabs(y[i] - ref[i]));
    ok &= y[i] == ref[i];
  }
  snprintf(name, sizeof name, "conv_fwd_%s", cc.name);
  check(ok, name, "%s, max error %g", cudnnGetErrorString(st), worst);

  // Adjoint identity: <conv(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_filter(x, dy)>.
  cudnnStatus_t st_d = cudnnConvolutionBackwardData(dnn, &one, d.w, w.data(), d.y, dy.data(),
                                                    d.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                    nullptr, 0, &zero, d.x, dx.data());
  cudnnStatus_t st_f = cudnnConvolutionBackwardFilter(dnn, &one, d.x, x.data(), d.y, dy.data(),
                                                      d.conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                      nullptr, 0, &zero, d.w, dw.data());
  double ydy = dot(y, dy), xdx = dot(x, dx), wdw = dot(w, dw);
  snprintf(name, sizeof name, "conv_adjoint_%s", cc.name);
  check(st_d == CUDNN_STATUS_SUCCESS && st_f == CUDNN_STATUS_SUCCESS && xdx == ydy &&
            wdw == ydy,
        name, "%s/%s: <y,dy> %.17g <x,dx> %.17g <w,dw> %.17g", cudnnGetErrorString(st_d),
        cudnnGetErrorString(st_f), ydy, xdx, wdw);

  // The filter gradient accumulates with beta = 1.
  std::vector<float> dw2 = dw;
  st = cudnnConvolutionBackwardFilter(dnn, &one, d.x, x.data(), d.y, dy.data(), d.conv,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &one, d.w,
                                      dw2.data());
  ok = st == CUDNN_STATUS_SUCCESS;
  for (size_t i = 0; i < dw.size(); i++) ok &= dw2[i] == 2.0f * dw[i];
  snprintf(name, sizeof name, "conv_bwd_filter_beta1_%s", cc.name);
  check(ok, name, "%s", cudnnGetErrorString(st));

  // The same convolution in NCHW / KCRS gives the same numbers, transposed.
  ConvDescs dn = conv_descs(cc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  std::vector<float> xn = to_nchw(x, cc.n, cc.h, cc.w, cc.c);
  std::vector<float> wn = to_nchw(w, cc.k, cc.r, cc.s, cc.c);
  std::vector<float> yn(y.size(), NAN);
  st = cudnnConvolutionForward(dnn, &one, dn.x, xn.data(), dn.w, wn.data(), dn.conv,
                               CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, 0, &zero, dn.y, yn.data());
  snprintf(name, sizeof name, "conv_fwd_nchw_matches_nhwc_%s", cc.name);
  check(st == CUDNN_STATUS_SUCCESS && yn == to_nchw(y, cc.n, P, Q, cc.k), name, "%s",
        cudnnGetErrorString(st));
  conv_descs_free(dn);
  conv_descs_free(d);
}

static void test_conv_half(cudnnHandle_t dnn) {
  ConvCase cc = {"half", 1, 5, 4, 6, 3, 3, 3, 1, 1, 1, CUDNN_CROSS_CORRELATION};
  const float one = 1.0f, zero = 0.0f;
  std::vector<float> x = rnd_vec((size_t)cc.n * cc.h * cc.w * cc.c);
  std::vector<float> w = rnd_vec((size_t)cc.k * cc.r * cc.s * cc.c);
  std::vector<__half> xh(x.size()), wh(w.size()), yh((size_t)cc.n * cc.p() * cc.q() * cc.k);
  for (size_t i = 0; i < x.size(); i++) x[i] = __half2float(xh[i] = __float2half_rn(x[i]));
  for (size_t i = 0; i < w.size(); i++) w[i] = __half2float(wh[i] = __float2half_rn(w[i]));
  ConvDescs d = conv_descs(cc, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH);
  cudnnStatus_t st = cudnnConvolutionForward(dnn, &one, d.x, xh.data(), d.w, wh.data(), d.conv,
                                             CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                             &zero, d.y, yh.data());
  std::vector<double> ref, scale;
  ref_conv_nhwc(cc, x, w, &ref, &scale);
  bool ok = st == CUDNN_STATUS_SUCCESS;
  for (size_t i = 0; i < ref.size(); i++)
    ok &= close(__half2float(yh[i]), ref[i], 1e-6 * scale[i] / 0x1p-11, 0x1p-11);
  check(ok, "conv_fwd_half_nhwc", "%s", cudnnGetErrorString(st));
  conv_descs_free(d);
}

// A 1x1 convolution of 1 + 2^-12 by 1: TF32 unless the math type is FMA.
static void test_conv_tf32(cudnnHandle_t dnn) {
  ConvCase cc = {"tf32", 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, CUDNN_CROSS_CORRELATION};
  const float one = 1.0f, zero = 0.0f;
  float x = 1 + 0x1p-12f, w = 1.0f;
  struct {
    cudnnMathType_t math;
    float want;
  } cases[] = {{CUDNN_DEFAULT_MATH, 1.0f},
               {CUDNN_TENSOR_OP_MATH, 1.0f},
               {CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, 1.0f},
               {CUDNN_FMA_MATH, 1 + 0x1p-12f}};
  bool ok = true;
  for (const auto &t : cases) {
    ConvDescs d = conv_descs(cc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, t.math);
    // dx = dy w and dw = x dy' each have one operand that TF32 shortens.
    float y = NAN, dx = NAN, dw = NAN, dy = 1 + 0x1p-12f, dy_one = 1.0f;
    ok &= cudnnConvolutionForward(dnn, &one, d.x, &x, d.w, &w, d.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                  d.y, &y) == CUDNN_STATUS_SUCCESS;
    ok &= cudnnConvolutionBackwardData(dnn, &one, d.w, &w, d.y, &dy, d.conv,
                                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, &zero, d.x,
                                       &dx) == CUDNN_STATUS_SUCCESS;
    ok &= cudnnConvolutionBackwardFilter(dnn, &one, d.x, &x, d.y, &dy_one, d.conv,
                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero,
                                         d.w, &dw) == CUDNN_STATUS_SUCCESS;
    ok &= y == t.want && dx == t.want && dw == t.want;
    if (!ok) printf("  math %d: y %.10g dx %.10g dw %.10g\n", (int)t.math, y, dx, dw);
    conv_descs_free(d);
  }
  check(ok, "conv_tf32_by_math_type", "a result did not match its math type");
}

// The heuristic queries (the convolutions' default choice): the same result
// as a Find, from the descriptors alone: no wait for the device; a shape that
// does not fit, or no room for a result, is BAD_PARAM.
static void test_conv_heuristic(cudnnHandle_t dnn) {
  ConvCase cc = {"heuristic", 2, 7, 6, 3, 5, 3, 3, 2, 1, 1, CUDNN_CROSS_CORRELATION};
  ConvDescs d = conv_descs(cc, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n_fwd = 0, n_data = 0, n_filt = 0;
  emu_activity_begin(nullptr);
  cudnnStatus_t st_f = cudnnGetConvolutionForwardAlgorithm_v7(
      dnn, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n_fwd, fwd);
  cudnnStatus_t st_d = cudnnGetConvolutionBackwardDataAlgorithm_v7(
      dnn, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n_data, data);
  cudnnStatus_t st_w = cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      dnn, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n_filt, filt);
  EmuActivity a = emu_activity_end();
  check(st_f == CUDNN_STATUS_SUCCESS && st_d == CUDNN_STATUS_SUCCESS &&
            st_w == CUDNN_STATUS_SUCCESS && n_fwd == 1 && n_data == 1 && n_filt == 1 &&
            fwd[0].status == CUDNN_STATUS_SUCCESS &&
            fwd[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM &&
            data[0].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
            filt[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && fwd[0].memory == 0 &&
            fwd[0].mathType == CUDNN_TENSOR_OP_MATH && filt[0].mathType == CUDNN_TENSOR_OP_MATH,
        "conv_heuristic_results", "%s/%s/%s, counts %d %d %d", cudnnGetErrorString(st_f),
        cudnnGetErrorString(st_d), cudnnGetErrorString(st_w), n_fwd, n_data, n_filt);
  check(a.host_waits == 0, "conv_heuristic_never_waits", "%ld host waits (first: %s)",
        a.host_waits, a.first_wait);

  cudnnTensorDescriptor_t bad_y;
  cudnnCreateTensorDescriptor(&bad_y);
  cudnnSetTensor4dDescriptor(bad_y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, cc.n, cc.k,
                             cc.p() + 1, cc.q());
  struct {
    const char *name;
    cudnnStatus_t got;
  } cases[] = {
      {"conv_heuristic_fwd_bad_output_extent",
       cudnnGetConvolutionForwardAlgorithm_v7(dnn, d.x, d.w, d.conv, bad_y, 1, &n_fwd, fwd)},
      {"conv_heuristic_bwd_data_bad_output_extent",
       cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, d.w, bad_y, d.conv, d.x, 1, &n_data,
                                                   data)},
      {"conv_heuristic_bwd_filter_bad_output_extent",
       cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, d.x, bad_y, d.conv, d.w, 1, &n_filt,
                                                     filt)},
      {"conv_heuristic_zero_requested",
       cudnnGetConvolutionForwardAlgorithm_v7(dnn, d.x, d.w, d.conv, d.y, 0, &n_fwd, fwd)},
  };
  for (const auto &t : cases)
    check(t.got == CUDNN_STATUS_BAD_PARAM, t.name, "got %s", cudnnGetErrorString(t.got));
  cudnnDestroyTensorDescriptor(bad_y);
  conv_descs_free(d);
}

static void test_conv_find(cudnnHandle_t dnn) {
  ConvCase cc = {"find", 2, 7, 6, 3, 5, 3, 3, 2, 1, 1, CUDNN_CROSS_CORRELATION};
  std::vector<float> x = rnd_vec((size_t)cc.n * cc.h * cc.w * cc.c);
  std::vector<float> w = rnd_vec((size_t)cc.k * cc.r * cc.s * cc.c);
  std::vector<float> y((size_t)cc.n * (cc.p() + 1) * (cc.q() + 1) * (cc.k + 1), 0.0f);
  ConvDescs d = conv_descs(cc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);

  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  cudnnStatus_t st = cudnnFindConvolutionForwardAlgorithmEx(
      dnn, d.x, x.data(), d.w, w.data(), d.conv, d.y, y.data(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
      &count, fwd, nullptr, 0);
  check(st == CUDNN_STATUS_SUCCESS && count == 1 && fwd[0].status == CUDNN_STATUS_SUCCESS &&
            fwd[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM && fwd[0].memory == 0 &&
            fwd[0].determinism == CUDNN_DETERMINISTIC && fwd[0].mathType == CUDNN_FMA_MATH,
        "conv_find_fwd_result", "%s, count %d", cudnnGetErrorString(st), count);
  check(std::isnan(y[0]), "conv_find_fwd_clobbers_y", "y[0] = %g after Find", y[0]);

  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  cudnnStatus_t st_d = cudnnFindConvolutionBackwardDataAlgorithmEx(
      dnn, d.w, w.data(), d.y, y.data(), d.conv, d.x, x.data(), 1, &count, data, nullptr, 0);
  cudnnStatus_t st_f = cudnnFindConvolutionBackwardFilterAlgorithmEx(
      dnn, d.x, x.data(), d.y, y.data(), d.conv, d.w, w.data(), 1, &count, filt, nullptr, 0);
  check(st_d == CUDNN_STATUS_SUCCESS && st_f == CUDNN_STATUS_SUCCESS &&
            data[0].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
            filt[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
        "conv_find_bwd_results", "%s/%s", cudnnGetErrorString(st_d), cudnnGetErrorString(st_f));

  // Shapes that do not fit together: each Find says BAD_PARAM.
  cudnnTensorDescriptor_t bad_y, bad_x, half_y;
  cudnnFilterDescriptor_t bad_w;
  cudnnCreateTensorDescriptor(&bad_y);
  cudnnCreateTensorDescriptor(&bad_x);
  cudnnCreateTensorDescriptor(&half_y);
  cudnnCreateFilterDescriptor(&bad_w);
  cudnnSetTensor4dDescriptor(bad_y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.k, cc.p() + 1,
                             cc.q());
  cudnnSetTensor4dDescriptor(bad_x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.c + 1, cc.h,
                             cc.w);
  cudnnSetTensor4dDescriptor(half_y, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, cc.n, cc.k, cc.p(),
                             cc.q());
  cudnnSetFilter4dDescriptor(bad_w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, cc.k + 1, cc.c, cc.r,
                             cc.s);
  struct {
    const char *name;
    cudnnStatus_t got;
  } cases[] = {
      {"conv_find_fwd_bad_output_extent",
       cudnnFindConvolutionForwardAlgorithmEx(dnn, d.x, x.data(), d.w, w.data(), d.conv, bad_y,
                                              y.data(), 1, &count, fwd, nullptr, 0)},
      {"conv_find_fwd_bad_channels",
       cudnnFindConvolutionForwardAlgorithmEx(dnn, bad_x, x.data(), d.w, w.data(), d.conv, d.y,
                                              y.data(), 1, &count, fwd, nullptr, 0)},
      {"conv_find_fwd_dtype_mismatch",
       cudnnFindConvolutionForwardAlgorithmEx(dnn, d.x, x.data(), d.w, w.data(), d.conv, half_y,
                                              y.data(), 1, &count, fwd, nullptr, 0)},
      {"conv_find_bwd_data_bad_k",
       cudnnFindConvolutionBackwardDataAlgorithmEx(dnn, bad_w, w.data(), d.y, y.data(), d.conv,
                                                   d.x, x.data(), 1, &count, data, nullptr, 0)},
      {"conv_find_bwd_filter_bad_output",
       cudnnFindConvolutionBackwardFilterAlgorithmEx(dnn, d.x, x.data(), bad_y, y.data(), d.conv,
                                                     d.w, w.data(), 1, &count, filt, nullptr, 0)},
      {"conv_find_zero_requested",
       cudnnFindConvolutionForwardAlgorithmEx(dnn, d.x, x.data(), d.w, w.data(), d.conv, d.y,
                                              y.data(), 0, &count, fwd, nullptr, 0)},
  };
  for (const auto &t : cases)
    check(t.got == CUDNN_STATUS_BAD_PARAM, t.name, "got %s", cudnnGetErrorString(t.got));

  check(cudnnSetTensor4dDescriptor(bad_x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 0, 1, 1, 1) ==
                CUDNN_STATUS_BAD_PARAM &&
            cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) == CUDNN_STATUS_BAD_PARAM,
        "cudnn_descriptor_bad_values", "zero size or stride accepted");
  cudnnDestroyTensorDescriptor(bad_y);
  cudnnDestroyTensorDescriptor(bad_x);
  cudnnDestroyTensorDescriptor(half_y);
  cudnnDestroyFilterDescriptor(bad_w);
  conv_descs_free(d);
}

// The conv bias: (1, K, 1, 1) added to every (n, h, w) of an NHWC tensor.
static void test_add_tensor(cudnnHandle_t dnn) {
  const int n = 2, k = 5, h = 3, w = 4;
  cudnnTensorDescriptor_t bias_d, y_d;
  cudnnCreateTensorDescriptor(&bias_d);
  cudnnCreateTensorDescriptor(&y_d);
  cudnnSetTensor4dDescriptor(bias_d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, k, 1, 1);
  cudnnSetTensor4dDescriptor(y_d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, k, h, w);
  std::vector<float> bias = rnd_vec(k), y = rnd_vec((size_t)n * h * w * k), y0 = y;
  const float one = 1.0f, two = 2.0f;
  cudnnStatus_t st = cudnnAddTensor(dnn, &two, bias_d, bias.data(), &one, y_d, y.data());
  bool ok = st == CUDNN_STATUS_SUCCESS;
  for (size_t i = 0; i < y.size(); i++) ok &= y[i] == y0[i] + 2.0f * bias[i % k];
  check(ok, "cudnn_add_tensor_bias_nhwc", "%s", cudnnGetErrorString(st));
  cudnnDestroyTensorDescriptor(bias_d);
  cudnnDestroyTensorDescriptor(y_d);
}

// ---------------------------------------------------------------- NCCL

static void test_nccl() {
  ncclUniqueId id, zero_id;
  memset(&zero_id, 0, sizeof zero_id);
  ncclComm_t comm = nullptr, other = nullptr;
  bool ok = ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess;
  std::vector<float> send = rnd_vec(37), recv(37, NAN), in_place = send;
  ok &= ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat, ncclAvg, comm, nullptr) ==
            ncclSuccess &&
        recv == send;
  ok &= ncclAllReduce(in_place.data(), in_place.data(), send.size(), ncclFloat, ncclSum, comm,
                      nullptr) == ncclSuccess &&
        in_place == send;
  std::vector<float> bcast(37, NAN);
  ok &= ncclBroadcast(send.data(), bcast.data(), send.size(), ncclFloat, 0, comm, nullptr) ==
            ncclSuccess &&
        bcast == send;
  ok &= ncclBroadcast(send.data(), bcast.data(), send.size(), ncclFloat, 1, comm, nullptr) ==
        ncclInvalidArgument;
  ok &= ncclCommInitRank(&other, 2, id, 0) == ncclInvalidUsage;
  ok &= ncclCommInitRank(&other, 1, zero_id, 0) == ncclInvalidArgument;
  ok &= ncclCommDestroy(comm) == ncclSuccess && ncclGetErrorString(ncclInvalidUsage) != nullptr;
  check(ok, "nccl_one_rank", "a call returned an unexpected result or wrong data");
}

int main() {
  // The stand-ins' arithmetic, not the device queue: each call completes
  // before it returns, so results can be read at once.
  setenv("EMU_SYNC", "1", 1);
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cudnnCreate(&dnn) != CUDNN_STATUS_SUCCESS) {
    printf("FAIL setup: handle creation\n");
    return 1;
  }
  test_cublas_handle();
  test_gemm_f32_transposes(blas);
  test_gemm_bf16(blas);
  test_gemm_tf32(blas);
  test_gemm_beta_zero(blas);
  test_gemm_arguments(blas);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    printf("FAIL setup: cuBLASLt handle creation\n");
    return 1;
  }
  test_lt_epilogues(lt);
  test_lt_arguments(lt);
  cublasLtDestroy(lt);
  const ConvCase conv_cases[] = {
      // W = 6: (6 + 2 - 3) / 2 has a remainder, so the extent must round down.
      {"3x3_s2_p1", 2, 7, 6, 3, 5, 3, 3, 2, 1, 1, CUDNN_CROSS_CORRELATION},
      {"1x1", 3, 5, 3, 7, 6, 1, 1, 1, 0, 1, CUDNN_CROSS_CORRELATION},
      {"3x2_dil2_convolution_mode", 1, 9, 8, 2, 3, 3, 2, 1, 2, 2, CUDNN_CONVOLUTION},
  };
  for (const ConvCase &cc : conv_cases) test_conv_case(dnn, cc);
  test_conv_half(dnn);
  test_conv_tf32(dnn);
  test_conv_find(dnn);
  test_conv_heuristic(dnn);
  test_add_tensor(dnn);
  test_nccl();
  cudnnDestroy(dnn);
  cublasDestroy(blas);
  printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
