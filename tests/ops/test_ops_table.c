// The op table, in the spirit of ggml's test-backend-ops: THE place where
// every op's CUDA implementation is checked against its CPU reference, and
// its CPU backward against finite differences. One row per op and shape set
// says which tensors the op takes (name, role, shape, value range, dtype),
// the dtypes it runs in, its tolerance rule (ops_test_util.h), its scalars
// and whether a finite-difference gradient check applies. For every row the
// program runs
//   - the CUDA implementation against the CPU reference on the same random
//     inputs, for each dtype of the row (and each index dtype where the row
//     asks), comparing every output (SKIP "no GPU" without one; under
//     `make test-emu` on the CPU emulation of CUDA); unaligned views too
//     where the row asks (one element into every buffer: the scalar path of
//     the vectorised kernels);
//   - where the row names a gradient check, the CPU backward against central
//     differences of the CPU forward (loss = sum(y * dy) in double, or the
//     op's own scalar loss).
//   - the CPU implementation on 1 and on 3 threads, every loop made parallel
//     whatever its size (core/parallel.h): every output bit for bit the same.
// Rows are grouped by family; each family is three cases,
// <family>_cuda_matches_cpu, <family>_gradients_match_finite_differences
// and <family>_cpu_threads_agree.
//
// Adding an op: its entry in the family's list (ops.h), a run function
// below (a few lines calling the op on t[0], t[1], ... in the order of the
// row's tensors; the same code runs on the CPU and on CUDA), and a row in
// its family's table. Hand-checked cases, golden files and bad-input tests
// stay in tests/ops/test_ops_<family>.c.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

// Rows leave every field they do not need at zero.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static const Device kCpu = {.kind = DEVICE_CPU};

typedef struct Row Row;
typedef double (*TolFn)(DType dtype);

// A tensor of a row.
//   role  'x' input, 'o' output, 'u' input and output (updated in place or
//         accumulated into), all in the case dtype; 'f', 'g', 'a' the same
//         three in fp32; 'i' an index input in the case's index dtype (int32,
//         and int64 too where the row says index64); 's' scratch (an output
//         that is not compared).
//   dims  the row's extents it takes, as indices into Row.d ("01" = (d[0],
//         d[1]); "" a scalar).
//   lo, hi  inputs are uniform on [lo, hi), rounded to their dtype (integer
//         dtypes: rounded down).
//   dt    a fixed dtype instead of the role's (fp16, bf16, int32, uint8).
//   tol   this output's tolerance rule instead of the row's.
//   fill  rewrites the uniform values before rounding (ties, special values).
//   values  the input's values themselves (small index tensors).
//   zeros  the output's zeros must sit at the same elements (dropout's mask).
// Integer tensors, and every tensor of a `native` row, are held on the host
// in their own dtype and must match bit for bit; the others are held in fp32
// on the host and compared by relative L2 error.
typedef struct Arg {
  const char *name;
  char role;
  const char *dims;
  float lo, hi;
  DType dt;
  TolFn tol;
  void (*fill)(float *x, int64_t n);
  const float *values;
  bool zeros;
} Arg;
#define MAX_ARGS 16

// Runs the op on the row's tensors t (host or device views, in the order of
// Row.args); r gives the row's extents and scalars.
typedef void (*RunFn)(const Device *dev, const Tensor *t, const Row *r);
#define RUN(name) static void name(const Device *dev, const Tensor *t, const Row *r __attribute__((unused)))

// The finite-difference check: loss = sum(t[y] * t[dy]) (dy < 0: t[y], a
// scalar loss); for each k, t[grad[k]] (after run) against the derivative
// by t[wrt[k]], at `points` indices. n_wrt 0: none. eps, floor, tol, points
// default to FD_EPS, FD_FLOOR, FD_TOL (ops_test_util.h) and 60; a row that
// states its own gives the derivation beside it. floor_1_over_n: the floor
// is 1 / (the input's element count).
typedef struct Grad {
  int y, dy, n_wrt, wrt[4], grad[4];
  float eps;
  double floor, tol;
  int points;
  bool floor_1_over_n;
} Grad;

// CUDA dtypes of a row (bits by DType); 0: no CUDA case.
#define DT_BIT(dt) (1u << (dt))
#define ALL_DT (DT_BIT(DT_F32) | DT_BIT(DT_F16) | DT_BIT(DT_BF16))
#define FP32_DT DT_BIT(DT_F32)
#define LOWP_DT (DT_BIT(DT_F16) | DT_BIT(DT_BF16))

struct Row {
  const char *op;
  RunFn run;
  int64_t d[10];
  Arg args[MAX_ARGS];
  unsigned dtypes;
  TolFn tol;         // of each output, at its own dtype
  bool unaligned;    // also one element into every buffer
  bool index64;      // 'i' tensors in int32 and in int64
  bool native;       // host tensors in their own dtype, compared bit for bit
  Grad fd;
  float f[2];        // scalars the run function reads
  int k[4];
  ConvParams conv;
  PoolParams pool;
};

// ---------------------------------------------------------------- tolerances
// The rules of ops_test_util.h as TolFns, and the few row-specific bounds.
static double tol_exact(DType dtype) {
  (void)dtype;
  return TOL_EXACT;
}
static double tol_fp32_sum(DType dtype) {  // fp32 outputs of any input dtype
  (void)dtype;
  return tol_rounded(DT_F32);
}
static double tol_gemm_fp(DType dtype) { return tol_gemm(dtype, false); }
static double tol_gemm_tf32(DType dtype) { return tol_gemm(dtype, true); }
static double tol_tf32(DType dtype) {
  (void)dtype;
  return TOL_TF32;
}
// Embedding gradient: fp32 sums of ~27 terms in another order, ~1e-7.
static double tol_embedding_sum(DType dtype) {
  (void)dtype;
  return 1e-6;
}
// The fused attention's delta = rowsum(dout * out), fp32 from an out rounded
// to the case's dtype on CUDA (at most 2^-9 relative per element in bf16):
// sums of Dh terms of either sign, which cancel, so the relative error of
// the row grows past the per-element one; measured 3e-4 (fp16), 2.7e-3
// (bf16); bound 1e-2.
static double tol_delta(DType dtype) {
  (void)dtype;
  return 1e-2;
}
// Batch norm parameters and statistics, fp32 on both sides: ~1e-5 for the
// statistics (fp32 one-pass shifted sums against double two-pass sums over
// up to ~1e4 rows), dgamma / dbeta likewise; bound 1e-4.
static double tol_bn_param(DType dtype) {
  (void)dtype;
  return 1e-4;
}

// ---------------------------------------------------------------- fills
// Casts: ties of both 16-bit formats, overflow, subnormals, NaN, inf, -0;
// 1000 values scaled into fp16's subnormal range.
static void fill_cast_specials(float *x, int64_t n) {
  const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f, 0x1.8p-24f,
                           1.0f + 0x1p-8f, NAN, -NAN, INFINITY, -0.0f, 3e38f, 1e-40f};
  for (size_t i = 0; i < sizeof special / sizeof special[0] && (int64_t)i < n; i++) x[i] = special[i];
  for (int64_t i = 100; i < 1100 && i < n; i++) x[i] *= 1e-9f;
}
// Top-k: every third value a whole number, so rows have many ties.
static void fill_ties(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i += 3) x[i] = roundf(x[i]);
}
#define IGNORE (-100)
static void fill_ignore_every_4th(float *labels, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) labels[i] = IGNORE;
}
static void fill_ignore_every_3rd(float *labels, int64_t n) {
  for (int64_t i = 1; i < n; i += 3) labels[i] = IGNORE;
}
// An inf logit in (ignored) row 0: its gradient is still exact zeros.
static void fill_inf_at_1(float *x, int64_t n) {
  if (n > 1) x[1] = INFINITY;
}
// Distinct values exact in fp16 and bf16, (1 + m/128) 2^e for j = 128 (e +
// 8) + m < 2048, shuffled (j = 1237 i mod n, a permutation as 1237 is prime),
// so max pooling has no ties (fill_relu_ties below makes them). Odd j are negated.
static void fill_distinct(float *x, int64_t n) {
  REQUIRE(n <= 2048 && n % 1237 != 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t j = (i * 1237) % n;
    x[i] = (1.0f + (float)(j % 128) / 128.0f) * ldexpf(1.0f, (int)(j / 128) - 8) *
           (j % 2 ? -1.0f : 1.0f);
  }
}
// Max pooling's ties, as after a ReLU: x from (-1, 1) clamped at 0 and
// rounded to quarters (exact in fp16 and bf16), so about half the values are
// 0 and the rest take four values; most windows hold their maximum more than
// once, and the gradient must go to the first (pool.h) on every device.
static void fill_relu_ties(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = fmaxf(0.0f, roundf(x[i] * 4.0f) / 4.0f);
}
// Piecewise linear ops' gradient checks: |x| >= 0.05 and distinct values
// at least 0.95 / n apart (a shuffled ramp, every third negated), far above
// eps = 1e-3 for n <= 300, so no perturbation crosses a kink.
static void fill_away_from_kinks(float *x, int64_t n) {
  REQUIRE(n <= 300 && n % 37 != 0);
  for (int64_t j = 0; j < n; j++) {
    float v = 0.05f + 0.95f * ((float)((j * 37) % n) + 0.5f) / (float)n;
    x[j] = j % 3 == 0 ? -v : v;
  }
}
static const float kPadLens[] = {45, 17, 1}, kCausalLens[] = {33, 20, 33};
static const float kFdPadLens[] = {7, 1}, kFdCausalLens[] = {6, 4, 2};

