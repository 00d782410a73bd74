// The shared run lifecycle: the events every run writes, in order; the eval
// cadence, its blocks and the stop decision; checkpoints and resume; and the
// errors for missing or bad common flags.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "tests/harness/test.h"
#include "train/run.h"

static const ConfigKey kOwnKeys[] = {{"epochs", CFG_INT, "3", NULL, NULL}};
static const RunSpec kSpec = {.benchmark = "resnet", .metric = "top-1", .max_epochs = "5",
                              .target = "0.5", .eval_every = "2", .keys = kOwnKeys, .n_keys = 1};

// run_init on "prog" and the flags (a NULL-terminated list), the log in
// the test's folder at name.
static void init_with(Run *run, const char *name, char **flags) {
  static char log_arg[600];
  static char *argv[32];
  snprintf(log_arg, sizeof log_arg, "--log_file=%s/run/%s", test_tmpdir(), name);
  int argc = 0;
  argv[argc++] = "prog";
  argv[argc++] = "--device=cpu";
  argv[argc++] = log_arg;
  for (char **f = flags; *f; f++) argv[argc++] = *f;
  argv[argc] = NULL;
  char **args = argv;
  run_init(run, &kSpec, &argc, &args);
}

static void read_log(const char *name, char *text, size_t text_bytes) {
  char path[600];
  snprintf(path, sizeof path, "%s/run/%s", test_tmpdir(), name);
  FILE *f = fopen(path, "r");
  text[0] = 0;
  if (!f) return;
  size_t n = fread(text, 1, text_bytes - 1, f);
  text[n] = 0;
  fclose(f);
}

// Each needle after the one before it in text.
static void check_order(const char *text, const char *const *order, int n) {
  const char *at = text;
  for (int i = 0; i < n; i++) {
    const char *hit = strstr(at, order[i]);
    CHECK_MSG(hit, "event %s missing or out of order", order[i]);
    if (hit) at = hit + 1;
  }
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
  return n;
}

static void lifecycle_writes_required_events(void) {
  char *flags[] = {"--data_dir=/data", "--seed=7", "--submission_platform=test box",
                   "--max_epochs=2", "--eval_every=1", "--target_accuracy=0.5", NULL};
  Run run;
  init_with(&run, "x.log", flags);
  CHECK(run.dev.kind == DEVICE_CPU);
  run_check(&run);
  run_start(&run, 100, 10);
  CHECK(run.run_start_ms > 0);
  while (run_next_epoch(&run))
    if (run_epoch_stop(&run, 1.0)) run_eval_stop(&run, 0.9, NULL);
  run_stop(&run);
  CHECK(run.reached);
  CHECK_EQ_INT(run.epoch, 1);
  run_close(&run);

  static char text[16384];
  read_log("x.log", text, sizeof text);
  const char *order[] = {"\"init_start\"", "\"submission_benchmark\", \"value\": \"resnet\"",
                         "\"submission_org\"", "\"submission_division\", \"value\": \"closed\"",
                         "\"submission_status\"", "\"submission_platform\", \"value\": \"test box\"",
                         "\"cache_clear\", \"value\": true", "\"seed\", \"value\": 7",
                         "\"init_stop\"", "\"run_start\"", "\"block_start\"", "\"epoch_start\"",
                         "\"epoch_stop\"", "\"block_stop\"", "\"eval_start\"", "\"eval_accuracy\", \"value\": 0.9",
                         "\"eval_stop\"", "\"run_stop\""};
  check_order(text, order, (int)(sizeof order / sizeof order[0]));
  CHECK_CONTAINS(text, "\"status\": \"success\"");
}

// A run of epochs whose evals score metric[epoch]; returns the log's text.
static void run_scoring(const char *name, char **flags, const double *metric, char *text,
                        size_t text_bytes, Run *run) {
  init_with(run, name, flags);
  run_check(run);
  run_start(run, 100, 10);
  while (run_next_epoch(run))
    if (run_epoch_stop(run, 1.0)) run_eval_stop(run, metric[run->epoch], NULL);
  run_stop(run);
  run_close(run);
  read_log(name, text, text_bytes);
}

// eval_every 2 over 5 epochs: evals after 2 and 4, blocks {1, 2}, {3, 4} and
// {5} (cut by max_epochs, no eval there), run_stop aborted.
static void cadence_blocks_and_epoch_limit(void) {
  static char text[32768];
  const double metric[8] = {0, 0.1, 0.2, 0.3, 0.4, 0.9, 0.9, 0.9};
  char *flags[] = {"--data_dir=/data", NULL};
  Run run;
  run_scoring("cadence.log", flags, metric, text, sizeof text, &run);
  CHECK(!run.reached);
  CHECK_EQ_INT(count(text, "\"eval_accuracy\""), 2);
  CHECK_EQ_INT(count(text, "\"epoch_start\""), 5);
  CHECK_EQ_INT(count(text, "\"block_start\""), 3);
  CHECK_EQ_INT(count(text, "\"block_stop\""), 3);
  const char *order[] = {"\"first_epoch_num\": 1, \"epoch_count\": 2",
                         "\"eval_accuracy\", \"value\": 0.2",
                         "\"first_epoch_num\": 3, \"epoch_count\": 2",
                         "\"eval_accuracy\", \"value\": 0.4",
                         "\"first_epoch_num\": 5, \"epoch_count\": 1", "\"status\": \"aborted\""};
  check_order(text, order, (int)(sizeof order / sizeof order[0]));
}

