// Elementwise arithmetic, casts and the uint8 input normalisation:
// hand-checked CPU cases, casts and affine_u8 on CUDA against the CPU
// (skipped without a GPU). Arithmetic on CUDA: test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/augment.h"
#include "ops/elementwise.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static void arithmetic_hand_checked(void) {
  float a[5] = {1, -2, 3.5f, 0, 10}, b[5] = {2, 2, -1, 7, 0.5f}, y[5];
  Tensor ta = T1(a, 5), tb = T1(b, 5), ty = T1(y, 5);
  op_add(&kCpu, &ta, &tb, &ty);
  CHECK(y[0] == 3 && y[1] == 0 && y[2] == 2.5f && y[3] == 7 && y[4] == 10.5f);
  op_mul(&kCpu, &ta, &tb, &ty);
  CHECK(y[0] == 2 && y[1] == -4 && y[2] == -3.5f && y[3] == 0 && y[4] == 5);
  op_scale(&kCpu, &ta, -2, &ty);
  CHECK(y[0] == -2 && y[1] == 4 && y[2] == -7 && y[3] == 0 && y[4] == -20);
  op_axpy(&kCpu, 0.5f, &ta, &tb);  // b += a / 2, in place
  CHECK(b[0] == 2.5f && b[1] == 1 && b[2] == 0.75f && b[3] == 7 && b[4] == 5.5f);
}

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// Known encodings, the round-to-nearest-even ties included.
static void casts_hand_checked(void) {
  float x[] = {1.0f, -2.0f, 65504.0f, 65520.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
               0x1p-24f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, NAN, -INFINITY};
  uint16_t want_h[] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0x3c00, 0x3c02, 0x0001, 0x3c04, 0x3c0c, 0x7e00, 0xfc00};
  uint16_t want_b[] = {0x3f80, 0xc000, 0x4780, 0x4780, 0x3f80, 0x3f80, 0x3380, 0x3f80, 0x3f82, 0x7fc0, 0xff80};
  enum { N = sizeof x / sizeof x[0] };
  uint16_t h[N], b[N];
  float back[N];
  Tensor tx = T1(x, N), th = TENSOR(h, DT_F16, DEVICE_CPU, N), tb = TENSOR(b, DT_BF16, DEVICE_CPU, N);
  op_cast(&kCpu, &tx, &th);
  op_cast(&kCpu, &tx, &tb);
  for (int i = 0; i < N; i++) {
    CHECK_MSG(h[i] == want_h[i], "fp16 of %a: %04x, want %04x", x[i], h[i], want_h[i]);
    CHECK_MSG(b[i] == want_b[i], "bf16 of %a: %04x, want %04x", x[i], b[i], want_b[i]);
  }
  Tensor tback = T1(back, N);
  op_cast(&kCpu, &th, &tback);
  CHECK(back[0] == 1.0f && back[2] == 65504.0f && isinf(back[3]) && back[6] == 0x1p-24f && isnan(back[9]));
  // fp16 -> bf16 goes through fp32: 1 + 2^-10 (exact in fp16) rounds to 1 in bf16.
  uint16_t h1 = 0x3c01, b1;
  op_cast(&kCpu, TP(&h1, DT_F16, DEVICE_CPU, 1), TP(&b1, DT_BF16, DEVICE_CPU, 1));
  CHECK_EQ_INT(b1, 0x3f80);
  CHECK(bits(back[1]) == bits(-2.0f));
}

// Casts must match the CPU bit for bit for every pair of dtypes, on random
// values and on the special ones (ties, overflow, subnormals, NaN, inf).
static void casts_cuda_match_cpu_bitwise(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t n = 4096;
  float *x = random_array(n, 5, -70000, 70000, DT_F32);
  float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f, 0x1.8p-24f,
                     1.0f + 0x1p-8f, NAN, -NAN, INFINITY, -0.0f, 3e38f, 1e-40f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i] = special[i];
  for (int64_t i = 100; i < 1100; i++) x[i] *= 1e-9f;  // subnormal fp16 range
  for (int si = 0; si < N_FLOAT_DTYPES; si++)
    for (int ti = 0; ti < N_FLOAT_DTYPES; ti++) {
      DType src = kFloatDtypes[si], dst = kFloatDtypes[ti];
      size_t out_bytes = (size_t)n * dtype_size(dst);
      uint8_t *host_src = malloc((size_t)n * 4), *want = malloc(out_bytes), *got = malloc(out_bytes);
      op_cast(&kCpu, TP(x, DT_F32, DEVICE_CPU, n), TP(host_src, src, DEVICE_CPU, n));
      op_cast(&kCpu, TP(host_src, src, DEVICE_CPU, n), TP(want, dst, DEVICE_CPU, n));
      void *dsrc = device_alloc(DEVICE_CUDA, (size_t)n * 4), *ddst = device_alloc(DEVICE_CUDA, out_bytes);
      device_copy(DEVICE_CUDA, dsrc, DEVICE_CPU, host_src, (size_t)n * dtype_size(src));
      op_cast(&dev, TP(dsrc, src, DEVICE_CUDA, n), TP(ddst, dst, DEVICE_CUDA, n));
      device_copy(DEVICE_CPU, got, DEVICE_CUDA, ddst, out_bytes);
      CHECK_MSG(memcmp(got, want, out_bytes) == 0, "%s -> %s differs from the CPU", dtype_name(src),
                dtype_name(dst));
      device_free(DEVICE_CUDA, dsrc), device_free(DEVICE_CUDA, ddst);
      free(host_src), free(want), free(got);
    }
  free(x);
  device_close(&dev);
}

