// schedule.c: learning-rate schedules and their MLLOG keys.
#include "train/schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"

static const char *const kSchedNames[] = {
    [SCHED_CONSTANT] = "constant", [SCHED_POLY] = "poly", [SCHED_STEP] = "step",
    [SCHED_RSQRT] = "rsqrt", [SCHED_LINEAR] = "linear",
};
#define N_SCHEDS ((int)(sizeof kSchedNames / sizeof kSchedNames[0]))

int schedule_kind_parse(const char *name) {
  for (int k = 0; k < N_SCHEDS; k++)
    if (strcmp(name, kSchedNames[k]) == 0) return k;
  return -1;
}

const char *schedule_kind_name(SchedKind kind) { return kSchedNames[kind]; }

void schedule_check(const Schedule *s, const char *flags) {
  const char *name = flags;
  if ((unsigned)s->kind >= (unsigned)N_SCHEDS) die_input(name, "unknown kind %d", (int)s->kind);
  if (!(s->base_lr >= 0)) die_input(name, "base learning rate %g is negative", s->base_lr);
  if (s->warmup_steps < 0) die_input(name, "%lld warmup steps", (long long)s->warmup_steps);
  if (s->warmup_factor < 0 || s->warmup_factor > 1)
    die_input(name, "warmup factor %g is outside [0, 1]", s->warmup_factor);
  switch (s->kind) {
    case SCHED_POLY:
      if (s->decay_steps < 1)
        die_input(name, "poly decay over %lld steps (need >= 1)", (long long)s->decay_steps);
      if (s->power <= 0) die_input(name, "poly power %g must be positive", s->power);
      break;
    case SCHED_STEP:
      if (s->steps_per_epoch < 1)
        die_input(name, "step decay needs steps_per_epoch >= 1, got %lld",
                  (long long)s->steps_per_epoch);
      if (s->n_boundaries < 0 || s->n_boundaries > SCHED_MAX_BOUNDARIES)
        die_input(name, "%d decay boundaries (at most %d)", s->n_boundaries,
                  SCHED_MAX_BOUNDARIES);
      for (int i = 1; i < s->n_boundaries; i++)
        if (s->boundary_epochs[i] <= s->boundary_epochs[i - 1])
          die_input(name, "decay boundaries must ascend (%lld after %lld)",
                    (long long)s->boundary_epochs[i], (long long)s->boundary_epochs[i - 1]);
      break;
    case SCHED_RSQRT:
      if (s->warmup_steps < 1) die_input(name, "rsqrt needs warmup_steps >= 1");
      break;
    case SCHED_LINEAR:
      if (s->total_steps <= s->warmup_steps)
        die_input(name, "linear decay: total steps %lld must exceed warmup steps %lld",
                  (long long)s->total_steps, (long long)s->warmup_steps);
      break;
    case SCHED_CONSTANT: break;
  }
}

static double after_warmup(const Schedule *s, int64_t step) {
  double since = (double)(step - s->warmup_steps);
  switch (s->kind) {
    case SCHED_POLY:
      if (since >= (double)s->decay_steps) return s->end_lr;
      return s->end_lr +
             (s->base_lr - s->end_lr) * pow(1.0 - since / (double)s->decay_steps, s->power);
    case SCHED_STEP: {
      int64_t epoch = step / s->steps_per_epoch;
      double lr = s->base_lr;
      for (int i = 0; i < s->n_boundaries; i++)
        if (epoch >= s->boundary_epochs[i]) lr *= s->decay_factor;
      return lr;
    }
    case SCHED_RSQRT: return s->base_lr * sqrt((double)s->warmup_steps / (double)(step + 1));
    case SCHED_LINEAR:
      return s->base_lr * fmax(0.0, 1.0 - since / (double)(s->total_steps - s->warmup_steps));
    case SCHED_CONSTANT: break;
  }
  return s->base_lr;
}

double schedule_lr(const Schedule *s, int64_t step) {
  if (s->kind != SCHED_CONSTANT && step < s->warmup_steps) {
    double f = s->warmup_factor;
    return s->base_lr * (f + (1.0 - f) * (double)(step + 1) / (double)s->warmup_steps);
  }
  return after_warmup(s, step);
}

static double warmup_epochs(const Schedule *s) {
  return s->steps_per_epoch > 0 ? (double)s->warmup_steps / (double)s->steps_per_epoch : 0.0;
}

static void log_poly(const Schedule *s, OptKind opt_kind, MLLog *log) {
  // The rule files name these keys after the optimizer.
  bool lars = opt_kind == OPT_LARS;
  const char *p = lars ? "lars_opt_" : "sgd_opt_";
  char key[96];
#define POLY_KEY(suffix) (snprintf(key, sizeof key, "%s%s", p, suffix), key)
  MLLOG_POINT(log, POLY_KEY("base_learning_rate"), mlv_float(s->base_lr));
  MLLOG_POINT(log, POLY_KEY("end_learning_rate"), mlv_float(s->end_lr));
  MLLOG_POINT(log, POLY_KEY("learning_rate_decay_poly_power"), mlv_float(s->power));
  MLLOG_POINT(log, POLY_KEY("learning_rate_decay_steps"), mlv_int(s->decay_steps));
#undef POLY_KEY
  MLLOG_POINT(log, lars ? "lars_opt_learning_rate_warmup_epochs" : "opt_learning_rate_warmup_epochs",
              mlv_float(warmup_epochs(s)));
}

static void log_step(const Schedule *s, MLLog *log) {
  char list[16 * SCHED_MAX_BOUNDARIES + 2] = "[";
  for (int i = 0; i < s->n_boundaries; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? ", " : "",
             (long long)s->boundary_epochs[i]);
  strcat(list, "]");
  MLLOG_POINT(log, "opt_learning_rate_warmup_factor", mlv_float(s->warmup_factor));
  MLLOG_POINT(log, "opt_learning_rate_decay_boundary_epochs", mlv_json(list));
  MLLOG_POINT(log, "opt_learning_rate_decay_factor", mlv_float(s->decay_factor));
}

void schedule_log(const Schedule *s, OptKind opt_kind, MLLog *log) {
  if (s->kind == SCHED_POLY) {
    log_poly(s, opt_kind, log);
    return;
  }
  MLLOG_POINT(log, "opt_base_learning_rate", mlv_float(s->base_lr));
  if (s->kind == SCHED_CONSTANT) return;
  MLLOG_POINT(log, "opt_learning_rate_warmup_steps", mlv_int(s->warmup_steps));
  if (s->kind == SCHED_STEP) log_step(s, log);
  if (s->kind == SCHED_LINEAR) {
    MLLOG_POINT(log, "opt_learning_rate_training_steps", mlv_int(s->total_steps));
    if (opt_kind == OPT_LAMB) {
      // The LAMB rule file asks these; linear decay is poly power 1.
      MLLOG_POINT(log, "opt_lamb_learning_rate_decay_poly_power", mlv_float(1.0));
      MLLOG_POINT(log, "num_warmup_steps", mlv_int(s->warmup_steps));
      MLLOG_POINT(log, "start_warmup_step", mlv_int(0));
    }
  }
}
