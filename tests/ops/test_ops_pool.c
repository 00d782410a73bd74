// Pooling: max, average and global average pooling, CPU forward and
// backward against PyTorch (tests/golden/conv.gld, from gen_conv.py), and
// max pooling's ties. CUDA against CPU and the gradient checks:
// test_ops_table.c.
#include <stdlib.h>

#include "ops/pool.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T4(p, a, b, c, d) TENSOR((p), DT_F32, DEVICE_CPU, (a), (b), (c), (d))

// ---------------------------------------------------------------- golden: pooling

static void pool_golden_case(const char *c, bool max) {
  GoldenFile *g = golden_load("conv.gld");
  int32_t d[4], geom[3];
  golden_i32(g, golden_key(c, "dims"), d, 4);
  golden_i32(g, golden_key(c, "geom"), geom, 3);
  PoolParams p = pool_params((int)geom[0], (int)geom[1], (int)geom[2]);
  int64_t pp = conv_out_extent(d[1], geom[0], p.stride_h, p.pad_h, 1);
  int64_t q = conv_out_extent(d[2], geom[0], p.stride_w, p.pad_w, 1);
  Tensor x = T4(golden_get(g, golden_key(c, "x"), NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = T4(golden_get(g, golden_key(c, "dy"), NULL), d[0], pp, q, d[3]);
  float *y = out_buf(tensor_numel(&dy)), *dx = out_buf(tensor_numel(&x));
  Tensor ty = T4(y, d[0], pp, q, d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  if (max) {
    op_maxpool_fwd(&kCpu, &x, &ty, &p);
    op_maxpool_bwd(&kCpu, &x, &ty, &dy, &tdx, &p);
  } else {
    op_avgpool_fwd(&kCpu, &x, &ty, &p);
    op_avgpool_bwd(&kCpu, &dy, &tdx, &p);
  }
  check_golden(g, golden_key(c, "y"), y, tensor_numel(&ty), TOL_GOLDEN);
  check_golden(g, golden_key(c, "dx"), dx, tensor_numel(&tdx), TOL_GOLDEN);
  free(y), free(dx);
  golden_free(g);
}

static void pooling_matches_pytorch(void) {
  pool_golden_case("maxpool3x3_s2", true);
  pool_golden_case("maxpool2x2", true);
  pool_golden_case("avgpool3x3_s2", false);
  pool_golden_case("avgpool2x2", false);
}

static void global_avgpool_matches_pytorch(void) {
  GoldenFile *g = golden_load("conv.gld");
  int32_t d[4];
  golden_i32(g, "gap.dims", d, 4);
  Tensor x = T4(golden_get(g, "gap.x", NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = TENSOR(golden_get(g, "gap.dy", NULL), DT_F32, DEVICE_CPU, d[0], d[3]);
  float *y = out_buf(d[0] * d[3]), *dx = out_buf(tensor_numel(&x));
  Tensor ty = TENSOR(y, DT_F32, DEVICE_CPU, d[0], d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  op_global_avgpool_fwd(&kCpu, &x, &ty);
  op_global_avgpool_bwd(&kCpu, &dy, &tdx);
  check_golden(g, "gap.y", y, tensor_numel(&ty), TOL_GOLDEN);
  check_golden(g, "gap.dx", dx, tensor_numel(&tdx), TOL_GOLDEN);
  free(y), free(dx);
  golden_free(g);
}

// ---------------------------------------------------------------- hand-checked cases

// Max pool backward where windows tie (ReLU outputs are full of zeros): each
// output's gradient goes to one input only, the first of its window in row
// order holding the maximum, as PyTorch does. A 3x3 image, 2 channels, pool
// 2x2 stride 1 (windows overlap): channel 0 all zeros, channel 1 zeros but
// for a 4 in the middle, which every window holds as its maximum.
static void maxpool_ties_route_to_the_first(void) {
  float x[18] = {0}, y[8], dy[8], dx[18];
  x[4 * 2 + 1] = 4;
  for (int i = 0; i < 8; i++) dy[i] = (float)(i + 1);  // output o, channel c: 2 o + c + 1
  Tensor tx = T4(x, 1, 3, 3, 2), ty = T4(y, 1, 2, 2, 2), tdy = T4(dy, 1, 2, 2, 2),
         tdx = T4(dx, 1, 3, 3, 2);
  PoolParams pp = pool_params(2, 1, 0);
  op_maxpool_fwd(&kCpu, &tx, &ty, &pp);
  op_maxpool_bwd(&kCpu, &tx, &ty, &tdy, &tdx, &pp);
  // Channel 0: output (oh, ow)'s window starts at input (oh, ow), its first zero.
  float want[18] = {0};
  want[0 * 2] = 1, want[1 * 2] = 3, want[3 * 2] = 5, want[4 * 2] = 7;
  want[4 * 2 + 1] = 2 + 4 + 6 + 8;  // channel 1: all four windows' maximum
  for (int i = 0; i < 18; i++) CHECK_MSG(dx[i] == want[i], "dx[%d] = %g, want %g", i, dx[i], want[i]);
}

int main(void) {
  TEST_RUN(maxpool_ties_route_to_the_first);
  TEST_RUN(pooling_matches_pytorch);
  TEST_RUN(global_avgpool_matches_pytorch);
  return test_finish();
}
