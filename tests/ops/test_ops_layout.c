// Concat, split, permute and the detection heads' moves: hand-checked CPU
// cases, the preconditions' error messages. CUDA against CPU: test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/layout.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static void concat_split_hand_checked(void) {
  // (2, 2, 3) and (2, 1, 3) along axis 1 -> (2, 3, 3).
  float *a = test_iota(12), *b = test_iota(6), y[18], a2[12], b2[6];
  for (int i = 0; i < 6; i++) b[i] += 100;
  Tensor parts[2] = {TENSOR(a, DT_F32, DEVICE_CPU, 2, 2, 3), TENSOR(b, DT_F32, DEVICE_CPU, 2, 1, 3)};
  Tensor ty = TENSOR(y, DT_F32, DEVICE_CPU, 2, 3, 3);
  op_concat(&kCpu, parts, 2, 1, &ty);
  float want[18] = {0, 1, 2, 3, 4, 5, 100, 101, 102, 6, 7, 8, 9, 10, 11, 103, 104, 105};
  for (int i = 0; i < 18; i++) CHECK_MSG(y[i] == want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
  Tensor back[2] = {TENSOR(a2, DT_F32, DEVICE_CPU, 2, 2, 3), TENSOR(b2, DT_F32, DEVICE_CPU, 2, 1, 3)};
  op_split(&kCpu, &ty, 1, back, 2);
  CHECK(memcmp(a, a2, sizeof a2) == 0 && memcmp(b, b2, sizeof b2) == 0);
  // Along the last axis of 16-bit data: whole rows interleave.
  uint16_t u[4] = {1, 2, 3, 4}, v[2] = {9, 8}, w[6];
  Tensor hp[2] = {TENSOR(u, DT_BF16, DEVICE_CPU, 2, 2), TENSOR(v, DT_BF16, DEVICE_CPU, 2, 1)};
  Tensor tw = TENSOR(w, DT_BF16, DEVICE_CPU, 2, 3);
  op_concat(&kCpu, hp, 2, 1, &tw);
  CHECK(w[0] == 1 && w[1] == 2 && w[2] == 9 && w[3] == 3 && w[4] == 4 && w[5] == 8);
  free(a), free(b);
}

static void permutes_move_every_element(void) {
  enum { N = 2, C = 3, H = 4, W = 5 };
  float *x = test_iota(N * C * H * W), y[N * C * H * W], z[N * C * H * W];
  Tensor nchw = TENSOR(x, DT_F32, DEVICE_CPU, N, C, H, W);
  Tensor nhwc = TENSOR(y, DT_F32, DEVICE_CPU, N, H, W, C);
  Tensor back = TENSOR(z, DT_F32, DEVICE_CPU, N, C, H, W);
  op_permute(&kCpu, &nchw, (int[]){0, 2, 3, 1}, &nhwc);
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++)
        for (int c = 0; c < C; c++)
          CHECK(y[((n * H + h) * W + w) * C + c] == x[((n * C + c) * H + h) * W + w]);
  op_permute(&kCpu, &nhwc, (int[]){0, 3, 1, 2}, &back);
  CHECK(memcmp(x, z, sizeof z) == 0);
  // (B, T, H, D) -> (B, H, T, D): attention heads.
  enum { B = 2, T = 3, NH = 4, D = 5 };
  Tensor bthd = TENSOR(x, DT_F32, DEVICE_CPU, B, T, NH, D);
  Tensor bhtd = TENSOR(y, DT_F32, DEVICE_CPU, B, NH, T, D);
  op_permute(&kCpu, &bthd, (int[]){0, 2, 1, 3}, &bhtd);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++)
          CHECK(y[((b * NH + h) * T + t) * D + d] == x[((b * T + t) * NH + h) * D + d]);
  free(x);
}

