// norm.c: CPU reference of layer norm and batch norm (norm.h) and their
// shape checks.
#include "ops/norm.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/elementwise.h"

// ---------------------------------------------------------------- layer norm
void op_layernorm_check(const Tensor *x, const Tensor *gamma, const Tensor *y,
                        const Tensor *mean, const Tensor *rstd) {
  int64_t c = op_last_dim(x), m = op_rows(x);
  OP_REQUIRE("op_layernorm", tensor_numel(y) == m * c && y->dtype == x->dtype);
  OP_REQUIRE("op_layernorm", tensor_numel(gamma) == c && gamma->dtype == DT_F32);
  OP_REQUIRE("op_layernorm", tensor_numel(mean) == m && mean->dtype == DT_F32);
  OP_REQUIRE("op_layernorm", tensor_numel(rstd) == m && rstd->dtype == DT_F32);
}

void op_layernorm_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *beta, float eps, const Tensor *y,
                          const Tensor *mean, const Tensor *rstd) {
  (void)dev;
  op_layernorm_check(x, gamma, y, mean, rstd);
  OP_REQUIRE("op_layernorm_fwd", tensor_same_shape(beta, gamma));
  int64_t m = op_rows(x), c = op_last_dim(x);
  const float *g = gamma->data, *b = beta->data;  // (C)
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t i = 0; i < m; i++) {
    const float *row = (const float *)x->data + i * c;  // (C)
    float *out = (float *)y->data + i * c;              // (C)
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < c; j++) sum += row[j];
    double mu = sum / c;
    for (int64_t j = 0; j < c; j++) sq += (row[j] - mu) * (row[j] - mu);
    float rs = (float)(1.0 / sqrt(sq / c + eps));
    for (int64_t j = 0; j < c; j++) out[j] = ((row[j] - (float)mu) * rs) * g[j] + b[j];
    ((float *)mean->data)[i] = (float)mu;
    ((float *)rstd->data)[i] = rs;
  }
}

void op_residual_layernorm_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y,
                                   float keep_prob, uint64_t seed, uint64_t stream,
                                   const Tensor *gamma, const Tensor *beta, float eps,
                                   const Tensor *sum, const Tensor *out, const Tensor *mean,
                                   const Tensor *rstd) {
  OP_REQUIRE("op_residual_layernorm_fwd", keep_prob > 0.0f && keep_prob <= 1.0f);
  OP_REQUIRE("op_residual_layernorm_fwd", tensor_same_shape(x, sum) && tensor_same_shape(y, sum));
  const Tensor *kept = y;
  if (keep_prob < 1.0f) op_dropout_fwd_cpu(dev, y, sum, keep_prob, seed, stream), kept = sum;
  op_add_cpu(dev, x, kept, sum);
  op_layernorm_fwd_cpu(dev, sum, gamma, beta, eps, out, mean, rstd);
}

// Rows per piece of the dgamma, dbeta sums: each piece sums its rows in
// double, and the pieces are added in order (the same bits at any thread
// count, core/parallel.h).
enum { LN_ROWS = 64 };

// With xhat = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),
//   dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy.
void op_layernorm_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *gamma,
                          const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                          const Tensor *dx, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate) {
  (void)dev;
  op_layernorm_check(x, gamma, dy, mean, rstd);
  OP_REQUIRE("op_layernorm_bwd", tensor_same_shape(dx, dy));
  OP_REQUIRE("op_layernorm_bwd",
             tensor_same_shape(dgamma, gamma) && tensor_same_shape(dbeta, gamma));
  int64_t m = op_rows(x), c = op_last_dim(x);
  const float *gam = gamma->data;               // (C)
  float *dg = dgamma->data, *db = dbeta->data;  // (C)
  int64_t pieces = parallel_pieces(m, LN_ROWS);
  double *part = xmalloc((size_t)(2 * pieces * c) * sizeof(double));  // (2, pieces, C)
  double *sums = xmalloc((size_t)(2 * c) * sizeof(double));            // dgamma, dbeta
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    double *pdg = part + p * c, *pdb = part + (pieces + p) * c;
    for (int64_t j = 0; j < c; j++) pdg[j] = pdb[j] = 0;
    for (int64_t i = p * LN_ROWS; i < m && i < (p + 1) * LN_ROWS; i++) {
      const float *row = (const float *)x->data + i * c,
                  *g = (const float *)dy->data + i * c;
      float *out = (float *)dx->data + i * c;
      float mu = ((const float *)mean->data)[i], rs = ((const float *)rstd->data)[i];
      double mean_g = 0, mean_gx = 0;
      for (int64_t j = 0; j < c; j++) {
        float xhat = (row[j] - mu) * rs;
        mean_g += g[j] * gam[j];
        mean_gx += g[j] * gam[j] * xhat;
        pdg[j] += g[j] * xhat;
        pdb[j] += g[j];
      }
      mean_g /= c;
      mean_gx /= c;
      for (int64_t j = 0; j < c; j++) {
        float xhat = (row[j] - mu) * rs;
        out[j] = rs * (g[j] * gam[j] - (float)mean_g - xhat * (float)mean_gx);
      }
    }
  }
  parallel_add_pieces(part, pieces, c, sums);
  parallel_add_pieces(part + pieces * c, pieces, c, sums + c);
  for (int64_t j = 0; j < c; j++) {
    dg[j] = (float)sums[j] + (accumulate ? dg[j] : 0.0f);
    db[j] = (float)sums[c + j] + (accumulate ? db[j] : 0.0f);
  }
  free(part);
  free(sums);
}

