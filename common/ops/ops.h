// ops.h: conventions every op family follows, and how an op is declared.
//
// Families, one file pair each (family.h, family.c the CPU reference,
// family_cuda.cu the CUDA side), named for what is inside:
//   elementwise  add, mul, scale, axpy, cast, affine_u8 (input bytes)
//   layout       concat, split, permute (data movement, any dtype)
//   reduce       sum, mean, top-k
//   activation   GELU, softmax, dropout
//   norm         layer norm, batch norm (fused with ReLU and residual add)
//   attention    multi-head scaled dot-product attention
//   dense        GEMM, linear layer, embedding lookup
//   conv         convolution, ReLU
//   pool         max, average and global average pooling
//   loss         softmax cross-entropy, BCE on logits, smooth L1
//
// - Each op has a CPU reference and a CUDA implementation with the same name
//   and signature apart from the suffix: op_relu_fwd_cpu / op_relu_fwd_cuda.
//   The first argument is always `const Device *dev`, so the two are
//   interchangeable; op_relu_fwd(dev, ...) picks one by dev->kind.
//   Below: "declaring ops".
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

// ---------------------------------------------------------------- declaring ops
// Each family header (conv.h, dense.h, norm.h, ...) writes the signature of
// each of its dispatched ops once, in one X-macro list, with the op's comment
// beside its entry (block comments: a list is one macro, each line ending
// in a backslash, left out here):
//
//   #define OPS_NORM(X)
//     /* y = (x - mean) * rstd * gamma + beta over the last axis ... */
//     X(op_layernorm_fwd, (const Device *dev, const Tensor *x, ...),
//       (dev, x, ...))
//     ...
//   OPS_DECLARE(OPS_NORM)
//
// An entry is X(name, (parameters), (arguments)): the parameter list with
// types, and the same names as a call. OPS_DECLARE declares, for each entry,
// the dispatcher `name`, the CPU reference `name_cpu` and the CUDA
// implementation `name_cuda` (the last is declared in every build and defined
// only in CUDA builds). ops/dispatch.c defines every dispatcher, for every
// family, with OPS_DEFINE_DISPATCHERS: nobody writes one by hand.
//
// To add an op: (1) an entry in its family's list, with its comment;
// (2) name_cpu in family.c and name_cuda in family_cuda.cu (extern "C");
// (3) in tests/ops/test_ops_table.c, a run function (a few lines calling the
// op on the row's tensors t[0], t[1], ...) and a row in the family's table:
// the tensors (name, role: input, output, in-place or accumulated, index,
// scratch; shape; value range; a fixed dtype where it has one), the dtypes
// it runs in on CUDA, the tolerance rule (tests/ops/ops_test_util.h), its
// scalars, and the finite-difference gradient check where it has a
// backward. That is all its CUDA-against-CPU and gradient checking; only
// hand-checked, PyTorch golden and bad-input cases go in
// tests/ops/test_ops_<family>.c. A new family also adds its list to
// ops/dispatch.c and its table to test_ops_table.c's kFamilies.
#define OPS_PROTOTYPES(name, params, args) \
  void name params;                        \
  void name##_cpu params;                  \
  void name##_cuda params;
#define OPS_DECLARE(list) list(OPS_PROTOTYPES)

// Runs fn_cuda or fn_cpu by dev->kind, with dev and the other arguments;
// every dispatched call is a span of the profile while one runs
// (profile.h). OP_DISPATCH_ARGS takes the arguments as one parenthesised
// list, dev included, as the families' lists write them; OP_DISPATCH is the
// same for a hand-written dispatcher outside ops/ (a task's own kernels).
#if HAVE_CUDA
#define OP_DISPATCH_ARGS(dev, fn, args) \
  PROFILE_REGION(dev, #fn, {            \
    if ((dev)->kind == DEVICE_CUDA)     \
      fn##_cuda args;                   \
    else                                \
      fn##_cpu args;                    \
  })
#else
#define OP_DISPATCH_ARGS(dev, fn, args)                                  \
  PROFILE_REGION(dev, #fn, {                                             \
    if ((dev)->kind == DEVICE_CUDA) DIE(#fn ": this build has no CUDA"); \
    fn##_cpu args;                                                       \
  })
#endif
#define OP_DISPATCH(dev, fn, ...) OP_DISPATCH_ARGS(dev, fn, ((dev), __VA_ARGS__))
#define OPS_DISPATCHER(name, params, args) \
  void name params { OP_DISPATCH_ARGS(dev, name, args); }
#define OPS_DEFINE_DISPATCHERS(list) list(OPS_DISPATCHER)

// A broken precondition of an op (a shape mismatch) is a programming error in
// the caller: it names the op and the condition.
#define OP_REQUIRE(op, cond)                                  \
  do {                                                        \
    if (!(cond)) DIE("%s: precondition failed: %s", op, #cond); \
  } while (0)
