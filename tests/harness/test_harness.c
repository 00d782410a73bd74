// The test harness itself (harness.c, test.h) fails when it should: a NaN
// gradient or loss fails the gradient check, a NaN fails every comparison,
// and a case that fails and then skips makes the program exit non-zero;
// TEST_ONLY runs exactly the cases it names, and a forked child that dies
// through exit() keeps its status without running its parent's exit handlers.
// The cases that run a harness of their own in a child run first, while
// this program has no failure that the child would inherit.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

// loss = sum_i w_i x_i^2, so d loss / d x_i = 2 w_i x_i.
typedef struct Quadratic {
  float x[8], w[8];
  bool nan_loss;
} Quadratic;

static double quadratic_loss(void *ctx) {
  Quadratic *q = ctx;
  double sum = 0;
  for (int i = 0; i < 8; i++) sum += (double)q->w[i] * q->x[i] * q->x[i];
  return q->nan_loss ? NAN : sum;
}

static Quadratic quadratic(float *grad) {
  Quadratic q = {.nan_loss = false};
  test_fill_uniform(q.x, 8, 1, -1, 1);
  test_fill_uniform(q.w, 8, 2, -1, 1);
  for (int i = 0; i < 8; i++) grad[i] = 2 * q.w[i] * q.x[i];
  return q;
}

static void gradcheck_passes_a_right_gradient(void) {
  float grad[8];
  Quadratic q = quadratic(grad);
  double err = test_gradcheck(quadratic_loss, &q, q.x, grad, 8, 1e-2f, 8, 1e-2);
  CHECK_MSG(err < 1e-3, "error %.3g", err);
  grad[3] *= 1.5f;  // and fails a wrong one
  err = test_gradcheck(quadratic_loss, &q, q.x, grad, 8, 1e-2f, 8, 1e-2);
  CHECK_MSG(err > 0.1, "error %.3g", err);
}

static void gradcheck_fails_a_nan_gradient(void) {
  float grad[8];
  Quadratic q = quadratic(grad);
  grad[5] = NAN;  // not the last point checked: a later finite error must not hide it
  double err = test_gradcheck(quadratic_loss, &q, q.x, grad, 8, 1e-2f, 8, 1e-2);
  CHECK_MSG(!(err <= 1e-3) && !(err < 1e9), "error %.3g", err);
}

static void gradcheck_fails_a_nan_loss(void) {
  float grad[8];
  Quadratic q = quadratic(grad);
  q.nan_loss = true;
  double err = test_gradcheck(quadratic_loss, &q, q.x, grad, 8, 1e-2f, 8, 1e-2);
  CHECK_MSG(!(err <= 1e-3), "error %.3g", err);
}

static void worst_keeps_nan(void) {
  CHECK(isnan(test_worst(NAN, 1.0)));
  CHECK(isnan(test_worst(1.0, NAN)));
  CHECK(isnan(test_worst(test_worst(0.0, NAN), 5.0)));
  CHECK(test_worst(0.5, 0.25) == 0.5 && test_worst(0.25, 0.5) == 0.5);
}

static void rel_error_fails_on_nan(void) {
  float a[3] = {1, 2, 3}, b[3] = {1, 2, 3};
  CHECK(test_rel_error(a, b, 3) == 0);
  a[1] = NAN;
  CHECK(!(test_rel_error(a, b, 3) <= 1e-3));
  b[1] = NAN;  // NaN on both sides is no agreement either
  CHECK(!(test_rel_error(a, b, 3) <= 1e-3));
}

// Children: each runs one case under a harness of its own and exits with
// test_finish's status.
static void fail_then_skip(void) {
  CHECK(1 + 1 == 3);
  test_skip("skipping after a failure");
}
static void skip_only(void) { test_skip("nothing to do"); }
static void near_nan(void) { CHECK_NEAR(NAN, 0.0, 1.0); }
static void check_error_nan(void) {
  unsetenv("TEST_ERROR_TABLE");  // a deliberate fault is no measured error
  test_check_error("nan", "fp32", NAN, 1.0);
}
static void run_as_program(void *fn) {
  test_run("inner", (void (*)(void))fn);
  exit(test_finish());
}

static int program_status(void (*fn)(void)) {
  char msg[256];
  return test_run_child(run_as_program, (void *)fn, msg, sizeof msg);
}

static void failure_then_skip_exits_nonzero(void) {
  CHECK_EQ_INT(program_status(fail_then_skip), 1);
  CHECK_EQ_INT(program_status(skip_only), 0);
}

static void nan_fails_comparisons(void) {
  CHECK_EQ_INT(program_status(near_nan), 1);
  CHECK_EQ_INT(program_status(check_error_nan), 1);
}

// TEST_ONLY: the named cases run, and no case whose name merely contains or
// starts with a named one.
static int g_ran;
static void count_run(void) { g_ran++; }
static void must_not_run(void) { CHECK(!"a case outside TEST_ONLY ran"); }
static void select_cases(void *ctx) {
  (void)ctx;
  setenv("TEST_ONLY", "other, wanted", 1);
  test_run("wanted", count_run);
  test_run("wanted_too", must_not_run);
  test_run("unwanted", must_not_run);
  test_run("other", count_run);
  exit(g_ran == 2 ? test_finish() : 2);
}

static void test_only_runs_the_named_cases(void) {
  char msg[256];
  CHECK_EQ_INT(test_run_child(select_cases, NULL, msg, sizeof msg), 0);
}

// An exit handler of this process: in a forked child it must not run (as
// the CUDA runtime's or compute-sanitizer's would not).
static pid_t g_parent;
static void parent_exit_handler(void) {
  if (getpid() != g_parent) fprintf(stderr, "the parent's exit handler ran in the child\n");
}
static void die_with_3(void *ctx) {
  (void)ctx;
  fprintf(stderr, "dying\n");
  exit(3);
}

static void child_skips_parent_exit_handlers(void) {
  char msg[256];
  CHECK_EQ_INT(test_run_child(die_with_3, NULL, msg, sizeof msg), 3);
  CHECK_CONTAINS(msg, "dying");
  CHECK_MSG(!strstr(msg, "exit handler"), "child said: %s", msg);
}

int main(void) {
  g_parent = getpid();
  atexit(parent_exit_handler);
  TEST_RUN(failure_then_skip_exits_nonzero);
  TEST_RUN(test_only_runs_the_named_cases);
  TEST_RUN(child_skips_parent_exit_handlers);
  TEST_RUN(nan_fails_comparisons);
  TEST_RUN(gradcheck_passes_a_right_gradient);
  TEST_RUN(gradcheck_fails_a_nan_gradient);
  TEST_RUN(gradcheck_fails_a_nan_loss);
  TEST_RUN(worst_keeps_nan);
  TEST_RUN(rel_error_fails_on_nan);
  return test_finish();
}
