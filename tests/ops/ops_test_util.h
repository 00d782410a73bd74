// ops_test_util.h: what the op tests share - the one tolerance family
// (below), moving fp32 test data to the GPU in a given dtype and back, and
// rounding host data to a dtype so the CPU reference sees exactly the values
// the GPU does.
#pragma once
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/tensor.h"
#include "tests/harness/test.h"

static const DType kFloatDtypes[] = {DT_F32, DT_F16, DT_BF16};
#define N_FLOAT_DTYPES 3

// ---------------------------------------------------------------- tolerances
// The one family of tolerances of the op tests. Every value is a bound on
// the relative L2 error (test_rel_error) unless it says otherwise, derived
// here once; a call site names the rule that fits what its op does. The
// unit roundoffs: fp32 2^-24 = 6e-8, fp16 2^-11 = 4.9e-4, bf16 2^-8 =
// 3.9e-3; over many elements the RMS of one rounding is about 0.6 of that.
//
// TOL_EXACT: ops that only move or select values (concat, split, permute,
// top-k, ReLU, max-pool forward, embedding lookup): bit for bit.
#define TOL_EXACT 0.0
// TOL_GOLDEN: fp32 CPU against fp32 PyTorch (golden files): both round each
// product and sum once per term, in other orders; measured ~1e-7, so 1e-5
// is loose enough for any order and catches a wrong term, tap or stride
// (errors of order 1).
#define TOL_GOLDEN 1e-5
// tol_once_rounded: one fp32 operation per element (add, mul, a fused
// multiply-add), the same arithmetic on both sides, then one rounding into
// the dtype: fp32 1e-6 (the fused multiply-add may move the last bit);
// fp16 1e-3 and bf16 8e-3 (at most 2^-11 / 2^-8 relative per element,
// twice that when the last fp32 bit moves a rounding).
static inline double tol_once_rounded(DType dtype) {
  return dtype == DT_F32 ? 1e-6 : dtype == DT_F16 ? 1e-3 : 8e-3;
}
// tol_rounded: an fp32 result computed like the CPU's (math functions
// within 2 ulp of the host's, sums in another order) and rounded once to the
// dtype: fp32 1e-5 (a few ulp and the summation order); fp16 2e-3 and bf16
// 1e-2 (the RMS of the rounding, ~0.6 of 2^-11 and 2^-8, with a margin of 4
// to 6). Also every fp32 statistic, parameter gradient and loss scalar
// (tol_rounded(DT_F32)): sums over rows in another order.
static inline double tol_rounded(DType dtype) {
  return dtype == DT_F32 ? 1e-5 : dtype == DT_F16 ? 2e-3 : 1e-2;
}
// tol_rounded_chain: batch norm and pooling on CUDA, where a 16-bit result
// may go through one more rounded intermediate (the residual branch, a
// window sum): as tol_rounded, but bf16 1.6e-2 (two roundings of 2^-8,
// ~2 x 2.3e-3 RMS, margin 3.5).
static inline double tol_rounded_chain(DType dtype) {
  return dtype == DT_F32 ? 1e-5 : dtype == DT_F16 ? 2e-3 : 1.6e-2;
}
// tol_conv: cuDNN convolutions, whose fp16/bf16 algorithms (Winograd,
// split-K) round intermediates too: fp32 1e-5 (summation order, ~1e-6);
// fp16 5e-3 and bf16 2.5e-2 (about 4x the output rounding plus as much
// again for the intermediates).
static inline double tol_conv(DType dtype) {
  return dtype == DT_F32 ? 1e-5 : dtype == DT_F16 ? 5e-3 : 2.5e-2;
}
// TOL_TF32: an fp32 product on TF32 tensor cores: each input rounded to 10
// mantissa bits (2^-11 relative), errors of K products partly cancel: ~5e-4
// measured; 3e-3. tol_gemm: TOL_TF32 or tol_rounded (cuBLAS accumulates in
// fp32 and rounds the output once; summation order ~1e-7 sqrt(K) in fp32).
#define TOL_TF32 3e-3
static inline double tol_gemm(DType dtype, bool tf32) {
  return dtype == DT_F32 && tf32 ? TOL_TF32 : tol_rounded(dtype);
}
// tol_attention: fp32 1e-4 (cuBLAS and the CPU loops sum q k^T, probs v and
// the four backward products in other orders: ~1e-6). In 16 bits the scores
// are stored in the dtype before the softmax: a score s of magnitude up to
// ~4 carries an absolute error of 4 * 2^-11 (fp16) or 4 * 2^-8 (bf16), which
// becomes the relative error of the probabilities; the probabilities and the
// output round once more. fp16: ~3e-3, tolerance 1e-2; bf16: ~2.5e-2,
// tolerance 6e-2. The backward pass goes through dP and dS stored in the
// dtype too, same bounds.
static inline double tol_attention(DType dtype) {
  return dtype == DT_F32 ? 1e-4 : dtype == DT_F16 ? 1e-2 : 6e-2;
}
// Finite-difference gradient checks (test_gradcheck, test.h) return the
// largest |analytic - numeric| / max(|numeric|, floor) over the points.
// FD_EPS, FD_FLOOR, FD_TOL: central differences of the fp32 forward with
// eps 1e-2: truncation O(eps^2 f''') ~1e-4 and rounding ~1e-7 |loss| / eps
// ~1e-5, relative to gradients of order 1 (floor 1e-2 for the near-zero
// ones): 1e-2 passes every correct gradient and fails any wrong term (order
// 1). Ops with their own eps, floor or bound state them beside the call.
#define FD_EPS 1e-2f
#define FD_FLOOR 1e-2
#define FD_TOL 1e-2

