// loss_cuda.cu: the losses on the GPU. The loss scalar is reduced in a
// fixed order (per-row or per-block partial sums in dev->workspace, then one
// block) and written to the caller's device float; nothing waits on the host.
#include "ops/cuda.cuh"
#include "ops/loss.h"

#define MEAN_THREADS 1024

// loss = sum(values) / (weights ? sum(weights) : denom), 0 when the divisor is
// 0; weight_sum (if not NULL) gets sum(weights). One block: thread t sums
// entries t, t + 1024, ... and the block tree adds the 1024 partials.
static __global__ void mean_kernel(const float *values, const float *weights, int64_t n,
                                   float denom, float *loss, float *weight_sum) {
  __shared__ float shared[32];
  float v = 0.0f, w = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    v += values[i];
    if (weights) w += weights[i];
  }
  v = ops_block_sum(v, shared);
  if (weights) denom = ops_block_sum(w, shared);
  if (threadIdx.x == 0) {
    *loss = denom > 0.0f ? v / denom : 0.0f;
    if (weight_sum) *weight_sum = denom;
  }
}

static void mean_launch(const Device *dev, const float *values, const float *weights,
                        int64_t n, float denom, float *loss, float *weight_sum) {
  mean_kernel<<<1, MEAN_THREADS, 0, dev->stream>>>(values, weights, n, denom, loss,
                                                   weight_sum);
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------- cross-entropy
// Scratch per row in dev->workspace: loss, kept (1 or 0), log-sum-exp.
typedef struct XentScratch {
  float *row_loss, *kept, *lse, *count;
} XentScratch;

template <typename L>
static __device__ __forceinline__ bool xent_label(const L *labels, int64_t row,
                                                  int64_t cols, int64_t ignore_index,
                                                  int64_t *label) {
  *label = (int64_t)labels[row];
  return *label != ignore_index && *label >= 0 && *label < cols;
}

// One block per row: the row's loss, kept flag and log-sum-exp.
template <typename T, typename L>
static __global__ void xent_loss_kernel(const T *logits, const L *labels, int64_t cols,
                                        float smoothing, int64_t ignore_index,
                                        XentScratch s, float *row_loss_out) {
  __shared__ float shared[32];
  int64_t row = blockIdx.x, label;
  const T *x = logits + row * cols;
  bool kept = xent_label(labels, row, cols, ignore_index, &label);
  float max = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    max = fmaxf(max, ops_f32(x[j]));
  max = ops_block_max(max, shared);
  float sum = 0.0f, sum_logits = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = ops_f32(x[j]);
    sum += expf(v - max);
    sum_logits += v;
  }
  sum = ops_block_sum(sum, shared);
  sum_logits = ops_block_sum(sum_logits, shared);
  if (threadIdx.x != 0) return;
  float lse = max + logf(sum);
  float loss = kept ? (1.0f - smoothing) * (lse - ops_f32(x[label])) +
                          smoothing * (lse - sum_logits / (float)cols)
                    : 0.0f;
  s.row_loss[row] = loss;
  s.kept[row] = kept ? 1.0f : 0.0f;
  s.lse[row] = lse;
  if (row_loss_out) row_loss_out[row] = loss;
}

// One block per row: dlogits = grad_scale (p - target) / kept rows; exact
// zeros on an ignored row (its logits may be inf or NaN, and 0 * NaN is NaN).
template <typename T, typename L>
static __global__ void xent_grad_kernel(const T *logits, const L *labels, int64_t cols,
                                        float smoothing, int64_t ignore_index,
                                        float grad_scale, XentScratch s, T *dlogits) {
  int64_t row = blockIdx.x, label;
  bool kept = xent_label(labels, row, cols, ignore_index, &label);
  float count = *s.count, lse = s.lse[row];
  float norm = kept && count > 0.0f ? grad_scale / count : 0.0f;
  float off = smoothing / (float)cols, on = 1.0f - smoothing + off;
  const T *x = logits + row * cols;
  T *d = dlogits + row * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    d[j] = ops_from_f32<T>(
        kept ? norm * (expf(ops_f32(x[j]) - lse) - (j == label ? on : off)) : 0.0f);
}

