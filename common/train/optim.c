// optim.c: the CPU reference optimizers, the dispatchers and MLLOG keys.
#include "train/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"
#include "train/optim_math.h"

static const char *const kKindNames[] = {
    [OPT_SGD] = "sgd", [OPT_LARS] = "lars", [OPT_ADAM] = "adam",
    [OPT_ADAMW] = "adamw", [OPT_LAMB] = "lamb",
};
#define N_KINDS ((int)(sizeof kKindNames / sizeof kKindNames[0]))

OptConfig optim_defaults(OptKind kind) {
  OptConfig c = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                 .bias_correction = true};
  if (kind == OPT_SGD || kind == OPT_LARS) c.momentum = 0.9f;
  if (kind == OPT_LARS) {
    c.lars_eta = 0.001f;
    c.eps = 0.0f;
  }
  if (kind == OPT_LAMB) c.eps = 1e-6f;
  return c;
}

int optim_kind_parse(const char *name) {
  for (int k = 0; k < N_KINDS; k++)
    if (strcmp(name, kKindNames[k]) == 0) return k;
  return -1;
}

const char *optim_kind_name(OptKind kind) { return kKindNames[kind]; }

int optim_state_count(OptKind kind) { return kind == OPT_SGD || kind == OPT_LARS ? 1 : 2; }

static void check_config(const OptConfig *c) {
  const char *name = optim_kind_name(c->kind);
  if (c->weight_decay < 0) die_input(name, "weight decay %g is negative", c->weight_decay);
  if (c->momentum < 0 || c->momentum >= 1)
    die_input(name, "momentum %g is outside [0, 1)", c->momentum);
  if (c->beta1 < 0 || c->beta1 >= 1) die_input(name, "beta1 %g is outside [0, 1)", c->beta1);
  if (c->beta2 < 0 || c->beta2 >= 1) die_input(name, "beta2 %g is outside [0, 1)", c->beta2);
  if (c->eps < 0) die_input(name, "epsilon %g is negative", c->eps);
  if (c->kind == OPT_LARS && c->lars_eta <= 0)
    die_input(name, "LARS eta %g must be positive", c->lars_eta);
}

void optim_init(Optimizer *opt, const OptConfig *cfg, const ParamSet *ps) {
  if ((unsigned)cfg->kind >= (unsigned)N_KINDS) DIE("optim_init: kind %d", (int)cfg->kind);
  check_config(cfg);
  if (ps->n_state < optim_state_count(cfg->kind))
    DIE("optim_init: %s needs %d state buffers, the ParamSet has %d", optim_kind_name(cfg->kind),
        optim_state_count(cfg->kind), ps->n_state);
  memset(opt, 0, sizeof *opt);
  opt->cfg = *cfg;
  opt->device = ps->device;
#if HAVE_CUDA
  if (ps->device == DEVICE_CUDA) optim_init_cuda(opt, ps);
#endif
}

void optim_free(Optimizer *opt) {
#if HAVE_CUDA
  if (opt->cuda) optim_free_cuda(opt);
#endif
  memset(opt, 0, sizeof *opt);
}

OptStepScalars optim_next_step(Optimizer *opt) {
  opt->step++;
  OptStepScalars s = {1.0f, 1.0f};
  if (opt->cfg.bias_correction) {
    s.bc1 = (float)(1.0 - pow(opt->cfg.beta1, (double)opt->step));
    s.bc2 = (float)(1.0 - pow(opt->cfg.beta2, (double)opt->step));
  }
  return s;
}

#if HAVE_CUDA
#define OPTIM_DISPATCH(dev, fn, ...)                      \
  do {                                                    \
    if ((dev)->kind == DEVICE_CUDA)                       \
      fn##_cuda(__VA_ARGS__);                             \
    else                                                  \
      fn##_cpu(__VA_ARGS__);                              \
  } while (0)
