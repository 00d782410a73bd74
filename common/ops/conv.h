// conv.h: 2-D convolution and ReLU, forward and backward, CPU (oneDNN or
// im2col + OpenBLAS for convolutions, a plain loop for ReLU) and CUDA (cuDNN;
// ReLU the shared elementwise kernel). Batch norm (with fused ReLU and
// residual add) is in norm.h, pooling in pool.h. Conventions: see ops.h.
//
// Layout. Activations are NHWC (N, H, W, C) end to end and filters KRSC
// (K out-channels, R rows, S columns, C in-channels). Why NHWC:
//  - Tensor cores multiply along the channel axis. In NHWC a convolution is
//    an implicit GEMM whose reduction dimension (R*S*C) has C innermost and
//    contiguous, so cuDNN's fp16/bf16 kernels read 16-byte vectors straight
//    from memory; with NCHW it inserts a transpose before and after each
//    convolution, which for ResNet-50 costs about as much as the arithmetic
//    of the cheap 1x1 layers.
//  - Batch norm, ReLU, residual adds and pooling are per channel or
//    elementwise; in NHWC a channel's values sit C apart in every row, so a
//    per-channel reduction is a column sum over (N*H*W, C), the shape our
//    kernels (and cuDNN's persistent NHWC batch norm) handle best.
//  - On the CPU the same layout makes im2col copy runs of C contiguous floats
//    and turns a 1x1 stride-1 convolution into one plain GEMM.
// KRSC is the filter layout cuDNN expects with NHWC data (its "NHWC" filter
// format), and it is a row-major (K, R*S*C) matrix for the CPU GEMMs.
//
// Dtypes. CPU: fp32. CUDA: activations, filters and conv bias in fp32, fp16
// or bf16 (all one dtype per call), accumulation in fp32.
#pragma once
#include <stdbool.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- geometry
typedef struct ConvParams {
  int stride_h, stride_w;
  int pad_h, pad_w;  // zeros added on each side
  int dil_h, dil_w;  // 1 = dense kernel
} ConvParams;

// The square helper: the same value along H and W.
ConvParams conv_params(int stride, int pad, int dilation);
// floor((in + 2 pad - dil (k - 1) - 1) / stride) + 1, PyTorch's output extent.
int64_t conv_out_extent(int64_t in, int64_t kernel, int stride, int pad, int dilation);

// ---------------------------------------------------------------- convolution
// Shapes:  x (N, H, W, C)   w (K, R, S, C)   bias (K) or NULL
//          y (N, P, Q, K)   P = conv_out_extent(H, R, ...), Q likewise.
// scratch: memory the op may use as it likes. CPU: at least
// op_conv2d_scratch_bytes(x, w, p) (one image's im2col matrix); more lets the
// CPU path convolve several images per GEMM. CUDA: ignored (cuDNN uses
// dev->workspace); pass NULL, 0.
// The CUDA path picks an algorithm for each new shape once and remembers it:
// by default cuDNN's heuristic choice (host work only, the same in every
// run); with the environment variable CONV_ALGO=search, cuDNN's timed search
// (cudnnFind*AlgorithmEx: runs them all once and waits for the GPU, so the
// first call per shape is slow and synchronous). CONV_ALGO_LOG=1 prints each
// shape's candidates and the one taken to stderr.

size_t op_conv2d_scratch_bytes(const Tensor *x, const Tensor *w, const ConvParams *p);

// The CPU convolutions run through oneDNN where the build has it (make
// DNNL=1, the default where Debian's libdnnl-dev is installed) and oneDNN has
// a kernel for the shape; otherwise, and after op_conv2d_cpu_library(false),
// through im2col + OpenBLAS, the plain reference the tests hold oneDNN to.
// Either way the batch goes in chunks fixed by the shapes, one thread each,
// so the bits do not depend on the number of threads. Returns the previous
// setting (default true); a process-wide setting, for tests and benchmarks.
bool op_conv2d_cpu_library(bool use);
// How many chunks oneDNN has convolved in this process (0 where it is not
// built in): the tests check the path they mean to test was taken.
int64_t op_conv2d_cpu_library_runs(void);

// ---------------------------------------------------------------- the ops
#define OPS_CONV(X)                                                                     \
  /* On CUDA, lets fp32 convolutions run on TF32 tensor cores (10-bit mantissa          \
     inputs, fp32 accumulation) from now on in this process - the convolution           \
     twin of op_gemm_set_tf32 (dense.h); cuDNN takes the math mode per                  \
     call, so the choice is a process-wide setting, remembered with each                \
     shape's algorithm. Default: off (true fp32). Nothing on CPU. */                    \
  X(op_conv2d_set_tf32, (const Device *dev, bool allow), (dev, allow))                  \
  /* ------------------------------------------------------------ convolution           \
     y = conv(x, w) + bias (shapes and scratch: above) */                               \
  X(op_conv2d_fwd,                                                                      \
    (const Device *dev, const Tensor *x, const Tensor *w, const Tensor *bias,           \
     const Tensor *y, const ConvParams *p, void *scratch, size_t scratch_bytes),        \
    (dev, x, w, bias, y, p, scratch, scratch_bytes))                                    \
  /* dx = the gradient with respect to x of sum(dy * conv(x, w)); overwritten. */       \
  X(op_conv2d_bwd_data,                                                                 \
    (const Device *dev, const Tensor *dy, const Tensor *w, const Tensor *dx,            \
     const ConvParams *p, void *scratch, size_t scratch_bytes),                         \
    (dev, dy, w, dx, p, scratch, scratch_bytes))                                        \
  /* dw = (or += when accumulate) the gradient with respect to w. A bias                \
     gradient is op_sum(dev, dy, 3, dbias) (reduce.h). */                               \
  X(op_conv2d_bwd_filter,                                                               \
    (const Device *dev, const Tensor *x, const Tensor *dy, const Tensor *dw,            \
     const ConvParams *p, bool accumulate, void *scratch, size_t scratch_bytes),        \
    (dev, x, dy, dw, p, accumulate, scratch, scratch_bytes))                            \
  /* ------------------------------------------------------------ ReLU                  \
     y = max(x, 0); dx = dy where y > 0, else 0. Any shape; may run in place. */        \
  X(op_relu_fwd, (const Device *dev, const Tensor *x, const Tensor *y), (dev, x, y))    \
  X(op_relu_bwd,                                                                        \
    (const Device *dev, const Tensor *y, const Tensor *dy, const Tensor *dx),           \
    (dev, y, dy, dx))
OPS_DECLARE(OPS_CONV)

// The shared shape check (conv.c); dies naming the op on a mismatch. Returns
// N, H, W, C, K, R, S, P, Q in g. (pool_geometry, pool.h, fills the same
// struct for a pooling window.)
typedef struct ConvGeometry {
  int64_t n, h, w, c, k, r, s, p, q;
} ConvGeometry;
ConvGeometry conv_geometry(const char *op, const Tensor *x, const Tensor *w, const Tensor *y,
                           const ConvParams *p);

#ifdef __cplusplus
}
#endif
