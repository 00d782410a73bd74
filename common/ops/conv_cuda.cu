// conv_cuda.cu: the CUDA side of conv.h. Convolution goes through
// cuDNN (NHWC descriptors); batch norm, ReLU and pooling are own kernels,
// which fuse the residual add and the ReLU for every dtype, give
// bit-reproducible statistics and follow the CPU's pooling rules exactly.
// Everything runs on dev->stream.
#include <stdlib.h>
#include <string.h>

#include <initializer_list>

#include "ops/conv.h"
#include "ops/cuda_binary.cuh"

static const float kOne = 1.0f, kZero = 0.0f;

static cudnnDataType_t conv_cudnn_dtype(DType dt) {
  switch (dt) {
    case DT_F32: return CUDNN_DATA_FLOAT;
    case DT_F16: return CUDNN_DATA_HALF;
    case DT_BF16: return CUDNN_DATA_BFLOAT16;
    default: DIE("cuDNN op: dtype %s is not a float type", dtype_name(dt));
  }
}

static void conv_set_nhwc(cudnnTensorDescriptor_t d, DType dt, int64_t n, int64_t h, int64_t w,
                          int64_t c) {
  CHECK_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, conv_cudnn_dtype(dt), (int)n,
                                         (int)c, (int)h, (int)w));
}

// ---------------------------------------------------------------- convolution plans

// Everything cuDNN needs for one convolution shape: the descriptors and, per
// direction, the algorithm cudnnFind*AlgorithmEx measured fastest.
typedef struct ConvPlan {
  ConvGeometry g;
  ConvParams p;
  DType dtype;
  bool tf32;  // fp32 on TF32 tensor cores (op_conv2d_set_tf32)
  int device;
  cudnnTensorDescriptor_t x_desc, y_desc, bias_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv_desc;
  bool have_fwd, have_data, have_filter;
  cudnnConvolutionFwdAlgo_t fwd_algo;
  cudnnConvolutionBwdDataAlgo_t data_algo;
  cudnnConvolutionBwdFilterAlgo_t filter_algo;
  cudnnMathType_t fwd_math, data_math, filter_math;
  size_t fwd_ws_bytes, data_ws_bytes, filter_ws_bytes;
} ConvPlan;

// ResNet-50 has 53 convolutions of about 25 distinct shapes per batch size;
// a detector adds its heads. Two batch sizes (train, eval) of all of them fit.
#define CONV_PLANS_MAX 256
static ConvPlan g_plans[CONV_PLANS_MAX];
static int g_plan_count;

static bool g_conv_tf32;

void op_conv2d_set_tf32_cuda(const Device *dev, bool allow) {
  (void)dev;
  g_conv_tf32 = allow;
}

