// norm.c: CPU reference of layer norm (norm.h) and its shape check.
#include "ops/norm.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"

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
