// conv_cuda.cu: the CUDA side of conv.h. Convolution goes through cuDNN
// (NHWC descriptors); ReLU is the shared elementwise kernel
// (cuda_binary.cuh). Everything runs on dev->stream.
#include <stdlib.h>
#include <string.h>

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