// The SSD heads' permute, (N, D, A, H, W) -> (N, A, H, W, D), large enough
// to go on the team (parallel_min_work), in fp32 and bf16 (4- and 2-byte
// elements): every element where the coordinates say.
static void permutes_large_tensors_on_the_team(void) {
  enum { N = 4, D = 12, A = 6, H = 10, W = 12 };
  int64_t n = (int64_t)N * D * A * H * W;
  CHECK(n >= parallel_min_work);
  float *x = test_iota(n), *y = malloc((size_t)n * sizeof(float));
  uint16_t *xh = malloc((size_t)n * 2), *yh = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) xh[i] = (uint16_t)(i * 7);
  const int perm[5] = {0, 2, 3, 4, 1};
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, N, D, A, H, W), ty = TENSOR(y, DT_F32, DEVICE_CPU, N, A, H, W, D);
  Tensor hx = TENSOR(xh, DT_BF16, DEVICE_CPU, N, D, A, H, W), hy = TENSOR(yh, DT_BF16, DEVICE_CPU, N, A, H, W, D);
  op_permute(&kCpu, &tx, perm, &ty);
  op_permute(&kCpu, &hx, perm, &hy);
  int64_t wrong = 0;
  for (int b = 0; b < N; b++)
    for (int a = 0; a < A; a++)
      for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++)
          for (int d = 0; d < D; d++) {
            int64_t out = (((int64_t)(b * A + a) * H + h) * W + w) * D + d;
            int64_t in = (((int64_t)(b * D + d) * A + a) * H + h) * W + w;
            wrong += y[out] != x[in] || yh[out] != xh[in];
          }
  CHECK_MSG(wrong == 0, "%lld elements out of place", (long long)wrong);
  free(x), free(y), free(xh), free(yh);
}

// Detection heads to boxes against what it stands for: each head viewed
// (N, H, W, D, A), permuted to (N, A, H, W, D), and the heads concatenated
// along the boxes; then back. Three heads of other sizes and anchor counts,
// large enough to go on the team, in fp32 and in 2-byte elements.
static void heads_to_boxes_is_permute_then_concat(void) {
  enum { N = 8, D = 5, K = 3 };
  const int side[K] = {13, 5, 2}, anchors[K] = {4, 6, 1};
  float *head[K], *part[K];
  uint16_t *hhead[K], *hback[K];
  Tensor heads[K], parts[K], hheads[K], hbacks[K];
  int64_t boxes = 0;
  for (int k = 0; k < K; k++) {
    int64_t n = (int64_t)N * side[k] * side[k] * D * anchors[k];
    head[k] = test_iota(n), part[k] = malloc((size_t)n * sizeof(float));
    hhead[k] = malloc((size_t)n * 2), hback[k] = calloc((size_t)n, 2);
    for (int64_t i = 0; i < n; i++) hhead[k][i] = (uint16_t)(1000 * k + i);
    heads[k] = TENSOR(head[k], DT_F32, DEVICE_CPU, N, side[k], side[k], D * anchors[k]);
    hheads[k] = TENSOR(hhead[k], DT_BF16, DEVICE_CPU, N, side[k], side[k], D * anchors[k]);
    hbacks[k] = TENSOR(hback[k], DT_BF16, DEVICE_CPU, N, side[k], side[k], D * anchors[k]);
    Tensor view = TENSOR(head[k], DT_F32, DEVICE_CPU, N, side[k], side[k], D, anchors[k]);
    Tensor pv = TENSOR(part[k], DT_F32, DEVICE_CPU, N, anchors[k], side[k], side[k], D);
    op_permute(&kCpu, &view, (int[]){0, 4, 1, 2, 3}, &pv);
    parts[k] = TENSOR(part[k], DT_F32, DEVICE_CPU, N, (int64_t)anchors[k] * side[k] * side[k], D);
    boxes += (int64_t)anchors[k] * side[k] * side[k];
  }
  int64_t total = N * boxes * D;
  CHECK(total >= parallel_min_work);
  float *want = malloc((size_t)total * sizeof(float)), *got = malloc((size_t)total * sizeof(float));
  uint16_t *hgot = malloc((size_t)total * 2);
  Tensor tw = TENSOR(want, DT_F32, DEVICE_CPU, N, boxes, D), tg = TENSOR(got, DT_F32, DEVICE_CPU, N, boxes, D);
  Tensor th = TENSOR(hgot, DT_BF16, DEVICE_CPU, N, boxes, D);
  op_concat(&kCpu, parts, K, 1, &tw);
  op_heads_to_boxes(&kCpu, heads, anchors, K, &tg);
  CHECK(memcmp(want, got, (size_t)total * sizeof(float)) == 0);
  // The inverse gives the heads back, and 2-byte elements move as 4-byte ones.
  op_heads_to_boxes(&kCpu, hheads, anchors, K, &th);
  op_boxes_to_heads(&kCpu, &th, anchors, hbacks, K);
  for (int k = 0; k < K; k++) {
    int64_t n = (int64_t)N * side[k] * side[k] * D * anchors[k];
    CHECK_MSG(memcmp(hhead[k], hback[k], (size_t)n * 2) == 0, "head %d not restored", k);
    free(head[k]), free(part[k]), free(hhead[k]), free(hback[k]);
  }
  free(want), free(got), free(hgot);
}

