// elementwise.c: CPU reference of the elementwise arithmetic, casts and
// the uint8 input normalisation (elementwise.h).
#include "ops/elementwise.h"

#include <math.h>
#include <string.h>

#include "core/parallel.h"

// ---------------------------------------------------------------- shape checks

int64_t elem_affine_u8_channels(const Tensor *x, const Tensor *y) {
  OP_REQUIRE("op_affine_u8", x->dtype == DT_U8);
  OP_REQUIRE("op_affine_u8", y->dtype == DT_F32 || y->dtype == DT_F16 || y->dtype == DT_BF16);
  OP_REQUIRE("op_affine_u8", x->ndim >= 1 && tensor_numel(x) == tensor_numel(y));
  int64_t channels = x->shape[x->ndim - 1];
  OP_REQUIRE("op_affine_u8", channels >= 1 && channels <= 4);
  return channels;
}

// ---------------------------------------------------------------- CPU: arithmetic

static int64_t elem_binary_count(const char *op, const Tensor *a, const Tensor *b,
                                 const Tensor *y) {
  int64_t n = tensor_numel(y);
  OP_REQUIRE(op, a->dtype == DT_F32 && b->dtype == DT_F32 && y->dtype == DT_F32);
  OP_REQUIRE(op, tensor_numel(a) == n && tensor_numel(b) == n);
  return n;
}

void op_add_cpu(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_add", a, b, y);
  const float *pa = a->data, *pb = b->data;
  float *py = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) py[i] = pa[i] + pb[i];
}

void op_mul_cpu(const Device *dev, const Tensor *a, const Tensor *b, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_mul", a, b, y);
  const float *pa = a->data, *pb = b->data;
  float *py = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) py[i] = pa[i] * pb[i];
}

void op_scale_cpu(const Device *dev, const Tensor *x, float alpha, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_scale", x, x, y);
  const float *px = x->data;
  float *py = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) py[i] = alpha * px[i];
}

void op_axpy_cpu(const Device *dev, float alpha, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t n = elem_binary_count("op_axpy", x, x, y);
  const float *px = x->data;
  float *py = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) py[i] += alpha * px[i];
}

// ---------------------------------------------------------------- CPU: casts

ChannelAffine channel_affine_normalize_u8(const float mean[3], const float std[3]) {
  ChannelAffine ca = {{0}, {0}};
  for (int c = 0; c < 3; c++) {
    ca.scale[c] = 1.0f / (255.0f * std[c]);
    ca.shift[c] = -mean[c] / std[c];
  }
  return ca;
}

void op_affine_u8_cpu(const Device *dev, const Tensor *x, const ChannelAffine *a,
                      const Tensor *y) {
  (void)dev;
  int64_t channels = elem_affine_u8_channels(x, y), n = tensor_numel(x);
  const uint8_t *in = x->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++)
    dtype_store_f32(y->data, y->dtype, i, (float)in[i] * a->scale[i % channels] + a->shift[i % channels]);
}

void op_cast_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t n = tensor_numel(x);
  OP_REQUIRE("op_cast", tensor_numel(y) == n);
  OP_REQUIRE("op_cast", x->dtype == DT_F32 || x->dtype == DT_F16 || x->dtype == DT_BF16);
  OP_REQUIRE("op_cast", y->dtype == DT_F32 || y->dtype == DT_F16 || y->dtype == DT_BF16);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) dtype_store_f32(y->data, y->dtype, i, dtype_load_f32(x->data, x->dtype, i));
}
