// The op table, in the spirit of ggml's test-backend-ops: one row per op and
// shape says which tensors the op takes (name, role, shape, value range),
// the dtypes it runs in, its tolerance rule (ops_test_util.h) and whether a
// finite-difference gradient check applies. For every row the program runs
//   - the CUDA implementation against the CPU reference on the same random
//     inputs, for each dtype of the row (SKIP "no GPU" without one; under
//     `make test-emu` on the CPU emulation of CUDA), unaligned views too
//     where the row asks (one element into every buffer: the scalar path of
//     the vectorised kernels);
//   - where the row names a gradient check, the CPU backward against central
//     differences of the CPU forward (loss = sum(y * dy) in double).
// Adding an op: its entry in the family's list (ops.h) and a row here (a run
// function calling it, then the row). Hand-checked cases, golden files and
// bad-input tests stay in tests/ops/test_ops_<family>.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

// A tensor of a row. role: 'x' input in the case dtype, 'f' input in fp32,
// 'o' output in the case dtype, 'g' output in fp32, 'u' input and output in
// the case dtype (updated in place). dims: the row's extents it takes, as
// indices into Row.d ("01" = (d[0], d[1])). Inputs are uniform on [lo, hi).
typedef struct Arg {
  const char *name;
  char role;
  const char *dims;
  float lo, hi;
} Arg;
#define MAX_ARGS 10

typedef void (*RunFn)(const Device *dev, const Tensor *t);
typedef double (*TolFn)(DType dtype);

// The finite-difference check: loss = sum(t[y] * t[dy]); for each k,
// t[grad[k]] (after run) against the derivative by t[wrt[k]]. n_wrt 0: none.
typedef struct Grad {
  int y, dy, n_wrt, wrt[3], grad[3];
} Grad;

typedef struct Row {
  const char *op;
  RunFn run;
  int64_t d[6];
  Arg args[MAX_ARGS];
  bool all_dtypes;  // fp32, fp16 and bf16 on CUDA; else fp32 only
  TolFn tol;        // of each output, at its own dtype
  bool unaligned;
  Grad fd;
} Row;

static double tol_fp32_sum(DType dtype) {  // fp32 outputs of any input dtype
  (void)dtype;
  return tol_rounded(DT_F32);
}

// ---------------------------------------------------------------- run functions
static void run_add(const Device *dev, const Tensor *t) { op_add(dev, &t[0], &t[1], &t[2]); }
static void run_mul(const Device *dev, const Tensor *t) { op_mul(dev, &t[0], &t[1], &t[2]); }
static void run_scale(const Device *dev, const Tensor *t) { op_scale(dev, &t[0], -1.5f, &t[1]); }
static void run_axpy(const Device *dev, const Tensor *t) { op_axpy(dev, 0.75f, &t[0], &t[1]); }
static void run_sum(const Device *dev, const Tensor *t) { op_sum(dev, &t[0], 1, &t[1]); }
static void run_mean(const Device *dev, const Tensor *t) { op_mean(dev, &t[0], 1, &t[1]); }
static void run_sum_all(const Device *dev, const Tensor *t) { op_sum(dev, &t[0], 2, &t[1]); }
static void run_mean_all(const Device *dev, const Tensor *t) { op_mean(dev, &t[0], 2, &t[1]); }
static void run_gelu(const Device *dev, const Tensor *t) {
  op_gelu_fwd(dev, &t[0], &t[2]);
  op_gelu_bwd(dev, &t[0], &t[1], &t[3]);
}
static void run_softmax(const Device *dev, const Tensor *t) {
  op_softmax_fwd(dev, &t[0], &t[2]);
  op_softmax_bwd(dev, &t[2], &t[1], &t[3]);
}
static void run_layernorm(const Device *dev, const Tensor *t) {
  op_layernorm_fwd(dev, &t[0], &t[1], &t[2], 1e-5f, &t[4], &t[5], &t[6]);
  op_layernorm_bwd(dev, &t[0], &t[1], &t[5], &t[6], &t[3], &t[7], &t[8], &t[9], false);
}

// ---------------------------------------------------------------- the table
#define NO_GRAD {.n_wrt = 0}
#define BINARY(name, fn, n, grad)                                                      \
  {name, fn, {n}, {{"a", 'x', "0", -2, 2}, {"b", 'x', "0", -2, 2}, {"y", 'o', "0", 0, 0}}, \
   true, tol_once_rounded, true, grad}
#define REDUCE(name, fn, m, n)                                      \
  {name, fn, {m, n}, {{"x", 'x', "01", 0, 1}, {"y", 'g', "1", 0, 0}}, true, \
   tol_fp32_sum, false, NO_GRAD}
