// dense.c: CPU reference of the dense ops (OpenBLAS for the products) and
// the shape checks both backends and the other families share.
#include "ops/dense.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"

int64_t op_last_dim(const Tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

int64_t op_rows(const Tensor *t) {
  int64_t last = op_last_dim(t);
  return last ? tensor_numel(t) / last : 0;
}

Tensor op_as_matrix(const Tensor *t) {
  return TENSOR(t->data, t->dtype, t->device, op_rows(t), op_last_dim(t));
}

void op_same_size_check(const char *op, const Tensor *a, const Tensor *b) {
  if (tensor_numel(a) != tensor_numel(b) || a->dtype != b->dtype)
    DIE("%s: tensors of %lld %s and %lld %s elements", op, (long long)tensor_numel(a),
        dtype_name(a->dtype), (long long)tensor_numel(b), dtype_name(b->dtype));
}

void op_gemm_set_tf32_cpu(const Device *dev, bool allow) {
  (void)dev;
  (void)allow;  // CPU products are fp32
}

void op_linear_set_epilogues_cpu(const Device *dev, bool allow) {
  (void)dev;
  (void)allow;  // the CPU adds the bias after its product
}

// (rows, cols) of the last two dimensions and the batch count; a 2-D operand
// has batch 0 (shared by every batch entry).
static void gemm_operand(const Tensor *t, int64_t *rows, int64_t *cols, int64_t *batch) {
  OP_REQUIRE("op_gemm", t->ndim == 2 || t->ndim == 3);
  *rows = t->shape[t->ndim - 2];
  *cols = t->shape[t->ndim - 1];
  *batch = t->ndim == 3 ? t->shape[0] : 0;
}

GemmShape op_gemm_shape(const Tensor *a, bool trans_a, const Tensor *b, bool trans_b,
                        const Tensor *c) {
  int64_t ar, ac, br, bc, cr, cc;
  GemmShape s;
  gemm_operand(a, &ar, &ac, &s.batch_a);
  gemm_operand(b, &br, &bc, &s.batch_b);
  gemm_operand(c, &cr, &cc, &s.batch);
  s.m = trans_a ? ac : ar;
  s.k = trans_a ? ar : ac;
  s.n = trans_b ? br : bc;
  // Row strides; at least 1 even for an empty inner dimension, which BLAS
  // libraries require of a leading dimension.
  s.lda = ac > 1 ? ac : 1;
  s.ldb = bc > 1 ? bc : 1;
  OP_REQUIRE("op_gemm", (trans_b ? bc : br) == s.k);
  OP_REQUIRE("op_gemm", cr == s.m && cc == s.n);
  OP_REQUIRE("op_gemm", s.batch_a == 0 || s.batch_a == s.batch);
  OP_REQUIRE("op_gemm", s.batch_b == 0 || s.batch_b == s.batch);
  OP_REQUIRE("op_gemm", a->dtype == b->dtype);
  // A 3-D operand of batch 0 reads as "shared" above: an empty batch is no
  // product at all (batch 0), not one product over empty buffers.
  bool empty = (a->ndim == 3 && s.batch_a == 0) || (b->ndim == 3 && s.batch_b == 0) ||
               (c->ndim == 3 && s.batch == 0);
  OP_REQUIRE("op_gemm", !empty || c->ndim == 3);
  if (!empty && s.batch == 0) s.batch = 1;
  return s;
}

// On the team's threads: a batched product one entry per task; a single one
// cut into row pieces of C (GEMM_PIECES at most, at least GEMM_MIN_ROWS rows
// each), each an OpenBLAS call of its own on one thread. The pieces depend on
// the shape alone and every element of C is one call's K-long sum, so the
// bits do not depend on the team's size (core/parallel.h).
enum { GEMM_PIECES = 8, GEMM_MIN_ROWS = 32 };

static void gemm_rows(bool trans_a, bool trans_b, int64_t rows, const GemmShape *s, float alpha,
                      const float *pa, const float *pb, float beta, float *pc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (int)rows, (int)s->n, (int)s->k, alpha, pa,
              (int)s->lda, pb, (int)s->ldb, beta, pc, (int)s->n);
}

