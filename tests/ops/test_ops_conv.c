// Convolution: CPU forward and backward against PyTorch (conv.gld from
// tests/golden/gen_conv.py), by oneDNN and by the plain im2col path, oneDNN
// against the plain path on ResNet shapes, hand-checked (a max pool of the
// same image included) and empty-batch cases, and the preconditions' error
// messages (batch norm's among them). Batch norm's own cases:
// test_ops_norm.c; pooling's: test_ops_pool.c. CUDA against CPU (TF32 and
// the empty batch included) and the gradient checks: test_ops_table.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T4(p, a, b, c, d) TENSOR((p), DT_F32, DEVICE_CPU, (a), (b), (c), (d))
#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static float *zeros(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

// ---------------------------------------------------------------- golden: convolution

// Golden comparisons: TOL_GOLDEN (ops_test_util.h).

// scratch_images: how many images' im2col the scratch holds (1 forces the
// per-image path, 0 the whole batch); library: oneDNN where it has a kernel.
static void conv_golden_case(const char *c, int scratch_images, bool library) {
  bool was = op_conv2d_cpu_library(library);
  GoldenFile *g = golden_load("conv.gld");
  int32_t d[7], geom[6];
  int64_t numel;
  golden_i32(g, golden_key(c, "dims"), d, 7);
  golden_i32(g, golden_key(c, "geom"), geom, 6);
  ConvParams p = {(int)geom[0], (int)geom[1], (int)geom[2], (int)geom[3], (int)geom[4],
                  (int)geom[5]};
  int64_t n = d[0], pp = conv_out_extent(d[1], d[5], p.stride_h, p.pad_h, p.dil_h),
          q = conv_out_extent(d[2], d[6], p.stride_w, p.pad_w, p.dil_w);
  Tensor x = T4(golden_get(g, golden_key(c, "x"), NULL), n, d[1], d[2], d[3]);
  Tensor w = T4(golden_get(g, golden_key(c, "w"), NULL), d[4], d[5], d[6], d[3]);
  Tensor dy = T4(golden_get(g, golden_key(c, "dy"), &numel), n, pp, q, d[4]);
  REQUIRE(numel == tensor_numel(&dy));
  bool has_bias = strcmp(c, "conv3x3") == 0 || strcmp(c, "conv1x1") == 0;
  Tensor b = T1(has_bias ? golden_get(g, golden_key(c, "b"), NULL) : NULL, d[4]);
  float *y = zeros(tensor_numel(&dy)), *dx = zeros(tensor_numel(&x)), *dw = zeros(tensor_numel(&w));
  Tensor ty = T4(y, n, pp, q, d[4]), tdx = T4(dx, n, d[1], d[2], d[3]);
  Tensor tdw = T4(dw, d[4], d[5], d[6], d[3]);
  size_t scratch_bytes = op_conv2d_scratch_bytes(&x, &w, &p) * (size_t)(scratch_images ? scratch_images : n);
  void *scratch = malloc(scratch_bytes ? scratch_bytes : 1);

  op_conv2d_fwd(&kCpu, &x, &w, has_bias ? &b : NULL, &ty, &p, scratch, scratch_bytes);
  check_golden(g, golden_key(c, "y"), y, tensor_numel(&ty), TOL_GOLDEN);
  op_conv2d_bwd_data(&kCpu, &dy, &w, &tdx, &p, scratch, scratch_bytes);
  check_golden(g, golden_key(c, "dx"), dx, tensor_numel(&tdx), TOL_GOLDEN);
  op_conv2d_bwd_filter(&kCpu, &x, &dy, &tdw, &p, false, scratch, scratch_bytes);
  check_golden(g, golden_key(c, "dw"), dw, tensor_numel(&tdw), TOL_GOLDEN);
  // Accumulating a second time doubles the gradient.
  op_conv2d_bwd_filter(&kCpu, &x, &dy, &tdw, &p, true, scratch, scratch_bytes);
  op_scale(&kCpu, &tdw, 0.5f, &tdw);
  check_golden(g, golden_key(c, "dw"), dw, tensor_numel(&tdw), TOL_GOLDEN);
  free(y), free(dx), free(dw), free(scratch);
  golden_free(g);
  op_conv2d_cpu_library(was);
}

static const char *kConvCases[] = {"conv3x3",    "conv3x3_s2", "conv7x7_s2",  "conv1x1",
                                   "conv1x1_s2", "conv3x3_d2", "conv1x3_rect"};
#define N_CONV_CASES (int)(sizeof kConvCases / sizeof kConvCases[0])

static void conv_matches_pytorch_per_image(void) {
  for (int i = 0; i < N_CONV_CASES; i++) conv_golden_case(kConvCases[i], 1, false);
}

static void conv_matches_pytorch_whole_batch(void) {
  for (int i = 0; i < N_CONV_CASES; i++) conv_golden_case(kConvCases[i], 0, false);
}