#else
#define OPTIM_DISPATCH(dev, fn, ...)                                     \
  do {                                                                   \
    if ((dev)->kind == DEVICE_CUDA) DIE(#fn ": this build has no CUDA"); \
    fn##_cpu(__VA_ARGS__);                                               \
  } while (0)
#endif

void optim_step(Optimizer *opt, const Device *dev, ParamSet *ps, float lr) {
  OPTIM_DISPATCH(dev, optim_step, opt, dev, ps, lr);
}

void optim_grads_scale(const Device *dev, ParamSet *ps, float factor) {
  OPTIM_DISPATCH(dev, optim_grads_scale, dev, ps, factor);
}

void optim_clip_grads(Optimizer *opt, const Device *dev, ParamSet *ps, float max_norm) {
  OPTIM_DISPATCH(dev, optim_clip_grads, opt, dev, ps, max_norm);
}

float optim_last_grad_norm(const Optimizer *opt) {
#if HAVE_CUDA
  if (opt->cuda) return optim_last_grad_norm_cuda(opt);
#endif
  return opt->last_grad_norm;
}

void optim_grads_zero(const Device *dev, ParamSet *ps) {
  OPTIM_DISPATCH(dev, optim_grads_zero, dev, ps);
}

// ------------------------------------------------------------ CPU reference

// Sum of x[i]^2 in double: pieces of SQ_PIECE elements on the team's
// threads, added in piece order (the same bits at any thread count).
enum { SQ_PIECE = 1 << 15 };
static double sum_squares(const float *x, int64_t n) {
  int64_t pieces = parallel_pieces(n, SQ_PIECE);
  double *part = xmalloc((size_t)(pieces > 0 ? pieces : 1) * sizeof(double));
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++) {
    double s = 0;
    for (int64_t i = p * SQ_PIECE; i < n && i < (p + 1) * SQ_PIECE; i++)
      s += (double)x[i] * x[i];
    part[p] = s;
  }
  double s;
  parallel_add_pieces(part, pieces, 1, &s);
  free(part);
  return s;
}

static void sgd_tensor(const OptConfig *c, float lr, float wd, float *w, const float *g,
                       float *buf, int64_t n) {
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++)
    optim_sgd_elem(&w[i], &buf[i], g[i], lr, wd, c->momentum, c->nesterov);
}

static void lars_tensor(const OptConfig *c, float lr, bool adapt, float *w, const float *g,
                        float *buf, int64_t n) {
  float wd = adapt ? c->weight_decay : 0.0f;
  float ratio = adapt ? optim_lars_ratio(sqrt(sum_squares(w, n)), sqrt(sum_squares(g, n)),
                                         c->lars_eta, wd, c->eps)
                      : 1.0f;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++)
    optim_lars_elem(&w[i], &buf[i], g[i], lr * ratio, wd, c->momentum, c->nesterov);
}

// Elements [i0, i1) of Adam's update, in a loop of its own so that it
// vectorises (core/parallel.h).
CPU_VECTORISED
static void adam_range(const OptConfig *c, float step_size, float l2, float decoupled,
                       float sqrt_bc2, float *w, const float *g, float *m, float *v, int64_t i0,
                       int64_t i1) {
  float beta1 = c->beta1, beta2 = c->beta2, eps = c->eps;
  for (int64_t i = i0; i < i1; i++)
    optim_adam_elem(&w[i], &m[i], &v[i], g[i], step_size, l2, decoupled, beta1, beta2, sqrt_bc2,
                    eps);
}

static void adam_tensor(const OptConfig *c, OptStepScalars s, float lr, bool decay, float *w,
                        const float *g, float *m, float *v, int64_t n) {
  enum { PIECE = 4096 };
  float wd = decay ? c->weight_decay : 0.0f;
  float l2 = c->kind == OPT_ADAM ? wd : 0.0f;
  float decoupled = c->kind == OPT_ADAMW ? 1.0f - lr * wd : 1.0f;
  float sqrt_bc2 = sqrtf(s.bc2);
  int64_t pieces = parallel_pieces(n, PIECE);
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t p = 0; p < pieces; p++)
    adam_range(c, lr / s.bc1, l2, decoupled, sqrt_bc2, w, g, m, v, p * PIECE,
               parallel_piece_end(n, PIECE, p));
}

static void lamb_tensor(const OptConfig *c, OptStepScalars s, float lr, bool adapt, float *w,
                        const float *g, float *m, float *v, int64_t n) {
  float wd = adapt ? c->weight_decay : 0.0f;
  double u_sq = 0;
  for (int64_t i = 0; i < n; i++) {
    optim_lamb_moments(&m[i], &v[i], g[i], c->beta1, c->beta2);
    float u = optim_lamb_dir(w[i], m[i], v[i], s.bc1, s.bc2, c->eps, wd);
    u_sq += (double)u * u;
  }
  float ratio = adapt ? optim_lamb_ratio(sqrt(sum_squares(w, n)), sqrt(u_sq)) : 1.0f;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++)
    w[i] -= lr * ratio * optim_lamb_dir(w[i], m[i], v[i], s.bc1, s.bc2, c->eps, wd);
}