static ConvPlan *conv_plan(const Device *dev, const ConvGeometry *g, const ConvParams *p,
                           DType dtype) {
  bool tf32 = dtype == DT_F32 && g_conv_tf32;
  for (int i = 0; i < g_plan_count; i++) {
    ConvPlan *e = &g_plans[i];
    if (e->dtype == dtype && e->tf32 == tf32 && e->device == dev->index &&
        memcmp(&e->g, g, sizeof *g) == 0 && memcmp(&e->p, p, sizeof *p) == 0)
      return e;
  }
  if (g_plan_count == CONV_PLANS_MAX)
    DIE("conv: more than %d distinct convolution shapes; raise CONV_PLANS_MAX", CONV_PLANS_MAX);
  ConvPlan *e = &g_plans[g_plan_count++];
  memset(e, 0, sizeof *e);
  e->g = *g;
  e->p = *p;
  e->dtype = dtype;
  e->tf32 = tf32;
  e->device = dev->index;
  CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->x_desc));
  CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->y_desc));
  CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->bias_desc));
  CHECK_CUDNN(cudnnCreateFilterDescriptor(&e->w_desc));
  CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&e->conv_desc));
  conv_set_nhwc(e->x_desc, dtype, g->n, g->h, g->w, g->c);
  conv_set_nhwc(e->y_desc, dtype, g->n, g->p, g->q, g->k);
  conv_set_nhwc(e->bias_desc, dtype, 1, 1, 1, g->k);
  // KRSC is cuDNN's NHWC filter format.
  CHECK_CUDNN(cudnnSetFilter4dDescriptor(e->w_desc, conv_cudnn_dtype(dtype), CUDNN_TENSOR_NHWC,
                                         (int)g->k, (int)g->c, (int)g->r, (int)g->s));
  CHECK_CUDNN(cudnnSetConvolution2dDescriptor(e->conv_desc, p->pad_h, p->pad_w, p->stride_h,
                                              p->stride_w, p->dil_h, p->dil_w,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  return e;
}

// fp32 stays true fp32 (the CPU oracle's precision) unless TF32 is allowed;
// fp16 and bf16 may use tensor cores.
static bool conv_true_fp32(const ConvPlan *plan) { return plan->dtype == DT_F32 && !plan->tf32; }

// The search only considers algorithms allowed this math.
static cudnnMathType_t conv_search_math(const ConvPlan *plan) {
  if (plan->dtype != DT_F32) return CUDNN_TENSOR_OP_MATH;
  return conv_true_fp32(plan) ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// The math the found algorithm runs with: its own, except that true fp32
// stays FMA-only (a result reported as CUDNN_DEFAULT_MATH would allow TF32).
static cudnnMathType_t conv_run_math(const ConvPlan *plan, cudnnMathType_t found) {
  return conv_true_fp32(plan) ? CUDNN_FMA_MATH : found;
}

// The first successful result that fits the workspace (results come best
// first); for true fp32, the first that does not need tensor-op math. Generic
// over the three perf-result types.
template <typename Perf>
static const Perf *conv_pick(const char *op, const ConvPlan *plan, const Perf *perf, int count,
                             size_t ws_bytes) {
  bool fma_only = conv_true_fp32(plan);
  for (int i = 0; i < count; i++) {
    bool tensor_op = perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                     perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_bytes &&
        !(fma_only && tensor_op))
      return &perf[i];
  }
  DIE("%s: cuDNN found no algorithm within the %zu-byte workspace%s", op, ws_bytes,
      fma_only ? " without tensor-op math" : "");
}

// How each new shape's algorithm is chosen (environment variable CONV_ALGO):
//   heuristic (the default)  cuDNN's own ranking for the shape
//                            (cudnnGet*Algorithm_v7): host work only, and
//                            the same choice in every run;
//   search                   cuDNN's timed search (cudnnFind*AlgorithmEx):
//                            runs every algorithm once and waits for the GPU.
// On an H200 (2026-11-28) the search's choices made ResNet-50's bf16 step at
// 64x64 1.8x slower than the heuristic's (its filter gradients ran several
// times slower in the step than in the search), and at 224x224 both chose
// alike. The search's choices also differ between runs of one program.
static bool conv_use_search(void) {
  static int search = -1;
  if (search < 0) {
    const char *env = getenv("CONV_ALGO");
    if (!env || !*env || strcmp(env, "heuristic") == 0)
      search = 0;
    else if (strcmp(env, "search") == 0)
      search = 1;
    else
      die_input("CONV_ALGO", "'%s' is not heuristic or search", env);
  }
  return search;
}

// CONV_ALGO_LOG=1: each new shape's candidates on stderr, one line each
// (algorithm, status, time where searched, workspace, math type), the one
// taken marked.
template <typename Perf>
static void conv_log_choice(const char *op, const ConvPlan *plan, const Perf *perf, int count,
                            const Perf *best) {
  static int enabled = -1;
  if (enabled < 0) {
    const char *env = getenv("CONV_ALGO_LOG");
    enabled = env && *env && strcmp(env, "0") != 0;
  }
  if (!enabled) return;
  const ConvGeometry *g = &plan->g;
  for (int i = 0; i < count; i++)
    fprintf(stderr,
            "conv algo: %s %s n%lld %lldx%lldx%lld -> k%lld r%lld s%lld stride %d: algo %d "
            "status %d %.3f ms ws %zu math %d%s\n",
            op, plan->tf32 ? "tf32" : dtype_name(plan->dtype), (long long)g->n, (long long)g->h,
            (long long)g->w, (long long)g->c, (long long)g->k, (long long)g->r, (long long)g->s,
            plan->p.stride_h, (int)perf[i].algo, (int)perf[i].status, perf[i].time,
            perf[i].memory, (int)perf[i].mathType, &perf[i] == best ? "  <- taken" : "");
}

static ConvPlan *conv_prepare(const char *op, const Device *dev, const Tensor *x,
                              const Tensor *w, const Tensor *y, const ConvParams *p) {
  ConvGeometry g = conv_geometry(op, x, w, y, p);
  if (g.n == 0) return NULL;  // an empty batch: nothing to compute (cuDNN refuses n = 0)
  ConvPlan *plan = conv_plan(dev, &g, p, x->dtype);
  CHECK_CUDNN(cudnnSetConvolutionMathType(plan->conv_desc, conv_search_math(plan)));
  return plan;
}

void op_conv2d_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *w, const Tensor *bias,
                        const Tensor *y, const ConvParams *p, void *scratch,
                        size_t scratch_bytes) {
  (void)scratch, (void)scratch_bytes;
  ConvPlan *plan = conv_prepare("op_conv2d_fwd", dev, x, w, y, p);
  if (!plan) return;
  OP_REQUIRE("op_conv2d_fwd",
             !bias || (bias->dtype == x->dtype && tensor_numel(bias) == plan->g.k));
  if (!plan->have_fwd) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    if (!conv_use_search()) {
      CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
          dev->cudnn, plan->x_desc, plan->w_desc, plan->conv_desc, plan->y_desc,
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    } else {
      CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
          dev->cudnn, plan->x_desc, x->data, plan->w_desc, w->data, plan->conv_desc, plan->y_desc,
          y->data, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, dev->workspace,
          dev->workspace_bytes));
    }
    const cudnnConvolutionFwdAlgoPerf_t *best =
        conv_pick("op_conv2d_fwd", plan, perf, count, dev->workspace_bytes);
    conv_log_choice("op_conv2d_fwd", plan, perf, count, best);
    plan->fwd_algo = best->algo;
    plan->fwd_math = conv_run_math(plan, best->mathType);
    plan->fwd_ws_bytes = best->memory;
    plan->have_fwd = true;
  }
  CHECK_CUDNN(cudnnSetConvolutionMathType(plan->conv_desc, plan->fwd_math));
  CHECK_CUDNN(cudnnConvolutionForward(dev->cudnn, &kOne, plan->x_desc, x->data, plan->w_desc,
                                      w->data, plan->conv_desc, plan->fwd_algo, dev->workspace,
                                      plan->fwd_ws_bytes, &kZero, plan->y_desc, y->data));
  if (bias)
    CHECK_CUDNN(cudnnAddTensor(dev->cudnn, &kOne, plan->bias_desc, bias->data, &kOne,
                               plan->y_desc, y->data));
}