// Skips where the build has no oneDNN; fails where it has one and oneDNN
// took none of the calls (every case here has a kernel on x86-64).
static void require_library_ran(int64_t runs_before) {
  if (!HAVE_DNNL) test_skip("built without oneDNN (make DNNL=0)");
  CHECK_MSG(op_conv2d_cpu_library_runs() > runs_before, "oneDNN convolved nothing");
}

static void conv_library_matches_pytorch(void) {
  int64_t runs = op_conv2d_cpu_library_runs();
  for (int i = 0; i < N_CONV_CASES; i++) conv_golden_case(kConvCases[i], 1, true);
  require_library_ran(runs);
}

// oneDNN against the plain path on the small ResNet's shapes (its stem, 3x3
// convolutions, strided 3x3 and 1x1 projections), a dilated one and a
// strided 1x1 one with 4 input channels (conv_dnnl.c's refused case), at a
// batch of 19: chunks of 2 images and a last one of 1, more chunks than
// lanes. Both compute the same sums in other orders: tol_conv, as for CUDA
// against the CPU. The filter gradient accumulates onto a random start.
static void conv_library_matches_plain(void) {
  static const int64_t shapes[][10] = {
      // h, w, c, k, r, s, stride, pad, dilation
      {32, 32, 3, 32, 7, 7, 2, 3, 1}, {8, 8, 32, 32, 3, 3, 1, 1, 1}, {8, 8, 32, 64, 3, 3, 2, 1, 1},
      {8, 8, 32, 64, 1, 1, 2, 0, 1},  {4, 4, 64, 128, 3, 3, 2, 1, 1}, {2, 2, 128, 128, 3, 3, 1, 1, 1},
      {9, 7, 16, 8, 3, 3, 1, 2, 2},   {6, 6, 24, 40, 1, 1, 1, 0, 1},  {12, 12, 4, 8, 1, 1, 2, 0, 1}};
  int64_t runs = op_conv2d_cpu_library_runs(), n = 19;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t *d = shapes[si];
    ConvParams p = conv_params((int)d[6], (int)d[7], (int)d[8]);
    int64_t h = d[0], w = d[1], c = d[2], k = d[3], r = d[4], s = d[5];
    int64_t pp = conv_out_extent(h, r, p.stride_h, p.pad_h, p.dil_h),
            q = conv_out_extent(w, s, p.stride_w, p.pad_w, p.dil_w);
    int64_t nx = n * h * w * c, nw = k * r * s * c, ny = n * pp * q * k;
    float *x = random_array(nx, 11 + si, -1, 1, DT_F32), *wt = random_array(nw, 23 + si, -1, 1, DT_F32);
    float *dy = random_array(ny, 37 + si, -1, 1, DT_F32), *b = random_array(k, 41 + si, -1, 1, DT_F32);
    float *start = random_array(nw, 53 + si, -1, 1, DT_F32);
    float *out[2][3];  // [plain, library][y, dx, dw]
    Tensor tx = T4(x, n, h, w, c), tw = T4(wt, k, r, s, c), tdy = T4(dy, n, pp, q, k), tb = T1(b, k);
    size_t bytes = op_conv2d_scratch_bytes(&tx, &tw, &p);
    void *scratch = malloc(bytes ? bytes : 1);
    for (int lib = 0; lib < 2; lib++) {
      bool was = op_conv2d_cpu_library(lib);
      out[lib][0] = zeros(ny), out[lib][1] = zeros(nx), out[lib][2] = zeros(nw);
      memcpy(out[lib][2], start, (size_t)nw * sizeof(float));
      Tensor ty = T4(out[lib][0], n, pp, q, k), tdx = T4(out[lib][1], n, h, w, c),
             tdw = T4(out[lib][2], k, r, s, c);
      op_conv2d_fwd(&kCpu, &tx, &tw, &tb, &ty, &p, scratch, bytes);
      op_conv2d_bwd_data(&kCpu, &tdy, &tw, &tdx, &p, scratch, bytes);
      op_conv2d_bwd_filter(&kCpu, &tx, &tdy, &tdw, &p, true, scratch, bytes);
      op_conv2d_cpu_library(was);
    }
    static const char *what[3] = {"y", "dx", "dw"};
    int64_t count[3] = {ny, nx, nw};
    for (int o = 0; o < 3; o++) {
      char name[96];
      snprintf(name, sizeof name, "shape %zu %s", si, what[o]);
      test_check_error(name, "fp32, oneDNN vs im2col", test_rel_error(out[1][o], out[0][o], count[o]),
                       tol_conv(DT_F32));
      free(out[0][o]), free(out[1][o]);
    }
    free(x), free(wt), free(dy), free(b), free(start), free(scratch);
  }
  require_library_ran(runs);
}

// ---------------------------------------------------------------- hand-checked cases

