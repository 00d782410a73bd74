// dense.h: matrix products and lookups - general (batched) GEMM, the
// linear layer, embedding lookup - on CPU (OpenBLAS) and CUDA (cuBLAS).
//
// Conventions (ops.h): row-major contiguous tensors; outputs allocated by the
// caller. Activation dtypes: fp32 on CPU; fp32, fp16 or bf16 on CUDA (all
// matrices of one product in the same dtype, fp32 accumulation). Gradients of
// parameters (dW, db, the embedding table's gradient) may be fp32 whatever
// the activation dtype, so that they accumulate straight into the fp32
// gradient buffer of a ParamSet. An optional tensor is passed as NULL.
//
// `accumulate` (backward ops): add into the parameter gradient instead of
// overwriting it, for gradient accumulation over micro-batches. Input
// gradients (dx) are always overwritten.
#pragma once
#include <stdbool.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_DENSE(X)                                                                    \
  /* On CUDA, lets fp32 products run on TF32 tensor cores (10-bit mantissa              \
     inputs, fp32 accumulation) for every GEMM issued on dev afterwards; a              \
     property of dev's cuBLAS handle. Nothing on CPU, where GEMMs are fp32. */          \
  X(op_gemm_set_tf32, (const Device *dev, bool allow), (dev, allow))                    \
  /* On CUDA (default allowed), op_linear_fwd adds the bias inside the GEMM and         \
     op_linear_bwd sums its gradient inside the dw GEMM (cuBLASLt's BIAS and           \
     BGRADB epilogues) wherever cuBLASLt offers them; not allowed, each is a            \
     separate pass over y or dy (the path the epilogues are tested against). A          \
     setting of dev (Device.linear_unfused). Nothing on CPU. */                          \
  X(op_linear_set_epilogues, (const Device *dev, bool allow), (dev, allow))             \
  /* c = alpha * op(a) op(b) + beta * c, op(x) = x or x^T.                              \
       a: (M, K), or (K, M) when trans_a     (optionally with a leading batch dim)      \
       b: (K, N), or (N, K) when trans_b                                                \
       c: (M, N)                                                                        \
     Batched: c is (batch, M, N); a and b are each (batch, ., .) or 2-D, a 2-D          \
     operand being shared by every batch entry. With beta == 0, c is not read. */       \
  X(op_gemm,                                                                            \
    (const Device *dev, const Tensor *a, bool trans_a, const Tensor *b, bool trans_b,   \
     const Tensor *c, float alpha, float beta),                                         \
    (dev, a, trans_a, b, trans_b, c, alpha, beta))                                      \
  /* y = x W^T + b.                                                                     \
       x: (..., in) read as (M, in); w: (out, in); b: (out) or NULL;                    \
       y: (..., out) read as (M, out). On CUDA b is fp32 or x's dtype. */               \
  X(op_linear_fwd,                                                                      \
    (const Device *dev, const Tensor *x, const Tensor *w, const Tensor *b,              \
     const Tensor *y),                                                                  \
    (dev, x, w, b, y))                                                                  \
  /* dx = dy W; dw (+)= dy^T x; db (+)= column sums of dy.                              \
       dy: (M, out); dx: (M, in) or NULL (first layer); dw: (out, in);                  \
       db: (out) or NULL. */                                                            \
  X(op_linear_bwd,                                                                      \
    (const Device *dev, const Tensor *x, const Tensor *w, const Tensor *dy,             \
     const Tensor *dx, const Tensor *dw, const Tensor *db, bool accumulate),            \
    (dev, x, w, dy, dx, dw, db, accumulate))                                            \
  /* out[n, :] = table[idx[n], :].                                                      \
       idx: any shape, N elements, int32 or int64; table: (V, D); out: (N, D)           \
       (or idx's shape + D). An index outside [0, V) is an input error on CPU;          \
       on CUDA (no host sync) its row is written as zeros - loaders validate ids. */    \
  X(op_embedding_fwd,                                                                   \
    (const Device *dev, const Tensor *idx, const Tensor *table, const Tensor *out),     \
    (dev, idx, table, out))                                                             \
  /* dtable[idx[n], :] (+)= dout[n, :], summed over repeated indices.                   \
       dout: (N, D); dtable: (V, D), fp32 on CUDA. On CUDA the sum uses fp32            \
       atomics: the order of the additions (not the set of terms) varies run to        \
       run, so results agree to rounding, not bit for bit. A sorted, deterministic      \
       reduction would need scratch for the sort and a second pass; gradient            \
       noise of one ulp per repeated row does not change training. */                   \
  X(op_embedding_bwd,                                                                   \
    (const Device *dev, const Tensor *idx, const Tensor *dout, const Tensor *dtable,    \
     bool accumulate),                                                                  \
    (dev, idx, dout, dtable, accumulate))
OPS_DECLARE(OPS_DENSE)

// Shape logic shared by the backends and the op families. op_last_dim: the
// last dimension; op_rows: the product of all the others (the "rows" of a
// row-wise op); op_as_matrix: t viewed as (rows, last dim).
int64_t op_last_dim(const Tensor *t);
int64_t op_rows(const Tensor *t);
Tensor op_as_matrix(const Tensor *t);
// Dies naming op unless a and b have the same element count and dtype.
void op_same_size_check(const char *op, const Tensor *a, const Tensor *b);
// sums[j] = the sum of column j of a (rows, cols) row-major fp32 matrix, in
// double, down the rows in order (so the same bits at any team size):
// column blocks on the team, each reading its rows along memory.
void op_column_sums(const float *x, int64_t rows, int64_t cols, double *sums);

// A checked GEMM call: sizes, leading dimensions of the row-major a and b,
// and batch counts (batch_a/batch_b 0 for a shared 2-D operand; batch >= 1,
// or 0 when a 3-D operand has an empty batch: nothing to compute).
typedef struct GemmShape {
  int64_t m, n, k, lda, ldb, batch, batch_a, batch_b;
} GemmShape;
GemmShape op_gemm_shape(const Tensor *a, bool trans_a, const Tensor *b, bool trans_b,
                        const Tensor *c);
// Dies naming the op when x, w, b (NULL allowed), y are not a linear layer's.
void op_linear_check(const Tensor *x, const Tensor *w, const Tensor *b, const Tensor *y);
// rows: (N, D) with N = numel(idx) and D = table's row length.
void op_embedding_check(const Tensor *idx, const Tensor *table, const Tensor *rows);

#ifdef __cplusplus
}
#endif