void op_gemm_cpu(const Device *dev, const Tensor *a, bool trans_a, const Tensor *b,
                 bool trans_b, const Tensor *c, float alpha, float beta) {
  (void)dev;
  GemmShape s = op_gemm_shape(a, trans_a, b, trans_b, c);
  OP_REQUIRE("op_gemm", a->dtype == DT_F32 && c->dtype == DT_F32);
  if (s.m == 0 || s.n == 0 || s.batch == 0) return;  // batch 0: an empty batch, no product
  int64_t work = s.batch * s.m * s.n * (s.k > 0 ? s.k : 1);
  (void)work;  // read by the pragmas alone (a build without OpenMP ignores them)
  if (s.batch > 1) {
#pragma omp parallel for if (work >= parallel_min_work)
    for (int64_t i = 0; i < s.batch; i++)
      gemm_rows(trans_a, trans_b, s.m, &s, alpha,
                (const float *)a->data + (s.batch_a ? i * s.m * s.k : 0),
                (const float *)b->data + (s.batch_b ? i * s.k * s.n : 0), beta,
                (float *)c->data + i * s.m * s.n);
    return;
  }
  int64_t pieces = s.m / GEMM_MIN_ROWS;
  if (pieces > GEMM_PIECES) pieces = GEMM_PIECES;
  if (pieces < 1) pieces = 1;
  int64_t step = (s.m + pieces - 1) / pieces;
  pieces = (s.m + step - 1) / step;
  // Row r of op(A): row r of A, or its column r when A is transposed.
  int64_t a_row = trans_a ? 1 : s.lda;
#pragma omp parallel for if (work >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    int64_t r0 = p * step, rows = s.m - r0 < step ? s.m - r0 : step;
    gemm_rows(trans_a, trans_b, rows, &s, alpha, (const float *)a->data + r0 * a_row,
              (const float *)b->data, beta, (float *)c->data + r0 * s.n);
  }
}

// Columns [c0, c0 + cn) of x, cn <= COLUMN_BLOCK: its rows read along
// memory into one double accumulator a column.
enum { COLUMN_BLOCK = 64 };
CPU_VECTORISED
static void column_block_sums(const float *x, int64_t rows, int64_t cols, int64_t c0, int64_t cn,
                              double *sums) {
  double acc[COLUMN_BLOCK] = {0};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cn; c++) acc[c] += x[r * cols + c0 + c];
  memcpy(sums + c0, acc, (size_t)cn * sizeof(double));
}

void op_column_sums(const float *x, int64_t rows, int64_t cols, double *sums) {
  int64_t blocks = parallel_pieces(cols, COLUMN_BLOCK);
#pragma omp parallel for if (rows * cols >= parallel_min_work)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t c0 = b * COLUMN_BLOCK;
    column_block_sums(x, rows, cols, c0, cols - c0 < COLUMN_BLOCK ? cols - c0 : COLUMN_BLOCK, sums);
  }
}

void op_linear_check(const Tensor *x, const Tensor *w, const Tensor *b, const Tensor *y) {
  OP_REQUIRE("op_linear", w->ndim == 2);
  OP_REQUIRE("op_linear", op_last_dim(x) == w->shape[1]);
  OP_REQUIRE("op_linear", op_last_dim(y) == w->shape[0]);
  OP_REQUIRE("op_linear", op_rows(x) == op_rows(y));
  OP_REQUIRE("op_linear", !b || tensor_numel(b) == w->shape[0]);
}