// ---------------------------------------------------------------- batch norm
void batchnorm_geometry(const char *op, const BatchNorm *bn, const Tensor *x, int64_t *m,
                        int64_t *c) {
  OP_REQUIRE(op, x->ndim >= 1);
  *c = x->shape[x->ndim - 1];
  *m = *c ? tensor_numel(x) / *c : 0;
  const Tensor *params[] = {&bn->gamma, &bn->beta, &bn->running_mean, &bn->running_var,
                            &bn->save_mean, &bn->save_invstd};
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
    OP_REQUIRE(op, params[i]->dtype == DT_F32 && tensor_numel(params[i]) == *c);
  OP_REQUIRE(op, bn->eps > 0 && bn->momentum >= 0 && bn->momentum <= 1);
}

// Rows go in pieces of BN_ROWS, on the team's threads. Each piece sums its
// rows per channel in double; the pieces' sums are then added in piece order,
// so any number of threads gives the same bits (core/parallel.h). The loops
// over a piece's rows are the CPU_VECTORISED functions below: channels
// innermost, each channel's sum in row order.
enum { BN_ROWS = 256 };

static void bn_require_f32(const char *op, const Tensor *x, const Tensor *z, const Tensor *y) {
  OP_REQUIRE(op, x->dtype == DT_F32 && y->dtype == DT_F32 && tensor_numel(y) == tensor_numel(x));
  OP_REQUIRE(op, !z || (z->dtype == DT_F32 && tensor_numel(z) == tensor_numel(x)));
}

// Rows [r0, r1) of x (M, C): sum[j] = the sum of x[i][j].
CPU_VECTORISED
static void bn_rows_sum(const float *x, int64_t r0, int64_t r1, int64_t c, double *sum) {
  for (int64_t j = 0; j < c; j++) sum[j] = 0;
  for (int64_t i = r0; i < r1; i++) {
    const float *xr = x + i * c;
    for (int64_t j = 0; j < c; j++) sum[j] += xr[j];
  }
}

// sq[j] = the sum of (x[i][j] - mean[j])^2.
CPU_VECTORISED
static void bn_rows_sq_dev(const float *x, int64_t r0, int64_t r1, int64_t c, const double *mean,
                           double *sq) {
  for (int64_t j = 0; j < c; j++) sq[j] = 0;
  for (int64_t i = r0; i < r1; i++) {
    const float *xr = x + i * c;
    for (int64_t j = 0; j < c; j++) {
      double d = xr[j] - mean[j];
      sq[j] += d * d;
    }
  }
}

// y = act(scale[j] x + shift[j] (+ z)).
CPU_VECTORISED
static void bn_rows_apply(const float *x, const float *z, float *y, int64_t r0, int64_t r1,
                          int64_t c, const float *scale, const float *shift, bool relu) {
  for (int64_t i = r0; i < r1; i++) {
    const float *xr = x + i * c;
    float *yr = y + i * c;
    if (z) {
      const float *zr = z + i * c;
      for (int64_t j = 0; j < c; j++) {
        float v = scale[j] * xr[j] + shift[j] + zr[j];
        yr[j] = relu && !(v > 0) ? 0.0f : v;
      }
    } else {
      for (int64_t j = 0; j < c; j++) {
        float v = scale[j] * xr[j] + shift[j];
        yr[j] = relu && !(v > 0) ? 0.0f : v;
      }
    }
  }
}