void op_conv2d_bwd_data_cuda(const Device *dev, const Tensor *dy, const Tensor *w,
                             const Tensor *dx, const ConvParams *p, void *scratch,
                             size_t scratch_bytes) {
  (void)scratch, (void)scratch_bytes;
  ConvPlan *plan = conv_prepare("op_conv2d_bwd_data", dev, dx, w, dy, p);
  if (!plan) return;
  if (!plan->have_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    if (!conv_use_search()) {
      CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          dev->cudnn, plan->w_desc, plan->y_desc, plan->conv_desc, plan->x_desc,
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    } else {
      CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
          dev->cudnn, plan->w_desc, w->data, plan->y_desc, dy->data, plan->conv_desc,
          plan->x_desc, dx->data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf,
          dev->workspace, dev->workspace_bytes));
    }
    const cudnnConvolutionBwdDataAlgoPerf_t *best =
        conv_pick("op_conv2d_bwd_data", plan, perf, count, dev->workspace_bytes);
    conv_log_choice("op_conv2d_bwd_data", plan, perf, count, best);
    plan->data_algo = best->algo;
    plan->data_math = conv_run_math(plan, best->mathType);
    plan->data_ws_bytes = best->memory;
    plan->have_data = true;
  }
  CHECK_CUDNN(cudnnSetConvolutionMathType(plan->conv_desc, plan->data_math));
  CHECK_CUDNN(cudnnConvolutionBackwardData(dev->cudnn, &kOne, plan->w_desc, w->data,
                                           plan->y_desc, dy->data, plan->conv_desc,
                                           plan->data_algo, dev->workspace, plan->data_ws_bytes,
                                           &kZero, plan->x_desc, dx->data));
}

void op_conv2d_bwd_filter_cuda(const Device *dev, const Tensor *x, const Tensor *dy,
                               const Tensor *dw, const ConvParams *p, bool accumulate,
                               void *scratch, size_t scratch_bytes) {
  (void)scratch, (void)scratch_bytes;
  ConvPlan *plan = conv_prepare("op_conv2d_bwd_filter", dev, x, dw, dy, p);
  if (!plan) {  // an empty batch: the gradient is an empty sum
    if (!accumulate) CHECK_CUDA(cudaMemsetAsync(dw->data, 0, tensor_bytes(dw), dev->stream));
    return;
  }
  if (!plan->have_filter) {
    // The search writes its trial results into the output; when dw holds a
    // gradient being accumulated, aim them at the workspace's tail instead.
    size_t dw_bytes = (tensor_bytes(dw) + 255) & ~(size_t)255;
    OP_REQUIRE("op_conv2d_bwd_filter", dw_bytes < dev->workspace_bytes / 2);
    size_t search_ws_bytes = dev->workspace_bytes - dw_bytes;
    void *trial_dw = (char *)dev->workspace + search_ws_bytes;
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    if (!conv_use_search()) {
      CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          dev->cudnn, plan->x_desc, plan->y_desc, plan->conv_desc, plan->w_desc,
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    } else {
      CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          dev->cudnn, plan->x_desc, x->data, plan->y_desc, dy->data, plan->conv_desc,
          plan->w_desc, trial_dw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf,
          dev->workspace, search_ws_bytes));
    }
    const cudnnConvolutionBwdFilterAlgoPerf_t *best =
        conv_pick("op_conv2d_bwd_filter", plan, perf, count, search_ws_bytes);
    conv_log_choice("op_conv2d_bwd_filter", plan, perf, count, best);
    plan->filter_algo = best->algo;
    plan->filter_math = conv_run_math(plan, best->mathType);
    plan->filter_ws_bytes = best->memory;
    plan->have_filter = true;
  }
  CHECK_CUDNN(cudnnSetConvolutionMathType(plan->conv_desc, plan->filter_math));
  CHECK_CUDNN(cudnnConvolutionBackwardFilter(
      dev->cudnn, &kOne, plan->x_desc, x->data, plan->y_desc, dy->data, plan->conv_desc,
      plan->filter_algo, dev->workspace, plan->filter_ws_bytes, accumulate ? &kOne : &kZero,
      plan->w_desc, dw->data));
}

// ---------------------------------------------------------------- batch norm

// The kernels below map channels to threads along x and rows along y. Each
// thread owns V neighbouring channels, moved as one 16-byte OpsPack (8 bf16
// or fp16, 4 fp32) when the channel count and the pointers allow it, else
// V = 1. In NHWC a row's channels are contiguous, so the threads of a warp
// read whole rows in 16-byte pieces.
static inline bool bn_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T, int V>
__device__ __forceinline__ void pack_load(const T *p, float (&out)[V]) {
  OpsPack<T, V> pack = *(const OpsPack<T, V> *)p;
#pragma unroll
  for (int v = 0; v < V; v++) out[v] = ops_f32(pack.v[v]);
}

template <typename T, int V>
__device__ __forceinline__ void pack_store(T *p, const float (&in)[V]) {
  OpsPack<T, V> pack;
#pragma unroll
  for (int v = 0; v < V; v++) pack.v[v] = ops_from_f32<T>(in[v]);
  *(OpsPack<T, V> *)p = pack;
}

// Per-channel partial sums over row parts, the layout of the reductions in
// reduce_cuda.cu: block (cw, 256 / cw) covers cw * V channels; blockIdx.y
// is the part; lanes along y add up in a fixed tree. Two sums per channel.
template <typename T>
struct BnPartialArgs {
  const T *x, *y, *dy;  // x always; y and dy for the backward
  const float *mean, *invstd;
  int64_t rows, cols, rows_per_part;
  float *part_a, *part_b;  // (parts, cols) each
  bool relu;
};

template <int V>
__device__ __forceinline__ void bn_block_pair_sums(const float (&a)[V], const float (&b)[V],
                                                   float *part_a, float *part_b, int64_t cols,
                                                   int64_t c0) {
  __shared__ float lanes_a[V][256], lanes_b[V][256];
  int slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int v = 0; v < V; v++) {
    lanes_a[v][slot] = a[v];
    lanes_b[v][slot] = b[v];
  }
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      int other = slot + half * blockDim.x;
#pragma unroll
      for (int v = 0; v < V; v++) {
        lanes_a[v][slot] += lanes_a[v][other];
        lanes_b[v][slot] += lanes_b[v][other];
      }
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c0 < cols) {
    int64_t at = (int64_t)blockIdx.y * cols + c0;
#pragma unroll
    for (int v = 0; v < V; v++) {
      part_a[at + v] = lanes_a[v][threadIdx.x];
      part_b[at + v] = lanes_b[v][threadIdx.x];
    }
  }
}

