// run.c: the run lifecycle shared by the trainers (run.h).
#include "train/run.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/file.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "device/profile.h"
#include "ops/elementwise.h"

const ConfigKey run_keys[] = {
    {"device", CFG_STRING, "auto", "cpu, cuda, or auto (cuda when a GPU is present)", "auto|cpu|cuda"},
    {"seed", CFG_INT, "1", "seed of every random stream in the run", "[0, inf)"},
    {"data_dir", CFG_STRING, "", "the converted data set (required)", NULL},
    {"log_file", CFG_STRING, "", "the MLPerf log; default logs/<benchmark>/<date>-<seed>.log", NULL},
    {"submission_org", CFG_STRING, "mlsuite", "MLLOG submission_org", NULL},
    {"submission_division", CFG_STRING, "closed", "closed or open", "closed|open"},
    {"submission_status", CFG_STRING, "research", "onprem, cloud, research or preview", "onprem|cloud|research|preview"},
    {"submission_platform", CFG_STRING, "", "default: 1x<device name>", NULL},
    {"threads", CFG_INT, "0",
     "CPU op threads per rank; 0: OMP_NUM_THREADS, else the rank's share of the cores", "[0, 1024]"},
    {"profile_steps", CFG_INT, "0",
     "after a benchmark run's timed steps: this many more timed op by op, printed as a table",
     "[0, inf)"},
    {"print_config", CFG_BOOL, "false",
     "print the effective config (every key, defaults included) on stdout and exit 0, "
     "touching no data, device or log", NULL},
};
const int run_key_count = (int)(sizeof run_keys / sizeof run_keys[0]);

// The common keys a resumed run may change: where things are, the log and
// its labels, and the epoch limit (a schedule's length is its own key).
static const char *const kResumeMayChange[] = {
    "data_dir", "log_file", "checkpoint", "resume", "device", "max_epochs", "submission_org",
    "submission_division", "submission_status", "submission_platform", "threads", "profile_steps",
    "print_config", NULL};

// The lifecycle's keys, their defaults the spec's.
static void declare_run_keys(Run *run) {
  const RunSpec *s = &run->spec;
  snprintf(run->target_help, sizeof run->target_help, "%s that ends the run (run_stop success)",
           s->metric);
  const ConfigKey keys[RUN_OWN_KEYS] = {
      {"max_epochs", CFG_INT, s->max_epochs, "epoch limit: run_stop aborted there", "[1, 1000000]"},
      {"target_accuracy", CFG_FLOAT, s->target, run->target_help, "(0, 1]"},
      {"eval_every", CFG_INT, s->eval_every, "epochs between evals", "[1, inf)"},
      {"eval_offset", CFG_INT, "0", "the first eval comes after epoch eval_every - eval_offset", "[0, inf)"},
      {"eval_epochs", CFG_STRING, "",
       "evals after exactly these epochs (ascending, e.g. 40,50,55), in place of eval_every and "
       "eval_offset; empty: the eval_every cadence", NULL},
      {"checkpoint", CFG_STRING, "", "write the training state here after every eval (rank 0)", NULL},
      {"resume", CFG_BOOL, "false", "continue from --checkpoint when it exists (every rank reads it)", NULL},
  };
  memcpy(run->keys, keys, sizeof keys);
  config_add_keys(&run->cfg, run->keys, RUN_OWN_KEYS);
}

// --print_config: what the config files and flags amount to, each key's
// value and origin as a run prints them, with no data set, device or log
// touched, so that a config can be read without running it (the recipe
// checker, tests/recipes/check_recipes.py).
static NORETURN void print_config_and_exit(Run *run) {
  if (run->rank == 0) config_print(&run->cfg, stdout);
  fflush(stdout);
  config_free(&run->cfg);
  dist_finalize(&run->dist);
  exit(0);
}