// ImageNet normalisation of loader bytes: the loader's own CPU version
// (augment_normalize_cpu) bit for bit, and a hand-checked 2-channel case.
static ChannelAffine imagenet_affine(void) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  ChannelAffine a = {{0}, {0}};
  for (int c = 0; c < 3; c++) {
    a.scale[c] = 1.0f / (255.0f * std[c]);
    a.shift[c] = -mean[c] / std[c];
  }
  return a;
}

static void affine_u8_matches_loader_normalisation(void) {
  enum { PIXELS = 7 * 5 };
  uint8_t x[PIXELS * 3];
  for (int i = 0; i < PIXELS * 3; i++) x[i] = (uint8_t)(i * 37 + 11);
  float want[PIXELS * 3], got[PIXELS * 3];
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  augment_normalize_cpu(x, want, PIXELS, mean, std);
  ChannelAffine a = imagenet_affine();
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(got, DT_F32, DEVICE_CPU, 1, 7, 5, 3));
  CHECK(memcmp(want, got, sizeof want) == 0);
  uint8_t two[4] = {0, 255, 10, 20};
  float out[4];
  ChannelAffine b = {{2, 0.5f}, {1, -1}};
  op_affine_u8(&kCpu, TP(two, DT_U8, DEVICE_CPU, 2, 2), &b, TP(out, DT_F32, DEVICE_CPU, 2, 2));
  CHECK(out[0] == 1 && out[1] == 126.5f && out[2] == 21 && out[3] == 9);
  // Low-precision output: the fp32 result rounded once.
  uint16_t lowp[PIXELS * 3];
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(lowp, DT_BF16, DEVICE_CPU, 1, 7, 5, 3));
  int same = 1;
  for (int i = 0; i < PIXELS * 3; i++) same &= lowp[i] == f32_to_bf16(want[i]);
  CHECK(same);
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(lowp, DT_F16, DEVICE_CPU, 1, 7, 5, 3));
  same = 1;
  for (int i = 0; i < PIXELS * 3; i++) same &= lowp[i] == f32_to_f16(want[i]);
  CHECK(same);
}

static void affine_u8_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  const int64_t n = 3 * 33 * 31 * 3;  // odd extents
  uint8_t *x = malloc((size_t)n);
  float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(rng_u32(9, 0, (uint64_t)i) >> 24);
  ChannelAffine a = imagenet_affine();
  void *dx = device_alloc(DEVICE_CUDA, (size_t)n), *dy = device_alloc(DEVICE_CUDA, (size_t)n * 4);
  device_copy(DEVICE_CUDA, dx, DEVICE_CPU, x, (size_t)n);
  const DType dts[] = {DT_F32, DT_BF16, DT_F16};
  for (int k = 0; k < 3; k++) {
    DType dt = dts[k];
    void *cpu_out = malloc((size_t)n * 4), *gpu_out = malloc((size_t)n * 4);
    op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 3, 33, 31, 3), &a, TP(cpu_out, dt, DEVICE_CPU, 3, 33, 31, 3));
    op_affine_u8(&dev, TP(dx, DT_U8, DEVICE_CUDA, 3, 33, 31, 3), &a, TP(dy, dt, DEVICE_CUDA, 3, 33, 31, 3));
    device_sync(&dev);
    device_copy(DEVICE_CPU, gpu_out, DEVICE_CUDA, dy, (size_t)n * dtype_size(dt));
    op_cast(&kCpu, TP(cpu_out, dt, DEVICE_CPU, n), TP(want, DT_F32, DEVICE_CPU, n));
    op_cast(&kCpu, TP(gpu_out, dt, DEVICE_CPU, n), TP(got, DT_F32, DEVICE_CPU, n));
    // One multiply and one add (fused on the GPU, so the fp32 results may
    // differ in the last bit): within 1e-6 relative in fp32; in fp16 / bf16
    // that last bit can move the rounding by one unit of the narrow type
    // (2^-11 / 2^-8 relative).
    double tol = tol_once_rounded(dt);
    test_check_error("affine_u8 y", dtype_name(dt), test_rel_error(got, want, n), tol);
    free(cpu_out), free(gpu_out);
  }
  device_free(DEVICE_CUDA, dx), device_free(DEVICE_CUDA, dy);
  free(x), free(want), free(got);
  device_close(&dev);
}

int main(void) {
  TEST_RUN(arithmetic_hand_checked);
  TEST_RUN(casts_hand_checked);
  TEST_RUN(casts_cuda_match_cpu_bitwise);
  TEST_RUN(affine_u8_matches_loader_normalisation);
  TEST_RUN(affine_u8_cuda_matches_cpu);
  return test_finish();
}
