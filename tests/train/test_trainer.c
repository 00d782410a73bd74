// The shared run lifecycle: the events every run writes, in order, and the
// errors for missing or bad common flags.
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "tests/harness/test.h"
#include "train/run.h"

static const ConfigKey kOwnKeys[] = {{"epochs", CFG_INT, "3", NULL, NULL}};

static void lifecycle_writes_required_events(void) {
  char log_arg[600], log_path[512];
  snprintf(log_path, sizeof log_path, "%s/run/x.log", test_tmpdir());
  snprintf(log_arg, sizeof log_arg, "--log_file=%s", log_path);
  char *argv[] = {"prog", "--device=cpu", "--data_dir=/data", "--seed=7", log_arg,
                  "--submission_platform=test box"};
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kOwnKeys, 1);
  TrainerRun run;
  trainer_begin(&run, "ncf", &cfg, 6, argv, 0, 0);
  CHECK(run.dev.kind == DEVICE_CPU);
  trainer_start(&run);
  CHECK(run.run_start_ms > 0);
  trainer_finish(&run, true);
  trainer_close(&run);
  config_free(&cfg);

  FILE *f = fopen(log_path, "r");
  REQUIRE(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  const char *order[] = {"\"init_start\"", "\"submission_benchmark\", \"value\": \"ncf\"",
                         "\"submission_org\"", "\"submission_division\", \"value\": \"closed\"",
                         "\"submission_status\"", "\"submission_platform\", \"value\": \"test box\"",
                         "\"cache_clear\", \"value\": true", "\"seed\", \"value\": 7",
                         "\"init_stop\"", "\"run_start\"", "\"run_stop\""};
  const char *at = text;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const char *hit = strstr(at, order[i]);
    CHECK_MSG(hit, "event %s missing or out of order", order[i]);
    if (hit) at = hit;
  }
  CHECK_CONTAINS(text, "\"status\": \"success\"");
}

static void begin_with(void *ctx) {
  char **args = ctx;
  int argc = 1;
  while (args[argc]) argc++;
  Config cfg;
  config_init(&cfg);
  TrainerRun run;
  trainer_begin(&run, "resnet", &cfg, argc, args, 0, 0);
  trainer_data_dir(&run);
}

static void bad_common_flags(void) {
  char *no_data[] = {"prog", "--device=cpu", "--log_file=/dev/null", NULL};
  CHECK_DIES_WITH(begin_with, no_data, "error: --data_dir: no data set given");
  char *bad_division[] = {"prog", "--data_dir=x", "--submission_division=half", NULL};
  CHECK_DIES_WITH(begin_with, bad_division, "error: --submission_division: 'half' is not one of closed|open");
  char *bad_device[] = {"prog", "--data_dir=x", "--device=tpu", NULL};
  CHECK_DIES_WITH(begin_with, bad_device, "error: --device: 'tpu' is not one of auto|cpu|cuda");
  char *unwritable[] = {"prog", "--data_dir=x", "--device=cpu", "--log_file=/proc/nope/x.log", NULL};
  CHECK_DIES_WITH(begin_with, unwritable, "/proc/nope");
}

int main(void) {
  TEST_RUN(lifecycle_writes_required_events);
  TEST_RUN(bad_common_flags);
  return test_finish();
}
