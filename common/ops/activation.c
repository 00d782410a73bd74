// activation.c: CPU reference of GELU, softmax and dropout (activation.h)
// and the shape checks both backends share.
#include "ops/activation.h"

#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "core/rng.h"

// ---------------------------------------------------------------- GELU
// GELU(x) = x Phi(x), Phi the standard normal CDF, with no libm call in
// the loops so that they vectorise (an erff and an expf a call took a tenth
// of an encoder layer's training step). Phi(x) = erfc(-x / sqrt 2) / 2, and
// for z >= 0 erfc(z) = t e^(-z^2 + P(t)), t = 1 / (1 + z / 2), P the
// polynomial of degree 9 that scripts/fit_erfc.py fits over z in [0, 10]
// (5e-8 relative in exact arithmetic). In fp32, GELU and its derivative are
// within (2 x^2 + 16) 2^-24 relative (4e-7 for |x| <= 1, 6e-6 at |x| = 8;
// test_ops_activation.c): the rounding of z, magnified by e^(-z^2),
// dominates. erff from libm is closer near 0 (1e-7) and far off in the
// left tail, where 1 + erff(x / sqrt 2) keeps only a few bits of Phi.

// e^x for x <= 0 in fp32: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its
// Taylor series to r^7 (5e-9 relative at most), 2^n written into the
// exponent bits. 0 below -87, where e^x leaves fp32's normal range; NaN
// stays NaN (every step is arithmetic or a bit copy).
static inline float gelu_exp(float x) {
  const float magic = 12582912.0f;  // 1.5 x 2^23: adding it rounds to an integer
  float xc = cpu_float_select(x < -87.0f, -87.0f, x);
  float k = xc * 1.44269504f + magic;  // magic + n, n = round(x / ln 2)
  float n = k - magic;
  float r = (xc - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 in two parts: n ln2_hi is exact
  float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                    r * (1.0f / 720 + r * (1.0f / 5040)))))));
  uint32_t k_bits, magic_bits;
  memcpy(&k_bits, &k, sizeof k_bits);
  memcpy(&magic_bits, &magic, sizeof magic_bits);
  uint32_t bits = (k_bits - magic_bits + 127u) << 23;  // 2^n: n + 127 in the exponent field
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  return cpu_float_select(x < -87.0f, 0.0f, p * two_n);
}

// Phi(x), from erfc(|x| / sqrt 2) / 2 and its reflection.
static inline float gelu_cdf(float x) {
  // P's coefficients, t^0 first (scripts/fit_erfc.py).
  const float p0 = -1.265447997e+00f, p1 = 9.986327834e-01f, p2 = 3.866404119e-01f,
              p3 = 3.460280100e-02f, p4 = 1.267583484e-03f, p5 = -8.028042686e-02f,
              p6 = -6.962519052e-01f, p7 = 1.156733762e+00f, p8 = -6.808271797e-01f,
              p9 = 1.449302141e-01f;
  float z = fabsf(x) * (float)M_SQRT1_2;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = p0 + t * (p1 + t * (p2 + t * (p3 + t * (p4 + t * (p5 + t * (p6 + t * (p7 + t * (p8 +
                                                                          t * p9))))))));
  float half_erfc = 0.5f * t * gelu_exp(p - z * z);
  return cpu_float_select(x < 0.0f, half_erfc, 1.0f - half_erfc);
}

enum { GELU_PIECE = 4096 };

CPU_VECTORISED
static void gelu_fwd_range(const float *in, float *out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) out[i] = in[i] * gelu_cdf(in[i]);
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x).
CPU_VECTORISED
static void gelu_bwd_range(const float *in, const float *g, float *out, int64_t i0, int64_t i1) {
  const float inv_sqrt_2pi = 0.3989422804014327f;
  for (int64_t i = i0; i < i1; i++) {
    float pdf = inv_sqrt_2pi * gelu_exp(-0.5f * in[i] * in[i]);
    out[i] = g[i] * (gelu_cdf(in[i]) + in[i] * pdf);
  }
}

void op_gelu_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  op_same_size_check("op_gelu_fwd", x, y);
  int64_t n = tensor_numel(x), pieces = parallel_pieces(n, GELU_PIECE);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++)
    gelu_fwd_range(x->data, y->data, p * GELU_PIECE, parallel_piece_end(n, GELU_PIECE, p));
}

void op_gelu_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                     const Tensor *dx) {
  (void)dev;
  op_same_size_check("op_gelu_bwd", x, dy);
  op_same_size_check("op_gelu_bwd", x, dx);
  int64_t n = tensor_numel(x), pieces = parallel_pieces(n, GELU_PIECE);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++)
    gelu_bwd_range(x->data, dy->data, dx->data, p * GELU_PIECE,
                   parallel_piece_end(n, GELU_PIECE, p));
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

void op_gelu_dropout_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y,
                             float keep_prob, uint64_t seed, uint64_t stream) {
  op_dropout_check("op_gelu_dropout_fwd", x, y, keep_prob);
  op_gelu_fwd_cpu(dev, x, y);
  op_dropout_fwd_cpu(dev, y, y, keep_prob, seed, stream);
}

void op_gelu_dropout_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                             const Tensor *dx, float keep_prob, uint64_t seed, uint64_t stream) {
  op_dropout_check("op_gelu_dropout_bwd", dy, dx, keep_prob);
  op_same_size_check("op_gelu_dropout_bwd", x, dy);
  op_dropout_bwd_cpu(dev, dy, dx, keep_prob, seed, stream);
  op_gelu_bwd_cpu(dev, x, dx, dx);
}
