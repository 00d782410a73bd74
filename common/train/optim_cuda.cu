// optim_cuda.cu: the fused multi-tensor optimizer kernels. The flat buffers
// are cut into chunks of at most kChunkElems elements that never straddle two
// tensors; one block handles one chunk, so a whole model is one launch and
// every element knows its tensor (for the flags and the trust ratio). Per-tensor
// norms go through per-chunk partial sums and a per-tensor reduction in a fixed
// order, so a step is deterministic run to run.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check_cuda.h"
#include "train/optim.h"
#include "train/optim_math.h"

namespace {

constexpr int kChunkElems = 4096;
constexpr int kThreads = 256;

struct Chunk {
  int32_t tensor;
  int32_t numel;
  int64_t start;  // element offset in the flat buffers
};

}  // namespace

struct OptimCuda {
  int count;
  int64_t n_chunks;
  Chunk *chunks;        // (n_chunks)
  int64_t *chunk0;      // (count + 1) first chunk of each tensor, then n_chunks
  int64_t *all_chunks;  // (2) {0, n_chunks}: the whole model as one range
  unsigned *flags;      // (count) ParamSpec flags
  float *partials;      // (n_chunks, 2) sums of squares per chunk
  float *ratios;        // (count) trust ratio per tensor
  float *grad_norm;     // (1) global gradient norm of the latest clip
  cudaStream_t clip_stream;
};

namespace {

// Sums a and b over the block; the result is valid in thread 0.
template <class T>
__device__ void block_sum2(T *a, T *b) {
  __shared__ T sa[32], sb[32];
  for (int o = 16; o > 0; o >>= 1) {
    *a += __shfl_down_sync(0xffffffffu, *a, o);
    *b += __shfl_down_sync(0xffffffffu, *b, o);
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = *a;
    sb[warp] = *b;
  }
  __syncthreads();
  if (warp == 0) {
    int n_warps = (blockDim.x + 31) >> 5;
    *a = lane < n_warps ? sa[lane] : T(0);
    *b = lane < n_warps ? sb[lane] : T(0);
    for (int o = 16; o > 0; o >>= 1) {
      *a += __shfl_down_sync(0xffffffffu, *a, o);
      *b += __shfl_down_sync(0xffffffffu, *b, o);
    }
  }
}

// op(tensor, i) for every element i of every chunk.
template <class Op>
__global__ void k_apply(Op op, const Chunk *chunks) {
  Chunk c = chunks[blockIdx.x];
  for (int i = threadIdx.x; i < c.numel; i += blockDim.x) op(c.tensor, c.start + i);
}

// op(tensor, i, &a, &b) accumulates two sums of squares per chunk.
template <class Op>
__global__ void k_sumsq(Op op, const Chunk *chunks, float *partials) {
  Chunk c = chunks[blockIdx.x];
  float a = 0, b = 0;
  for (int i = threadIdx.x; i < c.numel; i += blockDim.x) op(c.tensor, c.start + i, &a, &b);
  block_sum2(&a, &b);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = a;
    partials[2 * blockIdx.x + 1] = b;
  }
}

// Block t reduces the partials of chunks [range[t], range[t+1]) in double and
// stores out[t] = f(t, sqrt(sum a), sqrt(sum b)).
template <class F>
__global__ void k_norms(F f, const int64_t *range, const float *partials, float *out) {
  int t = blockIdx.x;
  double a = 0, b = 0;
  for (int64_t c = range[t] + threadIdx.x; c < range[t + 1]; c += blockDim.x) {
    a += partials[2 * c];
    b += partials[2 * c + 1];
  }
  block_sum2(&a, &b);
  if (threadIdx.x == 0) out[t] = f(t, sqrt(a), sqrt(b));
}

__device__ __forceinline__ bool no_decay(const unsigned *flags, int t) {
  return (flags[t] & PARAM_NO_DECAY) != 0;
}

struct SgdOp {
  float *w, *buf;
  const float *g;
  const unsigned *flags;
  float lr, wd, momentum;
  bool nesterov;
  __device__ void operator()(int t, int64_t i) const {
    optim_sgd_elem(&w[i], &buf[i], g[i], lr, no_decay(flags, t) ? 0.0f : wd, momentum, nesterov);
  }
};

struct LarsNormsOp {
  const float *w, *g;
  const unsigned *flags;
  __device__ void operator()(int t, int64_t i, float *a, float *b) const {
    if (no_decay(flags, t)) return;  // not adapted: its ratio is 1
    *a += w[i] * w[i];
    *b += g[i] * g[i];
  }
};

struct LarsRatio {
  const unsigned *flags;
  float eta, wd, eps;
  __device__ float operator()(int t, double w_norm, double g_norm) const {
    return no_decay(flags, t) ? 1.0f : optim_lars_ratio(w_norm, g_norm, eta, wd, eps);
  }
};

struct LarsOp {
  float *w, *buf;
  const float *g, *ratios;
  const unsigned *flags;
  float lr, wd, momentum;
  bool nesterov;
  __device__ void operator()(int t, int64_t i) const {
    optim_lars_elem(&w[i], &buf[i], g[i], lr * ratios[t], no_decay(flags, t) ? 0.0f : wd,
                    momentum, nesterov);
  }
};