// ---------------------------------------------------------------- bad input

static void concat_mismatch(void *ctx) {
  (void)ctx;
  float buf[32];
  Tensor parts[2] = {TENSOR(buf, DT_F32, DEVICE_CPU, 2, 3), TENSOR(buf, DT_F32, DEVICE_CPU, 3, 3)};
  Tensor y = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 6);
  op_concat(&kCpu, parts, 2, 1, &y);
}

static void permute_repeated_axis(void *ctx) {
  (void)ctx;
  float buf[32];
  Tensor x = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 2), y = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 2);
  op_permute(&kCpu, &x, (int[]){0, 0}, &y);
}

// A head whose channels are not D times its anchors.
static void heads_wrong_channels(void *ctx) {
  (void)ctx;
  float buf[64];
  Tensor heads[2] = {TENSOR(buf, DT_F32, DEVICE_CPU, 1, 2, 2, 6), TENSOR(buf, DT_F32, DEVICE_CPU, 1, 1, 1, 5)};
  Tensor y = TENSOR(buf, DT_F32, DEVICE_CPU, 1, 9, 2);
  op_heads_to_boxes(&kCpu, heads, (int[]){2, 3}, 2, &y);
}

// Boxes that do not add up to y's.
static void heads_wrong_box_count(void *ctx) {
  (void)ctx;
  float buf[64];
  Tensor heads[1] = {TENSOR(buf, DT_F32, DEVICE_CPU, 1, 2, 2, 6)};
  Tensor y = TENSOR(buf, DT_F32, DEVICE_CPU, 1, 13, 2);
  op_boxes_to_heads(&kCpu, &y, (int[]){3}, heads, 1);
}

static void preconditions_name_the_op(void) {
  CHECK_DIES_WITH(heads_wrong_channels, NULL, "op_heads_to_boxes: precondition failed");
  CHECK_DIES_WITH(heads_wrong_box_count, NULL, "op_boxes_to_heads: precondition failed");
  CHECK_DIES_WITH(concat_mismatch, NULL, "op_concat: precondition failed");
  CHECK_DIES_WITH(permute_repeated_axis, NULL, "op_permute: precondition failed");
}

int main(void) {
  TEST_RUN(concat_split_hand_checked);
  TEST_RUN(permutes_move_every_element);
  TEST_RUN(permutes_large_tensors_on_the_team);
  TEST_RUN(heads_to_boxes_is_permute_then_concat);
  TEST_RUN(preconditions_name_the_op);
  return test_finish();
}
