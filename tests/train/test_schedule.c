// Learning-rate schedules against hand-computed values, bad parameters, and
// the MLLOG hyperparameter keys each benchmark's rule file asks for.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mllog.h"
#include "tests/harness/test.h"
#include "train/optim.h"
#include "train/schedule.h"

// Warmup 5 steps to 10, then (10 - 1e-4) (1 - s'/20)^2 + 1e-4.
static void poly_with_warmup(void) {
  Schedule s = {.kind = SCHED_POLY, .base_lr = 10, .end_lr = 1e-4, .power = 2,
                .warmup_steps = 5, .decay_steps = 20};
  schedule_check(&s, "schedule");
  CHECK_NEAR(schedule_lr(&s, 0), 2.0, 1e-12);
  CHECK_NEAR(schedule_lr(&s, 4), 10.0, 1e-12);
  CHECK_NEAR(schedule_lr(&s, 5), 10.0, 1e-12);
  CHECK_NEAR(schedule_lr(&s, 15), 1e-4 + (10 - 1e-4) * 0.25, 1e-12);
  CHECK_NEAR(schedule_lr(&s, 25), 1e-4, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 1000), 1e-4, 1e-15);
  for (int64_t k = 5; k < 30; k++) CHECK(schedule_lr(&s, k + 1) <= schedule_lr(&s, k));
}

// Warmup from half the rate over 10 steps; x0.1 at epochs 2 and 4 of 10 steps.
static void step_decay_at_epochs(void) {
  Schedule s = {.kind = SCHED_STEP, .base_lr = 0.1, .warmup_steps = 10, .warmup_factor = 0.5,
                .steps_per_epoch = 10, .n_boundaries = 2, .boundary_epochs = {2, 4},
                .decay_factor = 0.1};
  schedule_check(&s, "schedule");
  CHECK_NEAR(schedule_lr(&s, 0), 0.1 * (0.5 + 0.5 * 0.1), 1e-15);
  CHECK_NEAR(schedule_lr(&s, 9), 0.1, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 19), 0.1, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 20), 0.01, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 39), 0.01, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 40), 0.001, 1e-15);
}

static void rsqrt_after_warmup(void) {
  Schedule s = {.kind = SCHED_RSQRT, .base_lr = 2, .warmup_steps = 4};
  schedule_check(&s, "schedule");
  CHECK_NEAR(schedule_lr(&s, 0), 0.5, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 3), 2.0, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 15), 1.0, 1e-15);  // 2 sqrt(4 / 16)
  CHECK_NEAR(schedule_lr(&s, 63), 0.5, 1e-15);
}

static void linear_warmup_and_decay(void) {
  Schedule s = {.kind = SCHED_LINEAR, .base_lr = 1, .warmup_steps = 10, .total_steps = 110};
  schedule_check(&s, "schedule");
  CHECK_NEAR(schedule_lr(&s, 0), 0.1, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 9), 1.0, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 10), 1.0, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 60), 0.5, 1e-15);
  CHECK_NEAR(schedule_lr(&s, 110), 0.0, 0);
  CHECK_NEAR(schedule_lr(&s, 500), 0.0, 0);
}

static void constant_ignores_warmup(void) {
  Schedule s = {.kind = SCHED_CONSTANT, .base_lr = 0.0045, .warmup_steps = 100};
  schedule_check(&s, "schedule");
  CHECK(schedule_lr(&s, 0) == 0.0045 && schedule_lr(&s, 1000000) == 0.0045);
}

static void names(void) {
  CHECK_EQ_INT(schedule_kind_parse("rsqrt"), SCHED_RSQRT);
  CHECK_EQ_INT(schedule_kind_parse("cosine"), -1);
  CHECK_STR(schedule_kind_name(SCHED_POLY), "poly");
}

static void check_poly_no_steps(void *ctx) {
  (void)ctx;
  Schedule s = {.kind = SCHED_POLY, .base_lr = 1, .power = 2};
  schedule_check(&s, "schedule");
}

static void check_step_descending(void *ctx) {
  (void)ctx;
  Schedule s = {.kind = SCHED_STEP, .base_lr = 1, .steps_per_epoch = 5, .n_boundaries = 2,
                .boundary_epochs = {50, 40}, .decay_factor = 0.1};
  schedule_check(&s, "schedule");
}

static void check_linear_short(void *ctx) {
  (void)ctx;
  Schedule s = {.kind = SCHED_LINEAR, .base_lr = 1, .warmup_steps = 10, .total_steps = 10};
  schedule_check(&s, "schedule");
}

static void bad_schedules_die(void) {
  CHECK_DIES_WITH(check_poly_no_steps, NULL, "schedule: poly decay over 0 steps");
  CHECK_DIES_WITH(check_step_descending, NULL, "decay boundaries must ascend (40 after 50)");
  CHECK_DIES_WITH(check_linear_short, NULL, "total steps 10 must exceed warmup steps 10");
}

// ------------------------------------------------------------------ MLLOG

// Logs the optimizer and schedule keys into a file and returns its text.
static char *logged(const OptConfig *oc, const Schedule *s, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.log", test_tmpdir(), name);
  MLLog log;
  mllog_open(&log, path, 0, false);
  optim_log(oc, &log);
  schedule_log(s, oc->kind, &log);
  mllog_close(&log);
  FILE *f = fopen(path, "rb");
  if (!f) return strdup("");
  static char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  return strdup(text);
}

