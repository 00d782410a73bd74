// The op profile (profile.h): dispatched ops and marked regions are counted
// per name with their calls and times, only while profiling is on; regions
// include the ops inside them; the report gives per-step figures.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/progress.h"
#include "device/profile.h"
#include "ops/elementwise.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

static const ProfileRow *find(const ProfileRow *rows, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  return NULL;
}

// A busy wait of about s seconds: a region with a known minimum duration.
static void spin(double s) {
  double t0 = time_now_s();
  while (time_now_s() - t0 < s) {
  }
}

static void counts_calls_and_time(void) {
  enum { N = 1 << 16 };
  static float a[N], b[N], y[N];
  Tensor ta = TENSOR(a, DT_F32, DEVICE_CPU, N), tb = TENSOR(b, DT_F32, DEVICE_CPU, N),
         ty = TENSOR(y, DT_F32, DEVICE_CPU, N);
  op_add(&kCpu, &ta, &tb, &ty);  // before the profile: not counted
  profile_start(&kCpu);
  for (int step = 0; step < 2; step++) {
    PROFILE_REGION(&kCpu, "step region", {
      op_add(&kCpu, &ta, &tb, &ty);
      op_add(&kCpu, &ta, &tb, &ty);
      op_scale(&kCpu, &ta, 2.0f, &ty);
      spin(0.002);
    });
    profile_collect(&kCpu);
  }
  profile_stop();
  op_add(&kCpu, &ta, &tb, &ty);  // after: not counted
  ProfileRow rows[8];
  int n = profile_rows(rows, 8);
  CHECK_EQ_INT(n, 3);
  const ProfileRow *add = find(rows, n, "op_add"), *scale = find(rows, n, "op_scale"),
                   *region = find(rows, n, "step region");
  REQUIRE(add && scale && region);
  CHECK_EQ_INT(add->calls, 4);
  CHECK_EQ_INT(scale->calls, 2);
  CHECK_EQ_INT(region->calls, 2);
  // The region holds the ops and two 2 ms waits: inclusive and largest.
  CHECK(region->ms >= 4.0);
  CHECK(region->ms >= add->ms + scale->ms);
  CHECK(strcmp(rows[0].name, "step region") == 0);
  for (int i = 1; i < n; i++) CHECK(rows[i - 1].ms >= rows[i].ms);
}

static void report_per_step(void) {
  profile_start(&kCpu);
  for (int step = 0; step < 4; step++) {
    PROFILE_REGION(&kCpu, "wait", spin(0.001));
    profile_collect(&kCpu);
  }
  profile_stop();
  char *text = NULL;
  size_t bytes = 0;
  FILE *f = open_memstream(&text, &bytes);
  profile_report(f, 4, 0.008);  // 2 ms a step
  fclose(f);
  CHECK_CONTAINS(text, "profile: 4 steps, 2.000 ms a step");
  // One call a step, and the region's measured total per step and as a
  // share of the 2 ms. Each wait lasts at least 1 ms, and any longer under a
  // loaded machine, so only the lower bound is a property of the code.
  ProfileRow row;
  REQUIRE(profile_rows(&row, 1) == 1);
  CHECK(row.ms >= 4.0);
  char line[128];
  snprintf(line, sizeof line, "  %-28s %10.1f %12.3f %7.1f%%\n", "wait", 1.0, row.ms / 4,
           100.0 * row.ms / 4 / 2.0);
  CHECK_CONTAINS(text, line);
  free(text);
}

// An end with no begin, and a begin never ended, are not counted.
static void unmatched_spans_ignored(void) {
  profile_start(&kCpu);
  profile_end(&kCpu, "never begun");
  profile_begin(&kCpu, "never ended");
  profile_collect(&kCpu);
  profile_stop();
  ProfileRow rows[4];
  int n = profile_rows(rows, 4);
  for (int i = 0; i < n; i++) CHECK_EQ_INT(rows[i].calls, 0);
}

static void count_step(void *ctx, int64_t i) {
  int64_t *seen = ctx;
  seen[i]++;
}

// profile_run: each step once, in order, each a "training step" span; no
// steps, nothing at all (not even a report).
static void run_profiles_each_step(void) {
  int64_t seen[3] = {0, 0, 0};
  char *text = NULL;
  size_t bytes = 0;
  FILE *f = open_memstream(&text, &bytes);
  profile_run(&kCpu, 3, count_step, seen, f);
  fclose(f);
  CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
  CHECK(!g_profile_on);
  ProfileRow row;
  REQUIRE(profile_rows(&row, 1) == 1);
  CHECK(strcmp(row.name, "training step") == 0);
  CHECK_EQ_INT(row.calls, 3);
  CHECK_CONTAINS(text, "profile: 3 steps");
  free(text);
  text = NULL;
  f = open_memstream(&text, &bytes);
  profile_run(&kCpu, 0, count_step, seen, f);
  fclose(f);
  CHECK(seen[0] == 1);
  CHECK_EQ_INT((int64_t)bytes, 0);
  free(text);
}

int main(void) {
  TEST_RUN(counts_calls_and_time);
  TEST_RUN(report_per_step);
  TEST_RUN(unmatched_spans_ignored);
  TEST_RUN(run_profiles_each_step);
  return test_finish();
}