// A 3x3 all-ones filter over a 3x3 image of 1..9 with padding 1: each output
// is the sum of its 3x3 neighbourhood.
static void conv_hand_checked(void) {
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[9], y[9], want[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
  for (int i = 0; i < 9; i++) w[i] = 1;
  Tensor tx = T4(x, 1, 3, 3, 1), tw = T4(w, 1, 3, 3, 1), ty = T4(y, 1, 3, 3, 1);
  ConvParams p = conv_params(1, 1, 1);
  float scratch[81];
  REQUIRE(op_conv2d_scratch_bytes(&tx, &tw, &p) == sizeof scratch);
  op_conv2d_fwd(&kCpu, &tx, &tw, NULL, &ty, &p, scratch, sizeof scratch);
  for (int i = 0; i < 9; i++) CHECK_NEAR(y[i], want[i], 1e-6);
  // Max pool 2x2 stride 1 of the same image: the bottom-right of each window.
  float m[4];
  Tensor tm = T4(m, 1, 2, 2, 1);
  PoolParams pp = pool_params(2, 1, 0);
  op_maxpool_fwd(&kCpu, &tx, &tm, &pp);
  CHECK(m[0] == 5 && m[1] == 6 && m[2] == 8 && m[3] == 9);
}

// An empty batch is nothing to compute: forward and backward-data write
// nothing, and the filter gradient is an empty sum (zero, or left as it was
// when accumulating). CUDA against this: a row of test_ops_table.c.
static void conv_empty_batch(void) {
  float buf[1] = {0}, dw[3 * 3 * 3 * 2];
  for (int i = 0; i < 54; i++) dw[i] = 1.5f;
  Tensor x = T4(buf, 0, 4, 4, 2), w = T4(dw, 3, 3, 3, 2), y = T4(buf, 0, 4, 4, 3);
  ConvParams p = conv_params(1, 1, 1);
  op_conv2d_fwd(&kCpu, &x, &w, NULL, &y, &p, NULL, 0);
  op_conv2d_bwd_data(&kCpu, &y, &w, &x, &p, NULL, 0);
  op_conv2d_bwd_filter(&kCpu, &x, &y, &w, &p, true, NULL, 0);
  CHECK(dw[0] == 1.5f && dw[53] == 1.5f);
  op_conv2d_bwd_filter(&kCpu, &x, &y, &w, &p, false, NULL, 0);
  CHECK(dw[0] == 0 && dw[53] == 0);
}

// ---------------------------------------------------------------- bad input

static void conv_no_channels(void *ctx) {
  (void)ctx;
  float buf[64] = {0};
  Tensor x = T4(buf, 1, 2, 2, 0), w = T4(buf, 1, 1, 1, 0), y = T4(buf, 1, 2, 2, 1);
  ConvParams p = conv_params(1, 0, 1);
  op_conv2d_fwd(&kCpu, &x, &w, NULL, &y, &p, NULL, 0);
}

static void conv_wrong_channels(void *ctx) {
  (void)ctx;
  float buf[64] = {0};
  Tensor x = T4(buf, 1, 2, 2, 3), w = T4(buf, 1, 1, 1, 4), y = T4(buf, 1, 2, 2, 1);
  ConvParams p = conv_params(1, 0, 1);
  op_conv2d_fwd(&kCpu, &x, &w, NULL, &y, &p, NULL, 0);
}

static void conv_small_scratch(void *ctx) {
  (void)ctx;
  float buf[256] = {0};
  Tensor x = T4(buf, 1, 4, 4, 2), w = T4(buf, 1, 3, 3, 2), y = T4(buf, 1, 4, 4, 1);
  ConvParams p = conv_params(1, 1, 1);
  op_conv2d_fwd(&kCpu, &x, &w, NULL, &y, &p, buf, 16);
}

static void bn_wrong_param_size(void *ctx) {
  (void)ctx;
  float buf[64] = {0};
  Tensor p = T1(buf, 3);  // gamma, beta and the statistics: 3 channels, x has 4
  BatchNorm bn = {p, p, p, p, p, p, 0.1f, 1e-5f};
  Tensor x = T4(buf, 1, 2, 2, 4);
  op_batchnorm_fwd_train(&kCpu, &bn, &x, NULL, false, &x);
}

static void preconditions_name_the_op(void) {
  CHECK_DIES_WITH(conv_wrong_channels, NULL, "op_conv2d_fwd: precondition failed");
  CHECK_DIES_WITH(conv_no_channels, NULL, "op_conv2d_fwd: precondition failed");
  CHECK_DIES_WITH(conv_small_scratch, NULL, "op_conv2d_fwd: scratch of 16 bytes, need at least");
  CHECK_DIES_WITH(bn_wrong_param_size, NULL, "op_batchnorm_fwd_train: precondition failed");
}

int main(void) {
  TEST_RUN(conv_hand_checked);
  TEST_RUN(conv_empty_batch);
  TEST_RUN(conv_matches_pytorch_per_image);
  TEST_RUN(conv_matches_pytorch_whole_batch);
  TEST_RUN(conv_library_matches_pytorch);
  TEST_RUN(conv_library_matches_plain);
  TEST_RUN(preconditions_name_the_op);
  return test_finish();
}