// dy through the ReLU: dy, or 0 where the ReLU's output y is not positive
// (selected on the bits, so that the loops below vectorise).
static inline float bn_relu_grad(float dy, float y, bool relu) {
  uint32_t keep = !relu | (y > 0);  // `|`, not `||`: no branch either
  return cpu_float_masked(dy, -keep);
}

// The gradient's sums, g = dy through the ReLU (where y is not positive, 0):
// sg[j] = the sum of g, sgx[j] = the sum of g xhat.
CPU_VECTORISED
static void bn_rows_grad_sums(const float *x, const float *y, const float *dy, int64_t r0,
                              int64_t r1, int64_t c, bool relu, const float *mean,
                              const float *invstd, double *sg, double *sgx) {
  for (int64_t j = 0; j < c; j++) sg[j] = sgx[j] = 0;
  for (int64_t i = r0; i < r1; i++) {
    const float *xr = x + i * c, *yr = y + i * c, *dyr = dy + i * c;
    for (int64_t j = 0; j < c; j++) {
      float g = bn_relu_grad(dyr[j], yr[j], relu);
      sg[j] += g;
      sgx[j] += (double)g * (xr[j] - mean[j]) * invstd[j];
    }
  }
}

// dx = k (g - mg - xhat mgx) with k = gamma invstd, mg and mgx the means of
// g and g xhat; dz = g where there is a residual branch.
CPU_VECTORISED
static void bn_rows_dx(const float *x, const float *y, const float *dy, float *dx, float *dz,
                       int64_t r0, int64_t r1, int64_t c, bool relu, const float *mean,
                       const float *invstd, const float *k, const float *mg, const float *mgx) {
  for (int64_t i = r0; i < r1; i++) {
    const float *xr = x + i * c, *yr = y + i * c, *dyr = dy + i * c;
    float *dxr = dx + i * c;
    if (dz) {  // each element read before it is written: dx or dz may be dy
      float *dzr = dz + i * c;
#pragma omp simd  // GCC declines these two loops unless told they are safe
      for (int64_t j = 0; j < c; j++) {
        float g = bn_relu_grad(dyr[j], yr[j], relu);
        float xhat = (xr[j] - mean[j]) * invstd[j];
        dzr[j] = g;
        dxr[j] = k[j] * (g - mg[j] - xhat * mgx[j]);
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; j++) {
        float g = bn_relu_grad(dyr[j], yr[j], relu);
        float xhat = (xr[j] - mean[j]) * invstd[j];
        dxr[j] = k[j] * (g - mg[j] - xhat * mgx[j]);
      }
    }
  }
}

#define BN_PIECE(p, m) int64_t r0 = (p) * BN_ROWS, r1 = r0 + BN_ROWS < (m) ? r0 + BN_ROWS : (m)

// y = act(scale[c] x + shift[c] (+ z)) with scale = gamma invstd and shift =
// beta - mean scale, the statistics given as (mean, invstd) or, for
// inference, as (running mean, running variance).
static void bn_apply_cpu(const BatchNorm *bn, const float *mean, const float *spread,
                         bool spread_is_var, const Tensor *x, const Tensor *z, bool relu,
                         const Tensor *y, int64_t m, int64_t c) {
  const float *gamma = bn->gamma.data, *beta = bn->beta.data;
  float *scale = xmalloc((size_t)(2 * c) * sizeof(float)), *shift = scale + c;
  for (int64_t j = 0; j < c; j++) {
    float invstd = spread_is_var ? 1.0f / sqrtf(spread[j] + bn->eps) : spread[j];
    scale[j] = gamma[j] * invstd;
    shift[j] = beta[j] - mean[j] * scale[j];
  }
  int64_t pieces = parallel_pieces(m, BN_ROWS);
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    BN_PIECE(p, m);
    bn_rows_apply(x->data, z ? z->data : NULL, y->data, r0, r1, c, scale, shift, relu);
  }
  free(scale);
}