struct AdamOp {
  float *w, *m, *v;
  const float *g;
  const unsigned *flags;
  float lr, step_size, wd, beta1, beta2, sqrt_bc2, eps;
  bool decoupled;
  __device__ void operator()(int t, int64_t i) const {
    float wd_t = no_decay(flags, t) ? 0.0f : wd;
    optim_adam_elem(&w[i], &m[i], &v[i], g[i], step_size, decoupled ? 0.0f : wd_t,
                    decoupled ? 1.0f - lr * wd_t : 1.0f, beta1, beta2, sqrt_bc2, eps);
  }
};

struct LambMomentsOp {
  const float *w, *g;
  float *m, *v;
  const unsigned *flags;
  float beta1, beta2, bc1, bc2, eps, wd;
  __device__ void operator()(int t, int64_t i, float *a, float *b) const {
    optim_lamb_moments(&m[i], &v[i], g[i], beta1, beta2);
    float u = optim_lamb_dir(w[i], m[i], v[i], bc1, bc2, eps, no_decay(flags, t) ? 0.0f : wd);
    *a += w[i] * w[i];
    *b += u * u;
  }
};

struct LambRatio {
  const unsigned *flags;
  __device__ float operator()(int t, double w_norm, double u_norm) const {
    return no_decay(flags, t) ? 1.0f : optim_lamb_ratio(w_norm, u_norm);
  }
};

struct LambOp {
  float *w;
  const float *m, *v, *ratios;
  const unsigned *flags;
  float lr, bc1, bc2, eps, wd;
  __device__ void operator()(int t, int64_t i) const {
    float wd_t = no_decay(flags, t) ? 0.0f : wd;
    w[i] -= lr * ratios[t] * optim_lamb_dir(w[i], m[i], v[i], bc1, bc2, eps, wd_t);
  }
};

struct GradSquaresOp {
  const float *g;
  __device__ void operator()(int, int64_t i, float *a, float *) const { *a += g[i] * g[i]; }
};

struct NormOnly {
  __device__ float operator()(int, double a_norm, double) const { return (float)a_norm; }
};

// Reads the norm on the device, so clipping never waits for the host.
struct ClipOp {
  float *g;
  const float *norm;
  float max_norm;
  __device__ void operator()(int, int64_t i) const {
    float coef = max_norm / (*norm + 1e-6f);
    if (coef < 1.0f) g[i] *= coef;
  }
};

__global__ void k_scale_flat(float *x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= factor;
}

template <class Op>
void launch_apply(const OptimCuda *oc, const Device *dev, Op op) {
  if (oc->n_chunks == 0) return;
  k_apply<<<(unsigned)oc->n_chunks, kThreads, 0, dev->stream>>>(op, oc->chunks);
  CHECK_LAUNCH();
}

// Per-chunk sums of squares, then f per tensor into oc->ratios.
template <class Op, class F>
void launch_ratios(const OptimCuda *oc, const Device *dev, Op op, F f) {
  if (oc->n_chunks == 0) return;
  k_sumsq<<<(unsigned)oc->n_chunks, kThreads, 0, dev->stream>>>(op, oc->chunks, oc->partials);
  CHECK_LAUNCH();
  k_norms<<<oc->count, kThreads, 0, dev->stream>>>(f, oc->chunk0, oc->partials, oc->ratios);
  CHECK_LAUNCH();
}

template <class T>
T *upload(const T *host, size_t count) {
  T *dev = (T *)device_alloc_cuda(count * sizeof(T));
  device_copy_cuda(dev, host, count * sizeof(T));
  return dev;
}

}  // namespace

extern "C" void optim_init_cuda(Optimizer *opt, const ParamSet *ps) {
  OptimCuda *oc = (OptimCuda *)xcalloc(1, sizeof *oc);
  oc->count = ps->count;
  int64_t *chunk0 = (int64_t *)xmalloc((size_t)(ps->count + 1) * sizeof(int64_t));
  unsigned *flags = (unsigned *)xmalloc((size_t)(ps->count + 1) * sizeof(unsigned));
  int64_t n_chunks = 0;
  for (int t = 0; t < ps->count; t++) {
    chunk0[t] = n_chunks;
    flags[t] = ps->specs[t].flags;
    n_chunks += (ps->numels[t] + kChunkElems - 1) / kChunkElems;
  }
  chunk0[ps->count] = n_chunks;
  Chunk *chunks = (Chunk *)xmalloc((size_t)(n_chunks + 1) * sizeof(Chunk));
  for (int t = 0; t < ps->count; t++)
    for (int64_t k = chunk0[t]; k < chunk0[t + 1]; k++) {
      int64_t first = (k - chunk0[t]) * kChunkElems;
      int64_t left = ps->numels[t] - first;
      chunks[k] = Chunk{t, (int32_t)(left < kChunkElems ? left : kChunkElems),
                        ps->offsets[t] + first};
    }
  int64_t all[2] = {0, n_chunks};
  oc->n_chunks = n_chunks;
  oc->chunks = upload(chunks, (size_t)n_chunks + 1);
  oc->chunk0 = upload(chunk0, (size_t)ps->count + 1);
  oc->all_chunks = upload(all, 2);
  oc->flags = upload(flags, (size_t)ps->count + 1);
  oc->partials = (float *)device_alloc_cuda((size_t)(2 * n_chunks + 2) * sizeof(float));
  oc->ratios = (float *)device_alloc_cuda((size_t)(ps->count + 1) * sizeof(float));
  oc->grad_norm = (float *)device_alloc_cuda(sizeof(float));
  device_zero_cuda(oc->grad_norm, sizeof(float));
  free(chunk0);
  free(flags);
  free(chunks);
  opt->cuda = oc;
}