// ================================================================ elementwise
RUN(run_add) { op_add(dev, &t[0], &t[1], &t[2]); }
RUN(run_mul) { op_mul(dev, &t[0], &t[1], &t[2]); }
RUN(run_scale) { op_scale(dev, &t[0], -1.5f, &t[1]); }
RUN(run_axpy) { op_axpy(dev, 0.75f, &t[0], &t[1]); }
RUN(run_cast) { op_cast(dev, &t[0], &t[1]); }
// ImageNet's normalisation: scale = 1 / (255 std), shift = -mean / std.
RUN(run_affine_u8) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  ChannelAffine a = {{0}, {0}};
  for (int c = 0; c < 3; c++) a.scale[c] = 1.0f / (255.0f * std[c]), a.shift[c] = -mean[c] / std[c];
  op_affine_u8(dev, &t[0], &a, &t[1]);
}

#define NO_GRAD {.n_wrt = 0}
#define BINARY(name, fn, n)                                                               \
  {name, fn, {n}, {{"a", 'x', "0", -2, 2}, {"b", 'x', "0", -2, 2}, {"y", 'o', "0"}}, ALL_DT, \
   tol_once_rounded, .unaligned = true}
// Casts from every dtype (the case dtype) to `to`: bit for bit.
#define CAST(role, to)                                                                      \
  {"cast", run_cast, {4096},                                                                \
   {{"x", 'x', "0", -70000, 70000, .fill = fill_cast_specials}, {"y", role, "0", .dt = to}}, \
   ALL_DT, tol_exact, .native = true}

static const Row kElementwise[] = {
    // An odd length: the 16-byte vector body plus a tail.
    BINARY("add", run_add, 100003),
    BINARY("mul", run_mul, 100003),
    {"scale", run_scale, {100003}, {{"x", 'x', "0", -2, 2}, {"y", 'o', "0"}}, ALL_DT,
     tol_once_rounded, .unaligned = true},
    {"axpy", run_axpy, {100003}, {{"x", 'x', "0", -2, 2}, {"y", 'u', "0", -2, 2}}, ALL_DT,
     tol_once_rounded, .unaligned = true},
    CAST('g', DT_F32), CAST('o', DT_F16), CAST('o', DT_BF16),
    // Odd extents. One multiply and one add (fused on the GPU, so the fp32
    // results may differ in the last bit): tol_once_rounded.
    {"affine_u8", run_affine_u8, {3, 33, 31, 3},
     {{"x", 'x', "0123", 0, 256, .dt = DT_U8}, {"y", 'o', "0123"}}, ALL_DT, tol_once_rounded},
};

// ================================================================ layout
// Data movement is exact: TOL_EXACT.
RUN(run_permute) { op_permute(dev, &t[0], r->k, &t[1]); }
RUN(run_concat) { op_concat(dev, &t[0], 3, 1, &t[3]); }
RUN(run_split) { op_split(dev, &t[0], 1, &t[1], 3); }

RUN(run_heads_to_boxes) {
  op_heads_to_boxes(dev, &t[0], (const int[]){(int)r->k[0], (int)r->k[1], (int)r->k[2]}, 3, &t[3]);
}
RUN(run_boxes_to_heads) {
  op_boxes_to_heads(dev, &t[0], (const int[]){(int)r->k[0], (int)r->k[1], (int)r->k[2]}, &t[1], 3);
}