void op_batchnorm_fwd_train_cpu(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                const Tensor *z, bool relu, const Tensor *y) {
  (void)dev;
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_train", bn, x, &m, &c);
  bn_require_f32("op_batchnorm_fwd_train", x, z, y);
  OP_REQUIRE("op_batchnorm_fwd_train", m >= 2);  // the unbiased variance needs two
  float *save_mean = bn->save_mean.data, *save_invstd = bn->save_invstd.data;
  float *run_mean = bn->running_mean.data, *run_var = bn->running_var.data;
  int64_t pieces = parallel_pieces(m, BN_ROWS);
  double *part = xmalloc((size_t)(pieces * c) * sizeof(double));
  double *mean = xmalloc((size_t)(2 * c) * sizeof(double)), *sq = mean + c;
  // Two passes (mean, then squared deviations): no cancellation.
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    BN_PIECE(p, m);
    bn_rows_sum(x->data, r0, r1, c, part + p * c);
  }
  parallel_add_pieces(part, pieces, c, mean);
  for (int64_t j = 0; j < c; j++) mean[j] /= (double)m;
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    BN_PIECE(p, m);
    bn_rows_sq_dev(x->data, r0, r1, c, mean, part + p * c);
  }
  parallel_add_pieces(part, pieces, c, sq);
  for (int64_t j = 0; j < c; j++) {
    double var = sq[j] / (double)m;
    save_mean[j] = (float)mean[j];
    save_invstd[j] = (float)(1.0 / sqrt(var + bn->eps));
    run_mean[j] = (1 - bn->momentum) * run_mean[j] + bn->momentum * (float)mean[j];
    run_var[j] = (1 - bn->momentum) * run_var[j] +
                 bn->momentum * (float)(var * (double)m / (double)(m - 1));
  }
  free(part);
  free(mean);
  bn_apply_cpu(bn, save_mean, save_invstd, false, x, z, relu, y, m, c);
}

void op_batchnorm_fwd_infer_cpu(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                const Tensor *z, bool relu, const Tensor *y) {
  (void)dev;
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_infer", bn, x, &m, &c);
  bn_require_f32("op_batchnorm_fwd_infer", x, z, y);
  bn_apply_cpu(bn, bn->running_mean.data, bn->running_var.data, true, x, z, relu, y, m, c);
}

void op_batchnorm_bwd_cpu(const Device *dev, const BatchNorm *bn, const Tensor *x,
                          const Tensor *y, const Tensor *dy, bool relu, const Tensor *dx,
                          const Tensor *dz, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate) {
  (void)dev;
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_bwd", bn, x, &m, &c);
  bn_require_f32("op_batchnorm_bwd", x, dz, y);
  bn_require_f32("op_batchnorm_bwd", x, dy, dx);
  OP_REQUIRE("op_batchnorm_bwd", dgamma->dtype == DT_F32 && tensor_numel(dgamma) == c);
  OP_REQUIRE("op_batchnorm_bwd", dbeta->dtype == DT_F32 && tensor_numel(dbeta) == c);
  const float *gamma = bn->gamma.data, *mean = bn->save_mean.data, *invstd = bn->save_invstd.data;
  float *pdgamma = dgamma->data, *pdbeta = dbeta->data;
  int64_t pieces = parallel_pieces(m, BN_ROWS);
  double *part = xmalloc((size_t)(2 * pieces * c) * sizeof(double));
  double *sum_g = xmalloc((size_t)(2 * c) * sizeof(double)), *sum_gx = sum_g + c;
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    BN_PIECE(p, m);
    bn_rows_grad_sums(x->data, y->data, dy->data, r0, r1, c, relu, mean, invstd, part + p * c,
                      part + (pieces + p) * c);
  }
  parallel_add_pieces(part, pieces, c, sum_g);
  parallel_add_pieces(part + pieces * c, pieces, c, sum_gx);
  float *k = xmalloc((size_t)(3 * c) * sizeof(float)), *mg = k + c, *mgx = k + 2 * c;
  for (int64_t j = 0; j < c; j++) {
    pdbeta[j] = (float)sum_g[j] + (accumulate ? pdbeta[j] : 0.0f);
    pdgamma[j] = (float)sum_gx[j] + (accumulate ? pdgamma[j] : 0.0f);
    mg[j] = (float)(sum_g[j] / (double)m);
    mgx[j] = (float)(sum_gx[j] / (double)m);
    k[j] = gamma[j] * invstd[j];
  }
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    BN_PIECE(p, m);
    bn_rows_dx(x->data, y->data, dy->data, dx->data, dz ? dz->data : NULL, r0, r1, c, relu, mean,
               invstd, k, mg, mgx);
  }
  free(part);
  free(sum_g);
  free(k);
}