static void default_log_path(Run *run, char *buf, size_t buf_bytes) {
  char stamp[32];
  time_t now = time(NULL);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
  snprintf(buf, buf_bytes, "logs/%s/%s-seed%lld.log", run->spec.benchmark, stamp,
           (long long)config_int(&run->cfg, "seed"));
}

void run_init(Run *run, const RunSpec *spec, int *argc, char ***argv) {
  memset(run, 0, sizeof *run);
  run->spec = *spec;
  Config *cfg = &run->cfg;
  device_blas_kernels(*argv);  // may run the program again, before MPI starts
  dist_init(&run->dist, argc, argv);
  run->rank = run->dist.rank;
  config_init(cfg);
  config_add_keys(cfg, run_keys, run_key_count);
  declare_run_keys(run);
  config_add_keys(cfg, amp_config_keys, amp_config_key_count);
  config_add_keys(cfg, spec->keys, spec->n_keys);
  config_from_args(cfg, *argc, *argv, (*argv)[0]);
  if (config_bool(cfg, "print_config")) print_config_and_exit(run);
  if (run->rank == 0 && device_blas_note()) printf("%s\n", device_blas_note());
  run->max_epochs = config_int(cfg, "max_epochs");
  run->target = config_float(cfg, "target_accuracy");
  run->eval_every = config_int(cfg, "eval_every");
  run->eval_offset = config_int(cfg, "eval_offset");
  run->checkpoint = config_string(cfg, "checkpoint");
  run->first_epoch = 1;
  const char *division = config_string(cfg, "submission_division");  // closed|open: config.c

  DeviceKind kind = device_kind_parse("device", config_string(cfg, "device"));
  device_open(&run->dev, kind, kind == DEVICE_CUDA ? dist_device_index(&run->dist) : 0);
  if (kind == DEVICE_CPU) {
    // The ops' team, GEMMs included (each OpenBLAS call on one thread).
    parallel_set_threads((int)config_int(cfg, "threads"), device_cpu_share(run->dist.local_size));
  }
  amp_setup(cfg, &run->dev, &run->amp, &run->scaler);
  loss_mean_init(&run->epoch_loss, &run->dev);

  const char *path = config_string(cfg, "log_file");
  if (*path)
    snprintf(run->log_path, sizeof run->log_path, "%s", path);
  else
    default_log_path(run, run->log_path, sizeof run->log_path);
  if (run->rank == 0) {  // a log that cannot be written fails naming its flag
    file_make_parent_dirs_for("--log_file", run->log_path);
    FILE *f = fopen(run->log_path, "a");  // written in place (mllog_open): /dev/null is fine
    if (!f) die_input("--log_file", "cannot write %s: %s", run->log_path, strerror(errno));
    fclose(f);
  }
  mllog_open(&run->log, run->log_path, run->rank, true);

  MLLOG_START(&run->log, "init_start");
  if (run->rank == 0) config_print(cfg, stderr);
  char platform[300];
  const char *configured = config_string(cfg, "submission_platform");
  if (*configured)
    snprintf(platform, sizeof platform, "%s", configured);
  else
    device_describe(&run->dev, platform, sizeof platform);
  MLLOG_POINT(&run->log, "submission_benchmark",
              mlv_str(spec->logged_as ? spec->logged_as : spec->benchmark));
  MLLOG_POINT(&run->log, "submission_org", mlv_str(config_string(cfg, "submission_org")));
  MLLOG_POINT(&run->log, "submission_division", mlv_str(division));
  MLLOG_POINT(&run->log, "submission_status", mlv_str(config_string(cfg, "submission_status")));
  MLLOG_POINT(&run->log, "submission_platform", mlv_str(platform));
  MLLOG_POINT(&run->log, "cache_clear", mlv_bool(true));
  MLLOG_POINT(&run->log, "seed", mlv_int(config_int(cfg, "seed")));
}