void op_linear_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *w,
                       const Tensor *b, const Tensor *y) {
  op_linear_check(x, w, b, y);
  int64_t m = op_rows(x), n = w->shape[0];
  float *out = y->data;  // (M, out)
  if (b)
    for (int64_t i = 0; i < m; i++)
      memcpy(out + i * n, b->data, (size_t)n * sizeof(float));
  Tensor x2 = op_as_matrix(x), y2 = op_as_matrix(y);
  op_gemm_cpu(dev, &x2, false, w, true, &y2, 1.0f, b ? 1.0f : 0.0f);
}

void op_linear_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *w,
                       const Tensor *dy, const Tensor *dx, const Tensor *dw,
                       const Tensor *db, bool accumulate) {
  op_linear_check(x, w, db, dy);
  OP_REQUIRE("op_linear_bwd", tensor_same_shape(dw, w));
  Tensor x2 = op_as_matrix(x), dy2 = op_as_matrix(dy);
  float keep = accumulate ? 1.0f : 0.0f;
  if (dx) {
    Tensor dx2 = op_as_matrix(dx);
    op_gemm_cpu(dev, &dy2, false, w, false, &dx2, 1.0f, 0.0f);
  }
  op_gemm_cpu(dev, &dy2, true, &x2, false, dw, 1.0f, keep);
  if (!db) return;
  int64_t n = dy2.shape[1];
  double *sums = xmalloc((size_t)n * sizeof(double));
  op_column_sums(dy->data, dy2.shape[0], n, sums);
  float *out = db->data;  // (out)
  for (int64_t j = 0; j < n; j++) out[j] = accumulate ? (float)(out[j] + sums[j]) : (float)sums[j];
  free(sums);
}

// The row of idx[i] in a table of `vocab` rows; an id outside the table is
// bad input (a corrupt record or a vocabulary mismatch), not a programming
// error.
static int64_t embedding_row(const Tensor *idx, int64_t i, int64_t vocab) {
  int64_t row = idx->dtype == DT_I64 ? ((const int64_t *)idx->data)[i]
                                     : ((const int32_t *)idx->data)[i];
  if (row < 0 || row >= vocab)
    die_input("embedding", "index %lld at position %lld is outside the table [0, %lld)",
              (long long)row, (long long)i, (long long)vocab);
  return row;
}

void op_embedding_check(const Tensor *idx, const Tensor *table, const Tensor *rows) {
  OP_REQUIRE("op_embedding", idx->dtype == DT_I32 || idx->dtype == DT_I64);
  OP_REQUIRE("op_embedding", table->ndim == 2);
  OP_REQUIRE("op_embedding", op_last_dim(rows) == table->shape[1]);
  OP_REQUIRE("op_embedding", op_rows(rows) == tensor_numel(idx));
}

void op_embedding_fwd_cpu(const Device *dev, const Tensor *idx, const Tensor *table,
                          const Tensor *out) {
  (void)dev;
  op_embedding_check(idx, table, out);
  int64_t n = tensor_numel(idx), vocab = table->shape[0], d = table->shape[1];
  const float *src = table->data;  // (V, D)
  float *dst = out->data;          // (N, D)
  for (int64_t i = 0; i < n; i++)
    memcpy(dst + i * d, src + embedding_row(idx, i, vocab) * d,
           (size_t)d * sizeof(float));
}

void op_embedding_bwd_cpu(const Device *dev, const Tensor *idx, const Tensor *dout,
                          const Tensor *dtable, bool accumulate) {
  (void)dev;
  op_embedding_check(idx, dtable, dout);
  int64_t n = tensor_numel(idx), vocab = dtable->shape[0], d = dtable->shape[1];
  const float *g = dout->data;  // (N, D)
  float *dst = dtable->data;    // (V, D)
  if (!accumulate) memset(dst, 0, tensor_bytes(dtable));
  for (int64_t i = 0; i < n; i++) {
    float *row = dst + embedding_row(idx, i, vocab) * d;
    for (int64_t j = 0; j < d; j++) row[j] += g[i * d + j];
  }
}