// Forward: sums of (x - s) and (x - s)^2 with s = x[0, c]. Shifting by a
// sample keeps the one-pass variance free of the cancellation that plain
// sum(x^2) - sum(x)^2 / M suffers when |mean| >> std.
template <typename T, int V>
__global__ void bn_stats_kernel(BnPartialArgs<T> a) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  float s1[V] = {}, s2[V] = {};
  if (c0 < a.cols) {
    float shift[V], x[V];
    pack_load<T, V>(a.x + c0, shift);
    int64_t r1 = min(a.rows, ((int64_t)blockIdx.y + 1) * a.rows_per_part);
    for (int64_t r = (int64_t)blockIdx.y * a.rows_per_part + threadIdx.y; r < r1; r += blockDim.y) {
      pack_load<T, V>(a.x + r * a.cols + c0, x);
#pragma unroll
      for (int v = 0; v < V; v++) {
        float d = x[v] - shift[v];
        s1[v] += d;
        s2[v] += d * d;
      }
    }
  }
  bn_block_pair_sums<V>(s1, s2, a.part_a, a.part_b, a.cols, c0);
}

// Backward: sums of g and g xhat, g = dy masked by the ReLU.
template <typename T, int V>
__global__ void bn_grad_sums_kernel(BnPartialArgs<T> a) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  float s1[V] = {}, s2[V] = {};
  if (c0 < a.cols) {
    float mean[V], invstd[V], x[V], y[V] = {}, dy[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      mean[v] = a.mean[c0 + v];
      invstd[v] = a.invstd[c0 + v];
    }
    int64_t r1 = min(a.rows, ((int64_t)blockIdx.y + 1) * a.rows_per_part);
    for (int64_t r = (int64_t)blockIdx.y * a.rows_per_part + threadIdx.y; r < r1; r += blockDim.y) {
      int64_t e = r * a.cols + c0;
      pack_load<T, V>(a.x + e, x);
      pack_load<T, V>(a.dy + e, dy);
      if (a.relu) pack_load<T, V>(a.y + e, y);
#pragma unroll
      for (int v = 0; v < V; v++) {
        float g = a.relu && !(y[v] > 0) ? 0.0f : dy[v];
        s1[v] += g;
        s2[v] += g * (x[v] - mean[v]) * invstd[v];
      }
    }
  }
  bn_block_pair_sums<V>(s1, s2, a.part_a, a.part_b, a.cols, c0);
}

// Adds up the parts in order; the training forward's statistics.
template <typename T>
__global__ void bn_stats_finalize_kernel(const T *x, const float *part_a, const float *part_b,
                                         int64_t parts, int64_t rows, int64_t cols, BatchNorm bn) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s1 = 0, s2 = 0;
  for (int64_t i = 0; i < parts; i++) {
    s1 += part_a[i * cols + c];
    s2 += part_b[i * cols + c];
  }
  float m = (float)rows, d_mean = s1 / m;
  float var = fmaxf(s2 / m - d_mean * d_mean, 0.0f);
  float mean = ops_f32(x[c]) + d_mean;
  ((float *)bn.save_mean.data)[c] = mean;
  ((float *)bn.save_invstd.data)[c] = rsqrtf(var + bn.eps);
  float *rm = (float *)bn.running_mean.data, *rv = (float *)bn.running_var.data;
  rm[c] = (1 - bn.momentum) * rm[c] + bn.momentum * mean;
  rv[c] = (1 - bn.momentum) * rv[c] + bn.momentum * var * m / (m - 1);
}

// The backward's per-channel results: dbeta, dgamma (maybe accumulated) and
// the two means dx needs, written to coef (2, cols).
__global__ void bn_grad_finalize_kernel(const float *part_a, const float *part_b, int64_t parts,
                                        int64_t rows, int64_t cols, float *dgamma, float *dbeta,
                                        bool accumulate, float *coef) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s1 = 0, s2 = 0;
  for (int64_t i = 0; i < parts; i++) {
    s1 += part_a[i * cols + c];
    s2 += part_b[i * cols + c];
  }
  dbeta[c] = s1 + (accumulate ? dbeta[c] : 0.0f);
  dgamma[c] = s2 + (accumulate ? dgamma[c] : 0.0f);
  coef[c] = s1 / (float)rows;
  coef[cols + c] = s2 / (float)rows;
}

// The elementwise kernels compute their channels' constants once and then
// stride over rows.

// y = act(scale x + shift (+ z)), scale = gamma invstd, shift = beta - mean
// scale (the CPU's formula); for inference `spread` is the running variance,
// else the saved invstd.
template <typename T, int V>
__global__ void bn_apply_kernel(const T *x, const T *z, T *y, int64_t rows, int64_t cols,
                                const float *gamma, const float *beta, const float *mean,
                                const float *spread, bool spread_is_var, float eps, bool relu) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= cols) return;
  float scale[V], shift[V], v_x[V], v_z[V], out[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    int64_t c = c0 + v;
    float invstd = spread_is_var ? rsqrtf(spread[c] + eps) : spread[c];
    scale[v] = gamma[c] * invstd;
    shift[v] = beta[c] - mean[c] * scale[v];
  }
  int64_t step = (int64_t)gridDim.y * blockDim.y;
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += step) {
    int64_t e = r * cols + c0;
    pack_load<T, V>(x + e, v_x);
    if (z) pack_load<T, V>(z + e, v_z);
#pragma unroll
    for (int v = 0; v < V; v++) {
      float o = scale[v] * v_x[v] + shift[v];
      if (z) o += v_z[v];
      out[v] = relu && !(o > 0) ? 0.0f : o;
    }
    pack_store<T, V>(y + e, out);
  }
}

