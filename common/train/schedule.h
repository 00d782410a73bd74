// schedule.h: learning-rate schedules, as a pure function of the step, so that
// a resumed run continues on the same curve. Step s is the 0-based index of the
// optimizer update about to be applied.
//
// Every kind except constant starts with a linear warmup over warmup_steps:
//   lr(s) = base (f + (1 - f) (s + 1) / warmup_steps),  f = warmup_factor
// which reaches base at the last warmup step. After it, with s' = s - warmup_steps:
//   SCHED_POLY    end + (base - end) (1 - s' / decay_steps)^power, then end  (ResNet LARS/SGD)
//   SCHED_STEP    base decay_factor^k, k = boundaries passed by epoch s / steps_per_epoch (detection)
//   SCHED_RSQRT   base sqrt(warmup_steps / (s + 1))                           (Transformer)
//   SCHED_LINEAR  base max(0, 1 - s' / (total_steps - warmup_steps))          (LAMB fine-tuning)
//   SCHED_CONSTANT base, no warmup                                            (recommender's Adam)
#pragma once
#include <stdint.h>

#include "core/mllog.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SCHED_CONSTANT, SCHED_POLY, SCHED_STEP, SCHED_RSQRT, SCHED_LINEAR } SchedKind;

#define SCHED_MAX_BOUNDARIES 8

typedef struct Schedule {
  SchedKind kind;
  double base_lr;
  int64_t warmup_steps;
  double warmup_factor;    // lr fraction at the start of the warmup (0: from zero)
  int64_t steps_per_epoch; // step decay; also turns warmup steps into epochs for MLLOG
  // SCHED_POLY
  double end_lr;
  double power;
  int64_t decay_steps;     // steps after the warmup until end_lr
  // SCHED_STEP
  int n_boundaries;
  int64_t boundary_epochs[SCHED_MAX_BOUNDARIES];  // ascending
  double decay_factor;
  // SCHED_LINEAR
  int64_t total_steps;
} Schedule;

// "constant" | "poly" | "step" | "rsqrt" | "linear"; -1 when unknown.
int schedule_kind_parse(const char *name);
const char *schedule_kind_name(SchedKind kind);

// Checks the fields the kind uses; a bad one is a one-line error naming
// `flags`, the flags the schedule was made from ("--warmup_epochs,
// --decay_epochs"), and the field.
void schedule_check(const Schedule *s, const char *flags);
double schedule_lr(const Schedule *s, int64_t step);

// MLLOG: the schedule's hyperparameter keys, named for the optimizer it drives
// (lars_opt_* for LARS, sgd_opt_* for SGD with a poly schedule, opt_* otherwise).
void schedule_log(const Schedule *s, OptKind opt_kind, MLLog *log);

#ifdef __cplusplus
}
#endif
