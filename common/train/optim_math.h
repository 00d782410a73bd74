// optim_math.h: the per-element arithmetic of each optimizer and the trust
// ratios, shared by the CPU reference (optim.c) and the CUDA kernels
// (optim_cuda.cu), so that the two paths cannot drift apart.
#pragma once
#include <math.h>
#include <stdbool.h>

#if defined(__CUDACC__)
#define OPT_FN static __host__ __device__ __forceinline__
#else
#define OPT_FN static inline
#endif

// SGD as PyTorch has it: the learning rate applies outside the momentum buffer.
//   g' = g + wd w;  buf = momentum buf + g';  w -= lr (nesterov ? g' + momentum buf : buf)
OPT_FN void optim_sgd_elem(float *w, float *buf, float g, float lr, float wd, float momentum,
                           bool nesterov) {
  float gd = g + wd * *w;
  float b = momentum * *buf + gd;
  *buf = b;
  *w -= lr * (nesterov ? gd + momentum * b : b);
}

// LARS as the MLPerf reference has it: the (trust-scaled) learning rate goes
// into the momentum buffer.
//   g' = g + wd w;  buf = momentum buf + lr' g';  w -= nesterov ? momentum buf + lr' g' : buf
OPT_FN void optim_lars_elem(float *w, float *buf, float g, float scaled_lr, float wd,
                            float momentum, bool nesterov) {
  float step = scaled_lr * (g + wd * *w);
  float b = momentum * *buf + step;
  *buf = b;
  *w -= nesterov ? momentum * b + step : b;
}

// LARS trust ratio eta ||w|| / (||g|| + wd ||w|| + eps); 1 when either norm
// is zero (a fresh zero-initialised tensor, or a tensor with no gradient).
OPT_FN float optim_lars_ratio(double w_norm, double g_norm, float eta, float wd, float eps) {
  if (w_norm <= 0 || g_norm <= 0) return 1.0f;
  return (float)(eta * w_norm / (g_norm + wd * w_norm + eps));
}

// The Adam family in PyTorch's arithmetic. l2 is Adam's weight decay folded
// into the gradient, decay is AdamW's decoupled factor 1 - lr wd (1 for Adam);
// step_size = lr / (1 - beta1^t), sqrt_bc2 = sqrt(1 - beta2^t).
OPT_FN void optim_adam_elem(float *w, float *m, float *v, float g, float step_size, float l2,
                            float decay, float beta1, float beta2, float sqrt_bc2,
                            float eps) {
  float gd = g + l2 * *w;
  *w *= decay;
  float mm = beta1 * *m + (1.0f - beta1) * gd;
  float vv = beta2 * *v + (1.0f - beta2) * gd * gd;
  *m = mm;
  *v = vv;
  *w -= step_size * mm / (sqrtf(vv) / sqrt_bc2 + eps);
}

// LAMB, first half: the moments.
OPT_FN void optim_lamb_moments(float *m, float *v, float g, float beta1, float beta2) {
  *m = beta1 * *m + (1.0f - beta1) * g;
  *v = beta2 * *v + (1.0f - beta2) * g * g;
}

// LAMB's update direction u = m^ / (sqrt(v^) + eps) + wd w, before the trust ratio.
OPT_FN float optim_lamb_dir(float w, float m, float v, float bc1, float bc2, float eps,
                            float wd) {
  return (m / bc1) / (sqrtf(v / bc2) + eps) + wd * w;
}

// LAMB trust ratio ||w|| / ||u||; 1 when either norm is zero.
OPT_FN float optim_lamb_ratio(double w_norm, double u_norm) {
  if (w_norm <= 0 || u_norm <= 0) return 1.0f;
  return (float)(w_norm / u_norm);
}
