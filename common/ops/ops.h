// ops.h: conventions every op family follows (ops_conv.h, ops_dense.h, ...).
//
// - Each op has a CPU reference and a CUDA implementation with the same name
//   and signature apart from the suffix: op_relu_fwd_cpu / op_relu_fwd_cuda.
//   The first argument is always `const Device *dev`, so the two are
//   interchangeable; op_relu_fwd(dev, ...) picks one by dev->kind.
// - Arguments are Tensors (dtype + shape + pointer) and scalars; outputs are
//   allocated by the caller. No op allocates memory: scratch comes from
//   dev->workspace or from an Arena the caller passes.
// - CPU ops take fp32 (and int32/int64 indices); CUDA ops also take fp16/bf16
//   activations where the op says so, accumulating in fp32.
// - CUDA ops run on dev->stream and never synchronise the host.
// - Convolutional activations are NHWC: (N, H, W, C).
#pragma once
#include "core/check.h"
#include "device/device.h"
#include "device/profile.h"
#include "device/tensor.h"

// Every dispatched call is a span of the profile while one runs (profile.h).
#if HAVE_CUDA
#define OP_DISPATCH(dev, fn, ...)                  \
  PROFILE_REGION(dev, #fn, {                       \
    if ((dev)->kind == DEVICE_CUDA)                \
      fn##_cuda((dev), __VA_ARGS__);               \
    else                                           \
      fn##_cpu((dev), __VA_ARGS__);                \
  })
#else
#define OP_DISPATCH(dev, fn, ...)                                        \
  PROFILE_REGION(dev, #fn, {                                             \
    if ((dev)->kind == DEVICE_CUDA) DIE(#fn ": this build has no CUDA"); \
    fn##_cpu((dev), __VA_ARGS__);                                        \
  })
#endif

// A broken precondition of an op (a shape mismatch) is a programming error in
// the caller: it names the op and the condition.
#define OP_REQUIRE(op, cond)                                  \
  do {                                                        \
    if (!(cond)) DIE("%s: precondition failed: %s", op, #cond); \
  } while (0)