// dx = gamma invstd (g - mean(g) - xhat mean(g xhat)), dz = g; coef holds the
// two means (2, cols).
template <typename T, int V>
__global__ void bn_dx_kernel(const T *x, const T *y, const T *dy, T *dx, T *dz, int64_t rows,
                             int64_t cols, const float *gamma, const float *mean,
                             const float *invstd, const float *coef, bool relu) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= cols) return;
  float mu[V], is[V], k[V], mg[V], mgx[V], v_x[V], v_y[V] = {}, v_dy[V], g[V], out[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    int64_t c = c0 + v;
    mu[v] = mean[c], is[v] = invstd[c], k[v] = gamma[c] * is[v];
    mg[v] = coef[c], mgx[v] = coef[cols + c];
  }
  int64_t step = (int64_t)gridDim.y * blockDim.y;
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += step) {
    int64_t e = r * cols + c0;
    pack_load<T, V>(x + e, v_x);
    pack_load<T, V>(dy + e, v_dy);
    if (relu) pack_load<T, V>(y + e, v_y);
#pragma unroll
    for (int v = 0; v < V; v++) {
      g[v] = relu && !(v_y[v] > 0) ? 0.0f : v_dy[v];
      out[v] = k[v] * (g[v] - mg[v] - (v_x[v] - mu[v]) * is[v] * mgx[v]);
    }
    // dx may be dy (in place): every read of this row is done.
    if (dz) pack_store<T, V>(dz + e, g);
    pack_store<T, V>(dx + e, out);
  }
}

// The channels a thread owns (batch norm, pooling): 16 bytes' worth when
// every row of every tensor starts 16-byte aligned, else 1.
template <typename T>
static int conv_vector_width(int64_t cols, std::initializer_list<const void *> ptrs) {
  const int wide = 16 / (int)sizeof(T);
  if (cols % wide != 0) return 1;
  for (const void *p : ptrs)
    if (p && !bn_aligned(p)) return 1;
  return wide;
}

// Block (cw, 256 / cw) with cw the channel groups per block (a power of two
// up to 32); grid (channel blocks, row blocks).
static void bn_elementwise_grid(int64_t rows, int64_t groups, dim3 *grid, dim3 *block) {
  unsigned cw = 1;
  while (cw < 32 && cw < groups) cw *= 2;
  *block = dim3(cw, 256 / cw);
  int64_t row_blocks = (rows + block->y - 1) / block->y;
  *grid = dim3((unsigned)((groups + cw - 1) / cw),
               (unsigned)(row_blocks < 1 ? 1 : row_blocks < 65535 ? row_blocks : 65535));
}

// How the partial-sum kernels split (rows, groups of channels): block shape
// and number of row parts, within the workspace (2 parts floats per column
// plus 2 more).
typedef struct BnSplit {
  dim3 block, grid;
  int64_t parts, rows_per_part;
} BnSplit;

static BnSplit bn_split(const Device *dev, int64_t rows, int64_t cols, int64_t groups) {
  BnSplit s;
  unsigned cw = 1;
  while (cw < 32 && cw < groups) cw *= 2;
  int64_t col_blocks = (groups + cw - 1) / cw;
  int64_t parts = (rows + 255) / 256;
  int64_t want = (4 * (int64_t)dev->sm_count + col_blocks - 1) / col_blocks;
  int64_t fit = (int64_t)(dev->workspace_bytes / sizeof(float)) / cols / 2 - 1;
  parts = parts < want ? parts : want;
  parts = parts < fit ? parts : fit;
  parts = parts < 65535 ? parts : 65535;
  OP_REQUIRE("batch norm", parts >= 1);
  s.parts = parts;
  s.rows_per_part = (rows + parts - 1) / parts;
  s.block = dim3(cw, 256 / cw);
  s.grid = dim3((unsigned)col_blocks, (unsigned)parts);
  return s;
}

static void bn_require(const char *op, const Tensor *x, const Tensor *other) {
  OP_REQUIRE(op, !other || (other->dtype == x->dtype && tensor_numel(other) == tensor_numel(x)));
}

template <typename T, int V>
static void bn_fwd_train_launch(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                const Tensor *z, bool relu, const Tensor *y, int64_t m,
                                int64_t c) {
  BnSplit s = bn_split(dev, m, c, c / V);
  float *part_a = (float *)dev->workspace, *part_b = part_a + s.parts * c;
  BnPartialArgs<T> a = {(const T *)x->data, NULL, NULL, NULL, NULL, m, c,
                        s.rows_per_part, part_a, part_b, relu};
  bn_stats_kernel<T, V><<<s.grid, s.block, 0, dev->stream>>>(a);
  CHECK_LAUNCH();
  bn_stats_finalize_kernel<T><<<ops_blocks(c, 256), 256, 0, dev->stream>>>(
      (const T *)x->data, part_a, part_b, s.parts, m, c, *bn);
  CHECK_LAUNCH();
  dim3 grid, block;
  bn_elementwise_grid(m, c / V, &grid, &block);
  bn_apply_kernel<T, V><<<grid, block, 0, dev->stream>>>(
      (const T *)x->data, z ? (const T *)z->data : NULL, (T *)y->data, m, c,
      (const float *)bn->gamma.data, (const float *)bn->beta.data,
      (const float *)bn->save_mean.data, (const float *)bn->save_invstd.data, false, bn->eps,
      relu);
  CHECK_LAUNCH();
}

