// reduce.c: CPU reference of the sum / mean reductions and top-k (reduce.h)
// and the shape checks both backends share.
#include "ops/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dense.h"

// ---------------------------------------------------------------- shape checks

void reduce_topk_geometry(const Tensor *x, int k, const Tensor *values, const Tensor *indices,
                        int64_t *rows, int64_t *cols) {
  OP_REQUIRE("op_topk", x->ndim >= 1 && values->dtype == x->dtype && indices->dtype == DT_I32);
  *cols = x->shape[x->ndim - 1];
  *rows = *cols ? tensor_numel(x) / *cols : 0;
  OP_REQUIRE("op_topk", k >= 1 && k <= *cols && *cols <= INT32_MAX);
  OP_REQUIRE("op_topk", tensor_numel(values) == *rows * k && tensor_numel(indices) == *rows * k);
}

void reduce_logsumexp_geometry(const Tensor *x, const Tensor *y, int64_t *rows, int64_t *cols) {
  OP_REQUIRE("op_logsumexp", x->ndim >= 1 && y->dtype == DT_F32);
  *cols = x->shape[x->ndim - 1];
  *rows = *cols ? tensor_numel(x) / *cols : 0;
  OP_REQUIRE("op_logsumexp", *cols >= 1 && tensor_numel(y) == *rows);
}

void reduce_geometry(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                          int64_t *rows, int64_t *cols) {
  OP_REQUIRE(op, lead_axes >= 0 && lead_axes <= x->ndim && y->dtype == DT_F32);
  *rows = 1;
  *cols = 1;
  for (int d = 0; d < x->ndim; d++) *(d < lead_axes ? rows : cols) *= x->shape[d];
  OP_REQUIRE(op, tensor_numel(y) == *cols);
}

// ---------------------------------------------------------------- CPU: reductions

static void reduce_cpu(const char *op, const Tensor *x, int lead_axes, const Tensor *y,
                            bool mean) {
  int64_t rows, cols;
  reduce_geometry(op, x, lead_axes, y, &rows, &cols);
  OP_REQUIRE(op, x->dtype == DT_F32);
  double *sums = xmalloc((size_t)cols * sizeof(double));
  op_column_sums(x->data, rows, cols, sums);
  float *py = y->data;  // (cols)
  for (int64_t c = 0; c < cols; c++) py[c] = (float)(mean ? sums[c] / (double)rows : sums[c]);
  free(sums);
}

void op_sum_cpu(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  (void)dev;
  reduce_cpu("op_sum", x, lead_axes, y, false);
}

void op_mean_cpu(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  (void)dev;
  reduce_cpu("op_mean", x, lead_axes, y, true);
}

// ---------------------------------------------------------------- CPU: top-k

void op_topk_cpu(const Device *dev, const Tensor *x, int k, const Tensor *values,
                 const Tensor *indices) {
  (void)dev;
  int64_t rows, cols;
  reduce_topk_geometry(x, k, values, indices, &rows, &cols);
  OP_REQUIRE("op_topk", x->dtype == DT_F32);
  const float *px = x->data;   // (rows, cols)
  float *pv = values->data;    // (rows, k)
  int32_t *pi = indices->data; // (rows, k)
  // k rounds, each picking the largest key below the previous pick: the
  // same selection the CUDA kernel makes, without scratch memory.
  for (int64_t r = 0; r < rows; r++) {
    const float *row = px + r * cols;
    uint64_t bound = 0;  // the previous pick's key; unused in round 0
    for (int j = 0; j < k; j++) {
      uint64_t best = 0;
      int64_t best_c = -1;
      for (int64_t c = 0; c < cols; c++) {
        uint32_t bits;
        memcpy(&bits, &row[c], 4);
        uint64_t key = reduce_topk_key(bits, c);
        if ((j == 0 || key < bound) && (best_c < 0 || key > best)) {
          best = key;
          best_c = c;
        }
      }
      bound = best;
      pv[r * k + j] = row[best_c];
      pi[r * k + j] = (int32_t)best_c;
    }
  }
}

// ---------------------------------------------------------------- CPU: log-sum-exp

void op_logsumexp_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t rows, cols;
  reduce_logsumexp_geometry(x, y, &rows, &cols);
  OP_REQUIRE("op_logsumexp", x->dtype == DT_F32);
  const float *px = x->data;
  float *py = y->data;
  for (int64_t r = 0; r < rows; r++) {
    const float *row = px + r * cols;
    float mx = -INFINITY;
    bool nan = false;
    for (int64_t c = 0; c < cols; c++) nan |= isnan(row[c]), mx = row[c] > mx ? row[c] : mx;
    if (nan || isinf(mx)) {  // NaN; every value -inf; a +inf
      py[r] = nan ? NAN : mx;
      continue;
    }
    double sum = 0;
    for (int64_t c = 0; c < cols; c++) sum += exp((double)row[c] - mx);
    py[r] = (float)(mx + log(sum));
  }
}