// The target reached at the second eval (epoch 3 with offset 1: evals after
// 1 and 3) stops the run there: success, no fourth epoch.
static void target_stops_the_run(void) {
  static char text[32768];
  const double metric[8] = {0, 0.1, 0.2, 0.6, 0.9, 0.9, 0.9, 0.9};
  char *flags[] = {"--data_dir=/data", "--eval_offset=1", NULL};
  Run run;
  run_scoring("target.log", flags, metric, text, sizeof text, &run);
  CHECK(run.reached);
  CHECK_EQ_INT(count(text, "\"epoch_start\""), 3);
  CHECK_EQ_INT(count(text, "\"eval_accuracy\""), 2);
  CHECK_CONTAINS(text, "\"first_epoch_num\": 2, \"epoch_count\": 2");
  CHECK_CONTAINS(text, "\"status\": \"success\"");
}

// The epoch_num of each event `key` of the log, in order, as "2 3".
static void event_epochs(const char *text, const char *key, char *out, size_t out_bytes) {
  char needle[96];
  snprintf(needle, sizeof needle, "\"key\": \"%s\"", key);
  out[0] = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) {
    const char *num = strstr(at, "\"epoch_num\": ");
    const char *eol = strchr(at, '\n');
    if (!num || (eol && num > eol)) continue;
    size_t len = strlen(out);
    snprintf(out + len, out_bytes - len, "%s%d", len ? " " : "", atoi(num + strlen("\"epoch_num\": ")));
  }
}

// eval_epochs 2,3 over 5 epochs (eval_every 2 unused): evals after 2 and 3
// only, blocks {1, 2}, {3} and {4, 5} (no eval there), run_stop aborted.
static void eval_epochs_fix_the_evals(void) {
  static char text[32768];
  const double metric[8] = {0, 0.1, 0.2, 0.3, 0.4, 0.9, 0.9, 0.9};
  char *flags[] = {"--data_dir=/data", "--eval_epochs=2,3", NULL};
  Run run;
  run_scoring("fixed.log", flags, metric, text, sizeof text, &run);
  CHECK(!run.reached);
  char epochs[64];
  event_epochs(text, "eval_start", epochs, sizeof epochs);
  CHECK_STR(epochs, "2 3");
  event_epochs(text, "eval_stop", epochs, sizeof epochs);
  CHECK_STR(epochs, "2 3");
  CHECK_EQ_INT(count(text, "\"epoch_start\""), 5);
  CHECK_EQ_INT(count(text, "\"block_stop\""), 3);
  const char *order[] = {"\"first_epoch_num\": 1, \"epoch_count\": 2", "\"eval_accuracy\", \"value\": 0.2",
                         "\"first_epoch_num\": 3, \"epoch_count\": 1", "\"eval_accuracy\", \"value\": 0.3",
                         "\"first_epoch_num\": 4, \"epoch_count\": 2", "\"status\": \"aborted\""};
  check_order(text, order, (int)(sizeof order / sizeof order[0]));
}

// A checkpoint after each eval; a resume continues after its epoch with its
// parameters, and one with another seed is refused by name.
static const ParamSpec kParams[] = {{"w", 1, {3}, 0}};

static void run_with_params(char **flags, ParamSet *ps, Optimizer *opt, Run *run, const char *name) {
  init_with(run, name, flags);
  run_check(run);
  paramset_init(ps, kParams, 1, optim_state_count(OPT_SGD), DEVICE_CPU);
  OptConfig oc = optim_defaults(OPT_SGD);
  optim_init(opt, &oc, ps);
  run_resume(run, ps, NULL, opt);
}

