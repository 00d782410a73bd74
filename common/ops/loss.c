// loss.c: CPU reference of the losses and the checks both backends share.
#include "ops/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"


void op_loss_check(const char *op, const Tensor *input, const Tensor *target,
                   const Tensor *loss, const Tensor *dinput) {
  OP_REQUIRE(op, tensor_numel(target) == tensor_numel(input) && target->dtype == DT_F32);
  OP_REQUIRE(op, tensor_numel(loss) == 1 && loss->dtype == DT_F32);
  op_same_size_check(op, input, dinput);
}

void op_softmax_xent_check(const Tensor *logits, const Tensor *labels, const Tensor *loss,
                           const Tensor *row_loss, const Tensor *dlogits) {
  const char *op = "op_softmax_xent";
  OP_REQUIRE(op, labels->dtype == DT_I32 || labels->dtype == DT_I64);
  OP_REQUIRE(op, tensor_numel(labels) == op_rows(logits));
  OP_REQUIRE(op, tensor_numel(loss) == 1 && loss->dtype == DT_F32);
  OP_REQUIRE(op, !row_loss || (tensor_numel(row_loss) == op_rows(logits) &&
                               row_loss->dtype == DT_F32));
  op_same_size_check(op, logits, dlogits);
}

static int64_t label_at(const Tensor *labels, int64_t i) {
  return labels->dtype == DT_I64 ? ((const int64_t *)labels->data)[i]
                                 : ((const int32_t *)labels->data)[i];
}

// One row: writes (p - target) norm into d and returns the row loss. Each
// exponential is taken once, in double: exp(x - max) is kept in d, and p is
// that over its row sum.
static double xent_row(const float *x, int64_t cols, int64_t label, float smoothing, float norm,
                       float *d) {
  float max = -INFINITY;
  for (int64_t j = 0; j < cols; j++) max = fmaxf(max, x[j]);
  double sum = 0, sum_logits = 0;
  for (int64_t j = 0; j < cols; j++) {
    double e = exp((double)x[j] - max);
    d[j] = (float)e;
    sum += e;
    sum_logits += x[j];
  }
  double lse = max + log(sum), inv = 1.0 / sum;
  float off = smoothing / (float)cols, on = 1.0f - smoothing + off;
  for (int64_t j = 0; j < cols; j++)
    d[j] = ((float)(d[j] * inv) - (j == label ? on : off)) * norm;
  // -sum_c log p[c] = C lse - sum_c x[c]
  return (1.0 - smoothing) * (lse - x[label]) + smoothing * (lse - sum_logits / cols);
}

void op_softmax_xent_cpu(const Device *dev, const Tensor *logits, const Tensor *labels,
                         float smoothing, int64_t ignore_index, float grad_scale,
                         const Tensor *loss, const Tensor *row_loss,
                         const Tensor *dlogits) {
  (void)dev;
  op_softmax_xent_check(logits, labels, loss, row_loss, dlogits);
  int64_t rows = op_rows(logits), cols = op_last_dim(logits), kept = 0;
  for (int64_t i = 0; i < rows; i++) {
    int64_t label = label_at(labels, i);
    if (label == ignore_index) continue;
    if (label < 0 || label >= cols)
      die_input("cross-entropy labels", "label %lld of row %lld is outside [0, %lld)",
                (long long)label, (long long)i, (long long)cols);
    kept++;
  }
  float norm = kept ? grad_scale / (float)kept : 0.0f;
  // The rows on the team; their losses are added in row order after.
  double *row = xmalloc((size_t)(rows ? rows : 1) * sizeof(double));
#pragma omp parallel for if (rows * cols >= parallel_min_work)
  for (int64_t i = 0; i < rows; i++) {
    int64_t label = label_at(labels, i);
    float *d = (float *)dlogits->data + i * cols;  // (C)
    if (label == ignore_index) {
      memset(d, 0, (size_t)cols * sizeof(float));
      row[i] = 0;
    } else {
      row[i] = xent_row((const float *)logits->data + i * cols, cols, label, smoothing, norm, d);
    }
  }
  double total = 0;
  for (int64_t i = 0; i < rows; i++) {
    if (row_loss) ((float *)row_loss->data)[i] = (float)row[i];
    total += row[i];
  }
  free(row);
  *(float *)loss->data = kept ? (float)(total / kept) : 0.0f;
}

void op_bce_logits_cpu(const Device *dev, const Tensor *logits, const Tensor *targets,
                       float grad_scale, const Tensor *loss, const Tensor *dlogits) {
  (void)dev;
  op_loss_check("op_bce_logits", logits, targets, loss, dlogits);
  int64_t n = tensor_numel(logits);
  const float *x = logits->data, *t = targets->data;
  float *d = dlogits->data;
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    total += fmaxf(x[i], 0.0f) - x[i] * t[i] + log1pf(expf(-fabsf(x[i])));
    d[i] = grad_scale * (1.0f / (1.0f + expf(-x[i])) - t[i]) / (float)n;
  }
  *(float *)loss->data = n ? (float)(total / n) : 0.0f;
}

void op_smooth_l1_cpu(const Device *dev, const Tensor *pred, const Tensor *target,
                      float beta, float grad_scale, const Tensor *loss,
                      const Tensor *dpred) {
  (void)dev;
  op_loss_check("op_smooth_l1", pred, target, loss, dpred);
  OP_REQUIRE("op_smooth_l1", beta > 0.0f);
  int64_t n = tensor_numel(pred);
  const float *p = pred->data, *t = target->data;
  float *d = dpred->data;
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    float diff = p[i] - t[i], a = fabsf(diff);
    total += a < beta ? 0.5f * diff * diff / beta : a - 0.5f * beta;
    float g = a < beta ? diff / beta : (diff > 0 ? 1.0f : -1.0f);
    d[i] = grad_scale * g / (float)n;
  }
  *(float *)loss->data = n ? (float)(total / n) : 0.0f;
}



