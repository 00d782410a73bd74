// loss.h: losses, each returning the loss and the gradient of the loss
// with respect to its input in one call, on CPU and CUDA.
//
// The loss scalar: `loss` is a (1) fp32 tensor on the op's device. On CUDA
// the op writes it on dev->stream and does not wait; the caller copies it to
// the host when it wants the number (after its next stream sync), so a
// training step never stalls on the loss.
//
// grad_scale multiplies the input gradient (not the loss): the AMP loss scale,
// or 1. Input dtypes: fp32 on CPU; fp32/fp16/bf16 logits (and gradients) on
// CUDA, arithmetic in fp32. Each CUDA reduction is deterministic (fixed-order
// partial sums in dev->workspace).
#pragma once
#include <stdint.h>

#include "ops/dense.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_LOSS(X)                                                                     \
  /* Softmax cross-entropy with label smoothing, averaged over the rows whose           \
     label is not ignore_index (the definition of torch.nn.functional.                  \
     cross_entropy(..., ignore_index, label_smoothing)): with p = softmax(row),         \
       row loss = -(1 - smoothing) log p[label] - smoothing / C * sum_c log p[c]        \
       dlogits  = grad_scale * (p - (1 - smoothing) onehot - smoothing / C) / n_kept    \
     and zero loss and gradient on ignored rows (loss 0 when all are ignored).          \
       logits, dlogits: (N, C); labels: (N) int32 or int64, each in [0, C) or           \
       ignore_index (an input error otherwise on CPU; on CUDA such a row is             \
       treated as ignored); loss: (1) fp32;                                             \
       row_loss: (N) fp32 per-row loss before averaging (hard-negative mining),         \
       or NULL. */                                                                      \
  X(op_softmax_xent,                                                                    \
    (const Device *dev, const Tensor *logits, const Tensor *labels, float smoothing,    \
     int64_t ignore_index, float grad_scale, const Tensor *loss, const Tensor *row_loss, \
     const Tensor *dlogits),                                                            \
    (dev, logits, labels, smoothing, ignore_index, grad_scale, loss, row_loss, dlogits)) \
  /* Binary cross-entropy on logits, averaged over all N elements, in the stable        \
     form max(x, 0) - x t + log(1 + exp(-|x|)); dlogits = grad_scale *                  \
     (sigmoid(x) - t) / N. logits, targets (fp32, in [0, 1]), dlogits: any shape. */    \
  X(op_bce_logits,                                                                      \
    (const Device *dev, const Tensor *logits, const Tensor *targets, float grad_scale,  \
     const Tensor *loss, const Tensor *dlogits),                                        \
    (dev, logits, targets, grad_scale, loss, dlogits))                                  \
  /* Smooth L1 (Huber / beta), averaged over all N elements: with d = pred - target,    \
       0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta > 0).            \
     pred, target (fp32), dpred: any shape. */                                          \
  X(op_smooth_l1,                                                                       \
    (const Device *dev, const Tensor *pred, const Tensor *target, float beta,           \
     float grad_scale, const Tensor *loss, const Tensor *dpred),                        \
    (dev, pred, target, beta, grad_scale, loss, dpred))
OPS_DECLARE(OPS_LOSS)

// Checks shared by the two backends (loss.c); each dies naming the op.
// target: fp32 with input's element count; loss: (1) fp32; dinput as input.
void op_loss_check(const char *op, const Tensor *input, const Tensor *target,
                   const Tensor *loss, const Tensor *dinput);
void op_softmax_xent_check(const Tensor *logits, const Tensor *labels, const Tensor *loss,
                           const Tensor *row_loss, const Tensor *dlogits);

#ifdef __cplusplus
}
#endif