void run_resolve_epochs(Run *run, const char *key) {
  if (config_float(&run->cfg, key) > 0) return;
  char value[32], err[256];
  snprintf(value, sizeof value, "%lld", (long long)config_int(&run->cfg, "max_epochs"));
  if (config_set(&run->cfg, key, value, "max_epochs", err, sizeof err)) DIE("%s", err);
}

const char *run_data_dir(const Run *run) {
  const char *dir = config_string(&run->cfg, "data_dir");
  if (!*dir) die_input("--data_dir", "no data set given (--data_dir=DIR)");
  return dir;
}

// The files rank 0 will write: the checkpoint and the spec's outputs.
static void check_outputs(const Run *run) {
  if (*run->checkpoint) file_check_writable("--checkpoint", run->checkpoint);
  for (const char *const *key = run->spec.outputs; key && *key; key++) {
    const char *path = config_string(&run->cfg, *key);
    char flag[96];
    snprintf(flag, sizeof flag, "--%s", *key);
    if (*path) file_check_writable(flag, path);
  }
}

int run_epoch_list(const Run *run, const char *key, int64_t *out, int max) {
  double v[RUN_MAX_EPOCH_LIST];
  if (max > RUN_MAX_EPOCH_LIST) DIE("run: a list of %d epochs (at most %d)", max, RUN_MAX_EPOCH_LIST);
  int n = config_numbers(&run->cfg, key, v, 0, max);
  char flag[96];
  snprintf(flag, sizeof flag, "--%s", key);
  for (int i = 0; i < n; i++) {
    if (v[i] != floor(v[i]) || v[i] < 1 || v[i] > 1e6)
      die_input(flag, "item %d (%g) is not a whole epoch >= 1", i + 1, v[i]);
    if (i && v[i] <= v[i - 1])
      die_input(flag, "epoch %g after %g: the epochs must ascend", v[i], v[i - 1]);
    out[i] = (int64_t)v[i];
  }
  return n;
}

// The cadence: eval_epochs' list, or eval_every with its offset.
static void check_cadence(Run *run) {
  run->n_eval_epochs = run_epoch_list(run, "eval_epochs", run->eval_epochs, RUN_MAX_EPOCH_LIST);
  if (run->n_eval_epochs) {
    int64_t last = run->eval_epochs[run->n_eval_epochs - 1];
    if (last > run->max_epochs)
      die_input("--eval_epochs", "epoch %lld is after --max_epochs=%lld", (long long)last,
                (long long)run->max_epochs);
    return;
  }
  int64_t every = run->eval_every, offset = run->eval_offset;
  if (offset >= every)
    die_input("--eval_offset", "%lld is not below --eval_every=%lld", (long long)offset, (long long)every);
  if (every - offset > run->max_epochs)
    die_input("--max_epochs", "%lld ends the run before the first eval (after epoch %lld)",
              (long long)run->max_epochs, (long long)(every - offset));
}

void run_check(Run *run) {
  check_cadence(run);
  if (config_bool(&run->cfg, "resume") && !*run->checkpoint)
    die_input("--resume", "needs --checkpoint=PATH to resume from");
  if (run->rank == 0) check_outputs(run);

  int n = 0;
  for (const char *const *k = kResumeMayChange; *k; k++) run->ignored[n++] = *k;
  for (int list = 0; list < 2; list++)  // the outputs are where things go, like the log
    for (const char *const *k = list ? run->spec.outputs : run->spec.resume_may_change; k && *k; k++) {
      if (n == RUN_MAX_IGNORED - 1) DIE("run: more than %d keys a resume may change", RUN_MAX_IGNORED - 1);
      run->ignored[n++] = *k;
    }
  run->ignored[n] = NULL;
  char err[600];
  if (config_snapshot(&run->cfg, run->ignored, run->run_config, sizeof run->run_config, err,
                      sizeof err))
    config_die(err);
}