void op_batchnorm_fwd_train_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                 const Tensor *z, bool relu, const Tensor *y) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_train", bn, x, &m, &c);
  bn_require("op_batchnorm_fwd_train", x, z);
  bn_require("op_batchnorm_fwd_train", x, y);
  OP_REQUIRE("op_batchnorm_fwd_train", m >= 2);
  OPS_FLOAT_DISPATCH("op_batchnorm_fwd_train", x->dtype, {
    typedef scalar_t T;
    if (conv_vector_width<T>(c, {x->data, z ? z->data : NULL, y->data}) > 1)
      bn_fwd_train_launch<T, 16 / sizeof(T)>(dev, bn, x, z, relu, y, m, c);
    else
      bn_fwd_train_launch<T, 1>(dev, bn, x, z, relu, y, m, c);
  });
}

void op_batchnorm_fwd_infer_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                 const Tensor *z, bool relu, const Tensor *y) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_infer", bn, x, &m, &c);
  bn_require("op_batchnorm_fwd_infer", x, z);
  bn_require("op_batchnorm_fwd_infer", x, y);
  if (m * c == 0) return;
  OPS_FLOAT_DISPATCH("op_batchnorm_fwd_infer", x->dtype, {
    typedef scalar_t T;
    int v = conv_vector_width<T>(c, {x->data, z ? z->data : NULL, y->data});
    dim3 grid, block;
    bn_elementwise_grid(m, c / v, &grid, &block);
    const T *pz = z ? (const T *)z->data : NULL;
    const float *g = (const float *)bn->gamma.data, *b = (const float *)bn->beta.data;
    const float *rm = (const float *)bn->running_mean.data;
    const float *rv = (const float *)bn->running_var.data;
    if (v > 1)
      bn_apply_kernel<T, 16 / sizeof(T)><<<grid, block, 0, dev->stream>>>(
          (const T *)x->data, pz, (T *)y->data, m, c, g, b, rm, rv, true, bn->eps, relu);
    else
      bn_apply_kernel<T, 1><<<grid, block, 0, dev->stream>>>(
          (const T *)x->data, pz, (T *)y->data, m, c, g, b, rm, rv, true, bn->eps, relu);
  });
  CHECK_LAUNCH();
}

template <typename T, int V>
static void bn_bwd_launch(const Device *dev, const BatchNorm *bn, const Tensor *x,
                          const Tensor *y, const Tensor *dy, bool relu, const Tensor *dx,
                          const Tensor *dz, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate, int64_t m, int64_t c) {
  BnSplit s = bn_split(dev, m, c, c / V);
  float *part_a = (float *)dev->workspace, *part_b = part_a + s.parts * c;
  float *coef = part_b + s.parts * c;  // (2, C)
  const float *mean = (const float *)bn->save_mean.data;
  const float *invstd = (const float *)bn->save_invstd.data;
  BnPartialArgs<T> a = {(const T *)x->data, (const T *)y->data, (const T *)dy->data, mean,
                        invstd, m, c, s.rows_per_part, part_a, part_b, relu};
  bn_grad_sums_kernel<T, V><<<s.grid, s.block, 0, dev->stream>>>(a);
  CHECK_LAUNCH();
  bn_grad_finalize_kernel<<<ops_blocks(c, 256), 256, 0, dev->stream>>>(
      part_a, part_b, s.parts, m, c, (float *)dgamma->data, (float *)dbeta->data, accumulate,
      coef);
  CHECK_LAUNCH();
  dim3 grid, block;
  bn_elementwise_grid(m, c / V, &grid, &block);
  bn_dx_kernel<T, V><<<grid, block, 0, dev->stream>>>(
      (const T *)x->data, (const T *)y->data, (const T *)dy->data, (T *)dx->data,
      dz ? (T *)dz->data : NULL, m, c, (const float *)bn->gamma.data, mean, invstd, coef, relu);
  CHECK_LAUNCH();
}

void op_batchnorm_bwd_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                           const Tensor *y, const Tensor *dy, bool relu, const Tensor *dx,
                           const Tensor *dz, const Tensor *dgamma, const Tensor *dbeta,
                           bool accumulate) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_bwd", bn, x, &m, &c);
  bn_require("op_batchnorm_bwd", x, y);
  bn_require("op_batchnorm_bwd", x, dy);
  bn_require("op_batchnorm_bwd", x, dx);
  bn_require("op_batchnorm_bwd", x, dz);
  OP_REQUIRE("op_batchnorm_bwd", dgamma->dtype == DT_F32 && tensor_numel(dgamma) == c);
  OP_REQUIRE("op_batchnorm_bwd", dbeta->dtype == DT_F32 && tensor_numel(dbeta) == c);
  if (m == 0) {  // no rows: sums of nothing, 0 as on the CPU
    if (!accumulate) {
      CHECK_CUDA(cudaMemsetAsync(dgamma->data, 0, tensor_bytes(dgamma), dev->stream));
      CHECK_CUDA(cudaMemsetAsync(dbeta->data, 0, tensor_bytes(dbeta), dev->stream));
    }
    return;
  }
  OPS_FLOAT_DISPATCH("op_batchnorm_bwd", x->dtype, {
    typedef scalar_t T;
    if (conv_vector_width<T>(c, {x->data, y->data, dy->data, dx->data, dz ? dz->data : NULL}) > 1)
      bn_bwd_launch<T, 16 / sizeof(T)>(dev, bn, x, y, dy, relu, dx, dz, dgamma, dbeta,
                                       accumulate, m, c);
    else
      bn_bwd_launch<T, 1>(dev, bn, x, y, dy, relu, dx, dz, dgamma, dbeta, accumulate, m, c);
  });
}

// ---------------------------------------------------------------- ReLU

struct ConvReluFwd {  // f(x, unused)
  __device__ float operator()(float x, float) const { return x > 0 ? x : 0.0f; }
};
struct ConvReluBwd {  // f(y, dy)
  __device__ float operator()(float y, float dy) const { return y > 0 ? dy : 0.0f; }
};