extern "C" void optim_free_cuda(Optimizer *opt) {
  OptimCuda *oc = opt->cuda;
  void *bufs[] = {oc->chunks, oc->chunk0, oc->all_chunks, oc->flags,
                  oc->partials, oc->ratios, oc->grad_norm};
  for (void *b : bufs) device_free_cuda(b);
  free(oc);
  opt->cuda = NULL;
}

extern "C" void optim_step_cuda(Optimizer *opt, const Device *dev, ParamSet *ps, float lr) {
  const OptimCuda *oc = opt->cuda;
  if (!oc) DIE("optim_step_cuda: the optimizer was set up for a CPU ParamSet");
  const OptConfig *c = &opt->cfg;
  OptStepScalars s = optim_next_step(opt);
  float *w = ps->params, *g = ps->grads, *s0 = ps->state[0], *s1 = ps->state[1];
  float wd = c->weight_decay;
  switch (c->kind) {
    case OPT_SGD:
      launch_apply(oc, dev, SgdOp{w, s0, g, oc->flags, lr, wd, c->momentum, c->nesterov});
      break;
    case OPT_LARS:
      launch_ratios(oc, dev, LarsNormsOp{w, g, oc->flags},
                    LarsRatio{oc->flags, c->lars_eta, wd, c->eps});
      launch_apply(oc, dev,
                   LarsOp{w, s0, g, oc->ratios, oc->flags, lr, wd, c->momentum, c->nesterov});
      break;
    case OPT_ADAM:
    case OPT_ADAMW:
      launch_apply(oc, dev,
                   AdamOp{w, s0, s1, g, oc->flags, lr, lr / s.bc1, wd, c->beta1, c->beta2,
                          sqrtf(s.bc2), c->eps, c->kind == OPT_ADAMW});
      break;
    case OPT_LAMB:
      launch_ratios(oc, dev,
                    LambMomentsOp{w, g, s0, s1, oc->flags, c->beta1, c->beta2, s.bc1, s.bc2,
                                  c->eps, wd},
                    LambRatio{oc->flags});
      launch_apply(oc, dev, LambOp{w, s0, s1, oc->ratios, oc->flags, lr, s.bc1, s.bc2, c->eps, wd});
      break;
  }
}

extern "C" void optim_grads_zero_cuda(const Device *dev, ParamSet *ps) {
  CHECK_CUDA(cudaMemsetAsync(ps->grads, 0, (size_t)ps->total_numel * sizeof(float), dev->stream));
}

// Over the padded length too: the padding is zero and stays zero.
extern "C" void optim_grads_scale_cuda(const Device *dev, ParamSet *ps, float factor) {
  int64_t n = ps->total_numel;
  if (n == 0) return;
  unsigned blocks = (unsigned)((n + kChunkElems - 1) / kChunkElems);
  k_scale_flat<<<blocks, kThreads, 0, dev->stream>>>(ps->grads, n, factor);
  CHECK_LAUNCH();
}

extern "C" void optim_clip_grads_cuda(Optimizer *opt, const Device *dev, ParamSet *ps,
                                      float max_norm) {
  OptimCuda *oc = opt->cuda;
  if (!oc) DIE("optim_clip_grads_cuda: the optimizer was set up for a CPU ParamSet");
  if (oc->n_chunks == 0) return;
  k_sumsq<<<(unsigned)oc->n_chunks, kThreads, 0, dev->stream>>>(GradSquaresOp{ps->grads},
                                                                oc->chunks, oc->partials);
  CHECK_LAUNCH();
  k_norms<<<1, 1024, 0, dev->stream>>>(NormOnly{}, oc->all_chunks, oc->partials, oc->grad_norm);
  CHECK_LAUNCH();
  launch_apply(oc, dev, ClipOp{ps->grads, oc->grad_norm, max_norm});
  oc->clip_stream = dev->stream;
}

extern "C" float optim_last_grad_norm_cuda(const Optimizer *opt) {
  float norm = 0;
  if (opt->cuda->clip_stream) CHECK_CUDA(cudaStreamSynchronize(opt->cuda->clip_stream));
  device_copy_cuda(&norm, opt->cuda->grad_norm, sizeof norm);
  return norm;
}