void optim_step_cpu(Optimizer *opt, const Device *dev, ParamSet *ps, float lr) {
  (void)dev;
  const OptConfig *c = &opt->cfg;
  OptStepScalars s = optim_next_step(opt);
  for (int t = 0; t < ps->count; t++) {
    int64_t off = ps->offsets[t], n = ps->numels[t];
    bool decay = !(ps->specs[t].flags & PARAM_NO_DECAY);
    float *w = ps->params + off, *g = ps->grads + off;
    float *s0 = ps->state[0] + off, *s1 = ps->n_state > 1 ? ps->state[1] + off : NULL;
    switch (c->kind) {
      case OPT_SGD: sgd_tensor(c, lr, decay ? c->weight_decay : 0.0f, w, g, s0, n); break;
      case OPT_LARS: lars_tensor(c, lr, decay, w, g, s0, n); break;
      case OPT_ADAM:
      case OPT_ADAMW: adam_tensor(c, s, lr, decay, w, g, s0, s1, n); break;
      case OPT_LAMB: lamb_tensor(c, s, lr, decay, w, g, s0, s1, n); break;
    }
  }
}

void optim_grads_zero_cpu(const Device *dev, ParamSet *ps) {
  (void)dev;
  memset(ps->grads, 0, (size_t)ps->total_numel * sizeof(float));
}

void optim_grads_scale_cpu(const Device *dev, ParamSet *ps, float factor) {
  (void)dev;
  int64_t n = ps->total_numel;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) ps->grads[i] *= factor;
}

void optim_clip_grads_cpu(Optimizer *opt, const Device *dev, ParamSet *ps, float max_norm) {
  float norm = (float)sqrt(sum_squares(ps->grads, ps->total_numel));
  opt->last_grad_norm = norm;
  float coef = max_norm / (norm + 1e-6f);
  if (coef < 1.0f) optim_grads_scale_cpu(dev, ps, coef);
}

// ------------------------------------------------------------------- MLLOG

// A float hyperparameter as the decimal it was written as (1e-9f, not
// 9.99999972e-10): the shortest decimal that reads back as the same float.
static MLValue mlv_f32(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (strtof(buf, NULL) == x) break;
  }
  return mlv_float(strtod(buf, NULL));
}

OptConfig optim_adam_config(const Config *cfg, OptKind kind) {
  OptConfig oc = optim_defaults(kind);
  oc.beta1 = (float)config_float(cfg, "adam_beta1");
  oc.beta2 = (float)config_float(cfg, "adam_beta2");
  oc.eps = (float)config_float(cfg, "adam_eps");
  oc.bias_correction = config_bool(cfg, "adam_bias_correction");
  return oc;
}

void optim_log(const OptConfig *c, MLLog *log) {
  // Keys of the checker's rule files; opt_name says which family follows.
  MLLOG_POINT(log, "opt_name", mlv_str(optim_kind_name(c->kind)));
  switch (c->kind) {
    case OPT_SGD:
      // The rule files differ: one asks for the sgd_opt_ names, another for
      // opt_weight_decay; a key a rule file does not know is allowed.
      MLLOG_POINT(log, "sgd_opt_momentum", mlv_f32(c->momentum));
      MLLOG_POINT(log, "sgd_opt_weight_decay", mlv_f32(c->weight_decay));
      MLLOG_POINT(log, "opt_weight_decay", mlv_f32(c->weight_decay));
      break;
    case OPT_LARS:
      MLLOG_POINT(log, "lars_opt_momentum", mlv_f32(c->momentum));
      MLLOG_POINT(log, "lars_opt_weight_decay", mlv_f32(c->weight_decay));
      MLLOG_POINT(log, "lars_epsilon", mlv_f32(c->eps));
      break;
    case OPT_ADAM:
    case OPT_ADAMW:
      MLLOG_POINT(log, "opt_adam_beta_1", mlv_f32(c->beta1));
      MLLOG_POINT(log, "opt_adam_beta_2", mlv_f32(c->beta2));
      MLLOG_POINT(log, "opt_adam_epsilon", mlv_f32(c->eps));
      MLLOG_POINT(log, "opt_weight_decay", mlv_f32(c->weight_decay));
      break;
    case OPT_LAMB:
      MLLOG_POINT(log, "opt_lamb_beta_1", mlv_f32(c->beta1));
      MLLOG_POINT(log, "opt_lamb_beta_2", mlv_f32(c->beta2));
      MLLOG_POINT(log, "opt_epsilon", mlv_f32(c->eps));
      MLLOG_POINT(log, "opt_lamb_weight_decay_rate", mlv_f32(c->weight_decay));
      break;
  }
}