// x rounded to dtype and widened back (what a 16-bit tensor holds).
static inline float round_to(DType dtype, float x) {
  if (dtype == DT_F16) return f16_to_f32(f32_to_f16(x));
  if (dtype == DT_BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

static inline void round_all(DType dtype, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = round_to(dtype, x[i]);
}

// A zeroed fp32 buffer of n floats (at least one).
static inline float *out_buf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

// x[i] = i everywhere: every output names the input it came from.
static inline float *test_iota(int64_t n) {
  float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  return x;
}

// A pointer to a temporary Tensor, for arguments built in place.
#define TP(...) ((Tensor[1]){TENSOR(__VA_ARGS__)})

// A fresh fp32 array of n uniform numbers on [lo, hi), rounded to dtype.
static inline float *random_array(int64_t n, uint64_t seed, float lo, float hi,
                                  DType dtype) {
  float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
  test_fill_uniform(x, n, seed, lo, hi);
  round_all(dtype, x, n);
  return x;
}

// Device copy of host[0..n) converted to dtype (float dtypes, or an index
// dtype given int64 host values as floats).
static inline void *upload(const float *host, int64_t n, DType dtype) {
  size_t elem = dtype_size(dtype);
  uint8_t *buf = malloc((size_t)(n ? n : 1) * elem);
  for (int64_t i = 0; i < n; i++) {
    uint8_t *dst = buf + (size_t)i * elem;
    if (dtype == DT_F32) {
      memcpy(dst, &host[i], 4);
    } else if (dtype == DT_F16 || dtype == DT_BF16) {
      uint16_t h = dtype == DT_F16 ? f32_to_f16(host[i]) : f32_to_bf16(host[i]);
      memcpy(dst, &h, 2);
    } else if (dtype == DT_I32) {
      int32_t v = (int32_t)host[i];
      memcpy(dst, &v, 4);
    } else {
      int64_t v = (int64_t)host[i];
      memcpy(dst, &v, 8);
    }
  }
  void *d = device_alloc(DEVICE_CUDA, (size_t)(n ? n : 1) * elem);
  device_copy(DEVICE_CUDA, d, DEVICE_CPU, buf, (size_t)n * elem);
  free(buf);
  return d;
}

// host[0..n) = the device's float-dtype array, widened to fp32.
static inline void download(float *host, const void *d, int64_t n, DType dtype) {
  size_t elem = dtype_size(dtype);
  uint8_t *buf = malloc((size_t)(n ? n : 1) * elem);
  device_copy(DEVICE_CPU, buf, DEVICE_CUDA, d, (size_t)n * elem);
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    if (dtype == DT_F32) {
      memcpy(&host[i], buf + (size_t)i * 4, 4);
    } else {
      memcpy(&h, buf + (size_t)i * 2, 2);
      host[i] = dtype == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  free(buf);
}

// Downloads the device array and checks its relative L2 error against the
// CPU reference; names what and the dtype on failure.
// Golden tensor name (n exact integers: ids, lengths) into dst.
static inline void golden_i32(GoldenFile *g, const char *name, int32_t *dst, int64_t n) {
  int64_t numel;
  const float *v = golden_get(g, name, &numel);
  REQUIRE(numel == n);
  for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)v[i];
}

// The golden tensor name "case.field" (conv.gld's layout); the last four
// names it gave stay valid.
static inline const char *golden_key(const char *c, const char *field) {
  static char buf[4][128];
  static int slot;
  slot = (slot + 1) % 4;
  snprintf(buf[slot], sizeof buf[slot], "%s.%s", c, field);
  return buf[slot];
}

// A malloc'd fp32 host copy of n elements at src on device (dtype dt).
static inline float *host_floats(DeviceKind device, const void *src, DType dt, int64_t n) {
  float *out = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (device == DEVICE_CPU) memcpy(out, src, (size_t)n * sizeof(float));
  else download(out, src, n, dt);
  return out;
}

static inline void check_close(const char *what, DType dtype, const void *d,
                               const float *ref, int64_t n, double tol) {
  float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
  download(got, d, n, dtype);
  test_check_error(what, dtype_name(dtype), test_rel_error(got, ref, n), tol);
  free(got);
}

// A Device for the GPU cases; skips the case without one.
static inline void open_gpu_or_skip(Device *dev) {
  if (!test_have_gpu()) test_skip("no GPU");
  device_open(dev, DEVICE_CUDA, 0);
}

// Relative L2 error of a golden tensor against computed values, with a
// message naming the tensor.
static inline void check_golden(GoldenFile *g, const char *name, const float *got,
                                int64_t n, double tol) {
  int64_t numel;
  float *want = golden_get(g, name, &numel);
  REQUIRE(numel == n);
  test_check_error(name, "fp32, CPU vs PyTorch", test_rel_error(got, want, n), tol);
}

// A copy of a golden tensor (the tests modify inputs for finite differences).
static inline float *golden_copy(GoldenFile *g, const char *name, int64_t *numel) {
  float *src = golden_get(g, name, numel);
  float *dst = malloc((size_t)*numel * sizeof(float));
  memcpy(dst, src, (size_t)*numel * sizeof(float));
  return dst;
}

// A host fp32 tensor and its device copy in `dtype`, for CUDA-against-CPU
// cases: uniform on [lo, hi) rounded to dtype (int dtypes: whole numbers).
typedef struct TestPair {
  float *host;
  void *dev;
  Tensor h, d;  // the host (fp32) and device (dtype) views, same shape
  int64_t n;
} TestPair;

static inline TestPair pair_make(DType dtype, uint64_t seed, float lo, float hi, int ndim,
                                 const int64_t *shape) {
  TestPair p;
  p.h = tensor_make(NULL, DT_F32, DEVICE_CPU, ndim, shape);
  p.n = tensor_numel(&p.h);
  bool is_int = dtype == DT_I32 || dtype == DT_I64;
  p.host = random_array(p.n, seed, lo, hi, is_int ? DT_F32 : dtype);
  for (int64_t i = 0; is_int && i < p.n; i++) p.host[i] = floorf(p.host[i]);
  p.dev = upload(p.host, p.n, dtype);
  p.h.data = p.host;
  p.d = tensor_make(p.dev, dtype, DEVICE_CUDA, ndim, shape);
  return p;
}
#define PAIR(dtype, seed, lo, hi, ...)                                 \
  pair_make((dtype), (seed), (lo), (hi),                               \
            (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
            (int64_t[]){__VA_ARGS__})

static inline void pair_free(TestPair *p) {
  free(p->host);
  device_free(DEVICE_CUDA, p->dev);
}

// The device result of p against its host result (after the ops ran).
static inline void pair_check(const char *what, const TestPair *p, double tol) {
  check_close(what, p->d.dtype, p->dev, p->host, p->n, tol);
}
