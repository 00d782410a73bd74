// ops_test_util.h: what the op tests of the dense, sequence and loss families
// share - moving fp32 test data to the GPU in a given dtype and back, and
// rounding host data to a dtype so the CPU reference sees exactly the values
// the GPU does.
#pragma once
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/tensor.h"
#include "tests/harness/test.h"

static const DType kFloatDtypes[] = {DT_F32, DT_F16, DT_BF16};
#define N_FLOAT_DTYPES 3

// Tolerance (relative L2 error) of a GPU result computed in fp32 like the
// CPU's and rounded once to dtype: fp32 1e-5 (a few ulp of the math
// functions, summation order); fp16 2e-3 and bf16 1e-2 (RMS of the rounding
// error, about 0.6 of 2^-11 and 2^-8, with a margin of 4 to 6).
static inline double rounding_tol(DType dtype) {
  return dtype == DT_F32 ? 1e-5 : dtype == DT_F16 ? 2e-3 : 1e-2;
}

// x rounded to dtype and widened back (what a 16-bit tensor holds).
static inline float round_to(DType dtype, float x) {
  if (dtype == DT_F16) return f16_to_f32(f32_to_f16(x));
  if (dtype == DT_BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

static inline void round_all(DType dtype, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = round_to(dtype, x[i]);
}

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
