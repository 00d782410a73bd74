// Sum, mean, top-k and log-sum-exp: hand-checked cases, the preconditions' error
// messages. CUDA against CPU: test_ops_table.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/reduce.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static void reductions_hand_checked(void) {
  float *x = test_iota(24), y[12];  // (2, 3, 4)
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 2, 3, 4);
  Tensor y12 = T1(y, 12), y4 = T1(y, 4), y1 = T1(y, 1);
  op_sum(&kCpu, &tx, 1, &y12);  // y[j] = j + (12 + j)
  for (int j = 0; j < 12; j++) CHECK(y[j] == 12 + 2 * j);
  op_mean(&kCpu, &tx, 2, &y4);  // mean over 6 rows of 4: (j + 4 r) averaged over r = 0..5
  for (int j = 0; j < 4; j++) CHECK_NEAR(y[j], j + 10, 1e-6);
  op_sum(&kCpu, &tx, 3, &y1);
  CHECK(y[0] == 276);
  op_mean(&kCpu, &tx, 3, &y1);
  CHECK(y[0] == 11.5f);
  free(x);
}

static void reduction_over_zero_axes_copies(void) {
  float x[3] = {1, 2, 3}, y[3];
  Tensor tx = T1(x, 3), ty = T1(y, 3);
  op_sum(&kCpu, &tx, 0, &ty);
  CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3);
}

static void topk_hand_checked(void) {
  float x[] = {3, 1, 4, 1, 5, 9, 2, 6,          // row 0: plain
               2, 7, 7, 1, 7, -INFINITY, 0, 7,  // row 1: ties go smallest index first
               1, NAN, -1, 0, -0.0f, 2, 3, 8};  // row 2: NaN counts as largest
  float v[12];
  int32_t idx[12];
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 3, 8), tv = TENSOR(v, DT_F32, DEVICE_CPU, 3, 4);
  Tensor ti = TENSOR(idx, DT_I32, DEVICE_CPU, 3, 4);
  op_topk(&kCpu, &tx, 4, &tv, &ti);
  int32_t want_i[12] = {5, 7, 4, 2, 1, 2, 4, 7, 1, 7, 6, 5};
  for (int i = 0; i < 12; i++) CHECK_MSG(idx[i] == want_i[i], "index %d: %d, want %d", i, idx[i], want_i[i]);
  CHECK(v[0] == 9 && v[1] == 6 && v[2] == 5 && v[3] == 4 && v[4] == 7 && isnan(v[8]) && v[9] == 8);
  // k = N sorts the row; the last of row 1 is -inf, after 0 and the +0/-0 pair of row 2.
  float all[8];
  int32_t all_i[8];
  op_topk(&kCpu, TP(x + 16, DT_F32, DEVICE_CPU, 8), 8, TP(all, DT_F32, DEVICE_CPU, 8),
          TP(all_i, DT_I32, DEVICE_CPU, 8));
  int32_t sorted_i[8] = {1, 7, 6, 5, 0, 3, 4, 2};  // NaN 8 3 2 1 +0 -0 -1
  for (int i = 0; i < 8; i++) CHECK_EQ_INT(all_i[i], sorted_i[i]);
}

// Log-sum-exp's rows: equal values, large ones (the maximum's shift keeps
// exp finite), all -inf, a +inf, a NaN; on the CPU, and on CUDA in every
// dtype (the same values, exact in each).
static const float kLseRows[5][4] = {{0, 0, 0, 0},
                                     {1000, 1000, -INFINITY, 1000},
                                     {-INFINITY, -INFINITY, -INFINITY, -INFINITY},
                                     {1, INFINITY, 2, 3},
                                     {1, NAN, 2, 3}};

static void lse_check(const float *y, const char *where) {
  printf("  %s: %g %g %g %g %g\n", where, y[0], y[1], y[2], y[3], y[4]);
  CHECK_NEAR(y[0], logf(4.0f), 1e-6);
  CHECK_NEAR(y[1], 1000.0f + logf(3.0f), 1e-4);  // 1000 in fp32 carries 6e-5
  CHECK(isinf(y[2]) && y[2] < 0);
  CHECK(isinf(y[3]) && y[3] > 0);
  CHECK(isnan(y[4]));
}

static void logsumexp_special_rows(void) {
  float y[5];
  Tensor tx = TENSOR((float *)kLseRows, DT_F32, DEVICE_CPU, 5, 4), ty = T1(y, 5);
  op_logsumexp(&kCpu, &tx, &ty);
  lse_check(y, "cpu");
}

static void logsumexp_special_rows_cuda(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  const DType dts[] = {DT_F32, DT_F16, DT_BF16};
  for (int d = 0; d < 3; d++) {
    void *x = upload(&kLseRows[0][0], 20, dts[d]), *y = upload((float[5]){0}, 5, DT_F32);
    Tensor tx = TENSOR(x, dts[d], DEVICE_CUDA, 5, 4), ty = TENSOR(y, DT_F32, DEVICE_CUDA, 5);
    op_logsumexp(&gpu, &tx, &ty);
    float got[5];
    download(got, y, 5, DT_F32);
    lse_check(got, dtype_name(dts[d]));
    device_free(DEVICE_CUDA, x);
    device_free(DEVICE_CUDA, y);
  }
  device_close(&gpu);
}

static void topk_too_many(void *ctx) {
  (void)ctx;
  float buf[32];
  int32_t idx[32];
  Tensor x = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 3), v = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 4);
  op_topk(&kCpu, &x, 4, &v, TP(idx, DT_I32, DEVICE_CPU, 2, 4));
}

static void preconditions_name_the_op(void) {
  CHECK_DIES_WITH(topk_too_many, NULL, "op_topk: precondition failed: k >= 1 && k <= *cols");
}

int main(void) {
  TEST_RUN(reductions_hand_checked);
  TEST_RUN(reduction_over_zero_axes_copies);
  TEST_RUN(topk_hand_checked);
  TEST_RUN(logsumexp_special_rows);
  TEST_RUN(logsumexp_special_rows_cuda);
  TEST_RUN(preconditions_name_the_op);
  return test_finish();
}
