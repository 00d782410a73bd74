// Elementwise arithmetic, casts and the uint8 input normalisation:
// hand-checked CPU cases. CUDA against CPU: test_ops_table.c.
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

int main(void) {
  TEST_RUN(arithmetic_hand_checked);
  TEST_RUN(casts_hand_checked);
  TEST_RUN(affine_u8_matches_loader_normalisation);
  return test_finish();
}