void run_resume(Run *run, ParamSet *params, ParamSet *buffers, Optimizer *opt) {
  run->params = params;
  run->buffers = buffers;
  run->opt = opt;
  if (!config_bool(&run->cfg, "resume")) return;
  CkptMeta meta;
  if (!ckpt_resume(run->checkpoint, &run->dev, params, buffers, opt, &run->scaler, &meta)) {
    if (run->rank == 0) printf("resume: no checkpoint at %s yet; starting afresh\n", run->checkpoint);
    return;
  }
  char err[600];
  if (config_check_snapshot(&run->cfg, meta.run_config, run->ignored, run->checkpoint, err, sizeof err))
    die_input("--resume", "%s; resume with the same settings, or start afresh", err);
  run->first_epoch = meta.epoch + 1;
  if (run->rank == 0)
    printf("resume: %s: continuing after epoch %lld (step %lld)\n", run->checkpoint,
           (long long)meta.epoch, (long long)meta.step);
}

// A fatal error after run_start (or benchmark_start) still ends the log as
// the rules want: run_stop (or benchmark_stop) aborted, from check.h's exit
// hook on the thread that exits.
static void release_stop_signals(void);

static void abort_on_error(void *ctx) {
  Run *run = ctx;
  release_stop_signals();
  MLLOG_END(&run->log, run->benchmark_what ? "benchmark_stop" : "run_stop",
            {"status", mlv_str("aborted")}, {"reason", mlv_str("error")});
  mllog_close(&run->log);
}