// Every `"key": "<k>"` in keys must be logged.
static void check_keys(const char *text, const char *const *keys) {
  for (int i = 0; keys[i]; i++) {
    char want[128];
    snprintf(want, sizeof want, "\"key\": \"%s\"", keys[i]);
    CHECK_CONTAINS(text, want);
  }
}

// The keys closed_resnet_lars.yaml (ruleset 1.0.0) requires, with its fixed values.
static void resnet_lars_keys(void) {
  OptConfig oc = optim_defaults(OPT_LARS);
  oc.weight_decay = 5e-5f;
  Schedule s = {.kind = SCHED_POLY, .base_lr = 10.5, .end_lr = 1e-4, .power = 2,
                .warmup_steps = 2 * 392, .steps_per_epoch = 392, .decay_steps = 33 * 392};
  char *text = logged(&oc, &s, "lars");
  static const char *const keys[] = {
      "opt_name", "lars_opt_base_learning_rate", "lars_opt_end_learning_rate",
      "lars_opt_learning_rate_decay_poly_power", "lars_opt_learning_rate_decay_steps",
      "lars_epsilon", "lars_opt_learning_rate_warmup_epochs", "lars_opt_momentum",
      "lars_opt_weight_decay", NULL};
  check_keys(text, keys);
  CHECK_CONTAINS(text, "\"key\": \"opt_name\", \"value\": \"lars\"");
  CHECK_CONTAINS(text, "\"key\": \"lars_epsilon\", \"value\": 0.0,");
  CHECK_CONTAINS(text, "\"key\": \"lars_opt_learning_rate_decay_poly_power\", \"value\": 2.0,");
  CHECK_CONTAINS(text, "\"key\": \"lars_opt_learning_rate_warmup_epochs\", \"value\": 2.0,");
  free(text);
}

static void resnet_sgd_keys(void) {
  OptConfig oc = optim_defaults(OPT_SGD);
  Schedule s = {.kind = SCHED_POLY, .base_lr = 6, .end_lr = 1e-4, .power = 2, .warmup_steps = 5,
                .steps_per_epoch = 1, .decay_steps = 37};
  char *text = logged(&oc, &s, "sgd");
  static const char *const keys[] = {
      "sgd_opt_base_learning_rate", "sgd_opt_end_learning_rate",
      "sgd_opt_learning_rate_decay_poly_power", "sgd_opt_learning_rate_decay_steps",
      "sgd_opt_weight_decay", "sgd_opt_momentum", "opt_learning_rate_warmup_epochs", NULL};
  check_keys(text, keys);
  free(text);
}

// SSD's rule file indexes the boundaries: they must be a JSON list.
static void ssd_step_keys(void) {
  OptConfig oc = optim_defaults(OPT_SGD);
  Schedule s = {.kind = SCHED_STEP, .base_lr = 0.09, .warmup_steps = 650, .steps_per_epoch = 100,
                .n_boundaries = 2, .boundary_epochs = {44, 55}, .decay_factor = 0.1};
  char *text = logged(&oc, &s, "ssd");
  static const char *const keys[] = {"opt_base_learning_rate", "opt_learning_rate_warmup_steps",
                                     "opt_learning_rate_warmup_factor", "opt_weight_decay", NULL};
  check_keys(text, keys);
  CHECK_CONTAINS(text, "\"key\": \"opt_learning_rate_decay_boundary_epochs\", \"value\": [44, 55],");
  free(text);
}

static void transformer_and_bert_keys(void) {
  OptConfig adam = optim_defaults(OPT_ADAM);
  adam.beta2 = 0.98f;
  adam.eps = 1e-9f;
  Schedule rs = {.kind = SCHED_RSQRT, .base_lr = 1.9e-3, .warmup_steps = 750};
  char *text = logged(&adam, &rs, "transformer");
  static const char *const tkeys[] = {"opt_base_learning_rate", "opt_learning_rate_warmup_steps",
                                      "opt_adam_beta_1", "opt_adam_beta_2", "opt_adam_epsilon",
                                      NULL};
  check_keys(text, tkeys);
  CHECK_CONTAINS(text, "\"key\": \"opt_adam_epsilon\", \"value\": 1e-09,");
  free(text);
  OptConfig lamb = optim_defaults(OPT_LAMB);
  Schedule lin = {.kind = SCHED_LINEAR, .base_lr = 3.5e-4, .warmup_steps = 0, .total_steps = 13700};
  text = logged(&lamb, &lin, "bert");
  static const char *const bkeys[] = {
      "opt_base_learning_rate", "opt_epsilon", "opt_learning_rate_training_steps",
      "opt_learning_rate_warmup_steps", "num_warmup_steps", "start_warmup_step",
      "opt_lamb_beta_1", "opt_lamb_beta_2", "opt_lamb_weight_decay_rate",
      "opt_lamb_learning_rate_decay_poly_power", NULL};
  check_keys(text, bkeys);
  free(text);
}

int main(void) {
  TEST_RUN(poly_with_warmup);
  TEST_RUN(step_decay_at_epochs);
  TEST_RUN(rsqrt_after_warmup);
  TEST_RUN(linear_warmup_and_decay);
  TEST_RUN(constant_ignores_warmup);
  TEST_RUN(names);
  TEST_RUN(bad_schedules_die);
  TEST_RUN(resnet_lars_keys);
  TEST_RUN(resnet_sgd_keys);
  TEST_RUN(ssd_step_keys);
  TEST_RUN(transformer_and_bert_keys);
  return test_finish();
}
