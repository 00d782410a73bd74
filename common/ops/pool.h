// pool.h: max, average and global average pooling over NHWC activations,
// forward and backward, CPU (plain loops) and CUDA (own kernels).
// Conventions: see ops.h; layout and dtypes as for the convolutions (conv.h,
// whose output extent and geometry pooling shares): NHWC, fp32 on CPU,
// fp32/fp16/bf16 on CUDA (one dtype per call, arithmetic in fp32).
#pragma once
#include "ops/conv.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- geometry
typedef struct PoolParams {
  int window_h, window_w;
  int stride_h, stride_w;
  int pad_h, pad_w;  // max: padding never wins; average: padding counts as 0
} PoolParams;

// The square helper: the same value along H and W.
PoolParams pool_params(int window, int stride, int pad);

// ---------------------------------------------------------------- the ops
#define OPS_POOL(X)                                                                     \
  /* x (N, H, W, C) -> y (N, P, Q, C), P = conv_out_extent(H, window_h, stride_h,       \
     pad_h, 1). Backward overwrites dx (x's shape) from dy (y's shape). Max pool        \
     sends each output's gradient to the first position (row-major within the          \
     window) holding the maximum; the average divides by the full window size,         \
     padding included (PyTorch's count_include_pad=True). */                            \
  X(op_maxpool_fwd,                                                                     \
    (const Device *dev, const Tensor *x, const Tensor *y, const PoolParams *p),         \
    (dev, x, y, p))                                                                     \
  X(op_maxpool_bwd,                                                                     \
    (const Device *dev, const Tensor *x, const Tensor *y, const Tensor *dy,             \
     const Tensor *dx, const PoolParams *p),                                            \
    (dev, x, y, dy, dx, p))                                                             \
  X(op_avgpool_fwd,                                                                     \
    (const Device *dev, const Tensor *x, const Tensor *y, const PoolParams *p),         \
    (dev, x, y, p))                                                                     \
  X(op_avgpool_bwd,                                                                     \
    (const Device *dev, const Tensor *dy, const Tensor *dx, const PoolParams *p),       \
    (dev, dy, dx, p))                                                                   \
  /* x (N, H, W, C) -> y (N, C): the mean over H and W; dx = dy / (H W) everywhere. */  \
  X(op_global_avgpool_fwd, (const Device *dev, const Tensor *x, const Tensor *y),       \
    (dev, x, y))                                                                        \
  X(op_global_avgpool_bwd, (const Device *dev, const Tensor *dy, const Tensor *dx),     \
    (dev, dy, dx))
OPS_DECLARE(OPS_POOL)

// The shared shape check (pool.c); dies naming the op on a mismatch.
// x (N, H, W, C), y (N, P, Q, C); returns the extents in g (k = C, r/s
// = the window).
ConvGeometry pool_geometry(const char *op, const Tensor *x, const Tensor *y,
                           const PoolParams *p);

#ifdef __cplusplus
}
#endif
