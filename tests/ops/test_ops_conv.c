// Convolutional ops: CPU forward and backward against PyTorch (conv.gld from
// tests/golden/gen_conv.py), CPU backward against central finite
// differences on odd shapes, CUDA against CPU for every op and dtype, and the
// preconditions' error messages.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T4(p, a, b, c, d) TENSOR((p), DT_F32, DEVICE_CPU, (a), (b), (c), (d))
#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))

static float *zeros(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

// Reads a small integer vector (dims, geometry) stored as floats.
static void golden_ints(GoldenFile *g, const char *name, int64_t *out, int64_t want) {
  int64_t n;
  float *v = golden_get(g, name, &n);
  REQUIRE(n == want);
  for (int64_t i = 0; i < n; i++) out[i] = (int64_t)v[i];
}

static const char *key(const char *c, const char *field) {
  static char buf[4][128];
  static int slot;
  slot = (slot + 1) % 4;
  snprintf(buf[slot], sizeof buf[slot], "%s.%s", c, field);
  return buf[slot];
}

// ---------------------------------------------------------------- golden: convolution

// Golden comparisons: TOL_GOLDEN (ops_test_util.h).

// scratch_images: how many images' im2col the scratch holds (1 forces the
// per-image path, 0 the whole batch).
static void conv_golden_case(const char *c, int scratch_images) {
  GoldenFile *g = golden_load("conv.gld");
  int64_t d[7], geom[6], numel;
  golden_ints(g, key(c, "dims"), d, 7);
  golden_ints(g, key(c, "geom"), geom, 6);
  ConvParams p = {(int)geom[0], (int)geom[1], (int)geom[2], (int)geom[3], (int)geom[4],
                  (int)geom[5]};
  int64_t n = d[0], pp = conv_out_extent(d[1], d[5], p.stride_h, p.pad_h, p.dil_h),
          q = conv_out_extent(d[2], d[6], p.stride_w, p.pad_w, p.dil_w);
  Tensor x = T4(golden_get(g, key(c, "x"), NULL), n, d[1], d[2], d[3]);
  Tensor w = T4(golden_get(g, key(c, "w"), NULL), d[4], d[5], d[6], d[3]);
  Tensor dy = T4(golden_get(g, key(c, "dy"), &numel), n, pp, q, d[4]);
  REQUIRE(numel == tensor_numel(&dy));
  bool has_bias = strcmp(c, "conv3x3") == 0 || strcmp(c, "conv1x1") == 0;
  Tensor b = T1(has_bias ? golden_get(g, key(c, "b"), NULL) : NULL, d[4]);
  float *y = zeros(tensor_numel(&dy)), *dx = zeros(tensor_numel(&x)), *dw = zeros(tensor_numel(&w));
  Tensor ty = T4(y, n, pp, q, d[4]), tdx = T4(dx, n, d[1], d[2], d[3]);
  Tensor tdw = T4(dw, d[4], d[5], d[6], d[3]);
  size_t scratch_bytes = op_conv2d_scratch_bytes(&x, &w, &p) * (size_t)(scratch_images ? scratch_images : n);
  void *scratch = malloc(scratch_bytes ? scratch_bytes : 1);

  op_conv2d_fwd(&kCpu, &x, &w, has_bias ? &b : NULL, &ty, &p, scratch, scratch_bytes);
  check_golden(g, key(c, "y"), y, tensor_numel(&ty), TOL_GOLDEN);
  op_conv2d_bwd_data(&kCpu, &dy, &w, &tdx, &p, scratch, scratch_bytes);
  check_golden(g, key(c, "dx"), dx, tensor_numel(&tdx), TOL_GOLDEN);
  op_conv2d_bwd_filter(&kCpu, &x, &dy, &tdw, &p, false, scratch, scratch_bytes);
  check_golden(g, key(c, "dw"), dw, tensor_numel(&tdw), TOL_GOLDEN);
  // Accumulating a second time doubles the gradient.
  op_conv2d_bwd_filter(&kCpu, &x, &dy, &tdw, &p, true, scratch, scratch_bytes);
  op_scale(&kCpu, &tdw, 0.5f, &tdw);
  check_golden(g, key(c, "dw"), dw, tensor_numel(&tdw), TOL_GOLDEN);
  free(y), free(dx), free(dw), free(scratch);
  golden_free(g);
}

static const char *kConvCases[] = {"conv3x3",    "conv3x3_s2", "conv7x7_s2",  "conv1x1",
                                   "conv1x1_s2", "conv3x3_d2", "conv1x3_rect"};
#define N_CONV_CASES (int)(sizeof kConvCases / sizeof kConvCases[0])

static void conv_matches_pytorch_per_image(void) {
  for (int i = 0; i < N_CONV_CASES; i++) conv_golden_case(kConvCases[i], 1);
}

static void conv_matches_pytorch_whole_batch(void) {
  for (int i = 0; i < N_CONV_CASES; i++) conv_golden_case(kConvCases[i], 0);
}

// ---------------------------------------------------------------- golden: batch norm

typedef struct BnHost {
  float gamma[64], beta[64], rmean[64], rvar[64], smean[64], sinvstd[64];
  BatchNorm bn;
} BnHost;

static void bn_host_init(BnHost *h, int64_t c, const float *gamma, const float *beta,
                         const float *rmean, const float *rvar) {
  REQUIRE(c <= 64);
  memcpy(h->gamma, gamma, (size_t)c * 4);
  memcpy(h->beta, beta, (size_t)c * 4);
  memcpy(h->rmean, rmean, (size_t)c * 4);
  memcpy(h->rvar, rvar, (size_t)c * 4);
  h->bn = (BatchNorm){T1(h->gamma, c), T1(h->beta, c), T1(h->rmean, c), T1(h->rvar, c),
                      T1(h->smean, c), T1(h->sinvstd, c), 0.1f, 1e-5f};
}

static void bn_golden_case(const char *c, bool fused) {
  GoldenFile *g = golden_load("conv.gld");
  int64_t d[4];
  golden_ints(g, key(c, "dims"), d, 4);
  int64_t n = d[0] * d[1] * d[2] * d[3], ch = d[3];
  BnHost h;
  bn_host_init(&h, ch, golden_get(g, key(c, "gamma"), NULL), golden_get(g, key(c, "beta"), NULL),
               golden_get(g, key(c, "running_mean_in"), NULL),
               golden_get(g, key(c, "running_var_in"), NULL));
  Tensor x = T4(golden_get(g, key(c, "x"), NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = T4(golden_get(g, key(c, "dy"), NULL), d[0], d[1], d[2], d[3]);
  Tensor z = T4(fused ? golden_get(g, key(c, "z"), NULL) : NULL, d[0], d[1], d[2], d[3]);
  float *y = zeros(n), *dx = zeros(n), *dz = zeros(n), dgamma[64], dbeta[64];
  Tensor ty = T4(y, d[0], d[1], d[2], d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  Tensor tdz = T4(dz, d[0], d[1], d[2], d[3]), tdg = T1(dgamma, ch), tdb = T1(dbeta, ch);

  op_batchnorm_fwd_train(&kCpu, &h.bn, &x, fused ? &z : NULL, fused, &ty);
  check_golden(g, key(c, "y"), y, n, TOL_GOLDEN);
  check_golden(g, key(c, "running_mean"), h.rmean, ch, TOL_GOLDEN);
  check_golden(g, key(c, "running_var"), h.rvar, ch, TOL_GOLDEN);
  op_batchnorm_bwd(&kCpu, &h.bn, &x, &ty, &dy, fused, &tdx, fused ? &tdz : NULL, &tdg, &tdb, false);
  check_golden(g, key(c, "dx"), dx, n, TOL_GOLDEN);
  check_golden(g, key(c, "dgamma"), dgamma, ch, TOL_GOLDEN);
  check_golden(g, key(c, "dbeta"), dbeta, ch, TOL_GOLDEN);
  if (fused) check_golden(g, key(c, "dz"), dz, n, TOL_GOLDEN);
  // In place: the gradient overwrites dy (dx aliasing dy), same result.
  memcpy(dx, dy.data, (size_t)n * sizeof(float));
  op_batchnorm_bwd(&kCpu, &h.bn, &x, &ty, &tdx, fused, &tdx, fused ? &tdz : NULL, &tdg, &tdb, false);
  check_golden(g, key(c, "dx"), dx, n, TOL_GOLDEN);
  op_batchnorm_fwd_infer(&kCpu, &h.bn, &x, fused ? &z : NULL, fused, &ty);
  check_golden(g, key(c, "y_infer"), y, n, TOL_GOLDEN);
  free(y), free(dx), free(dz);
  golden_free(g);
}

static void batchnorm_matches_pytorch(void) { bn_golden_case("bn", false); }
static void batchnorm_add_relu_matches_pytorch(void) { bn_golden_case("bn_add_relu", true); }

// ---------------------------------------------------------------- golden: pooling

static void pool_golden_case(const char *c, bool max) {
  GoldenFile *g = golden_load("conv.gld");
  int64_t d[4], geom[3];
  golden_ints(g, key(c, "dims"), d, 4);
  golden_ints(g, key(c, "geom"), geom, 3);
  PoolParams p = pool_params((int)geom[0], (int)geom[1], (int)geom[2]);
  int64_t pp = conv_out_extent(d[1], geom[0], p.stride_h, p.pad_h, 1);
  int64_t q = conv_out_extent(d[2], geom[0], p.stride_w, p.pad_w, 1);
  Tensor x = T4(golden_get(g, key(c, "x"), NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = T4(golden_get(g, key(c, "dy"), NULL), d[0], pp, q, d[3]);
  float *y = zeros(tensor_numel(&dy)), *dx = zeros(tensor_numel(&x));
  Tensor ty = T4(y, d[0], pp, q, d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  if (max) {
    op_maxpool_fwd(&kCpu, &x, &ty, &p);
    op_maxpool_bwd(&kCpu, &x, &ty, &dy, &tdx, &p);
  } else {
    op_avgpool_fwd(&kCpu, &x, &ty, &p);
    op_avgpool_bwd(&kCpu, &dy, &tdx, &p);
  }
  check_golden(g, key(c, "y"), y, tensor_numel(&ty), TOL_GOLDEN);
  check_golden(g, key(c, "dx"), dx, tensor_numel(&tdx), TOL_GOLDEN);
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
  int64_t d[4];
  golden_ints(g, "gap.dims", d, 4);
  Tensor x = T4(golden_get(g, "gap.x", NULL), d[0], d[1], d[2], d[3]);
  Tensor dy = TENSOR(golden_get(g, "gap.dy", NULL), DT_F32, DEVICE_CPU, d[0], d[3]);
  float *y = zeros(d[0] * d[3]), *dx = zeros(tensor_numel(&x));
  Tensor ty = TENSOR(y, DT_F32, DEVICE_CPU, d[0], d[3]), tdx = T4(dx, d[0], d[1], d[2], d[3]);
  op_global_avgpool_fwd(&kCpu, &x, &ty);
  op_global_avgpool_bwd(&kCpu, &dy, &tdx);
  check_golden(g, "gap.y", y, tensor_numel(&ty), TOL_GOLDEN);
  check_golden(g, "gap.dx", dx, tensor_numel(&tdx), TOL_GOLDEN);
  free(y), free(dx);
  golden_free(g);
}

// ---------------------------------------------------------------- finite differences

// sum(out * r) in double, for a fixed random r: the scalar whose gradient the
// backward ops compute when given dy = r.
static double weighted_sum(const float *out, const float *r, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)out[i] * r[i];
  return s;
}

typedef struct ConvShape {
  int64_t n, h, w, c, k, r, s;
  ConvParams p;
} ConvShape;

typedef struct ConvFd {
  Tensor x, w, y;
  const ConvParams *p;
  float *r;
  void *scratch;
  size_t scratch_bytes;
} ConvFd;

static double conv_fd_loss(void *ctx) {
  ConvFd *f = ctx;
  op_conv2d_fwd(&kCpu, &f->x, &f->w, NULL, &f->y, f->p, f->scratch, f->scratch_bytes);
  return weighted_sum(f->y.data, f->r, tensor_numel(&f->y));
}

// The convolution is linear in x and in w, so central differences are exact
// but for fp32 rounding of the outputs (~1e-7 relative, divided by 2 eps =
// 0.02): measured worst 5e-4 of gradients that are O(1), bound 3e-3; the
// floor keeps near-zero gradients from dividing by ~0.
static void conv_gradients_match_finite_differences(void) {
  ConvShape shapes[] = {
      {2, 7, 5, 3, 5, 3, 3, {1, 1, 1, 1, 1, 1}},   // odd H and W, C = 3
      {1, 9, 8, 5, 4, 3, 3, {2, 2, 1, 1, 1, 1}},   // stride 2, padding
      {1, 9, 9, 3, 2, 7, 7, {2, 2, 3, 3, 1, 1}},   // the 7x7 stem
      {2, 5, 5, 6, 3, 1, 1, {1, 1, 0, 0, 1, 1}},   // 1x1 (plain GEMM path)
      {1, 7, 6, 5, 3, 1, 1, {2, 2, 0, 0, 1, 1}},   // 1x1 stride 2 (shortcut)
      {1, 9, 9, 3, 3, 3, 3, {1, 1, 2, 2, 2, 2}},   // dilation 2
      {1, 6, 7, 7, 2, 2, 3, {1, 2, 1, 0, 1, 1}},   // rectangular everything
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    ConvShape *s = &shapes[i];
    int64_t pp = conv_out_extent(s->h, s->r, s->p.stride_h, s->p.pad_h, s->p.dil_h);
    int64_t q = conv_out_extent(s->w, s->s, s->p.stride_w, s->p.pad_w, s->p.dil_w);
    int64_t nx = s->n * s->h * s->w * s->c, nw = s->k * s->r * s->s * s->c, ny = s->n * pp * q * s->k;
    float *x = random_array(nx, 10 + i, -1, 1, DT_F32), *w = random_array(nw, 20 + i, -1, 1, DT_F32);
    float *r = random_array(ny, 30 + i, -1, 1, DT_F32);
    float *y = zeros(ny), *dx = zeros(nx), *dw = zeros(nw);
    ConvFd f = {T4(x, s->n, s->h, s->w, s->c), T4(w, s->k, s->r, s->s, s->c), T4(y, s->n, pp, q, s->k),
                &s->p, r, NULL, 0};
    f.scratch_bytes = op_conv2d_scratch_bytes(&f.x, &f.w, &s->p);
    f.scratch = malloc(f.scratch_bytes + 1);
    Tensor dy = T4(r, s->n, pp, q, s->k), tdx = T4(dx, s->n, s->h, s->w, s->c);
    Tensor tdw = T4(dw, s->k, s->r, s->s, s->c);
    op_conv2d_bwd_data(&kCpu, &dy, &f.w, &tdx, &s->p, f.scratch, f.scratch_bytes);
    op_conv2d_bwd_filter(&kCpu, &f.x, &dy, &tdw, &s->p, false, f.scratch, f.scratch_bytes);
    double ex = test_gradcheck(conv_fd_loss, &f, x, dx, nx, 1e-2f, 60, 0.1);
    double ew = test_gradcheck(conv_fd_loss, &f, w, dw, nw, 1e-2f, 60, 0.1);
    CHECK_MSG(ex < 3e-3 && ew < 3e-3, "shape %zu: dx error %.3g, dw error %.3g", i, ex, ew);
    free(x), free(w), free(r), free(y), free(dx), free(dw), free(f.scratch);
  }
}

typedef struct BnFd {
  BnHost h;
  Tensor x, z, y;
  bool fused;
  float *r;
} BnFd;

static double bn_fd_loss(void *ctx) {
  BnFd *f = ctx;
  op_batchnorm_fwd_train(&kCpu, &f->h.bn, &f->x, f->fused ? &f->z : NULL, f->fused, &f->y);
  return weighted_sum(f->y.data, f->r, tensor_numel(&f->y));
}

// Batch norm is nonlinear: central differences carry an O(eps^2) truncation
// error plus the fp32 rounding of the loss (~1e-6 absolute) / (2 eps). eps =
// 1e-2 keeps both small (measured worst 7e-4); with the fused ReLU a step
// that large can cross a kink, so those cases use eps = 1e-3, where rounding
// dominates (measured worst 7e-3 relative to the 0.05 floor). Bound: 2e-2.
static void batchnorm_gradients_match_finite_differences(void) {
  struct {
    int64_t n, h, w, c;
    bool fused;
  } cases[] = {{2, 3, 5, 7, false}, {1, 4, 3, 5, true}, {3, 1, 1, 9, true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t n = cases[i].n * cases[i].h * cases[i].w * cases[i].c, c = cases[i].c;
    float *x = random_array(n, 40 + i, -2, 3, DT_F32), *z = random_array(n, 50 + i, -1, 1, DT_F32);
    float *r = random_array(n, 60 + i, -1, 1, DT_F32), *params = random_array(2 * c, 70 + i, 0.5f, 1.5f, DT_F32);
    float *y = zeros(n), *dx = zeros(n), *dz = zeros(n), dgamma[64], dbeta[64], stats[64] = {0};
    BnFd f = {.fused = cases[i].fused, .r = r};
    for (int64_t j = 0; j < c; j++) stats[j] = 1;
    bn_host_init(&f.h, c, params, params + c, stats, stats);
    f.x = T4(x, cases[i].n, cases[i].h, cases[i].w, c);
    f.z = T4(z, cases[i].n, cases[i].h, cases[i].w, c);
    f.y = T4(y, cases[i].n, cases[i].h, cases[i].w, c);
    Tensor dy = T4(r, cases[i].n, cases[i].h, cases[i].w, c), tdx = T4(dx, cases[i].n, cases[i].h, cases[i].w, c);
    Tensor tdz = T4(dz, cases[i].n, cases[i].h, cases[i].w, c), tdg = T1(dgamma, c), tdb = T1(dbeta, c);
    float eps = f.fused ? 1e-3f : 1e-2f;
    bn_fd_loss(&f);
    op_batchnorm_bwd(&kCpu, &f.h.bn, &f.x, &f.y, &dy, f.fused, &tdx, f.fused ? &tdz : NULL, &tdg, &tdb, false);
    double ex = test_gradcheck(bn_fd_loss, &f, x, dx, n, eps, 80, 0.05);
    double eg = test_gradcheck(bn_fd_loss, &f, f.h.gamma, dgamma, c, eps, 80, 0.05);
    double eb = test_gradcheck(bn_fd_loss, &f, f.h.beta, dbeta, c, eps, 80, 0.05);
    double ez = f.fused ? test_gradcheck(bn_fd_loss, &f, z, dz, n, eps, 80, 0.05) : 0;
    CHECK_MSG(ex < 2e-2 && eg < 2e-2 && eb < 2e-2 && ez < 2e-2,
              "case %zu: dx %.3g dgamma %.3g dbeta %.3g dz %.3g", i, ex, eg, eb, ez);
    free(x), free(z), free(r), free(params), free(y), free(dx), free(dz);
  }
}

typedef struct PoolFd {
  Tensor x, y;
  PoolParams p;
  int kind;  // 0 max, 1 average, 2 global average, 3 ReLU
  float *r;
} PoolFd;

static double pool_fd_loss(void *ctx) {
  PoolFd *f = ctx;
  if (f->kind == 0) op_maxpool_fwd(&kCpu, &f->x, &f->y, &f->p);
  if (f->kind == 1) op_avgpool_fwd(&kCpu, &f->x, &f->y, &f->p);
  if (f->kind == 2) op_global_avgpool_fwd(&kCpu, &f->x, &f->y);
  if (f->kind == 3) op_relu_fwd(&kCpu, &f->x, &f->y);
  return weighted_sum(f->y.data, f->r, tensor_numel(&f->y));
}

// Piecewise linear ops: exact differences away from kinks. The inputs keep
// |x| >= 0.05 and distinct values (spacing far above eps = 1e-3), so no
// perturbation crosses a kink; what is left is fp32 rounding (measured worst
// 2e-4), bound 2e-3.
static void pooling_and_relu_gradients_match_finite_differences(void) {
  struct {
    int kind;
    int64_t n, h, w, c;
    PoolParams p;
  } cases[] = {
      {0, 1, 7, 7, 3, {3, 3, 2, 2, 1, 1}}, {0, 2, 5, 6, 2, {2, 2, 2, 2, 0, 0}},
      {1, 1, 6, 5, 3, {3, 3, 2, 2, 1, 1}}, {1, 2, 4, 4, 5, {2, 2, 2, 2, 0, 0}},
      {2, 2, 3, 5, 4, {1, 1, 1, 1, 0, 0}}, {3, 2, 3, 5, 4, {1, 1, 1, 1, 0, 0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t nx = cases[i].n * cases[i].h * cases[i].w * cases[i].c;
    PoolFd f = {.p = cases[i].p, .kind = cases[i].kind};
    float *x = random_array(nx, 80 + i, 0.05f, 1.0f, DT_F32);
    for (int64_t j = 0; j < nx; j++) x[j] = (j % 3 == 0 ? -x[j] : x[j]) + 1e-4f * (float)(j % 7);
    f.x = T4(x, cases[i].n, cases[i].h, cases[i].w, cases[i].c);
    int64_t pp = conv_out_extent(cases[i].h, f.p.window_h, f.p.stride_h, f.p.pad_h, 1);
    int64_t q = conv_out_extent(cases[i].w, f.p.window_w, f.p.stride_w, f.p.pad_w, 1);
    int64_t ny = f.kind == 2 ? cases[i].n * cases[i].c : f.kind == 3 ? nx : cases[i].n * pp * q * cases[i].c;
    float *y = zeros(ny), *dx = zeros(nx);
    f.r = random_array(ny, 90 + i, -1, 1, DT_F32);
    f.y = f.kind == 2   ? TENSOR(y, DT_F32, DEVICE_CPU, cases[i].n, cases[i].c)
          : f.kind == 3 ? f.x
                        : T4(y, cases[i].n, pp, q, cases[i].c);
    f.y.data = y;
    Tensor dy = f.y, tdx = f.x;
    dy.data = f.r;
    tdx.data = dx;
    pool_fd_loss(&f);
    if (f.kind == 0) op_maxpool_bwd(&kCpu, &f.x, &f.y, &dy, &tdx, &f.p);
    if (f.kind == 1) op_avgpool_bwd(&kCpu, &dy, &tdx, &f.p);
    if (f.kind == 2) op_global_avgpool_bwd(&kCpu, &dy, &tdx);
    if (f.kind == 3) op_relu_bwd(&kCpu, &f.y, &dy, &tdx);
    double err = test_gradcheck(pool_fd_loss, &f, x, dx, nx, 1e-3f, 200, 0.05);
    CHECK_MSG(err < 2e-3, "case %zu (kind %d): error %.3g", i, f.kind, err);
    free(x), free(y), free(dx), free(f.r);
  }
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
// when accumulating). On the CPU and, with a GPU, on CUDA (cuDNN refuses
// a batch of 0, so the op must not call it).
static void conv_empty_batch_on(const Device *dev) {
  float buf[1] = {0}, dw_host[3 * 3 * 3 * 2];
  for (int i = 0; i < 54; i++) dw_host[i] = 1.5f;
  void *dw_data = dw_host, *x_data = buf;
  if (dev->kind == DEVICE_CUDA) {
    dw_data = upload(dw_host, 54, DT_F32);
    x_data = upload(buf, 1, DT_F32);
  }
  Tensor x = T4(x_data, 0, 4, 4, 2), w = T4(dw_data, 3, 3, 3, 2), y = T4(x_data, 0, 4, 4, 3);
  x.device = w.device = y.device = dev->kind;
  ConvParams p = conv_params(1, 1, 1);
  op_conv2d_fwd(dev, &x, &w, NULL, &y, &p, NULL, 0);
  op_conv2d_bwd_data(dev, &y, &w, &x, &p, NULL, 0);
  op_conv2d_bwd_filter(dev, &x, &y, &w, &p, true, NULL, 0);
  device_sync(dev);
  if (dev->kind == DEVICE_CUDA) device_copy(DEVICE_CPU, dw_host, DEVICE_CUDA, dw_data, sizeof dw_host);
  CHECK(dw_host[0] == 1.5f && dw_host[53] == 1.5f);
  op_conv2d_bwd_filter(dev, &x, &y, &w, &p, false, NULL, 0);
  device_sync(dev);
  if (dev->kind == DEVICE_CUDA) device_copy(DEVICE_CPU, dw_host, DEVICE_CUDA, dw_data, sizeof dw_host);
  CHECK(dw_host[0] == 0 && dw_host[53] == 0);
  if (dev->kind == DEVICE_CUDA) {
    device_free(DEVICE_CUDA, dw_data);
    device_free(DEVICE_CUDA, x_data);
  }
}

static void conv_empty_batch(void) { conv_empty_batch_on(&kCpu); }

static void conv_empty_batch_cuda(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  conv_empty_batch_on(&gpu);
  device_close(&gpu);
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
  BnHost h;
  bn_host_init(&h, 3, buf, buf, buf, buf);
  Tensor x = T4(buf, 1, 2, 2, 4);
  op_batchnorm_fwd_train(&kCpu, &h.bn, &x, NULL, false, &x);
}

static void preconditions_name_the_op(void) {
  CHECK_DIES_WITH(conv_wrong_channels, NULL, "op_conv2d_fwd: precondition failed");
  CHECK_DIES_WITH(conv_no_channels, NULL, "op_conv2d_fwd: precondition failed");
  CHECK_DIES_WITH(conv_small_scratch, NULL, "op_conv2d_fwd: scratch of 16 bytes, need at least");
  CHECK_DIES_WITH(bn_wrong_param_size, NULL, "op_batchnorm_fwd_train: precondition failed");
}

// ---------------------------------------------------------------- CUDA against CPU

// Tolerances of CUDA against the CPU reference: tol_conv (convolutions),
// tol_rounded_chain (batch norm, pooling), TOL_TF32, TOL_EXACT (ReLU, max
// pool forward: they only select values); derivations in ops_test_util.h.

typedef struct GpuT {
  Tensor t;      // on the GPU
  float *host;   // fp32 values the CPU reference uses (rounded to the dtype)
} GpuT;

// ndim-4 (or fewer: trailing 1s dropped by caller) tensor of random values.
static GpuT gpu_random(DType dt, uint64_t seed, float lo, float hi, int ndim, const int64_t *shape) {
  GpuT g;
  Tensor shape_only = tensor_make(NULL, dt, DEVICE_CUDA, ndim, shape);
  int64_t n = tensor_numel(&shape_only);
  g.host = random_array(n, seed, lo, hi, dt);
  g.t = tensor_make(upload(g.host, n, dt), dt, DEVICE_CUDA, ndim, shape);
  return g;
}

static GpuT gpu_zeros(DType dt, int ndim, const int64_t *shape) {
  Tensor shape_only = tensor_make(NULL, dt, DEVICE_CUDA, ndim, shape);
  int64_t n = tensor_numel(&shape_only);
  GpuT g = {tensor_make(NULL, dt, DEVICE_CUDA, ndim, shape), zeros(n)};
  g.t.data = upload(g.host, n, dt);
  return g;
}

static Tensor host_view(const GpuT *g) {
  Tensor t = g->t;
  t.data = g->host;
  t.dtype = DT_F32;
  t.device = DEVICE_CPU;
  return t;
}

static void gpu_free(GpuT *g) {
  device_free(DEVICE_CUDA, g->t.data);
  free(g->host);
}

static void check_gpu(const char *what, const GpuT *g, double tol) {
  check_close(what, g->t.dtype, g->t.data, g->host, tensor_numel(&g->t), tol);
}

static const ConvShape kGpuConvShapes[] = {
    {3, 11, 13, 6, 10, 3, 3, {1, 1, 1, 1, 1, 1}},  {2, 15, 14, 16, 8, 3, 3, {2, 2, 1, 1, 1, 1}},
    {2, 17, 17, 3, 16, 7, 7, {2, 2, 3, 3, 1, 1}},  {4, 7, 7, 32, 24, 1, 1, {1, 1, 0, 0, 1, 1}},
    {2, 9, 9, 16, 32, 1, 1, {2, 2, 0, 0, 1, 1}},   {2, 12, 11, 8, 8, 3, 3, {1, 1, 2, 2, 2, 2}},
};

// Forward, dgrad and wgrad (accumulating onto a random start, and
// overwriting one) of every kGpuConvShapes entry in dtype dt on dev, against
// the CPU.
static void conv_cuda_case(const Device *dev, DType dt, double tol) {
  for (size_t i = 0; i < sizeof kGpuConvShapes / sizeof kGpuConvShapes[0]; i++) {
    const ConvShape *s = &kGpuConvShapes[i];
    int64_t pp = conv_out_extent(s->h, s->r, s->p.stride_h, s->p.pad_h, s->p.dil_h);
    int64_t q = conv_out_extent(s->w, s->s, s->p.stride_w, s->p.pad_w, s->p.dil_w);
    int64_t xs[] = {s->n, s->h, s->w, s->c}, ws[] = {s->k, s->r, s->s, s->c}, ys[] = {s->n, pp, q, s->k};
    GpuT x = gpu_random(dt, 100 + i, -1, 1, 4, xs), w = gpu_random(dt, 200 + i, -1, 1, 4, ws);
    GpuT b = gpu_random(dt, 300 + i, -1, 1, 1, ws), dy = gpu_random(dt, 400 + i, -1, 1, 4, ys);
    GpuT y = gpu_zeros(dt, 4, ys), dx = gpu_zeros(dt, 4, xs), dw = gpu_random(dt, 500 + i, -1, 1, 4, ws);
    GpuT dw0 = gpu_random(dt, 600 + i, -1, 1, 4, ws);  // overwritten, as the bf16 ResNet does
    Tensor hx = host_view(&x), hw = host_view(&w), hb = host_view(&b), hdy = host_view(&dy);
    Tensor hy = host_view(&y), hdx = host_view(&dx), hdw = host_view(&dw), hdw0 = host_view(&dw0);
    size_t scratch_bytes = op_conv2d_scratch_bytes(&hx, &hw, &s->p);
    void *scratch = malloc(scratch_bytes + 1);
    op_conv2d_fwd(&kCpu, &hx, &hw, &hb, &hy, &s->p, scratch, scratch_bytes);
    op_conv2d_bwd_data(&kCpu, &hdy, &hw, &hdx, &s->p, scratch, scratch_bytes);
    op_conv2d_bwd_filter(&kCpu, &hx, &hdy, &hdw, &s->p, true, scratch, scratch_bytes);
    op_conv2d_bwd_filter(&kCpu, &hx, &hdy, &hdw0, &s->p, false, scratch, scratch_bytes);
    op_conv2d_fwd(dev, &x.t, &w.t, &b.t, &y.t, &s->p, NULL, 0);
    op_conv2d_bwd_data(dev, &dy.t, &w.t, &dx.t, &s->p, NULL, 0);
    op_conv2d_bwd_filter(dev, &x.t, &dy.t, &dw.t, &s->p, true, NULL, 0);
    op_conv2d_bwd_filter(dev, &x.t, &dy.t, &dw0.t, &s->p, false, NULL, 0);
    device_sync(dev);
    char what[64];
    snprintf(what, sizeof what, "shape %zu y", i);
    check_gpu(what, &y, tol);
    snprintf(what, sizeof what, "shape %zu dx", i);
    check_gpu(what, &dx, tol);
    snprintf(what, sizeof what, "shape %zu dw", i);
    check_gpu(what, &dw, tol);
    snprintf(what, sizeof what, "shape %zu dw overwritten", i);
    check_gpu(what, &dw0, tol);
    free(scratch);
    gpu_free(&x), gpu_free(&w), gpu_free(&b), gpu_free(&dy), gpu_free(&y), gpu_free(&dx), gpu_free(&dw);
    gpu_free(&dw0);
  }
}

static void conv_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  for (int di = 0; di < N_FLOAT_DTYPES; di++) conv_cuda_case(&dev, kFloatDtypes[di], tol_conv(kFloatDtypes[di]));
  device_close(&dev);
}

// TF32 rounds each fp32 input to a 10-bit mantissa (2^-11 relative) before
// fp32 accumulation: ~5e-4 relative L2 on these sums, bound 3e-3. Switching
// back gives true fp32 again (new plans, tol_conv).
static void conv_tf32_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  op_conv2d_set_tf32(&dev, true);
  conv_cuda_case(&dev, DT_F32, TOL_TF32);
  op_conv2d_set_tf32(&dev, false);
  conv_cuda_case(&dev, DT_F32, tol_conv(DT_F32));
  device_close(&dev);
}

// BN parameters and statistics are fp32 on both sides: ~1e-5 for the
// statistics (fp32 one-pass shifted sums against double two-pass sums over
// up to ~1e4 rows), dgamma / dbeta likewise; activations use tol_rounded_chain.
static void batchnorm_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  // {5, 13, 11, 40}: 715 rows in 3 uneven parts, a half-used channel block.
  int64_t shapes[][4] = {{4, 9, 7, 6}, {8, 14, 14, 64}, {3, 5, 5, 13}, {5, 13, 11, 40}};
  for (int di = 0; di < N_FLOAT_DTYPES; di++) {
    DType dt = kFloatDtypes[di];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int fused = 0; fused < 2; fused++) {
        int64_t *xs = shapes[i], c = xs[3];
        GpuT x = gpu_random(dt, 500 + i, -1, 3, 4, xs), z = gpu_random(dt, 600 + i, -1, 1, 4, xs);
        GpuT dy = gpu_random(dt, 700 + i, -1, 1, 4, xs), y = gpu_zeros(dt, 4, xs);
        GpuT dx = gpu_zeros(dt, 4, xs), dz = gpu_zeros(dt, 4, xs), yi = gpu_zeros(dt, 4, xs);
        // For the backward in place (dx overwriting dy): dy's values again,
        // fresh dgamma and dbeta (not checked).
        GpuT dyi = gpu_random(dt, 700 + i, -1, 1, 4, xs), dzi = gpu_zeros(dt, 4, xs);
        GpuT dgi = gpu_zeros(DT_F32, 1, &c), dbi = gpu_zeros(DT_F32, 1, &c);
        GpuT p[8];  // gamma beta rmean rvar smean sinvstd dgamma dbeta, fp32
        for (int j = 0; j < 8; j++) p[j] = gpu_random(DT_F32, 800 + 10 * i + j, 0.5f, 1.5f, 1, &c);
        BatchNorm gbn = {p[0].t, p[1].t, p[2].t, p[3].t, p[4].t, p[5].t, 0.1f, 1e-5f};
        BatchNorm hbn = {host_view(&p[0]), host_view(&p[1]), host_view(&p[2]), host_view(&p[3]),
                         host_view(&p[4]), host_view(&p[5]), 0.1f, 1e-5f};
        Tensor hx = host_view(&x), hz = host_view(&z), hdy = host_view(&dy), hy = host_view(&y);
        Tensor hdx = host_view(&dx), hdz = host_view(&dz), hyi = host_view(&yi);
        Tensor hdg = host_view(&p[6]), hdb = host_view(&p[7]);
        const Tensor *gz = fused ? &z.t : NULL, *cz = fused ? &hz : NULL;
        op_batchnorm_fwd_train(&kCpu, &hbn, &hx, cz, fused, &hy);
        op_batchnorm_fwd_train(&dev, &gbn, &x.t, gz, fused, &y.t);
        op_batchnorm_fwd_infer(&kCpu, &hbn, &hx, cz, fused, &hyi);
        op_batchnorm_fwd_infer(&dev, &gbn, &x.t, gz, fused, &yi.t);
        // Both backwards start from dgamma, dbeta = their random values.
        op_batchnorm_bwd(&kCpu, &hbn, &hx, &hy, &hdy, fused, &hdx, fused ? &hdz : NULL, &hdg, &hdb, true);
        op_batchnorm_bwd(&dev, &gbn, &x.t, &y.t, &dy.t, fused, &dx.t, fused ? &dz.t : NULL, &p[6].t,
                         &p[7].t, true);
        op_batchnorm_bwd(&dev, &gbn, &x.t, &y.t, &dyi.t, fused, &dyi.t, fused ? &dzi.t : NULL,
                         &dgi.t, &dbi.t, false);
        memcpy(dyi.host, hdx.data, (size_t)tensor_numel(&hdx) * sizeof(float));
        device_sync(&dev);
        check_gpu("dx in place of dy", &dyi, tol_rounded_chain(dt));
        gpu_free(&dyi), gpu_free(&dgi), gpu_free(&dbi), gpu_free(&dzi);
        check_gpu("y", &y, tol_rounded_chain(dt));
        check_gpu("y_infer", &yi, tol_rounded_chain(dt));
        check_gpu("dx", &dx, tol_rounded_chain(dt));
        if (fused) check_gpu("dz", &dz, tol_rounded_chain(dt));
        const char *names[] = {"gamma", "beta", "running_mean", "running_var", "save_mean",
                               "save_invstd", "dgamma", "dbeta"};
        for (int j = 0; j < 8; j++) check_gpu(names[j], &p[j], 1e-4);
        gpu_free(&x), gpu_free(&z), gpu_free(&dy), gpu_free(&y), gpu_free(&dx), gpu_free(&dz), gpu_free(&yi);
        for (int j = 0; j < 8; j++) gpu_free(&p[j]);
      }
  }
  device_close(&dev);
}

// Distinct values exact in fp16 and bf16, (1 + m/128) 2^e for j = 128 (e +
// 8) + m < 2048, shuffled (j = 1237 i mod n, a permutation as 1237 is prime),
// so max pooling has no ties whose winner could differ between cuDNN and the
// CPU. Odd j are negated.
static void fill_distinct(float *x, int64_t n) {
  REQUIRE(n <= 2048 && n % 1237 != 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t j = (i * 1237) % n;
    x[i] = (1.0f + (float)(j % 128) / 128.0f) * ldexpf(1.0f, (int)(j / 128) - 8) *
           (j % 2 ? -1.0f : 1.0f);
  }
}

static void pooling_and_relu_cuda_match_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  // fill_distinct's limit is 2048 elements. 12 channels take the one-channel
  // kernels in fp16/bf16 and the 4-channel ones in fp32; 16 channels the
  // 8-channel ones in fp16/bf16.
  int64_t shapes[][4] = {{2, 9, 9, 12}, {2, 7, 7, 16}};
  PoolParams pools[] = {{3, 3, 2, 2, 1, 1}, {2, 2, 2, 2, 0, 0}, {3, 2, 1, 2, 1, 0}};
  for (int di = 0; di < N_FLOAT_DTYPES; di++) {
    DType dt = kFloatDtypes[di];
    for (size_t i = 0; i < 2 * sizeof pools / sizeof pools[0]; i++) {
      int64_t *xs = shapes[i / 3];
      PoolParams *p = &pools[i % 3];
      int64_t ys[] = {xs[0], conv_out_extent(xs[1], p->window_h, p->stride_h, p->pad_h, 1),
                      conv_out_extent(xs[2], p->window_w, p->stride_w, p->pad_w, 1), xs[3]};
      GpuT x = gpu_zeros(dt, 4, xs), dy = gpu_random(dt, 900 + i, -1, 1, 4, ys);
      fill_distinct(x.host, tensor_numel(&x.t));
      device_free(DEVICE_CUDA, x.t.data);
      x.t.data = upload(x.host, tensor_numel(&x.t), dt);
      GpuT y = gpu_zeros(dt, 4, ys), dx = gpu_zeros(dt, 4, xs), ya = gpu_zeros(dt, 4, ys);
      GpuT dxa = gpu_zeros(dt, 4, xs);
      Tensor hx = host_view(&x), hdy = host_view(&dy), hy = host_view(&y), hdx = host_view(&dx);
      Tensor hya = host_view(&ya), hdxa = host_view(&dxa);
      op_maxpool_fwd(&kCpu, &hx, &hy, p);
      op_maxpool_bwd(&kCpu, &hx, &hy, &hdy, &hdx, p);
      op_avgpool_fwd(&kCpu, &hx, &hya, p);
      op_avgpool_bwd(&kCpu, &hdy, &hdxa, p);
      op_maxpool_fwd(&dev, &x.t, &y.t, p);
      op_maxpool_bwd(&dev, &x.t, &y.t, &dy.t, &dx.t, p);
      op_avgpool_fwd(&dev, &x.t, &ya.t, p);
      op_avgpool_bwd(&dev, &dy.t, &dxa.t, p);
      device_sync(&dev);
      check_gpu("maxpool y", &y, TOL_EXACT);
      check_gpu("maxpool dx", &dx, tol_rounded_chain(dt));  // sums of up to 4 dy, rounded once
      check_gpu("avgpool y", &ya, tol_rounded_chain(dt));
      check_gpu("avgpool dx", &dxa, tol_rounded_chain(dt));
      gpu_free(&x), gpu_free(&dy), gpu_free(&y), gpu_free(&dx), gpu_free(&ya), gpu_free(&dxa);
    }
    // Global average pool and ReLU on the first input shape.
    int64_t *xs = shapes[0], gs[] = {xs[0], xs[3]};
    GpuT x = gpu_random(dt, 950, -1, 1, 4, xs), dy = gpu_random(dt, 951, -1, 1, 2, gs);
    GpuT y = gpu_zeros(dt, 2, gs), dx = gpu_zeros(dt, 4, xs), r = gpu_zeros(dt, 4, xs);
    GpuT dr = gpu_zeros(dt, 4, xs), dyr = gpu_random(dt, 952, -1, 1, 4, xs);
    Tensor hx = host_view(&x), hdy = host_view(&dy), hy = host_view(&y), hdx = host_view(&dx);
    Tensor hr = host_view(&r), hdr = host_view(&dr), hdyr = host_view(&dyr);
    op_global_avgpool_fwd(&kCpu, &hx, &hy);
    op_global_avgpool_bwd(&kCpu, &hdy, &hdx);
    op_relu_fwd(&kCpu, &hx, &hr);
    op_relu_bwd(&kCpu, &hr, &hdyr, &hdr);
    op_global_avgpool_fwd(&dev, &x.t, &y.t);
    op_global_avgpool_bwd(&dev, &dy.t, &dx.t);
    op_relu_fwd(&dev, &x.t, &r.t);
    op_relu_bwd(&dev, &r.t, &dyr.t, &dr.t);
    device_sync(&dev);
    check_gpu("global avgpool y", &y, tol_rounded_chain(dt));
    check_gpu("global avgpool dx", &dx, tol_rounded_chain(dt));
    check_gpu("relu y", &r, TOL_EXACT);
    check_gpu("relu dx", &dr, TOL_EXACT);
    gpu_free(&x), gpu_free(&dy), gpu_free(&y), gpu_free(&dx), gpu_free(&r), gpu_free(&dr), gpu_free(&dyr);
  }
  device_close(&dev);
}

int main(void) {
  TEST_RUN(conv_hand_checked);
  TEST_RUN(conv_empty_batch);
  TEST_RUN(conv_matches_pytorch_per_image);
  TEST_RUN(conv_matches_pytorch_whole_batch);
  TEST_RUN(batchnorm_matches_pytorch);
  TEST_RUN(batchnorm_add_relu_matches_pytorch);
  TEST_RUN(pooling_matches_pytorch);
  TEST_RUN(global_avgpool_matches_pytorch);
  TEST_RUN(conv_gradients_match_finite_differences);
  TEST_RUN(batchnorm_gradients_match_finite_differences);
  TEST_RUN(pooling_and_relu_gradients_match_finite_differences);
  TEST_RUN(preconditions_name_the_op);
  TEST_RUN(conv_cuda_matches_cpu);
  TEST_RUN(conv_tf32_cuda_matches_cpu);
  TEST_RUN(conv_empty_batch_cuda);
  TEST_RUN(batchnorm_cuda_matches_cpu);
  TEST_RUN(pooling_and_relu_cuda_match_cpu);
  return test_finish();
}