#define REDUCE_ALL(name, fn, m, n)                                  \
  {name, fn, {m, n}, {{"x", 'x', "01", 0, 1}, {"y", 'g', "", 0, 0}}, true, \
   tol_fp32_sum, false, NO_GRAD}
#define ROWWISE(name, fn, m, n, lo, hi, grad)                                             \
  {name, fn, {m, n},                                                                      \
   {{"x", 'x', "01", lo, hi}, {"dy", 'x', "01", -1, 1}, {"y", 'o', "01", 0, 0}, {"dx", 'o', "01", 0, 0}}, \
   true, tol_rounded, true, grad}
#define LAYERNORM(m, c, grad)                                                       \
  {"layernorm", run_layernorm, {m, c},                                              \
   {{"x", 'x', "01", -2, 2}, {"gamma", 'f', "1", 0.5f, 1.5f}, {"beta", 'f', "1", -1, 1}, \
    {"dy", 'x', "01", -1, 1}, {"y", 'o', "01", 0, 0}, {"mean", 'g', "0", 0, 0}, {"rstd", 'g', "0", 0, 0},  \
    {"dx", 'o', "01", 0, 0}, {"dgamma", 'g', "1", 0, 0}, {"dbeta", 'g', "1", 0, 0}},                     \
   true, tol_rounded, false, grad}
#define GRAD_XY {.y = 2, .dy = 1, .n_wrt = 1, .wrt = {0}, .grad = {3}}
#define GRAD_LN {.y = 4, .dy = 3, .n_wrt = 3, .wrt = {0, 1, 2}, .grad = {7, 8, 9}}

static const Row kRows[] = {
    // An odd length: the 16-byte vector body plus a tail.
    BINARY("add", run_add, 100003, NO_GRAD),
    BINARY("mul", run_mul, 100003, NO_GRAD),
    {"scale", run_scale, {100003}, {{"x", 'x', "0", -2, 2}, {"y", 'o', "0", 0, 0}}, true,
     tol_once_rounded, true, NO_GRAD},
    {"axpy", run_axpy, {100003}, {{"x", 'x', "0", -2, 2}, {"y", 'u', "0", -2, 2}}, true,
     tol_once_rounded, true, NO_GRAD},
    // Many rows and few columns, few rows and many, one column, odd both.
    REDUCE("sum", run_sum, 50000, 3), REDUCE("mean", run_mean, 50000, 3),
    REDUCE("sum", run_sum, 7, 1000), REDUCE("mean", run_mean, 7, 1000),
    REDUCE_ALL("sum", run_sum_all, 200000, 1), REDUCE_ALL("mean", run_mean_all, 200000, 1),
    REDUCE("sum", run_sum, 1, 33), REDUCE("mean", run_mean, 1, 33),
    REDUCE("sum", run_sum, 4099, 65), REDUCE("mean", run_mean, 4099, 65),
    // Rows wider than a block; small odd shapes for the gradient checks.
    ROWWISE("gelu", run_gelu, 37, 1000, -4, 4, NO_GRAD),
    ROWWISE("gelu", run_gelu, 5, 31, -3, 3, GRAD_XY),
    ROWWISE("gelu", run_gelu, 1, 1, -3, 3, GRAD_XY),
    ROWWISE("softmax", run_softmax, 37, 1000, -4, 4, NO_GRAD),
    ROWWISE("softmax", run_softmax, 3, 7, -3, 3, GRAD_XY),
    ROWWISE("softmax", run_softmax, 1, 1, -3, 3, GRAD_XY),
    // More rows than reduction groups, an odd width; small ones for the check.
    LAYERNORM(301, 1031, NO_GRAD),
    LAYERNORM(3, 7, GRAD_LN),
    LAYERNORM(1, 5, GRAD_LN),
};
#define N_ROWS (int)(sizeof kRows / sizeof kRows[0])

// ---------------------------------------------------------------- the driver
typedef struct Bufs {
  int n;
  Tensor h[MAX_ARGS], d[MAX_ARGS];  // host fp32 views; device views (NULL data on CPU runs)
  float *host[MAX_ARGS];
  void *dev[MAX_ARGS];
} Bufs;

static int64_t arg_shape(const Row *r, const Arg *a, int64_t *shape) {
  int nd = (int)strlen(a->dims);
  for (int k = 0; k < nd; k++) shape[k] = r->d[a->dims[k] - '0'];
  if (nd == 0) shape[nd++] = 1;
  return nd;
}

static DType arg_dtype(const Arg *a, DType dt) {
  return a->role == 'f' || a->role == 'g' ? DT_F32 : dt;
}

static bool is_output(const Arg *a) { return a->role == 'o' || a->role == 'g' || a->role == 'u'; }

