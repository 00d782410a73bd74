// activation.c: CPU reference of GELU, softmax and dropout (activation.h)
// and the shape checks both backends share.
#include "ops/activation.h"

#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "core/rng.h"

// ---------------------------------------------------------------- GELU
void op_gelu_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  op_same_size_check("op_gelu_fwd", x, y);
  const float *in = x->data;
  float *out = y->data;
  int64_t n = tensor_numel(x);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++)
    out[i] = 0.5f * in[i] * (1.0f + erff(in[i] * (float)M_SQRT1_2));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x).
void op_gelu_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                     const Tensor *dx) {
  (void)dev;
  op_same_size_check("op_gelu_bwd", x, dy);
  op_same_size_check("op_gelu_bwd", x, dx);
  const float *in = x->data, *g = dy->data;
  float *out = dx->data;
  const float inv_sqrt_2pi = 0.3989422804014327f;
  int64_t n = tensor_numel(x);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) {
    float cdf = 0.5f * (1.0f + erff(in[i] * (float)M_SQRT1_2));
    float pdf = inv_sqrt_2pi * expf(-0.5f * in[i] * in[i]);
    out[i] = g[i] * (cdf + in[i] * pdf);
  }
}

// ---------------------------------------------------------------- softmax
// One row: y = softmax(x) over the columns with keep(j) true, 0 elsewhere
// (all zeros when none is kept).
void op_softmax_row(const float *x, float *y, int64_t cols, int64_t kept_cols) {
  float max = -INFINITY;
  for (int64_t j = 0; j < kept_cols; j++) max = fmaxf(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < kept_cols; j++) {
    y[j] = expf(x[j] - max);
    sum += y[j];
  }
  for (int64_t j = 0; j < kept_cols; j++) y[j] = (float)(y[j] / sum);
  for (int64_t j = kept_cols; j < cols; j++) y[j] = 0.0f;
}

// dx = y (dy - sum(dy y)), one row.
void op_softmax_bwd_row(const float *y, const float *dy, float *dx, int64_t cols,
                        float scale) {
  double dot = 0;
  for (int64_t j = 0; j < cols; j++) dot += (double)dy[j] * y[j];
  for (int64_t j = 0; j < cols; j++) dx[j] = scale * y[j] * (dy[j] - (float)dot);
}

void op_softmax_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  op_same_size_check("op_softmax_fwd", x, y);
  int64_t m = op_rows(x), c = op_last_dim(x);
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t i = 0; i < m; i++)
    op_softmax_row((const float *)x->data + i * c, (float *)y->data + i * c, c, c);
}

void op_softmax_bwd_cpu(const Device *dev, const Tensor *y, const Tensor *dy,
                        const Tensor *dx) {
  (void)dev;
  op_same_size_check("op_softmax_bwd", y, dy);
  op_same_size_check("op_softmax_bwd", y, dx);
  int64_t m = op_rows(y), c = op_last_dim(y);
#pragma omp parallel for if (m * c >= parallel_min_work)
  for (int64_t i = 0; i < m; i++)
    op_softmax_bwd_row((const float *)y->data + i * c, (const float *)dy->data + i * c,
                    (float *)dx->data + i * c, c, 1.0f);
}

// ---------------------------------------------------------------- dropout
void op_dropout_check(const char *op, const Tensor *x, const Tensor *y, float keep_prob) {
  op_same_size_check(op, x, y);
  OP_REQUIRE(op, keep_prob > 0.0f && keep_prob <= 1.0f);
}

// y = x * mask / keep_prob; the same for the gradient.
static void dropout_cpu(const Tensor *x, const Tensor *y, float keep_prob, uint64_t seed,
                        uint64_t stream) {
  const float *in = x->data;
  float *out = y->data;
  float scale = 1.0f / keep_prob;
  // rng_bernoulli's draws, Philox blocks (4 numbers each) a chunk at a time:
  // element i takes word i % 4 of block i / 4, as rng_u32 does. Chunks are
  // independent, so the team shares them.
  enum { CHUNK_BLOCKS = 256 };
  int64_t n = tensor_numel(x);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t start = 0; start < n; start += 4 * CHUNK_BLOCKS) {
    uint32_t words[4 * CHUNK_BLOCKS];
    int64_t count = n - start < 4 * CHUNK_BLOCKS ? n - start : 4 * CHUNK_BLOCKS;
    rng_blocks_cpu(words, (count + 3) / 4, seed, stream, (uint64_t)start / 4);
    for (int64_t j = 0; j < count; j++) {
      uint32_t keep = rng_u32_to_unit(words[j]) < keep_prob;
      out[start + j] = cpu_float_masked(in[start + j] * scale, -keep);  // vectorises
    }
  }
}

void op_dropout_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y,
                        float keep_prob, uint64_t seed, uint64_t stream) {
  (void)dev;
  op_dropout_check("op_dropout_fwd", x, y, keep_prob);
  dropout_cpu(x, y, keep_prob, seed, stream);
}

void op_dropout_bwd_cpu(const Device *dev, const Tensor *dy, const Tensor *dx,
                        float keep_prob, uint64_t seed, uint64_t stream) {
  (void)dev;
  op_dropout_check("op_dropout_bwd", dy, dx, keep_prob);
  dropout_cpu(dy, dx, keep_prob, seed, stream);
}