void op_relu_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  int64_t n = tensor_numel(x);
  OP_REQUIRE("op_relu_fwd", y->dtype == x->dtype && tensor_numel(y) == n);
  ops_binary_launch(dev, "op_relu_fwd", x->dtype, x->data, x->data, y->data, n, ConvReluFwd());
}

void op_relu_bwd_cuda(const Device *dev, const Tensor *y, const Tensor *dy, const Tensor *dx) {
  int64_t n = tensor_numel(y);
  OP_REQUIRE("op_relu_bwd", dy->dtype == y->dtype && dx->dtype == y->dtype);
  OP_REQUIRE("op_relu_bwd", tensor_numel(dy) == n && tensor_numel(dx) == n);
  ops_binary_launch(dev, "op_relu_bwd", y->dtype, y->data, dy->data, dx->data, n, ConvReluBwd());
}

// ---------------------------------------------------------------- pooling
// Own NHWC kernels rather than cuDNN's pooling: they follow the CPU's rules
// exactly in every dtype (max: NaN never wins, the gradient goes to the
// first position holding the maximum; average: padding counts as zero), and
// the backward gathers instead of scattering, so it needs no atomics and adds
// each input's terms in the CPU's order. One thread per element; the
// channel is the fastest index, so a warp reads contiguous memory.

typedef struct PoolShape {
  int64_t n, h, w, c, p, q;
  int window_h, window_w, stride_h, stride_w, pad_h, pad_w;
} PoolShape;

static PoolShape pool_shape(const ConvGeometry *g, const PoolParams *pp) {
  PoolShape s = {g->n, g->h, g->w, g->c, g->p, g->q, pp->window_h, pp->window_w,
                 pp->stride_h, pp->stride_w, pp->pad_h, pp->pad_w};
  return s;
}

// The input rows [*h0, *h1) and columns [*w0, *w1) of output (oh, ow)'s window.
static __device__ void pool_window_dev(const PoolShape &s, int64_t oh, int64_t ow, int64_t *h0,
                                       int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * s.stride_h - s.pad_h, ws = ow * s.stride_w - s.pad_w;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + s.window_h < s.h ? hs + s.window_h : s.h;
  *w1 = ws + s.window_w < s.w ? ws + s.window_w : s.w;
}

// The outputs whose windows hold input row i along one axis: [*o0, *o1).
static __device__ void pool_covering(int64_t i, int stride, int pad, int window, int64_t out,
                                     int64_t *o0, int64_t *o1) {
  int64_t lo = i + pad - window + 1;  // o * stride >= lo
  *o0 = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  int64_t hi = (i + pad) / stride + 1;  // o * stride <= i + pad
  *o1 = hi < out ? hi : out;
}

// Both kernels give each thread V neighbouring channels of one pixel (see
// batch norm: 16-byte accesses when the channel count and the pointers
// allow); the index arithmetic and the window scans are shared by the V.
template <typename T, bool kMax, int V>
__global__ void pool_fwd_kernel(const T *x, T *y, PoolShape s) {
  int64_t groups = s.c / V, total = s.n * s.p * s.q * groups;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c0 = i % groups * V, pixel = i / groups;  // pixel: (n, oh, ow)
    int64_t ow = pixel % s.q, oh = pixel / s.q % s.p, n = pixel / (s.q * s.p);
    int64_t h0, h1, w0, w1;
    pool_window_dev(s, oh, ow, &h0, &h1, &w0, &w1);
    float acc[V], v[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = kMax ? -INFINITY : 0.0f;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++) {
        pack_load<T, V>(x + ((n * s.h + ih) * s.w + iw) * s.c + c0, v);
#pragma unroll
        for (int k = 0; k < V; k++)
          acc[k] = kMax ? (v[k] > acc[k] ? v[k] : acc[k]) : __fadd_rn(acc[k], v[k]);
      }
    if (!kMax) {
      float inv_area = 1.0f / (float)(s.window_h * s.window_w);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] = __fmul_rn(acc[k], inv_area);
    }
    pack_store<T, V>(y + pixel * s.c + c0, acc);
  }
}

// dx at each input: the sum over the outputs covering it (in row-major
// output order) of dy, where max pooling counts an output only when this
// input is the first in its window holding the output's value.
template <typename T, bool kMax, int V>
__global__ void pool_bwd_kernel(const T *x, const T *y, const T *dy, T *dx, PoolShape s) {
  int64_t groups = s.c / V, total = s.n * s.h * s.w * groups;
  float inv_area = 1.0f / (float)(s.window_h * s.window_w);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c0 = i % groups * V, pixel = i / groups;  // pixel: (n, ih, iw)
    int64_t iw = pixel % s.w, ih = pixel / s.w % s.h, n = pixel / (s.w * s.h);
    int64_t oh0, oh1, ow0, ow1;
    pool_covering(ih, s.stride_h, s.pad_h, s.window_h, s.p, &oh0, &oh1);
    pool_covering(iw, s.stride_w, s.pad_w, s.window_w, s.q, &ow0, &ow1);
    float acc[V], g[V], top[V], v[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++) {
        int64_t o = ((n * s.p + oh) * s.q + ow) * s.c + c0;
        pack_load<T, V>(dy + o, g);
        if (kMax) {
          // Per channel: is this input the first of the window to hold the max?
          bool found[V], mine[V];
#pragma unroll
          for (int k = 0; k < V; k++) found[k] = mine[k] = false;
          pack_load<T, V>(y + o, top);
          int64_t h0, h1, w0, w1;
          pool_window_dev(s, oh, ow, &h0, &h1, &w0, &w1);
          for (int64_t jh = h0; jh < h1; jh++)
            for (int64_t jw = w0; jw < w1; jw++) {
              pack_load<T, V>(x + ((n * s.h + jh) * s.w + jw) * s.c + c0, v);
              bool here = jh == ih && jw == iw;
#pragma unroll
              for (int k = 0; k < V; k++)
                if (!found[k] && v[k] == top[k]) found[k] = true, mine[k] = here;
            }
#pragma unroll
          for (int k = 0; k < V; k++)
            if (mine[k]) acc[k] = __fadd_rn(acc[k], g[k]);
        } else {
#pragma unroll
          for (int k = 0; k < V; k++) acc[k] = __fadd_rn(acc[k], __fmul_rn(g[k], inv_area));
        }
      }
    pack_store<T, V>(dx + pixel * s.c + c0, acc);
  }
}