// Host (and, with gpu, device) buffers for every argument; offset 1 puts
// each view one element into its buffer.
static void bufs_make(Bufs *b, const Row *r, DType dt, uint64_t seed, bool gpu, int offset) {
  memset(b, 0, sizeof *b);
  for (int i = 0; i < MAX_ARGS && r->args[i].name; i++, b->n++) {
    const Arg *a = &r->args[i];
    int64_t shape[TENSOR_MAX_DIMS];
    int nd = (int)arg_shape(r, a, shape);
    DType adt = arg_dtype(a, dt);
    Tensor t = tensor_make(NULL, DT_F32, DEVICE_CPU, nd, shape);
    int64_t n = tensor_numel(&t) + offset;
    bool input = a->role == 'x' || a->role == 'f' || a->role == 'u';
    b->host[i] = input ? random_array(n, seed + (uint64_t)i, a->lo, a->hi, adt) : out_buf(n);
    b->h[i] = t;
    b->h[i].data = b->host[i] + offset;
    if (gpu) {
      b->dev[i] = upload(b->host[i], n, adt);
      b->d[i] = tensor_make((char *)b->dev[i] + offset * dtype_size(adt), adt, DEVICE_CUDA, nd,
                            shape);
    }
  }
}

static void bufs_free(Bufs *b) {
  for (int i = 0; i < b->n; i++) {
    free(b->host[i]);
    if (b->dev[i]) device_free(DEVICE_CUDA, b->dev[i]);
  }
}

static void cuda_case(const Device *gpu, const Row *r, int row, DType dt, int offset) {
  Bufs b;
  bufs_make(&b, r, dt, 1000 + (uint64_t)row, true, offset);
  r->run(&kCpu, b.h);
  r->run(gpu, b.d);
  device_sync(gpu);
  for (int i = 0; i < b.n; i++) {
    const Arg *a = &r->args[i];
    if (!is_output(a)) continue;
    char what[96];
    snprintf(what, sizeof what, "row %d %s %s%s", row, r->op, a->name,
             offset ? " (unaligned)" : "");
    DType adt = arg_dtype(a, dt);
    check_close(what, adt, b.d[i].data, b.h[i].data, tensor_numel(&b.h[i]), r->tol(adt));
  }
  bufs_free(&b);
}

static void cuda_matches_cpu(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  for (int row = 0; row < N_ROWS; row++) {
    const Row *r = &kRows[row];
    for (int di = 0; di < (r->all_dtypes ? N_FLOAT_DTYPES : 1); di++)
      for (int offset = 0; offset <= (r->unaligned ? 1 : 0); offset++)
        cuda_case(&gpu, r, row, kFloatDtypes[di], offset);
  }
  device_close(&gpu);
}

typedef struct FdCtx {
  const Row *r;
  Bufs *b;
} FdCtx;

static double fd_loss(void *ctx) {
  FdCtx *c = ctx;
  c->r->run(&kCpu, c->b->h);
  const float *y = c->b->h[c->r->fd.y].data, *w = c->b->h[c->r->fd.dy].data;
  double sum = 0;
  for (int64_t i = 0; i < tensor_numel(&c->b->h[c->r->fd.y]); i++) sum += (double)y[i] * w[i];
  return sum;
}

// FD_EPS, FD_FLOOR, FD_TOL: derivation in ops_test_util.h.
static void gradients_match_finite_differences(void) {
  for (int row = 0; row < N_ROWS; row++) {
    const Row *r = &kRows[row];
    if (r->fd.n_wrt == 0) continue;
    Bufs b;
    bufs_make(&b, r, DT_F32, 2000 + (uint64_t)row, false, 0);
    FdCtx c = {r, &b};
    for (int k = 0; k < r->fd.n_wrt; k++) {
      fd_loss(&c);  // the analytic gradients at the unperturbed inputs (a
                    // check leaves its last run at a perturbed one)
      const Tensor *g = &b.h[r->fd.grad[k]], *x = &b.h[r->fd.wrt[k]];
      int64_t n = tensor_numel(x);
      float *grad = malloc((size_t)n * sizeof(float));
      memcpy(grad, g->data, (size_t)n * sizeof(float));  // fd_loss overwrites g
      double e = test_gradcheck(fd_loss, &c, x->data, grad, n, FD_EPS, 60, FD_FLOOR);
      CHECK_MSG(e < FD_TOL, "row %d %s: d/d%s off by %.3g (tolerance %g)", row, r->op,
                r->args[r->fd.wrt[k]].name, e, FD_TOL);
      free(grad);
    }
    bufs_free(&b);
  }
}

int main(void) {
  TEST_RUN(gradients_match_finite_differences);
  TEST_RUN(cuda_matches_cpu);
  return test_finish();
}