// A run ended by a signal still ends its log with run_stop aborted: when one
// rank dies, mpirun sends SIGTERM to the others; a user presses Ctrl-C. The
// line is formatted at run_start but for its time, so that the handler only
// calls async-signal-safe functions (clock_gettime, fcntl, write, raise).
// The log file comes first, and stdout is written without waiting: mpirun
// stops reading its ranks' output once it is told to end the job, so a
// rank's stdout can be a full pipe by then (a blocking write there, before
// the file, once left the log without its run_stop until mpirun's SIGKILL).
static struct {
  char head[64], tail[512];  // the line before and after the time
  int fds[2], n_fds;
} g_signal_stop;
static const int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void stop_on_signal(int sig) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
  char digits[24];
  int n = 0;
  do digits[sizeof digits - 1 - n++] = (char)('0' + ms % 10);
  while ((ms /= 10) > 0);
  for (int i = 0; i < g_signal_stop.n_fds; i++) {
    int fd = g_signal_stop.fds[i];
    if (fd == STDOUT_FILENO) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    write_all(fd, g_signal_stop.head, strlen(g_signal_stop.head));
    write_all(fd, digits + sizeof digits - n, (size_t)n);
    write_all(fd, g_signal_stop.tail, strlen(g_signal_stop.tail));
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_stop_signals(Run *run) {
  if (!run->log.enabled) return;
  MLMeta meta[] = {{"status", mlv_str("aborted")}, {"reason", mlv_str("signal")}};
  char line[600];
  mllog_format(line, sizeof line, 0, __FILE__, __LINE__, MLLOG_INTERVAL_END, "run_stop", mlv_null(),
               meta, 2);
  const char *time = strstr(line, "\"time_ms\": 0");
  if (!time) DIE("run: no time_ms in a formatted MLLOG line");
  size_t head = (size_t)(time - line) + strlen("\"time_ms\": ");
  snprintf(g_signal_stop.head, sizeof g_signal_stop.head, ":::MLLOG %.*s", (int)head, line);
  snprintf(g_signal_stop.tail, sizeof g_signal_stop.tail, "%s\n", time + strlen("\"time_ms\": 0"));
  g_signal_stop.n_fds = 0;
  if (run->log.file) g_signal_stop.fds[g_signal_stop.n_fds++] = fileno(run->log.file);
  if (run->log.to_stdout) g_signal_stop.fds[g_signal_stop.n_fds++] = STDOUT_FILENO;
  // A signal ignored when the run began (nohup, a background job of a
  // script) stays ignored.
  for (size_t i = 0; i < sizeof kStopSignals / sizeof kStopSignals[0]; i++)
    if (signal(kStopSignals[i], stop_on_signal) == SIG_IGN) signal(kStopSignals[i], SIG_IGN);
}

static void release_stop_signals(void) {
  for (size_t i = 0; i < sizeof kStopSignals / sizeof kStopSignals[0]; i++)
    if (signal(kStopSignals[i], SIG_DFL) == SIG_IGN) signal(kStopSignals[i], SIG_IGN);
}

void run_start(Run *run, int64_t epoch_samples, int64_t epoch_steps) {
  if (*run->checkpoint && !run->params)
    DIE("run: --checkpoint without the training state (run_resume before run_start)");
  MLLOG_END(&run->log, "init_stop");
  MLLOG_START(&run->log, "run_start");
  run->run_start_ms = time_unix_ms();
  run->epoch_samples = epoch_samples;
  run->epoch_steps = epoch_steps;
  progress_start(&run->progress, "train", run->max_epochs * epoch_steps);
  run->progress.out = stdout;
  run->epoch = run->first_epoch - 1;
  run->block_first = run->first_epoch;
  check_set_exit_hook(abort_on_error, run);
  catch_stop_signals(run);
}

void run_set_epoch_size(Run *run, int64_t epoch_samples, int64_t epoch_steps) {
  run->epoch_samples = epoch_samples;
  run->epoch_steps = epoch_steps;
  run->progress.total_steps = run->max_epochs * epoch_steps;
}

bool run_progress_due(const Run *run) {
  return run->rank == 0 && progress_due(&run->progress);
}

void run_progress(Run *run, int64_t step, int64_t samples, double loss) {
  int64_t before = run->epoch - 1;
  progress_update(&run->progress, before * run->epoch_steps + step,
                  before * run->epoch_samples + samples, loss);
}

static bool is_eval_epoch(const Run *run, int64_t epoch) {
  if (!run->n_eval_epochs) return (epoch + run->eval_offset) % run->eval_every == 0;
  for (int i = 0; i < run->n_eval_epochs; i++)
    if (run->eval_epochs[i] == epoch) return true;
  return false;
}

bool run_next_epoch(Run *run) {
  if (run->reached || run->epoch >= run->max_epochs) return false;
  run->epoch++;
  if (run->epoch == run->block_first) {
    int64_t count = 1;
    while (!is_eval_epoch(run, run->block_first + count - 1) &&
           run->block_first + count - 1 < run->max_epochs)
      count++;
    MLLOG_START(&run->log, "block_start", {"first_epoch_num", mlv_int(run->block_first)},
                {"epoch_count", mlv_int(count)});
  }
  MLLOG_START(&run->log, "epoch_start", {"epoch_num", mlv_int(run->epoch)});
  run->epoch_start_s = time_now_s();
  return true;
}

bool run_epoch_stop(Run *run, double train_loss) {
  MLLog *log = &run->log;
  MLLOG_END(log, "epoch_stop", {"epoch_num", mlv_int(run->epoch)});
  run->eval_start_s = time_now_s();
  run->train_s += run->eval_start_s - run->epoch_start_s;
  run->trained_epochs++;
  run->train_loss = train_loss;
  if (!is_eval_epoch(run, run->epoch)) {
    if (run->epoch == run->max_epochs)
      MLLOG_END(log, "block_stop", {"first_epoch_num", mlv_int(run->block_first)});
    return false;
  }
  MLLOG_END(log, "block_stop", {"first_epoch_num", mlv_int(run->block_first)});
  MLLOG_START(log, "eval_start", {"epoch_num", mlv_int(run->epoch)});
  return true;
}

void run_eval_stop(Run *run, double metric, const char *more) {
  MLLog *log = &run->log;
  int64_t epoch = run->epoch;
  MLLOG_POINT(log, "eval_accuracy", mlv_float(metric), {"epoch_num", mlv_int(epoch)});
  MLLOG_END(log, "eval_stop", {"epoch_num", mlv_int(epoch)});
  if (run->rank == 0) {
    double samples = (double)(run->trained_epochs * run->epoch_samples);
    printf("%s: epoch %lld: %s %.4f (target %.4f)%s%s, mean train loss %.4f; train %.1f s "
           "(%.0f samples/s), eval %.1f s\n",
           run->spec.benchmark, (long long)epoch, run->spec.metric, metric, run->target,
           more ? ", " : "", more ? more : "", run->train_loss, run->train_s,
           samples / run->train_s, time_now_s() - run->eval_start_s);
    fflush(stdout);
  }
  run->reached = dist_all_agree(&run->dist, metric >= run->target);
  run->block_first = epoch + 1;
  run->train_s = 0;
  run->trained_epochs = 0;
  if (*run->checkpoint && run->rank == 0)
    ckpt_save(run->checkpoint, &run->dev, run->params, run->buffers, run->opt, &run->scaler, epoch,
              0, rng_make((uint64_t)config_int(&run->cfg, "seed"), 0), run->run_config);
}

void run_stop(Run *run) {
  check_set_exit_hook(NULL, NULL);
  release_stop_signals();
  MLLOG_END(&run->log, "run_stop", {"status", mlv_str(run->reached ? "success" : "aborted")});
  run->run_stop_ms = time_unix_ms();
  if (run->rank == 0) {
    amp_report(&run->scaler, stdout, run->spec.benchmark);
    double seconds = (double)(run->run_stop_ms - run->run_start_ms) / 1000.0;
    printf("%s: %s, time to train %.1f s (%.2f min); log %s\n", run->spec.benchmark,
           run->reached ? "target reached" : "target NOT reached (aborted)", seconds,
           seconds / 60.0, run->log_path);
    fflush(stdout);
  }
}

void run_start_benchmark(Run *run, const char *what) {
  MLLOG_END(&run->log, "init_stop");
  MLLOG_START(&run->log, "benchmark_start", {"what", mlv_str(what)});
  run->benchmark_what = what;
  check_set_exit_hook(abort_on_error, run);
}

void run_stop_benchmark(Run *run, double throughput, const char *unit) {
  check_set_exit_hook(NULL, NULL);
  MLLOG_END(&run->log, "benchmark_stop", {"throughput", mlv_float(throughput)},
            {"unit", mlv_str(unit)});
  if (run->rank == 0) {
    amp_report(&run->scaler, stdout, run->spec.benchmark);
    printf("%s: benchmark of %s: %.1f %s (not a training run: no target); log %s\n",
           run->spec.benchmark, run->benchmark_what, throughput, unit, run->log_path);
    fflush(stdout);
  }
}

void run_close(Run *run) {
  loss_mean_free(&run->epoch_loss);
  amp_scaler_free(&run->scaler);
  mllog_close(&run->log);
  device_close(&run->dev);
  config_free(&run->cfg);
  dist_finalize(&run->dist);
}

int64_t run_local_batch(const Run *run, int64_t global_batch, const char *unit) {
  int ranks = run->dist.size;
  if (global_batch % ranks)
    die_input("--batch_size", "%lld %s do not split evenly over %d ranks", (long long)global_batch,
              unit, ranks);
  return global_batch / ranks;
}

void run_train(Run *run, const RunTraining *t, void *trainer, int64_t epoch_samples,
               int64_t epoch_steps) {
  run_start(run, epoch_samples, epoch_steps);
  if (t->open_data) t->open_data(trainer);
  while (run_next_epoch(run)) {
    loss_mean_reset(&run->epoch_loss, &run->dev);
    if (t->plan_epoch) t->plan_epoch(trainer, run->epoch);
    int64_t samples = 0;
    for (int64_t i = 0; i < run->epoch_steps; i++) {
      samples += t->train_step(trainer, run->epoch, i);
      if (run_progress_due(run))
        run_progress(run, i + 1, samples, run->last_loss ? loss_read(&run->dev, run->last_loss) : NAN);
    }
    if (run_epoch_stop(run, loss_mean_read(&run->epoch_loss, &run->dev))) {
      char more[256] = "";
      double metric = t->evaluate(trainer, more, sizeof more);
      run_eval_stop(run, metric, more[0] ? more : NULL);
    }
  }
  if (t->close_data) t->close_data(trainer);
  run_stop(run);
}

void run_add_loss(Run *run, const Tensor *loss) {
  loss_mean_add(&run->epoch_loss, &run->dev, loss);
  run->last_loss = loss;
}

void run_benchmark(Run *run, const char *what, double (*measure)(void *trainer), void *trainer,
                   const char *unit) {
  run_start_benchmark(run, what);
  run_stop_benchmark(run, measure(trainer), unit);
}

void run_check_profile(const Run *run, bool benchmark, const char *give) {
  if (config_int(&run->cfg, "profile_steps") > 0 && !benchmark)
    die_input("--profile_steps", "profiles the steps after a bench run: give %s too", give);
}

// profile_run's steps go on from the timed ones' index.
typedef struct RunProfiledStep {
  void (*step)(void *ctx, int64_t i);
  void *ctx;
  int64_t first;
} RunProfiledStep;

static void profiled_step(void *ctx, int64_t i) {
  RunProfiledStep *s = ctx;
  s->step(s->ctx, s->first + i);
}

double run_time_steps(Run *run, int64_t warmup, int64_t steps, void (*step)(void *ctx, int64_t i),
                      void *ctx) {
  double seconds = profile_time_steps(&run->dev, warmup, steps, step, ctx);
  RunProfiledStep more = {step, ctx, warmup + steps};
  profile_run(&run->dev, config_int(&run->cfg, "profile_steps"), profiled_step, &more,
              run->rank == 0 ? stdout : NULL);
  return seconds;
}

bool run_update(const Device *dev, Dist *dist, LossScaler *s, Optimizer *opt, ParamSet *ps,
                    float lr) {
  PROFILE_REGION(dev, "gradient all-reduce wait", dist_grad_wait(dist));
  PROFILE_REGION(dev, "amp unscale and check", amp_unscale(s, dev, ps->grads, ps->total_numel, 1.0f));
  if (!amp_update(s, dev)) return false;
  if (opt->cfg.max_grad_norm > 0)
    PROFILE_REGION(dev, "gradient clipping", optim_clip_grads(opt, dev, ps, opt->cfg.max_grad_norm));
  PROFILE_REGION(dev, "optimizer step", optim_step(opt, dev, ps, lr));
  return true;
}

void loss_mean_init(LossMean *m, const Device *dev) {
  m->sum = TENSOR(device_alloc(dev->kind, sizeof(float)), DT_F32, dev->kind, 1);
  loss_mean_reset(m, dev);
}

void loss_mean_reset(LossMean *m, const Device *dev) {
  // On the legacy stream, which the device's blocking streams are ordered with.
  device_zero(dev->kind, m->sum.data, sizeof(float));
  m->count = 0;
}

void loss_mean_add(LossMean *m, const Device *dev, const Tensor *loss) {
  op_add(dev, &m->sum, loss, &m->sum);
  m->count++;
}

double loss_mean_read(const LossMean *m, const Device *dev) {
  float sum;
  device_sync(dev);
  device_copy(DEVICE_CPU, &sum, dev->kind, m->sum.data, sizeof sum);
  return m->count ? sum / (double)m->count : NAN;
}

void loss_mean_free(LossMean *m) { device_free(m->sum.device, m->sum.data); }

double loss_read(const Device *dev, const Tensor *loss) {
  float v;
  device_sync(dev);
  device_copy(DEVICE_CPU, &v, loss->device, loss->data, sizeof v);
  return v;
}