template <bool kMax>
static void pool_fwd_cuda(const Device *dev, const char *op, const Tensor *x, const Tensor *y,
                          const PoolParams *p) {
  ConvGeometry g = pool_geometry(op, x, y, p);
  PoolShape s = pool_shape(&g, p);
  int64_t total = tensor_numel(y);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH(op, x->dtype, {
    typedef scalar_t T;
    constexpr int kWide = 16 / sizeof(T);
    const T *px = (const T *)x->data;
    T *py = (T *)y->data;
    if (conv_vector_width<T>(s.c, {px, py}) > 1)
      pool_fwd_kernel<T, kMax, kWide>
          <<<ops_blocks(total / kWide, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, s);
    else
      pool_fwd_kernel<T, kMax, 1>
          <<<ops_blocks(total, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, s);
  });
  CHECK_LAUNCH();
}

// x and y are read by max pooling only (NULL for the average).
template <bool kMax>
static void pool_bwd_cuda(const Device *dev, const char *op, const Tensor *x, const Tensor *y,
                          const Tensor *dy, const Tensor *dx, const PoolParams *p) {
  ConvGeometry g = pool_geometry(op, dx, dy, p);
  OP_REQUIRE(op, dy->dtype == dx->dtype);
  OP_REQUIRE(op, !kMax || (x->dtype == dx->dtype && y->dtype == dx->dtype));
  PoolShape s = pool_shape(&g, p);
  int64_t total = tensor_numel(dx);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH(op, dx->dtype, {
    typedef scalar_t T;
    constexpr int kWide = 16 / sizeof(T);
    const T *px = kMax ? (const T *)x->data : NULL, *py = kMax ? (const T *)y->data : NULL;
    const T *pdy = (const T *)dy->data;
    T *pdx = (T *)dx->data;
    if (conv_vector_width<T>(s.c, {px, py, pdy, pdx}) > 1)
      pool_bwd_kernel<T, kMax, kWide>
          <<<ops_blocks(total / kWide, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(
              px, py, pdy, pdx, s);
    else
      pool_bwd_kernel<T, kMax, 1>
          <<<ops_blocks(total, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, pdy, pdx, s);
  });
  CHECK_LAUNCH();
}

void op_maxpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                         const PoolParams *p) {
  pool_fwd_cuda<true>(dev, "op_maxpool_fwd", x, y, p);
}

void op_maxpool_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *y, const Tensor *dy,
                         const Tensor *dx, const PoolParams *p) {
  OP_REQUIRE("op_maxpool_bwd", tensor_same_shape(dy, y) && tensor_same_shape(dx, x));
  pool_bwd_cuda<true>(dev, "op_maxpool_bwd", x, y, dy, dx, p);
}

void op_avgpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                         const PoolParams *p) {
  pool_fwd_cuda<false>(dev, "op_avgpool_fwd", x, y, p);
}

void op_avgpool_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx,
                         const PoolParams *p) {
  pool_bwd_cuda<false>(dev, "op_avgpool_bwd", NULL, NULL, dy, dx, p);
}

// ---------------------------------------------------------------- global average pool

// One thread per (n, c); neighbouring threads read neighbouring channels.
template <typename T>
__global__ void gap_fwd_kernel(const T *x, T *y, int64_t n, int64_t area, int64_t c) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * c; i += stride) {
    const T *img = x + (i / c) * area * c + i % c;
    float acc = 0;
    for (int64_t a = 0; a < area; a++) acc += ops_f32(img[a * c]);
    y[i] = ops_from_f32<T>(acc / (float)area);
  }
}

template <typename T>
__global__ void gap_bwd_kernel(const T *dy, T *dx, int64_t total, int64_t area, int64_t c) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t img = i / (area * c);
    dx[i] = ops_from_f32<T>(ops_f32(dy[img * c + i % c]) / (float)area);
  }
}

static void gap_check(const char *op, const Tensor *x, const Tensor *y) {
  OP_REQUIRE(op, x->ndim == 4 && y->ndim == 2 && x->dtype == y->dtype);
  OP_REQUIRE(op, y->shape[0] == x->shape[0] && y->shape[1] == x->shape[3]);
  OP_REQUIRE(op, x->shape[1] * x->shape[2] >= 1);
}

void op_global_avgpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  gap_check("op_global_avgpool_fwd", x, y);
  int64_t n = x->shape[0], area = x->shape[1] * x->shape[2], c = x->shape[3];
  if (n * c == 0) return;
  OPS_FLOAT_DISPATCH("op_global_avgpool_fwd", x->dtype, {
    typedef scalar_t T;
    gap_fwd_kernel<T><<<ops_blocks(n * c, 256), 256, 0, dev->stream>>>(
        (const T *)x->data, (T *)y->data, n, area, c);
  });
  CHECK_LAUNCH();
}

void op_global_avgpool_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx) {
  gap_check("op_global_avgpool_bwd", dx, dy);
  int64_t area = dx->shape[1] * dx->shape[2], c = dx->shape[3], total = tensor_numel(dx);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH("op_global_avgpool_bwd", dx->dtype, {
    typedef scalar_t T;
    gap_bwd_kernel<T><<<ops_blocks(total, 256), 256, 0, dev->stream>>>(
        (const T *)dy->data, (T *)dx->data, total, area, c);
  });
  CHECK_LAUNCH();
}