static void resume_continues_after_checkpoint(void) {
  char ckpt[600], ckpt_arg[700];
  snprintf(ckpt, sizeof ckpt, "%s/run/c.ckpt", test_tmpdir());
  snprintf(ckpt_arg, sizeof ckpt_arg, "--checkpoint=%s", ckpt);
  char *first[] = {"--data_dir=/data", "--eval_every=1", "--max_epochs=2", ckpt_arg, NULL};
  Run run;
  ParamSet ps;
  Optimizer opt;
  run_with_params(first, &ps, &opt, &run, "c1.log");
  CHECK_EQ_INT(run.first_epoch, 1);
  run_start(&run, 10, 1);
  while (run_next_epoch(&run)) {
    ps.params[0] = (float)run.epoch;
    if (run_epoch_stop(&run, 1.0)) run_eval_stop(&run, 0.1, NULL);
  }
  run_stop(&run);
  optim_free(&opt);
  paramset_free(&ps);
  run_close(&run);

  char *again[] = {"--data_dir=/data", "--eval_every=1", "--max_epochs=4", ckpt_arg, "--resume", NULL};
  run_with_params(again, &ps, &opt, &run, "c2.log");
  CHECK_EQ_INT(run.first_epoch, 3);
  CHECK(ps.params[0] == 2.0f);
  run_start(&run, 10, 1);
  CHECK(run_next_epoch(&run));
  CHECK_EQ_INT(run.epoch, 3);
  optim_free(&opt);
  paramset_free(&ps);
  run_close(&run);
}

static void resume_other_seed(void *ctx) {
  char **flags = ctx;
  Run run;
  ParamSet ps;
  Optimizer opt;
  run_with_params(flags, &ps, &opt, &run, "c3.log");
}

static void begin_with(void *ctx) {
  Run run;
  init_with(&run, "bad.log", ctx);
  run_data_dir(&run);
  run_check(&run);
}

static void bad_common_flags(void) {
  char *no_data[] = {"--log_file=/dev/null", NULL};
  CHECK_DIES_WITH(begin_with, no_data, "error: --data_dir: no data set given");
  char *bad_division[] = {"--data_dir=x", "--submission_division=half", NULL};
  CHECK_DIES_WITH(begin_with, bad_division, "error: --submission_division: 'half' is not one of closed|open");
  char *bad_device[] = {"--data_dir=x", "--device=tpu", NULL};
  CHECK_DIES_WITH(begin_with, bad_device, "error: --device: 'tpu' is not one of auto|cpu|cuda");
  char *unwritable[] = {"--data_dir=x", "--log_file=/proc/nope/x.log", NULL};
  CHECK_DIES_WITH(begin_with, unwritable, "/proc/nope");
  char *offset[] = {"--data_dir=x", "--eval_offset=2", NULL};
  CHECK_DIES_WITH(begin_with, offset, "error: --eval_offset: 2 is not below --eval_every=2");
  char *no_eval[] = {"--data_dir=x", "--eval_every=4", "--max_epochs=2", NULL};
  CHECK_DIES_WITH(begin_with, no_eval, "error: --max_epochs: 2 ends the run before the first eval (after epoch 4)");
  char *zero_epoch[] = {"--data_dir=x", "--eval_epochs=0,2", NULL};
  CHECK_DIES_WITH(begin_with, zero_epoch, "error: --eval_epochs: item 1 (0) is not a whole epoch >= 1");
  char *unsorted[] = {"--data_dir=x", "--eval_epochs=4,2", NULL};
  CHECK_DIES_WITH(begin_with, unsorted, "error: --eval_epochs: epoch 2 after 4: the epochs must ascend");
  char *beyond[] = {"--data_dir=x", "--eval_epochs=2,6", NULL};
  CHECK_DIES_WITH(begin_with, beyond, "error: --eval_epochs: epoch 6 is after --max_epochs=5");
  char *not_list[] = {"--data_dir=x", "--eval_epochs=2;4", NULL};
  CHECK_DIES_WITH(begin_with, not_list, "error: --eval_epochs: '2;4' is not a list of 0 to 64");
  char *resume[] = {"--data_dir=x", "--resume", NULL};
  CHECK_DIES_WITH(begin_with, resume, "error: --resume: needs --checkpoint=PATH");
  char *ckpt_dir[] = {"--data_dir=x", "--checkpoint=/proc/nope/c.ckpt", NULL};
  CHECK_DIES_WITH(begin_with, ckpt_dir, "error: --checkpoint: cannot write /proc/nope/c.ckpt.tmp");
  char ckpt_arg[700];
  snprintf(ckpt_arg, sizeof ckpt_arg, "--checkpoint=%s/run/c.ckpt", test_tmpdir());
  char *other_seed[] = {"--data_dir=/data", "--eval_every=1", ckpt_arg, "--resume", "--seed=5", NULL};
  CHECK_DIES_WITH(resume_other_seed, other_seed, "error: --resume: --seed: 5 here, 1 in the run of");
}

int main(void) {
  TEST_RUN(lifecycle_writes_required_events);
  TEST_RUN(cadence_blocks_and_epoch_limit);
  TEST_RUN(target_stops_the_run);
  TEST_RUN(eval_epochs_fix_the_evals);
  TEST_RUN(resume_continues_after_checkpoint);
  TEST_RUN(bad_common_flags);
  return test_finish();
}