#define PERMUTE(a, b, c, d)                                                                \
  {"permute", run_permute, {3, 5, 7, 9}, {{"x", 'x', "0123", -1, 1}, {"y", 'o', #a #b #c #d}}, \
   ALL_DT, tol_exact, .k = {a, b, c, d}}
// Along the middle axis: (3, 5 | 2 | 8, 21) <-> (3, 15, 21).
#define CONCAT_DIMS {3, 5, 2, 8, 21, 15}

// Three detection heads of sides 5, 3 and 1 with 4, 6 and 2 anchors of 7
// values (channels 28, 42, 14) <-> (2, 156 boxes, 7).
#define HEADS_DIMS {2, 5, 28, 3, 42, 1, 14, 156, 7}

static const Row kLayout[] = {
    PERMUTE(0, 2, 3, 1), PERMUTE(0, 3, 1, 2), PERMUTE(0, 2, 1, 3),
    {"heads_to_boxes", run_heads_to_boxes, HEADS_DIMS,
     {{"a", 'x', "0112", -1, 1}, {"b", 'x', "0334", -1, 1}, {"c", 'x', "0556", -1, 1}, {"y", 'o', "078"}},
     ALL_DT, tol_exact, .k = {4, 6, 2}},
    {"boxes_to_heads", run_boxes_to_heads, HEADS_DIMS,
     {{"y", 'x', "078", -1, 1}, {"a", 'o', "0112"}, {"b", 'o', "0334"}, {"c", 'o', "0556"}},
     ALL_DT, tol_exact, .k = {4, 6, 2}},
    {"concat", run_concat, CONCAT_DIMS,
     {{"a", 'x', "014", -1, 1}, {"b", 'x', "024", -1, 1}, {"c", 'x', "034", -1, 1}, {"y", 'o', "054"}},
     ALL_DT, tol_exact},
    {"split", run_split, CONCAT_DIMS,
     {{"x", 'x', "054", -1, 1}, {"a", 'o', "014"}, {"b", 'o', "024"}, {"c", 'o', "034"}}, ALL_DT,
     tol_exact},
};

// ================================================================ reduce
RUN(run_sum) { op_sum(dev, &t[0], 1, &t[1]); }
RUN(run_mean) { op_mean(dev, &t[0], 1, &t[1]); }
RUN(run_sum_all) { op_sum(dev, &t[0], 2, &t[1]); }
RUN(run_mean_all) { op_mean(dev, &t[0], 2, &t[1]); }
RUN(run_topk) { op_topk(dev, &t[0], (int)r->d[2], &t[1], &t[2]); }

#define REDUCE(name, fn, m, n, ydims) \
  {name, fn, {m, n}, {{"x", 'x', "01", 0, 1}, {"y", 'g', ydims}}, ALL_DT, tol_fp32_sum}
// Top-k selects: values and indices match exactly.
#define TOPK(m, n, k)                                                                        \
  {"topk", run_topk, {m, n, k},                                                              \
   {{"x", 'x', "01", -4, 4, .fill = fill_ties}, {"values", 'o', "02"},                      \
    {"indices", 'o', "02", .dt = DT_I32}},                                                   \
   ALL_DT, tol_exact}
RUN(run_logsumexp) { op_logsumexp(dev, &t[0], &t[1]); }
// Log-sum-exp: fp32 results of double sums on both sides, from the same
// rounded inputs: tol_fp32_sum (its infinite and NaN rows:
// test_ops_reduce.c).
#define LOGSUMEXP(m, n, lo, hi) \
  {"logsumexp", run_logsumexp, {m, n}, {{"x", 'x', "01", lo, hi}, {"y", 'g', "0"}}, ALL_DT, \
   tol_fp32_sum}

static const Row kReduce[] = {
    // Many rows and few columns, few rows and many, one column, odd both.
    REDUCE("sum", run_sum, 50000, 3, "1"), REDUCE("mean", run_mean, 50000, 3, "1"),
    REDUCE("sum", run_sum, 7, 1000, "1"), REDUCE("mean", run_mean, 7, 1000, "1"),
    REDUCE("sum", run_sum_all, 200000, 1, ""), REDUCE("mean", run_mean_all, 200000, 1, ""),
    REDUCE("sum", run_sum, 1, 33, "1"), REDUCE("mean", run_mean, 1, 33, "1"),
    REDUCE("sum", run_sum, 4099, 65, "1"), REDUCE("mean", run_mean, 4099, 65, "1"),
    TOPK(97, 101, 10), TOPK(3, 8732, 200), TOPK(5, 384, 20), TOPK(2, 7, 7),
    // Rows of a vocabulary's logits (the beam search's norm); few columns.
    LOGSUMEXP(9, 33001, -30, 30), LOGSUMEXP(300, 5, -2, 2),
};

// ================================================================ activation
RUN(run_gelu) {
  op_gelu_fwd(dev, &t[0], &t[2]);
  op_gelu_bwd(dev, &t[0], &t[1], &t[3]);
}
RUN(run_softmax) {
  op_softmax_fwd(dev, &t[0], &t[2]);
  op_softmax_bwd(dev, &t[2], &t[1], &t[3]);
}
RUN(run_dropout) {
  op_dropout_fwd(dev, &t[0], &t[2], r->f[0], (uint64_t)r->k[0], (uint64_t)r->k[1]);
  op_dropout_bwd(dev, &t[1], &t[3], r->f[0], (uint64_t)r->k[0], (uint64_t)r->k[1]);
}
RUN(run_gelu_dropout) {
  op_gelu_dropout_fwd(dev, &t[0], &t[2], r->f[0], (uint64_t)r->k[0], (uint64_t)r->k[1]);
  op_gelu_dropout_bwd(dev, &t[0], &t[1], &t[3], r->f[0], (uint64_t)r->k[0], (uint64_t)r->k[1]);
}

// erff and expf on the GPU are within 2 ulp of the host's: tol_rounded.
#define ROWWISE(name, fn, m, n, lo, hi, grad)                                                    \
  {name, fn, {m, n},                                                                             \
   {{"x", 'x', "01", lo, hi}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01"}, {"dx", 'o', "01"}}, \
   ALL_DT, tol_rounded, .unaligned = true, .fd = grad}
#define GRAD_XY {.y = 2, .dy = 1, .n_wrt = 1, .wrt = {0}, .grad = {3}}

static const Row kActivation[] = {
    // Rows wider than a block; small odd shapes for the gradient checks.
    ROWWISE("gelu", run_gelu, 37, 1000, -4, 4, NO_GRAD),
    ROWWISE("gelu", run_gelu, 3, 7, -3, 3, GRAD_XY),
    ROWWISE("gelu", run_gelu, 5, 31, -3, 3, GRAD_XY),
    ROWWISE("gelu", run_gelu, 1, 1, -3, 3, GRAD_XY),
    ROWWISE("softmax", run_softmax, 37, 1000, -4, 4, NO_GRAD),
    ROWWISE("softmax", run_softmax, 3, 7, -3, 3, GRAD_XY),
    ROWWISE("softmax", run_softmax, 5, 31, -3, 3, GRAD_XY),
    ROWWISE("softmax", run_softmax, 1, 1, -3, 3, GRAD_XY),
    // keep 0.8, seed 9, offset 3: the same elements dropped (zeros), the
    // kept ones scaled alike.
    {"dropout", run_dropout, {37, 1000},
     {{"x", 'x', "01", -4, 4}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01", .zeros = true},
      {"dx", 'o', "01", .zeros = true}},
     ALL_DT, tol_rounded, .f = {0.8f}, .k = {9, 3}},
    // GELU and dropout in one pass (keep 0.8, seed 9, stream 4; and keep 1):
    // the same zeros; the CPU rounds GELU's value before the dropout's
    // scaling, both in fp32, CUDA rounds once to the dtype: tol_rounded.
    // The gradient check differences the CPU's y for its fixed mask.
    {"gelu_dropout", run_gelu_dropout, {37, 1000},
     {{"x", 'x', "01", -4, 4}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01", .zeros = true},
      {"dx", 'o', "01", .zeros = true}},
     ALL_DT, tol_rounded, .unaligned = true, .f = {0.8f}, .k = {9, 4}},
    {"gelu_dropout", run_gelu_dropout, {5, 31},
     {{"x", 'x', "01", -3, 3}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01", .zeros = true},
      {"dx", 'o', "01", .zeros = true}},
     ALL_DT, tol_rounded, .f = {0.7f}, .k = {9, 4}, .fd = GRAD_XY},
    {"gelu_dropout", run_gelu_dropout, {3, 7},
     {{"x", 'x', "01", -3, 3}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01"}, {"dx", 'o', "01"}},
     ALL_DT, tol_rounded, .f = {1.0f}, .k = {9, 4}, .fd = GRAD_XY},
};

// ================================================================ norm
RUN(run_layernorm) {
  op_layernorm_fwd(dev, &t[0], &t[1], &t[2], 1e-5f, &t[4], &t[5], &t[6]);
  op_layernorm_bwd(dev, &t[0], &t[1], &t[5], &t[6], &t[3], &t[7], &t[8], &t[9], r->k[0] != 0);
}
// f[0]: dropout's keep probability (1: none), seed 5, stream 3.
RUN(run_residual_layernorm) {
  op_residual_layernorm_fwd(dev, &t[0], &t[1], r->f[0], 5, 3, &t[2], &t[3], 1e-5f, &t[4], &t[5],
                            &t[6], &t[7]);
}
// Batch norm's parameters and statistics, from t[first] on: gamma beta
// running_mean running_var save_mean save_invstd.
static BatchNorm bn_of(const Tensor *t, int first) {
  const Tensor *p = &t[first];
  return (BatchNorm){p[0], p[1], p[2], p[3], p[4], p[5], 0.1f, 1e-5f};
}
// k[0] fused add + ReLU, k[1] accumulate dgamma, dbeta.
RUN(run_batchnorm) {
  bool fused = r->k[0] != 0;
  BatchNorm bn = bn_of(t, 7);
  const Tensor *z = fused ? &t[1] : NULL;
  op_batchnorm_fwd_train(dev, &bn, &t[0], z, fused, &t[3]);
  op_batchnorm_fwd_infer(dev, &bn, &t[0], z, fused, &t[4]);
  op_batchnorm_bwd(dev, &bn, &t[0], &t[3], &t[2], fused, &t[5], fused ? &t[6] : NULL, &t[13],
                   &t[14], r->k[1] != 0);
}
// The backward in place: dx overwrites dy (t[2]).
RUN(run_batchnorm_in_place) {
  bool fused = r->k[0] != 0;
  BatchNorm bn = bn_of(t, 5);
  op_batchnorm_fwd_train(dev, &bn, &t[0], fused ? &t[1] : NULL, fused, &t[3]);
  op_batchnorm_bwd(dev, &bn, &t[0], &t[3], &t[2], fused, &t[2], fused ? &t[4] : NULL, &t[11],
                   &t[12], false);
}

// rsqrtf is within 2 ulp of 1/sqrt: y and dx tol_rounded; mean, rstd and
// the fp32 column sums dgamma, dbeta (over rows, in another order)
// tol_rounded(fp32). accumulate: dgamma, dbeta add to their start values.
#define LAYERNORM(m, c, accumulate, grad)                                                      \
  {"layernorm", run_layernorm, {m, c},                                                         \
   {{"x", 'x', "01", -2, 2}, {"gamma", 'f', "1", 0.5f, 1.5f}, {"beta", 'f', "1", -1, 1},        \
    {"dy", 'x', "01", -1, 1}, {"y", 'o', "01"}, {"mean", 'g', "0"}, {"rstd", 'g', "0"},         \
    {"dx", 'o', "01"}, {"dgamma", 'a', "1", -1, 1}, {"dbeta", 'a', "1", -1, 1}},                \
   ALL_DT, tol_rounded, .k = {accumulate}, .fd = grad}
#define GRAD_LN {.y = 4, .dy = 3, .n_wrt = 3, .wrt = {0, 1, 2}, .grad = {7, 8, 9}}
// sum rounds once on both sides (CUDA from the fp32 x + dropout(y), the CPU
// rounds dropout(y) first, in fp32 exactly): tol_once_rounded; out is the
// layer norm of that rounded sum, rounded again: tol_rounded_chain; mean
// (x on [0.5, 2), far from 0) and rstd from sums that differ by those
// roundings, 2^-9 relative per bf16 element, averaged over 1031: 1e-3.
static double tol_stats_of_rounded(DType dtype) {
  (void)dtype;
  return 1e-3;
}
#define RESIDUAL_LN(m, c, keep)                                                                  \
  {"residual_layernorm", run_residual_layernorm, {m, c},                                         \
   {{"x", 'x', "01", 0.5f, 2}, {"y", 'x', "01", -1, 1}, {"gamma", 'f', "1", 0.5f, 1.5f},          \
    {"beta", 'f', "1", -1, 1}, {"sum", 'o', "01", .tol = tol_once_rounded}, {"out", 'o', "01"},   \
    {"mean", 'g', "0", .tol = tol_stats_of_rounded}, {"rstd", 'g', "0", .tol = tol_stats_of_rounded}}, \
   ALL_DT, tol_rounded_chain, .f = {keep}}

// gamma .. dbeta (8 fp32 tensors on [0.5, 1.5)): tol_bn_param.
#define BN_PARAM(name) {name, 'a', "3", 0.5f, 1.5f, .tol = tol_bn_param}
#define BN_STATE                                                                       \
  BN_PARAM("gamma"), BN_PARAM("beta"), BN_PARAM("running_mean"), BN_PARAM("running_var"), \
      BN_PARAM("save_mean"), BN_PARAM("save_invstd")
// d = (N, H, W, C); activations tol_rounded_chain.
#define BATCHNORM(n, h, w, c, fused, accumulate, xlo, dtypes, grad)                             \
  {"batchnorm", run_batchnorm, {n, h, w, c},                                                    \
   {{"x", 'x', "0123", xlo, 3}, {"z", 'x', "0123", -1, 1}, {"dy", 'x', "0123", -1, 1},           \
    {"y", 'o', "0123"}, {"y_infer", 'o', "0123"}, {"dx", 'o', "0123"}, {"dz", 'o', "0123"},      \
    BN_STATE, BN_PARAM("dgamma"), BN_PARAM("dbeta")},                                           \
   dtypes, tol_rounded_chain, .k = {fused, accumulate}, .fd = grad}
#define BATCHNORM_GPU(n, h, w, c)                                          \
  BATCHNORM(n, h, w, c, 0, 1, -1, ALL_DT, NO_GRAD),                        \
      BATCHNORM(n, h, w, c, 1, 1, -1, ALL_DT, NO_GRAD),                    \
      {"batchnorm in place", run_batchnorm_in_place, {n, h, w, c},         \
       {{"x", 'x', "0123", -1, 3}, {"z", 'x', "0123", -1, 1},              \
        {"dy, then dx", 'u', "0123", -1, 1}, {"y", 'o', "0123"},           \
        {"dz", 'o', "0123"}, BN_STATE, BN_PARAM("dgamma"), BN_PARAM("dbeta")}, \
       ALL_DT, tol_rounded_chain, .k = {0}},                               \
      {"batchnorm in place", run_batchnorm_in_place, {n, h, w, c},         \
       {{"x", 'x', "0123", -1, 3}, {"z", 'x', "0123", -1, 1},              \
        {"dy, then dx", 'u', "0123", -1, 1}, {"y", 'o', "0123"},           \
        {"dz", 'o', "0123"}, BN_STATE, BN_PARAM("dgamma"), BN_PARAM("dbeta")}, \
       ALL_DT, tol_rounded_chain, .k = {1}}
// Batch norm is nonlinear: central differences carry an O(eps^2) truncation
// error plus the fp32 rounding of the loss (~1e-6 absolute) / (2 eps). eps =
// 1e-2 keeps both small (measured worst 7e-4); with the fused ReLU a step
// that large can cross a kink, so those cases use eps = 1e-3, where rounding
// dominates (measured worst 7e-3 relative to the 0.05 floor). Bound: 2e-2.
#define GRAD_BN(step, count)                                                                  \
  ((Grad){.y = 3, .dy = 2, .n_wrt = count, .wrt = {0, 7, 8, 1}, .grad = {5, 13, 14, 6},       \
          .eps = step, .floor = 0.05, .tol = 2e-2, .points = 80})

static const Row kNorm[] = {
    // More rows than reduction groups, an odd width; small ones for the check.
    // Past 1,024 columns, the block-per-row kernels; up to it a warp per row:
    // 1,024 (32 registers a lane), 1,000 and 33 (lanes past the row's end),
    // and more rows than the backward's 2,048 warps.
    LAYERNORM(301, 1031, 0, NO_GRAD),
    LAYERNORM(301, 1031, 1, NO_GRAD),
    LAYERNORM(45, 1024, 1, NO_GRAD),
    LAYERNORM(301, 1000, 0, NO_GRAD),
    LAYERNORM(2100, 33, 1, NO_GRAD),
    // The post-norm sub-layer's end, with dropout and without, both kernels.
    RESIDUAL_LN(301, 1031, 0.9f), RESIDUAL_LN(301, 1000, 0.9f), RESIDUAL_LN(7, 384, 1.0f),
    LAYERNORM(3, 7, 0, GRAD_LN),
    LAYERNORM(1, 5, 0, GRAD_LN),
    LAYERNORM(4, 33, 0, GRAD_LN),
    // {5, 13, 11, 40}: 715 rows in 3 uneven parts, a half-used channel block.
    BATCHNORM_GPU(4, 9, 7, 6), BATCHNORM_GPU(8, 14, 14, 64), BATCHNORM_GPU(3, 5, 5, 13),
    BATCHNORM_GPU(5, 13, 11, 40),
    // 4,356 rows: 18 parts, so each of the finalize kernels' 8 lanes adds
    // two or three of them; 40 channels: a second, half-used finalize block.
    BATCHNORM(4, 33, 33, 40, 1, 1, -1, ALL_DT, NO_GRAD),
    BATCHNORM(2, 3, 5, 7, 0, 0, -2, FP32_DT, GRAD_BN(1e-2f, 3)),
    BATCHNORM(1, 4, 3, 5, 1, 0, -2, FP32_DT, GRAD_BN(1e-3f, 4)),
    BATCHNORM(3, 1, 1, 9, 1, 0, -2, FP32_DT, GRAD_BN(1e-3f, 4)),
};

// ================================================================ attention
// q (B, Tq, H, D), k and v (B, Tk, H, D), probs (B, H, Tq, Tk); k[0] causal;
// f[0] > 0: dropout on the probabilities, keeping f[0] (seed 5, stream 11).
// The forward's scratch is the backward's: the dropped probabilities are
// not compared, the gradients that depend on them are.
RUN(run_attention) {
  AttnDropout drop = {r->f[0], 5, 11};
  const AttnDropout *d = r->f[0] > 0 ? &drop : NULL;
  op_attention_fwd(dev, &t[0], &t[1], &t[2], &t[3], r->k[0] != 0, d, &t[4], &t[7], &t[5]);
  op_attention_bwd(dev, &t[0], &t[1], &t[2], &t[4], d, &t[6], &t[7], &t[8], &t[9], &t[10]);
}

// d = (B, Tq, Tk, H, D); key lengths from `lens`; q and k on [-qk, qk);
// keep: dropout's keep probability (0: none).
#define ATTENTION(b, tq, tk, h, dh, causal, lens, qk, keep, dtypes, grad)                    \
  {"attention", run_attention, {b, tq, tk, h, dh},                                           \
   {{"q", 'x', "0134", -qk, qk}, {"k", 'x', "0234", -qk, qk}, {"v", 'x', "0234", -1, 1},       \
    {"key_len", 'i', "0", .values = lens}, {"probs", 'o', "0312"}, {"out", 'o', "0134"},       \
    {"dout", 'x', "0134", -1, 1}, {"scratch", 's', "0312"}, {"dq", 'o', "0134"},               \
    {"dk", 'o', "0234"}, {"dv", 'o', "0234"}},                                                 \
   dtypes, tol_attention, .k = {causal}, .f = {keep}, .fd = grad}
#define GRAD_ATTN {.y = 5, .dy = 6, .n_wrt = 3, .wrt = {0, 1, 2}, .grad = {8, 9, 10}}

static const Row kAttention[] = {
    // Cross-attention with padding (a sequence of one key), causal
    // self-attention with padding.
    ATTENTION(3, 29, 45, 4, 16, 0, kPadLens, 1, 0, ALL_DT, NO_GRAD),
    ATTENTION(3, 33, 33, 2, 24, 1, kCausalLens, 1, 0, ALL_DT, NO_GRAD),
    // With dropout on the probabilities: the same elements dropped on both
    // devices, so out and the gradients agree as closely as without.
    ATTENTION(3, 29, 45, 4, 16, 0, kPadLens, 1, 0.8f, ALL_DT, NO_GRAD),
    ATTENTION(3, 33, 33, 2, 24, 1, kCausalLens, 1, 0.8f, ALL_DT, NO_GRAD),
    // The same on small odd sizes for the gradient check (a fixed mask:
    // dropout is linear in the probabilities).
    ATTENTION(2, 3, 7, 2, 5, 0, kFdPadLens, 1.5f, 0, FP32_DT, GRAD_ATTN),
    ATTENTION(3, 6, 6, 1, 3, 1, kFdCausalLens, 1.5f, 0, FP32_DT, GRAD_ATTN),
    ATTENTION(2, 3, 7, 2, 5, 0, kFdPadLens, 1.5f, 0.7f, FP32_DT, GRAD_ATTN),
    ATTENTION(3, 6, 6, 1, 3, 1, kFdCausalLens, 1.5f, 0.7f, FP32_DT, GRAD_ATTN),
};

// The fused op: lse (B, H, Tq) fp32 in place of probs, and delta, the
// backward's fp32 rowsum(dout * out) (compared too: the CUDA side's out is
// rounded to the dtype, so the row's tolerance); otherwise as run_attention. CUDA runs fp16 and
// bf16 only (tensor cores), so its rows' fp32 reference runs on the CPU
// alone: against finite differences, and on 1 and 3 threads.
RUN(run_attention_fused) {
  AttnDropout drop = {r->f[0], 5, 11};
  const AttnDropout *d = r->f[0] > 0 ? &drop : NULL;
  bool causal = r->k[0] != 0;
  op_attention_fused_fwd(dev, &t[0], &t[1], &t[2], &t[3], causal, d, &t[4], &t[5]);
  op_attention_fused_bwd(dev, &t[0], &t[1], &t[2], &t[3], causal, d, &t[5], &t[4], &t[6], &t[7],
                         &t[8], &t[9], &t[10]);
}
// lse: fp32 on both sides from the same rounded inputs (the CUDA scores are
// exact products summed in fp32 by the tensor cores): tol_rounded(fp32).
#define ATTENTION_FUSED(b, tq, tk, h, dh, causal, lens, qk, keep, dtypes, grad)                   \
  {"attention_fused", run_attention_fused, {b, tq, tk, h, dh},                                   \
   {{"q", 'x', "0134", -qk, qk}, {"k", 'x', "0234", -qk, qk}, {"v", 'x', "0234", -1, 1},           \
    {"key_len", 'i', "0", .values = lens}, {"lse", 'g', "031", .tol = tol_fp32_sum},              \
    {"out", 'o', "0134"}, {"dout", 'x', "0134", -1, 1}, {"delta", 'g', "031", .tol = tol_delta},      \
    {"dq", 'o', "0134"}, {"dk", 'o', "0234"}, {"dv", 'o', "0234"}},                                 \
   dtypes, tol_attention, .k = {causal}, .f = {keep}, .fd = grad}
static const float kTwoTileLens[] = {70, 61}, kCausalTileLens[] = {150};

static const Row kAttentionFused[] = {
    // One tile each way: cross-attention with padding (a sequence of one
    // key); causal self-attention with padding and dropout.
    ATTENTION_FUSED(3, 29, 45, 4, 16, 0, kPadLens, 1, 0, LOWP_DT, NO_GRAD),
    ATTENTION_FUSED(3, 33, 33, 2, 32, 1, kCausalLens, 1, 0.8f, LOWP_DT, NO_GRAD),
    // Head size 64 over several tiles: 130 queries (three tiles, the last
    // of two rows), 70 keys (the second tile six keys, and none valid in
    // the second sequence), with dropout; causal over three tiles.
    ATTENTION_FUSED(2, 130, 70, 2, 64, 0, kTwoTileLens, 1, 0.8f, LOWP_DT, NO_GRAD),
    ATTENTION_FUSED(1, 150, 150, 1, 64, 1, kCausalTileLens, 1, 0, LOWP_DT, NO_GRAD),
    // The fp32 reference against finite differences (run_attention's rows).
    ATTENTION_FUSED(2, 3, 7, 2, 5, 0, kFdPadLens, 1.5f, 0, 0, GRAD_ATTN),
    ATTENTION_FUSED(3, 6, 6, 1, 3, 1, kFdCausalLens, 1.5f, 0, 0, GRAD_ATTN),
    ATTENTION_FUSED(2, 3, 7, 2, 5, 0, kFdPadLens, 1.5f, 0.7f, 0, GRAD_ATTN),
    ATTENTION_FUSED(3, 6, 6, 1, 3, 1, kFdCausalLens, 1.5f, 0.7f, 0, GRAD_ATTN),
};

// ================================================================ dense
// c = 0.75 a b + beta c; k[0], k[1] transpose a, b; k[2] TF32 on CUDA.
RUN(run_gemm) {
  bool tf32 = r->k[2] && dev->kind == DEVICE_CUDA;
  if (tf32) op_gemm_set_tf32(dev, true);
  op_gemm(dev, &t[0], r->k[0] != 0, &t[1], r->k[1] != 0, &t[2], 0.75f, r->f[0]);
  if (tf32) op_gemm_set_tf32(dev, false);
}
// k[1]: the bias and its gradient in separate passes, not in the GEMMs'
// epilogues (op_linear_set_epilogues).
RUN(run_linear_fwd) {
  if (r->k[1]) op_linear_set_epilogues(dev, false);
  op_linear_fwd(dev, &t[0], &t[1], &t[2], &t[3]);
  if (r->k[1]) op_linear_set_epilogues(dev, true);
}
RUN(run_linear) {
  run_linear_fwd(dev, t, r);
  if (r->k[1]) op_linear_set_epilogues(dev, false);
  op_linear_bwd(dev, &t[0], &t[1], &t[4], &t[5], &t[6], &t[7], r->k[0] != 0);
  if (r->k[1]) op_linear_set_epilogues(dev, true);
}
RUN(run_embedding) {
  op_embedding_fwd(dev, &t[0], &t[1], &t[2]);
  op_embedding_bwd(dev, &t[0], &t[3], &t[4], false);
}

// d = (batch, M, N, K): a (batch, M, K) or transposed (batch, K, M); b
// (batch, K, N), (batch, N, K), or one 2-D b shared by the batch.
#define GEMM_A0 "013"
#define GEMM_A1 "031"
#define GEMM_B00 "032"
#define GEMM_B01 "023"
#define GEMM_B10 "32"
#define GEMM_B11 "23"
#define GEMM(batch, m, n, K, ta, tb, shared, beta, tf32, dtypes, tol)                        \
  {"gemm", run_gemm, {batch, m, n, K},                                                      \
   {{"a", 'x', GEMM_A##ta, -1, 1}, {"b", 'x', GEMM_B##shared##tb, -1, 1}, {"c", 'u', "012", -1, 1}}, \
   dtypes, tol, .f = {beta}, .k = {ta, tb, tf32}}
#define GEMM4(batch, m, n, K, shared, beta, dtypes)                                        \
  GEMM(batch, m, n, K, 0, 0, shared, beta, 0, dtypes, tol_gemm_fp),                        \
      GEMM(batch, m, n, K, 1, 0, shared, beta, 0, dtypes, tol_gemm_fp),                    \
      GEMM(batch, m, n, K, 0, 1, shared, beta, 0, dtypes, tol_gemm_fp),                    \
      GEMM(batch, m, n, K, 1, 1, shared, beta, 0, dtypes, tol_gemm_fp)
// y = x w^T + b; the backward accumulates into random fp32 dw, db (the beta
// path) when accumulate. tol_gemm; the fp32 dw, db: only the inputs were
// rounded, and the CPU saw the same (tol_gemm(fp32)). On CUDA the bias and
// its gradient come from cuBLASLt's epilogues, or from separate passes when
// `unfused`.
#define LINEAR(m, in, out, accumulate, unfused, dtypes, grad)                                \
  {"linear", run_linear, {m, in, out},                                                         \
   {{"x", 'x', "01", -1, 1}, {"w", 'x', "21", -1, 1}, {"b", 'f', "2", -1, 1}, {"y", 'o', "02"}, \
    {"dy", 'x', "02", -1, 1}, {"dx", 'o', "01"}, {"dw", 'a', "21", -1, 1},                     \
    {"db", 'a', "2", -1, 1}},                                                                  \
   dtypes, tol_gemm_fp, .k = {accumulate, unfused}, .fd = grad}

// The loss is linear in each input, so central differences are exact up to
// fp32 rounding of the loss (~1e-7 |loss| / eps): eps 1e-2, floor 0.1, 1e-3.
#define GRAD_LINEAR                                                                     \
  {.y = 3, .dy = 4, .n_wrt = 3, .wrt = {0, 1, 2}, .grad = {5, 6, 7}, .eps = 1e-2f,     \
   .floor = 1e-1, .tol = 1e-3, .points = 50}

static const Row kDense[] = {
    GEMM4(3, 37, 19, 65, 0, 0.0f, ALL_DT),
    GEMM4(2, 8, 129, 33, 1, 0.5f, ALL_DT),
    GEMM4(1, 256, 128, 512, 0, 1.0f, ALL_DT),
    GEMM(2, 97, 61, 300, 0, 1, 0, 0.0f, 1, FP32_DT, tol_gemm_tf32),
    // An empty inner dimension: c = beta c.
    GEMM4(2, 5, 7, 0, 0, 0.5f, FP32_DT),
    LINEAR(45, 67, 23, 1, 0, ALL_DT, NO_GRAD),
    LINEAR(45, 67, 23, 0, 0, ALL_DT, NO_GRAD),
    LINEAR(45, 67, 23, 1, 1, ALL_DT, NO_GRAD),
    LINEAR(45, 67, 23, 0, 1, ALL_DT, NO_GRAD),
    // A bias of the activations' dtype.
    {"linear bias in dtype", run_linear_fwd, {77, 40, 96},
     {{"x", 'x', "01", -1, 1}, {"w", 'x', "21", -1, 1}, {"b", 'x', "2", -1, 1}, {"y", 'o', "02"}},
     ALL_DT, tol_gemm_fp},
    LINEAR(3, 5, 4, 0, 0, FP32_DT, GRAD_LINEAR),
    LINEAR(1, 7, 1, 0, 0, FP32_DT, GRAD_LINEAR),
    LINEAR(6, 3, 11, 0, 0, FP32_DT, GRAD_LINEAR),
    // NCF's last layer: bf16 / fp16 x and w, an fp32 y, one output column.
    // Only the inputs are rounded and the CPU sees the same values.
    {"linear fp32 out", run_linear_fwd, {1029, 65, 1},
     {{"x", 'x', "01", -1, 1}, {"w", 'x', "21", -1, 1}, {"b", 'f', "2", -1, 1}, {"y", 'g', "02"}},
     LOWP_DT, tol_gemm_fp},
    // ~27 hits per table row; the lookup is a copy: exact.
    {"embedding", run_embedding, {1000, 37, 129},
     {{"ids", 'i', "0", 0, 37}, {"table", 'x', "12", -1, 1}, {"out", 'o', "02"},
      {"dout", 'x', "02", -1, 1}, {"dtable", 'g', "12", .tol = tol_embedding_sum}},
     ALL_DT, tol_exact, .index64 = true},
};

// ================================================================ conv
RUN(run_conv) {
  const ConvParams *p = &r->conv;
  bool tf32 = r->k[0] && dev->kind == DEVICE_CUDA;
  size_t bytes = dev->kind == DEVICE_CPU ? op_conv2d_scratch_bytes(&t[0], &t[1], p) : 0;
  void *scratch = dev->kind == DEVICE_CPU ? malloc(bytes + 1) : NULL;
  if (tf32) op_conv2d_set_tf32(dev, true);
  op_conv2d_fwd(dev, &t[0], &t[1], &t[2], &t[4], p, scratch, bytes);
  op_conv2d_bwd_data(dev, &t[3], &t[1], &t[5], p, scratch, bytes);
  op_conv2d_bwd_filter(dev, &t[0], &t[3], &t[6], p, true, scratch, bytes);
  op_conv2d_bwd_filter(dev, &t[0], &t[3], &t[7], p, false, scratch, bytes);
  if (tf32) op_conv2d_set_tf32(dev, false);
  free(scratch);
}
RUN(run_relu) {
  op_relu_fwd(dev, &t[0], &t[2]);
  op_relu_bwd(dev, &t[2], &t[1], &t[3]);
}

// conv_out_extent (conv.h) as a constant expression.
#define OUT_EXTENT(in, k, stride, pad, dil) (((in) + 2 * (pad) - (dil) * ((k) - 1) - 1) / (stride) + 1)
// d = (N, H, W, C, K, R, S, P, Q). Forward with a bias, dgrad, and wgrad
// accumulating onto a random start (dw) and overwriting one (dw0, as the
// bf16 ResNet does). tol_conv; TOL_TF32 with tf32.
#define CONV(N, H, W, C, K, R, S, sh, sw, ph, pw, dh, dw, tf32, dtypes, tol, grad)               \
  {"conv2d", run_conv,                                                                         \
   {N, H, W, C, K, R, S, OUT_EXTENT(H, R, sh, ph, dh), OUT_EXTENT(W, S, sw, pw, dw)},           \
   {{"x", 'x', "0123", -1, 1}, {"w", 'x', "4563", -1, 1}, {"b", 'x', "4", -1, 1},              \
    {"dy", 'x', "0784", -1, 1}, {"y", 'o', "0784"}, {"dx", 'o', "0123"},                       \
    {"dw", 'u', "4563", -1, 1}, {"dw0", 'u', "4563", -1, 1}},                                  \
   dtypes, tol, .conv = {sh, sw, ph, pw, dh, dw}, .k = {tf32}, .fd = grad}
#define CONV_GPU(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw) \
  CONV(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, 0, ALL_DT, tol_conv, NO_GRAD)
#define CONV_TF32(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw) \
  CONV(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, 1, FP32_DT, tol_tf32, NO_GRAD)
#define CONV_FP32(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw) \
  CONV(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, 0, FP32_DT, tol_conv, NO_GRAD)
// The convolution is linear in x and in w, so central differences are exact
// but for fp32 rounding of the outputs (~1e-7 relative, divided by 2 eps =
// 0.02): measured worst 5e-4 of gradients that are O(1), bound 3e-3; the
// floor keeps near-zero gradients from dividing by ~0.
#define CONV_FD(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw)                                  \
  CONV(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, 0, FP32_DT, tol_conv,                     \
       ((Grad){.y = 4, .dy = 3, .n_wrt = 2, .wrt = {0, 1}, .grad = {5, 7}, .eps = 1e-2f,       \
               .floor = 0.1, .tol = 3e-3}))
// Every shape of kConvGpuShapes.
#define CONV_SHAPES(M)                                     \
  M(3, 11, 13, 6, 10, 3, 3, 1, 1, 1, 1, 1, 1),             \
      M(2, 15, 14, 16, 8, 3, 3, 2, 2, 1, 1, 1, 1),         \
      M(2, 17, 17, 3, 16, 7, 7, 2, 2, 3, 3, 1, 1),         \
      M(4, 7, 7, 32, 24, 1, 1, 1, 1, 0, 0, 1, 1),          \
      M(2, 9, 9, 16, 32, 1, 1, 2, 2, 0, 0, 1, 1),          \
      M(2, 12, 11, 8, 8, 3, 3, 1, 1, 2, 2, 2, 2)

// Piecewise linear ops: exact differences away from kinks
// (fill_away_from_kinks); what is left is fp32 rounding (measured worst
// 2e-4), bound 2e-3.
#define GRAD_PIECEWISE                                                                       \
  ((Grad){.y = 2, .dy = 1, .n_wrt = 1, .wrt = {0}, .grad = {3}, .eps = 1e-3f, .floor = 0.05,  \
          .tol = 2e-3, .points = 200})
// An op of x (N, H, W, C) with y and dy on the axes `ydims` of (N, H, W, C),
// dx x's shape: ReLU here, global average pooling (GAP, below).
#define NHWC_UNARY(name, fn, n, h, w, c, ydims, lo, xfill, dtypes, tol, grad)                 \
  {name, fn, {n, h, w, c},                                                                     \
   {{"x", 'x', "0123", lo, 1, .fill = xfill}, {"dy", 'x', ydims, -1, 1}, {"y", 'o', ydims},       \
    {"dx", 'o', "0123"}},                                                                      \
   dtypes, tol, .fd = grad}
#define RELU(n, h, w, c, lo, xfill, dtypes, grad) \
  NHWC_UNARY("relu", run_relu, n, h, w, c, "0123", lo, xfill, dtypes, tol_exact, grad)

static const Row kConv[] = {
    CONV_SHAPES(CONV_GPU),
    // TF32 rounds each fp32 input to a 10-bit mantissa (2^-11 relative)
    // before fp32 accumulation: ~5e-4 relative L2 on these sums, TOL_TF32.
    CONV_SHAPES(CONV_TF32),
    // Switching TF32 back off gives true fp32 again (new plans, tol_conv).
    CONV_SHAPES(CONV_FP32),
    // An empty batch is nothing to compute (cuDNN refuses a batch of 0, so
    // the op must not call it): dw accumulated stays as it was, dw0 becomes 0.
    CONV(0, 4, 4, 2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, FP32_DT, tol_conv, NO_GRAD),
    // A batch of 19: the CPU's oneDNN path in chunks of 2 and a last of 1,
    // ten chunks over eight lanes (cpu_threads_agree: the same bits on 1 and
    // 3 threads).
    CONV_FP32(19, 8, 8, 32, 64, 3, 3, 2, 2, 1, 1, 1, 1),
    // Gradient checks: odd H and W, C = 3; stride 2 and padding; the 7x7
    // stem; 1x1 (the plain GEMM path); 1x1 stride 2 (shortcut); dilation 2;
    // rectangular everything.
    CONV_FD(2, 7, 5, 3, 5, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV_FD(1, 9, 8, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_FD(1, 9, 9, 3, 2, 7, 7, 2, 2, 3, 3, 1, 1),
    CONV_FD(2, 5, 5, 6, 3, 1, 1, 1, 1, 0, 0, 1, 1),
    CONV_FD(1, 7, 6, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1),
    CONV_FD(1, 9, 9, 3, 3, 3, 3, 1, 1, 2, 2, 2, 2),
    CONV_FD(1, 6, 7, 7, 2, 2, 3, 1, 2, 1, 0, 1, 1),
    // ReLU (exact): x (N, H, W, C).
    RELU(2, 9, 9, 12, -1, NULL, ALL_DT, NO_GRAD),
    RELU(2, 3, 5, 4, 0.05f, fill_away_from_kinks, FP32_DT, GRAD_PIECEWISE),
};

// ================================================================ pool
RUN(run_maxpool) {
  op_maxpool_fwd(dev, &t[0], &t[2], &r->pool);
  op_maxpool_bwd(dev, &t[0], &t[2], &t[1], &t[3], &r->pool);
}
RUN(run_avgpool) {
  op_avgpool_fwd(dev, &t[0], &t[2], &r->pool);
  op_avgpool_bwd(dev, &t[1], &t[3], &r->pool);
}
RUN(run_global_avgpool) {
  op_global_avgpool_fwd(dev, &t[0], &t[2]);
  op_global_avgpool_bwd(dev, &t[1], &t[3]);
}

// d = (N, H, W, C, P, Q); the pooling window as PoolParams.
#define POOL(name, fn, n, h, w, c, wh, ww, sh, sw, ph, pw, lo, xfill, ytol, dtypes, grad)        \
  {name, fn, {n, h, w, c, OUT_EXTENT(h, wh, sh, ph, 1), OUT_EXTENT(w, ww, sw, pw, 1)},        \
   {{"x", 'x', "0123", lo, 1, .fill = xfill}, {"dy", 'x', "0453", -1, 1},                      \
    {"y", 'o', "0453", .tol = ytol}, {"dx", 'o', "0123"}},                                    \
   dtypes, tol_rounded_chain, .pool = {wh, ww, sh, sw, ph, pw}, .fd = grad}
// Max pooling selects (y exact); its dx sums up to 4 dy, rounded once.
#define MAXPOOL_TIES(n, h, w, c, wh, ww, sh, sw, ph, pw)                                   \
  POOL("maxpool", run_maxpool, n, h, w, c, wh, ww, sh, sw, ph, pw, -1, fill_relu_ties,      \
       tol_exact, ALL_DT, NO_GRAD)
#define POOLS_GPU(n, h, w, c, wh, ww, sh, sw, ph, pw)                                      \
  POOL("maxpool", run_maxpool, n, h, w, c, wh, ww, sh, sw, ph, pw, 0, fill_distinct,        \
       tol_exact, ALL_DT, NO_GRAD),                                                         \
      POOL("avgpool", run_avgpool, n, h, w, c, wh, ww, sh, sw, ph, pw, 0, fill_distinct,    \
           tol_rounded_chain, ALL_DT, NO_GRAD)
#define POOL_FD(name, fn, n, h, w, c, wh, ww, sh, sw, ph, pw, ytol)                           \
  POOL(name, fn, n, h, w, c, wh, ww, sh, sw, ph, pw, 0.05f, fill_away_from_kinks, ytol, FP32_DT, \
       GRAD_PIECEWISE)
// Global average pooling (tol_rounded_chain): x (N, H, W, C), y (N, C).
#define GAP(n, h, w, c, lo, xfill, dtypes, grad)                                              \
  NHWC_UNARY("global_avgpool", run_global_avgpool, n, h, w, c, "03", lo, xfill, dtypes,     \
             tol_rounded_chain, grad)

static const Row kPool[] = {
    // fill_distinct's limit is 2048 elements. 12 channels take the
    // one-channel kernels in fp16/bf16 and the 4-channel ones in fp32; 16
    // channels the 8-channel ones in fp16/bf16.
    POOLS_GPU(2, 9, 9, 12, 3, 3, 2, 2, 1, 1), POOLS_GPU(2, 9, 9, 12, 2, 2, 2, 2, 0, 0),
    POOLS_GPU(2, 9, 9, 12, 3, 2, 1, 2, 1, 0), POOLS_GPU(2, 7, 7, 16, 3, 3, 2, 2, 1, 1),
    POOLS_GPU(2, 7, 7, 16, 2, 2, 2, 2, 0, 0), POOLS_GPU(2, 7, 7, 16, 3, 2, 1, 2, 1, 0),
    // Ties (ReLU-like zeros and repeats): overlapping windows, both kernels.
    MAXPOOL_TIES(2, 9, 9, 12, 3, 3, 2, 2, 1, 1), MAXPOOL_TIES(2, 7, 7, 16, 3, 3, 2, 2, 1, 1),
    MAXPOOL_TIES(2, 6, 7, 16, 2, 2, 1, 1, 0, 0), MAXPOOL_TIES(1, 8, 8, 12, 3, 2, 1, 2, 1, 0),
    GAP(2, 9, 9, 12, -1, NULL, ALL_DT, NO_GRAD),
    POOL_FD("maxpool", run_maxpool, 1, 7, 7, 3, 3, 3, 2, 2, 1, 1, tol_exact),
    POOL_FD("maxpool", run_maxpool, 2, 5, 6, 2, 2, 2, 2, 2, 0, 0, tol_exact),
    POOL_FD("avgpool", run_avgpool, 1, 6, 5, 3, 3, 3, 2, 2, 1, 1, tol_rounded_chain),
    POOL_FD("avgpool", run_avgpool, 2, 4, 4, 5, 2, 2, 2, 2, 0, 0, tol_rounded_chain),
    GAP(2, 3, 5, 4, 0.05f, fill_away_from_kinks, FP32_DT, GRAD_PIECEWISE),
};

// ================================================================ loss
// f[0] label smoothing, f[1] gradient scale.
RUN(run_xent) {
  op_softmax_xent(dev, &t[0], &t[1], r->f[0], IGNORE, r->f[1], &t[2], &t[3], &t[4]);
}
// f[0] gradient scale.
RUN(run_bce) { op_bce_logits(dev, &t[0], &t[1], r->f[0], &t[2], &t[3]); }
// f[0] gradient scale, f[1] beta.
RUN(run_smooth_l1) { op_smooth_l1(dev, &t[0], &t[1], r->f[1], r->f[0], &t[2], &t[3]); }

// Gradients are computed in fp32 like the CPU's (expf/logf within 2 ulp)
// and rounded once to the dtype: tol_rounded. The loss scalar is an fp32 sum
// in another order: tol_rounded(fp32).
#define XENT(rows, cols, lo, xfill, labels, smoothing, scale, dtypes, grad)                  \
  {"softmax_xent", run_xent, {rows, cols},                                                  \
   {{"logits", 'x', "01", lo, -(lo), .fill = xfill}, {"labels", 'i', "0", 0, cols, .fill = labels}, \
    {"loss", 'g', ""}, {"row_loss", 'g', "0"}, {"dlogits", 'o', "01"}},                      \
   dtypes, tol_rounded, .index64 = true, .f = {smoothing, scale}, .fd = grad}
// x on [lo, -lo), targets t (fp32) on [tlo, thi).
#define POINTWISE_LOSS(name, fn, dims, d0, d1, lo, tlo, thi, f0, f1, dtypes, grad)        \
  {name, fn, {d0, d1},                                                                    \
   {{"x", 'x', dims, lo, -(lo)}, {"t", 'f', dims, tlo, thi}, {"loss", 'g', ""},            \
    {"dx", 'o', dims}},                                                                   \
   dtypes, tol_rounded, .f = {f0, f1}, .fd = grad}
// The loss is an fp32 mean, so its rounding (~1e-7 of order 1) over 2 eps is
// ~1e-7 n / eps relative to gradients of order 1 / n: eps 1e-2 keeps that
// below 3e-3 for n <= 279, and the truncation error (eps^2 times the third
// derivative) is smaller still; the floor 1 / n (the typical gradient)
// covers those near zero. Smooth L1's gradient is continuous at its kink
// |d| = beta, so a sample that straddles it is off by at most eps / (2 beta)
// relative: 7e-3. Bound 2e-2.
#define GRAD_LOSS(loss_arg, grad_arg)                                                                    \
  ((Grad){.y = loss_arg, .dy = -1, .n_wrt = 1, .wrt = {0}, .grad = {grad_arg}, .eps = 1e-2f, .tol = 2e-2, \
          .points = 80, .floor_1_over_n = true})
#define LOSSES_FD(rows, cols)                                                                 \
  XENT(rows, cols, -3, NULL, fill_ignore_every_3rd, 0.1f, 1.0f, FP32_DT, GRAD_LOSS(2, 4)),      \
      POINTWISE_LOSS("bce_logits", run_bce, "01", rows, cols, -3, 0, 1, 1.0f, 0, FP32_DT,       \
                     GRAD_LOSS(2, 3)),                                                          \
      POINTWISE_LOSS("smooth_l1", run_smooth_l1, "01", rows, cols, -3, -3, 3, 1.0f, 0.7f,       \
                     FP32_DT, GRAD_LOSS(2, 3))

static const Row kLoss[] = {
    // A vocabulary of 5003; every 4th row ignored; an inf logit in row 0.
    XENT(67, 5003, -5, fill_inf_at_1, fill_ignore_every_4th, 0.1f, 4.0f, ALL_DT, NO_GRAD),
    // More elements than the reduction grid covers in one sweep.
    POINTWISE_LOSS("bce_logits", run_bce, "0", 300007, 0, -8, 0, 1, 1024.0f, 0, ALL_DT, NO_GRAD),
    POINTWISE_LOSS("smooth_l1", run_smooth_l1, "0", 300007, 0, -8, 0, 1, 1024.0f, 1.0f, ALL_DT,
                   NO_GRAD),
    LOSSES_FD(5, 7), LOSSES_FD(1, 3), LOSSES_FD(9, 31),
};

// ---------------------------------------------------------------- the families
typedef struct Family {
  const char *name;
  const Row *rows;
  int n;
} Family;
#define FAMILY(name, rows) {name, rows, (int)(sizeof rows / sizeof rows[0])}
static const Family kFamilies[] = {
    FAMILY("elementwise", kElementwise), FAMILY("layout", kLayout), FAMILY("reduce", kReduce),
    FAMILY("activation", kActivation),   FAMILY("norm", kNorm),     FAMILY("attention", kAttention),
    FAMILY("attention_fused", kAttentionFused),
    FAMILY("dense", kDense),             FAMILY("conv", kConv),     FAMILY("pool", kPool),
    FAMILY("loss", kLoss),
};
#define N_FAMILIES (int)(sizeof kFamilies / sizeof kFamilies[0])

// ---------------------------------------------------------------- the driver
typedef struct Bufs {
  int n;
  Tensor h[MAX_ARGS], d[MAX_ARGS];  // host views; device views (unset on CPU runs)
  void *host[MAX_ARGS], *dev[MAX_ARGS];
} Bufs;

static bool is_int(DType dt) { return dt == DT_I32 || dt == DT_I64 || dt == DT_U8; }
static bool is_input(const Arg *a) { return a->role == 'x' || a->role == 'f' || a->role == 'i' || a->role == 'u' || a->role == 'a'; }
static bool is_checked(const Arg *a) { return a->role == 'o' || a->role == 'g' || a->role == 'u' || a->role == 'a'; }

static int arg_shape(const Row *r, const Arg *a, int64_t *shape) {
  int nd = (int)strlen(a->dims);
  for (int k = 0; k < nd; k++) shape[k] = r->d[a->dims[k] - '0'];
  if (nd == 0) shape[nd++] = 1;
  return nd;
}

// The tensor's dtype in a case of dtype dt and index dtype it.
static DType arg_dtype(const Arg *a, DType dt, DType it) {
  if (a->dt) return a->dt;
  if (a->role == 'f' || a->role == 'g' || a->role == 'a') return DT_F32;
  return a->role == 'i' ? it : dt;
}

// Its dtype on the host: its own for integers and native rows, else fp32.
static DType host_dtype(const Row *r, DType adt) { return r->native || is_int(adt) ? adt : DT_F32; }

// dst[0..n) = x[0..n) in dtype dt.
static void encode(void *dst, const float *x, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; i++) switch (dt) {
      case DT_F32: ((float *)dst)[i] = x[i]; break;
      case DT_F16: ((uint16_t *)dst)[i] = f32_to_f16(x[i]); break;
      case DT_BF16: ((uint16_t *)dst)[i] = f32_to_bf16(x[i]); break;
      case DT_I32: ((int32_t *)dst)[i] = (int32_t)x[i]; break;
      case DT_I64: ((int64_t *)dst)[i] = (int64_t)x[i]; break;
      case DT_U8: ((uint8_t *)dst)[i] = (uint8_t)x[i]; break;
    }
}

// An input's values: uniform, the row's fill, rounded to the dtype.
static void arg_values(float *v, int64_t n, int offset, const Arg *a, DType adt, uint64_t seed) {
  if (a->values) {
    memcpy(v + offset, a->values, (size_t)(n - offset) * sizeof(float));
    return;
  }
  test_fill_uniform(v, n, seed, a->lo, a->hi);
  if (a->fill) a->fill(v, n);
  if (is_int(adt))
    for (int64_t i = 0; i < n; i++) v[i] = floorf(v[i]);
  else
    round_all(adt, v, n);
}

// Host (and, with gpu, device) buffers for every tensor; offset 1 puts each
// view one element into its buffer.
static void bufs_make(Bufs *b, const Row *r, DType dt, DType it, uint64_t seed, bool gpu, int offset) {
  memset(b, 0, sizeof *b);
  for (int i = 0; i < MAX_ARGS && r->args[i].name; i++, b->n++) {
    const Arg *a = &r->args[i];
    int64_t shape[TENSOR_MAX_DIMS];
    int nd = arg_shape(r, a, shape);
    DType adt = arg_dtype(a, dt, it), hdt = host_dtype(r, adt);
    b->h[i] = tensor_make(NULL, hdt, DEVICE_CPU, nd, shape);
    int64_t n = tensor_numel(&b->h[i]) + offset;
    float *v = out_buf(n);
    if (is_input(a)) arg_values(v, n, offset, a, adt, seed + (uint64_t)i);
    b->host[i] = malloc((size_t)(n ? n : 1) * dtype_size(hdt));
    encode(b->host[i], v, n, hdt);
    b->h[i].data = (char *)b->host[i] + offset * dtype_size(hdt);
    if (gpu) {
      void *bytes = malloc((size_t)(n ? n : 1) * dtype_size(adt));
      encode(bytes, v, n, adt);
      b->dev[i] = device_alloc(DEVICE_CUDA, (size_t)(n ? n : 1) * dtype_size(adt));
      device_copy(DEVICE_CUDA, b->dev[i], DEVICE_CPU, bytes, (size_t)n * dtype_size(adt));
      b->d[i] = tensor_make((char *)b->dev[i] + offset * dtype_size(adt), adt, DEVICE_CUDA, nd, shape);
      free(bytes);
    }
    free(v);
  }
}

static void bufs_free(Bufs *b) {
  for (int i = 0; i < b->n; i++) {
    free(b->host[i]);
    if (b->dev[i]) device_free(DEVICE_CUDA, b->dev[i]);
  }
}

// One output of a CUDA case against the CPU's: bit for bit where the host
// holds the tensor in its own dtype (the count of differing elements must
// be 0), else relative L2 error within the tolerance.
static void check_output(const char *what, const Row *r, const Arg *a, const Tensor *h,
                         const Tensor *d) {
  int64_t n = tensor_numel(h);
  if (r->native || is_int(d->dtype)) {
    size_t elem = dtype_size(d->dtype);
    uint8_t *got = malloc((size_t)(n ? n : 1) * elem);
    device_copy(DEVICE_CPU, got, DEVICE_CUDA, d->data, (size_t)n * elem);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += memcmp(got + i * elem, (uint8_t *)h->data + i * elem, elem) != 0;
    char w[192];
    snprintf(w, sizeof w, "%s (elements not bit for bit)", what);
    test_check_error(w, dtype_name(d->dtype), (double)differ, 0);
    free(got);
    return;
  }
  TolFn tol = a->tol ? a->tol : r->tol;
  check_close(what, d->dtype, d->data, h->data, n, tol(d->dtype));
  if (!a->zeros) return;
  float *got = out_buf(n);
  const float *want = h->data;
  download(got, d->data, n, d->dtype);
  int64_t moved = 0;
  for (int64_t i = 0; i < n; i++) moved += (got[i] == 0.0f) != (want[i] == 0.0f);
  char w[192];
  snprintf(w, sizeof w, "%s (elements zero on one side only)", what);
  test_check_error(w, dtype_name(d->dtype), (double)moved, 0);
  free(got);
}

static void cuda_case(const Device *gpu, const Row *r, int row, DType dt, DType it, int offset) {
  Bufs b;
  bufs_make(&b, r, dt, it, 1000 + 97 * (uint64_t)row, true, offset);
  r->run(&kCpu, b.h, r);
  r->run(gpu, b.d, r);
  device_sync(gpu);
  for (int i = 0; i < b.n; i++) {
    const Arg *a = &r->args[i];
    if (!is_checked(a)) continue;
    char what[128];
    snprintf(what, sizeof what, "row %d %s %s%s%s", row, r->op, a->name,
             offset ? " (unaligned)" : "", it == DT_I64 ? " (int64 indices)" : "");
    check_output(what, r, a, &b.h[i], &b.d[i]);
  }
  bufs_free(&b);
}

static const Family *g_family;  // the family the running case checks

static void cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  for (int row = 0; row < g_family->n; row++) {
    const Row *r = &g_family->rows[row];
    for (int di = 0; di < N_FLOAT_DTYPES; di++) {
      if (!(r->dtypes & DT_BIT(kFloatDtypes[di]))) continue;
      for (int wide = 0; wide <= (r->index64 ? 1 : 0); wide++)
        for (int offset = 0; offset <= (r->unaligned ? 1 : 0); offset++)
          cuda_case(&gpu, r, row, kFloatDtypes[di], wide ? DT_I64 : DT_I32, offset);
    }
  }
  device_close(&gpu);
}

typedef struct FdCtx {
  const Row *r;
  Bufs *b;
} FdCtx;

static double fd_loss(void *ctx) {
  FdCtx *c = ctx;
  const Grad *g = &c->r->fd;
  c->r->run(&kCpu, c->b->h, c->r);
  const float *y = c->b->h[g->y].data;
  if (g->dy < 0) return y[0];
  const float *w = c->b->h[g->dy].data;
  double sum = 0;
  for (int64_t i = 0; i < tensor_numel(&c->b->h[g->y]); i++) sum += (double)y[i] * w[i];
  return sum;
}

// FD_EPS, FD_FLOOR, FD_TOL (derivation in ops_test_util.h) unless the row
// states its own.
static void gradients_match_finite_differences(void) {
  for (int row = 0; row < g_family->n; row++) {
    const Row *r = &g_family->rows[row];
    const Grad *g = &r->fd;
    if (g->n_wrt == 0) continue;
    Bufs b;
    bufs_make(&b, r, DT_F32, DT_I32, 2000 + 97 * (uint64_t)row, false, 0);
    FdCtx c = {r, &b};
    for (int k = 0; k < g->n_wrt; k++) {
      fd_loss(&c);  // the analytic gradients at the unperturbed inputs (a
                    // check leaves its last run at a perturbed one)
      const Tensor *gt = &b.h[g->grad[k]], *x = &b.h[g->wrt[k]];
      int64_t n = tensor_numel(x);
      float *grad = malloc((size_t)n * sizeof(float));
      memcpy(grad, gt->data, (size_t)n * sizeof(float));  // fd_loss overwrites it
      double floor = g->floor_1_over_n ? 1.0 / (double)n : g->floor ? g->floor : FD_FLOOR;
      double tol = g->tol ? g->tol : FD_TOL;
      double e = test_gradcheck(fd_loss, &c, x->data, grad, n, g->eps ? g->eps : FD_EPS,
                                g->points ? g->points : 60, floor);
      CHECK_MSG(e < tol, "row %d %s: d/d%s off by %.3g (tolerance %g)", row, r->op,
                r->args[g->wrt[k]].name, e, tol);
      free(grad);
    }
    bufs_free(&b);
  }
}

// The fp32 CPU op on 1 thread and on 3, from the same inputs: every output
// and scratch tensor the same bits. Every loop runs on the team, whatever its
// size, so a race or a sum whose order follows the threads shows here.
// OpenBLAS keeps one thread: how it splits a GEMM among threads of its own
// changes its sums under some kernel sets (Haswell, Zen), and is not the ops'.
static void cpu_threads_agree(void) {
  int64_t saved = parallel_min_work;
  int threads = parallel_threads();
  openblas_set_num_threads(1);
  parallel_min_work = 1;
  for (int row = 0; row < g_family->n; row++) {
    const Row *r = &g_family->rows[row];
    if (!(r->dtypes & DT_BIT(DT_F32)) && r->fd.n_wrt == 0) continue;  // fp32 rows, and CPU-only ones
    Bufs one, three;
    bufs_make(&one, r, DT_F32, DT_I32, 3000 + 97 * (uint64_t)row, false, 0);
    bufs_make(&three, r, DT_F32, DT_I32, 3000 + 97 * (uint64_t)row, false, 0);
    parallel_set_threads(1, 1);
    r->run(&kCpu, one.h, r);
    parallel_set_threads(3, 3);
    r->run(&kCpu, three.h, r);
    for (int i = 0; i < one.n; i++) {
      const Arg *a = &r->args[i];
      if (is_input(a) && a->role != 'u' && a->role != 'a') continue;
      size_t elem = dtype_size(one.h[i].dtype);
      int64_t n = tensor_numel(&one.h[i]), differ = 0;
      for (int64_t e = 0; e < n; e++)
        differ += memcmp((char *)one.h[i].data + e * elem, (char *)three.h[i].data + e * elem, elem) != 0;
      CHECK_MSG(differ == 0, "row %d %s %s: %lld of %lld elements differ between 1 and 3 threads", row,
                r->op, a->name, (long long)differ, (long long)n);
    }
    bufs_free(&one);
    bufs_free(&three);
  }
  parallel_min_work = saved;
  parallel_set_threads(threads, threads);
}

int main(void) {
  static char names[N_FAMILIES][3][80];
  for (int f = 0; f < N_FAMILIES; f++) {
    g_family = &kFamilies[f];
    bool any_fd = false;
    for (int row = 0; row < g_family->n; row++) any_fd |= g_family->rows[row].fd.n_wrt > 0;
    snprintf(names[f][0], sizeof names[f][0], "%.24s_gradients_match_finite_differences", g_family->name);
    snprintf(names[f][1], sizeof names[f][1], "%.24s_cuda_matches_cpu", g_family->name);
    snprintf(names[f][2], sizeof names[f][2], "%.24s_cpu_threads_agree", g_family->name);
    if (any_fd) test_run(names[f][0], gradients_match_finite_differences);
    test_run(names[f][1], cuda_matches_cpu);
    test_run(names[f][2], cpu_threads_agree);
  }
  return test_finish();
}
