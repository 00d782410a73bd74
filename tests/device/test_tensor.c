// Tensors, dtype conversions, arenas and parameter sets.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device/tensor.h"
#include "tests/harness/test.h"

static float bits_to_float(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static void f16_known_values(void) {
  CHECK_EQ_INT(f32_to_f16(1.0f), 0x3c00);
  CHECK_EQ_INT(f32_to_f16(-2.0f), 0xc000);
  CHECK_EQ_INT(f32_to_f16(65504.0f), 0x7bff);      // largest half
  CHECK_EQ_INT(f32_to_f16(65520.0f), 0x7c00);      // rounds up to inf
  CHECK_EQ_INT(f32_to_f16(65519.0f), 0x7bff);
  CHECK_EQ_INT(f32_to_f16(5.9604645e-8f), 0x0001); // smallest subnormal 2^-24
  CHECK_EQ_INT(f32_to_f16(2.9802322e-8f), 0x0000); // 2^-25: tie, rounds to even 0
  CHECK_EQ_INT(f32_to_f16(6.1035156e-5f), 0x0400); // smallest normal 2^-14
  CHECK_EQ_INT(f32_to_f16(INFINITY), 0x7c00);
  CHECK((f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (f32_to_f16(NAN) & 0x3ff));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even 1.
  CHECK_EQ_INT(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  CHECK_EQ_INT(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  CHECK_EQ_INT(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie from odd 0x3c01 goes up
}

static void f16_round_trips_every_value(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    float x = f16_to_f32((uint16_t)h);
    if (nan ? !isnan(x) : f32_to_f16(x) != h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_NEAR(f16_to_f32(0x3555), 0.333251953125, 0);
  CHECK_NEAR(f16_to_f32(0x0001), 0x1p-24, 0);
}

static void bf16_conversions(void) {
  CHECK_EQ_INT(f32_to_bf16(1.0f), 0x3f80);
  CHECK_EQ_INT(f32_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);  // tie -> even
  CHECK_EQ_INT(f32_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);  // tie from odd -> up
  CHECK_EQ_INT(f32_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);
  CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
  CHECK_EQ_INT(f32_to_bf16(bits_to_float(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    if (!nan) CHECK_EQ_INT(f32_to_bf16(bf16_to_f32((uint16_t)b)), b);
  }
}

static void tensor_basics(void) {
  float data[24];
  Tensor t = TENSOR(data, DT_F32, DEVICE_CPU, 2, 3, 4);
  CHECK_EQ_INT(t.ndim, 3);
  CHECK_EQ_INT(tensor_numel(&t), 24);
  CHECK_EQ_INT(tensor_bytes(&t), 96);
  char buf[64];
  CHECK_STR(tensor_shape_str(&t, buf, sizeof buf), "(2, 3, 4)");
  Tensor u = TENSOR(data, DT_BF16, DEVICE_CPU, 2, 3, 4);
  CHECK(tensor_same_shape(&t, &u));
  CHECK_EQ_INT(tensor_bytes(&u), 48);
  Tensor v = TENSOR(data, DT_F32, DEVICE_CPU, 6, 4);
  CHECK(!tensor_same_shape(&t, &v));
  CHECK_EQ_INT(dtype_parse("bf16"), DT_BF16);
  CHECK_EQ_INT(dtype_parse("float"), -1);
  CHECK_STR(dtype_name(DT_I64), "int64");
}

// A row view shares the memory: rows 2..4 of a (6, 5, 3) bf16 tensor start
// 2 * 15 elements in, keep the other extents, and the view of 0 rows is valid.
static void rows_view_the_leading_axis(void) {
  uint16_t data[6 * 5 * 3];
  Tensor t = TENSOR(data, DT_BF16, DEVICE_CPU, 6, 5, 3);
  Tensor v = tensor_rows(&t, 2, 3);
  CHECK(v.data == (void *)&data[30]);
  CHECK(v.ndim == 3 && v.shape[0] == 3 && v.shape[1] == 5 && v.shape[2] == 3);
  CHECK(v.dtype == DT_BF16 && tensor_numel(&v) == 45);
  Tensor none = tensor_rows(&t, 6, 0);
  CHECK(none.data == (void *)&data[90] && tensor_numel(&none) == 0);
}

static void arena_alignment_and_reuse(void) {
  Arena a;
  arena_init(&a, "test", DEVICE_CPU, 4096);
  void *p = arena_alloc(&a, 10);
  void *q = arena_alloc(&a, 10);
  CHECK((uintptr_t)p % ARENA_ALIGN_BYTES == 0 && (uintptr_t)q % ARENA_ALIGN_BYTES == 0);
  CHECK((uint8_t *)q - (uint8_t *)p == ARENA_ALIGN_BYTES);
  size_t mark = arena_mark(&a);
  Tensor t = arena_tensor(&a, DT_F32, 2, (int64_t[]){4, 8});
  CHECK((uint8_t *)t.data == (uint8_t *)p + 2 * ARENA_ALIGN_BYTES);
  arena_release(&a, mark);
  Tensor t2 = arena_tensor(&a, DT_F32, 1, (int64_t[]){5});
  CHECK(t2.data == t.data);  // released space is handed out again
  CHECK_EQ_INT(a.peak_bytes, 2 * ARENA_ALIGN_BYTES + 128);
  arena_free(&a);
}

static void overflow_arena(void *ctx) {
  (void)ctx;
  Arena a;
  arena_init(&a, "activations", DEVICE_CPU, 1000);
  arena_alloc(&a, 600);
  arena_alloc(&a, 600);
}

static void arena_out_of_space_names_it(void) {
  CHECK_DIES_WITH(overflow_arena, NULL, "arena 'activations': 600 bytes wanted");
}

static const ParamSpec kSpecs[] = {
    {"conv1.weight", 4, {8, 3, 3, 3}, 0},
    {"bn1.bias", 1, {8}, PARAM_NO_DECAY},
    {"fc.weight", 2, {10, 65}, 0},
};

static void paramset_layout(void) {
  ParamSet ps;
  paramset_init(&ps, kSpecs, 3, 2, DEVICE_CPU);
  CHECK_EQ_INT(ps.offsets[0], 0);
  CHECK_EQ_INT(ps.offsets[1], 256);  // 216 rounded up to 64
  CHECK_EQ_INT(ps.offsets[2], 320);  // 256 + 8 rounded up
  CHECK_EQ_INT(ps.total_numel, 320 + 704);
  CHECK_EQ_INT(paramset_count_params(&ps), 216 + 8 + 650);
  for (int64_t i = 0; i < ps.total_numel; i++)
    if (ps.params[i] != 0 || ps.grads[i] != 0 || ps.state[0][i] != 0 || ps.state[1][i] != 0) {
      CHECK_MSG(0, "buffer element %lld not zeroed", (long long)i);
      break;
    }
  Tensor w = paramset_param(&ps, 2), g = paramset_grad(&ps, 2);
  CHECK(w.data == ps.params + 320 && g.data == ps.grads + 320);
  CHECK_EQ_INT(w.ndim, 2);
  CHECK_EQ_INT(w.shape[1], 65);
  CHECK_EQ_INT(paramset_find(&ps, "bn1.bias"), 1);
  CHECK_EQ_INT(paramset_find(&ps, "nope"), -1);
  CHECK(ps.specs[paramset_find(&ps, "bn1.bias")].flags & PARAM_NO_DECAY);
  paramset_free(&ps);
}

static void duplicate_param(void *ctx) {
  (void)ctx;
  static const ParamSpec dup[] = {{"w", 1, {4}, 0}, {"w", 1, {4}, 0}};
  ParamSet ps;
  paramset_init(&ps, dup, 2, 0, DEVICE_CPU);
}

static void paramset_rejects_duplicates(void) {
  CHECK_DIES_WITH(duplicate_param, NULL, "param w: declared twice");
}

int main(void) {
  TEST_RUN(f16_known_values);
  TEST_RUN(f16_round_trips_every_value);
  TEST_RUN(bf16_conversions);
  TEST_RUN(tensor_basics);
  TEST_RUN(rows_view_the_leading_axis);
  TEST_RUN(arena_alignment_and_reuse);
  TEST_RUN(arena_out_of_space_names_it);
  TEST_RUN(paramset_layout);
  TEST_RUN(paramset_rejects_duplicates);
  return test_finish();
}
