// test_dist_model.h: a tiny self-contained model for the training-runtime
// tests (test_dist.c, test_ckpt.c), so they need no op library: a two-layer
// MLP regression y = W2 relu(W1 x + b1) + b2 with a hand-written forward and
// backward, on a synthetic data set drawn from the counter-based RNG (sample
// i is the same on every rank and in every run).
#pragma once
#include <math.h>

#include "core/rng.h"
#include "device/tensor.h"

enum { TOY_IN = 6, TOY_HIDDEN = 10, TOY_OUT = 3, TOY_DATASET = 4096 };

static const ParamSpec kToySpecs[] = {
    {"w1", 2, {TOY_HIDDEN, TOY_IN}, 0},
    {"b1", 1, {TOY_HIDDEN}, PARAM_NO_DECAY},
    {"w2", 2, {TOY_OUT, TOY_HIDDEN}, 0},
    {"b2", 1, {TOY_OUT}, PARAM_NO_DECAY},
};
#define TOY_N_TENSORS 4

static float *toy_tensor(const ParamSet *ps, float *base, int t) {
  return base + ps->offsets[t];
}

// Small random weights from (seed, stream 100 + tensor).
static void toy_init_params(ParamSet *ps, uint64_t seed) {
  for (int t = 0; t < ps->count; t++)
    rng_fill_uniform_cpu(toy_tensor(ps, ps->params, t), ps->numels[t], seed, 100 + (uint64_t)t, 0,
                         -0.5f, 0.5f);
}

// Sample i: x ~ U(-1, 1), target y = sin(sum_j x_j (j + 1) / 3 + k).
static void toy_sample(int64_t i, float x[TOY_IN], float y[TOY_OUT]) {
  rng_fill_uniform_cpu(x, TOY_IN, 7, 1, (uint64_t)i * TOY_IN, -1.0f, 1.0f);
  float s = 0;
  for (int j = 0; j < TOY_IN; j++) s += x[j] * (float)(j + 1) / 3.0f;
  for (int k = 0; k < TOY_OUT; k++) y[k] = sinf(s + (float)k);
}

// Adds to ps->grads the gradient of the mean over the given samples of
// 0.5 ||f(x) - y||^2 and returns that mean loss. Ranks with equal shares of a
// global batch each take the mean of their share; the all-reduce average of
// those is the mean over the global batch.
static double toy_accumulate_grads(ParamSet *ps, const int64_t *samples, int count) {
  const float *w1 = toy_tensor(ps, ps->params, 0), *b1 = toy_tensor(ps, ps->params, 1);
  const float *w2 = toy_tensor(ps, ps->params, 2), *b2 = toy_tensor(ps, ps->params, 3);
  float *gw1 = toy_tensor(ps, ps->grads, 0), *gb1 = toy_tensor(ps, ps->grads, 1);
  float *gw2 = toy_tensor(ps, ps->grads, 2), *gb2 = toy_tensor(ps, ps->grads, 3);
  double loss = 0;
  for (int s = 0; s < count; s++) {
    float x[TOY_IN], y[TOY_OUT], h[TOY_HIDDEN], dh[TOY_HIDDEN] = {0}, d[TOY_OUT];
    toy_sample(samples[s], x, y);
    for (int u = 0; u < TOY_HIDDEN; u++) {
      float a = b1[u];
      for (int j = 0; j < TOY_IN; j++) a += w1[u * TOY_IN + j] * x[j];
      h[u] = a > 0 ? a : 0;
    }
    for (int k = 0; k < TOY_OUT; k++) {
      float o = b2[k];
      for (int u = 0; u < TOY_HIDDEN; u++) o += w2[k * TOY_HIDDEN + u] * h[u];
      d[k] = (o - y[k]) / (float)count;
      loss += 0.5 * (double)(o - y[k]) * (o - y[k]) / count;
    }
    for (int k = 0; k < TOY_OUT; k++) {
      gb2[k] += d[k];
      for (int u = 0; u < TOY_HIDDEN; u++) {
        gw2[k * TOY_HIDDEN + u] += d[k] * h[u];
        dh[u] += d[k] * w2[k * TOY_HIDDEN + u];
      }
    }
    for (int u = 0; u < TOY_HIDDEN; u++) {
      if (h[u] <= 0) continue;
      gb1[u] += dh[u];
      for (int j = 0; j < TOY_IN; j++) gw1[u * TOY_IN + j] += dh[u] * x[j];
    }
  }
  return loss;
}