extern "C" void op_softmax_xent_cuda(const Device *dev, const Tensor *logits,
                                     const Tensor *labels, float smoothing,
                                     int64_t ignore_index, float grad_scale,
                                     const Tensor *loss, const Tensor *row_loss,
                                     const Tensor *dlogits) {
  op_softmax_xent_check(logits, labels, loss, row_loss, dlogits);
  int64_t rows = op_rows(logits), cols = op_last_dim(logits);
  float *ws = ops_workspace_floats(dev, 3 * rows + 1, "op_softmax_xent");
  XentScratch s = {ws, ws + rows, ws + 2 * rows, ws + 3 * rows};
  float *row_out = row_loss ? (float *)row_loss->data : NULL;
  if (rows == 0) {
    CHECK_CUDA(cudaMemsetAsync(loss->data, 0, sizeof(float), dev->stream));
    return;
  }
  OPS_FLOAT_DISPATCH("op_softmax_xent", logits->dtype, {
    const scalar_t *x = (const scalar_t *)logits->data;
    if (labels->dtype == DT_I64)
      xent_loss_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
          x, (const int64_t *)labels->data, cols, smoothing, ignore_index, s, row_out);
    else
      xent_loss_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
          x, (const int32_t *)labels->data, cols, smoothing, ignore_index, s, row_out);
    CHECK_LAUNCH();
    mean_launch(dev, s.row_loss, s.kept, rows, 0.0f, (float *)loss->data, s.count);
    scalar_t *d = (scalar_t *)dlogits->data;
    if (labels->dtype == DT_I64)
      xent_grad_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
          x, (const int64_t *)labels->data, cols, smoothing, ignore_index, grad_scale, s,
          d);
    else
      xent_grad_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
          x, (const int32_t *)labels->data, cols, smoothing, ignore_index, grad_scale, s,
          d);
  });
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------- elementwise losses
// Block b sums the losses of elements b * blockDim + t + k * gridDim * blockDim
// into partials[b]; each element's gradient is written on the way.
template <typename T, typename Loss>
static __global__ void elementwise_loss_kernel(const T *input, const float *target,
                                               int64_t n, float grad_norm, Loss fn,
                                               T *dinput, float *partials) {
  __shared__ float shared[32];
  float sum = 0.0f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float grad;
    sum += fn(ops_f32(input[i]), target[i], &grad);
    dinput[i] = ops_from_f32<T>(grad_norm * grad);
  }
  sum = ops_block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

struct BceLoss {
  __device__ float operator()(float x, float t, float *grad) const {
    *grad = 1.0f / (1.0f + expf(-x)) - t;
    return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
  }
};

struct SmoothL1Loss {
  float beta;
  __device__ float operator()(float p, float t, float *grad) const {
    float d = p - t, a = fabsf(d);
    *grad = a < beta ? d / beta : (d > 0.0f ? 1.0f : -1.0f);
    return a < beta ? 0.5f * d * d / beta : a - 0.5f * beta;
  }
};

template <typename Loss>
static void elementwise_loss(const Device *dev, const char *op, const Tensor *input,
                             const Tensor *target, float grad_scale, Loss fn,
                             const Tensor *loss, const Tensor *dinput) {
  int64_t n = tensor_numel(input);
  float *partials = ops_workspace_floats(dev, OPS_REDUCE_GROUPS, op);
  float grad_norm = n ? grad_scale / (float)n : 0.0f;
  OPS_FLOAT_DISPATCH(op, input->dtype, {
    elementwise_loss_kernel<<<OPS_REDUCE_GROUPS, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)input->data, (const float *)target->data, n, grad_norm, fn,
        (scalar_t *)dinput->data, partials);
  });
  CHECK_LAUNCH();
  mean_launch(dev, partials, NULL, OPS_REDUCE_GROUPS, (float)n, (float *)loss->data,
              NULL);
}

extern "C" void op_bce_logits_cuda(const Device *dev, const Tensor *logits,
                                   const Tensor *targets, float grad_scale,
                                   const Tensor *loss, const Tensor *dlogits) {
  op_loss_check("op_bce_logits", logits, targets, loss, dlogits);
  elementwise_loss(dev, "op_bce_logits", logits, targets, grad_scale, BceLoss(), loss,
                   dlogits);
}

extern "C" void op_smooth_l1_cuda(const Device *dev, const Tensor *pred,
                                  const Tensor *target, float beta, float grad_scale,
                                  const Tensor *loss, const Tensor *dpred) {
  op_loss_check("op_smooth_l1", pred, target, loss, dpred);
  OP_REQUIRE("op_smooth_l1", beta > 0.0f);
  SmoothL1Loss fn = {beta};
  elementwise_loss(dev, "op_smooth_l1", pred, target, grad_scale, fn, loss, dpred);
}
