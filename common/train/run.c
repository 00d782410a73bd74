// trainer.c: the run lifecycle shared by the trainers.
#include "train/run.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/progress.h"
#include "device/profile.h"
#include "ops/elementwise.h"

const ConfigKey trainer_keys[] = {
    {"device", CFG_STRING, "auto", "cpu, cuda, or auto (cuda when a GPU is present)", "auto|cpu|cuda"},
    {"seed", CFG_INT, "1", "seed of every random stream in the run", "[0, inf)"},
    {"data_dir", CFG_STRING, "", "the converted data set (required)", NULL},
    {"log_file", CFG_STRING, "", "the MLPerf log; default logs/<benchmark>/<date>-<seed>.log", NULL},
    {"submission_org", CFG_STRING, "mlsuite", "MLLOG submission_org", NULL},
    {"submission_division", CFG_STRING, "closed", "closed or open", "closed|open"},
    {"submission_status", CFG_STRING, "research", "onprem, cloud, research or preview", "onprem|cloud|research|preview"},
    {"submission_platform", CFG_STRING, "", "default: 1x<device name>", NULL},
};
const int trainer_key_count = (int)(sizeof trainer_keys / sizeof trainer_keys[0]);

static void default_log_path(TrainerRun *run, char *buf, size_t buf_bytes) {
  char stamp[32];
  time_t now = time(NULL);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
  snprintf(buf, buf_bytes, "logs/%s/%s-seed%lld.log", run->benchmark, stamp,
           (long long)config_int(run->cfg, "seed"));
}

void trainer_begin(TrainerRun *run, const char *benchmark, Config *cfg, int argc, char **argv,
                   int rank, int device_index) {
  memset(run, 0, sizeof *run);
  run->benchmark = benchmark;
  run->cfg = cfg;
  run->rank = rank;
  config_add_keys(cfg, trainer_keys, trainer_key_count);
  config_from_args(cfg, argc, argv, argv[0]);
  const char *division = config_string(cfg, "submission_division");  // closed|open: config.c

  DeviceKind kind = device_kind_parse("device", config_string(cfg, "device"));
  device_open(&run->dev, kind, kind == DEVICE_CUDA ? device_index : 0);

  const char *path = config_string(cfg, "log_file");
  if (*path)
    snprintf(run->log_path, sizeof run->log_path, "%s", path);
  else
    default_log_path(run, run->log_path, sizeof run->log_path);
  mllog_open(&run->log, run->log_path, rank, true);

  MLLOG_START(&run->log, "init_start");
  if (rank == 0) config_print(cfg, stderr);
  char platform[300];
  const char *configured = config_string(cfg, "submission_platform");
  if (*configured)
    snprintf(platform, sizeof platform, "%s", configured);
  else
    device_describe(&run->dev, platform, sizeof platform);
  MLLOG_POINT(&run->log, "submission_benchmark", mlv_str(benchmark));
  MLLOG_POINT(&run->log, "submission_org", mlv_str(config_string(cfg, "submission_org")));
  MLLOG_POINT(&run->log, "submission_division", mlv_str(division));
  MLLOG_POINT(&run->log, "submission_status", mlv_str(config_string(cfg, "submission_status")));
  MLLOG_POINT(&run->log, "submission_platform", mlv_str(platform));
  MLLOG_POINT(&run->log, "cache_clear", mlv_bool(true));
  MLLOG_POINT(&run->log, "seed", mlv_int(config_int(cfg, "seed")));
}

const char *trainer_data_dir(const TrainerRun *run) {
  const char *dir = config_string(run->cfg, "data_dir");
  if (!*dir) die_input("--data_dir", "no data set given (--data_dir=DIR)");
  return dir;
}

// A fatal error after run_start (or benchmark_start) still ends the log as
// the rules want: run_stop (or benchmark_stop) aborted, from check.h's exit
// hook on the thread that exits.
static void release_stop_signals(void);

static void abort_on_error(void *ctx) {
  TrainerRun *run = ctx;
  release_stop_signals();
  MLLOG_END(&run->log, run->benchmark_what ? "benchmark_stop" : "run_stop",
            {"status", mlv_str("aborted")}, {"reason", mlv_str("error")});
  mllog_close(&run->log);
}

// A run ended by a signal still ends its log with run_stop aborted: when one
// rank dies, mpirun sends SIGTERM to the others; a user presses Ctrl-C. The
// line is formatted at run_start but for its time, so that the handler only
// calls async-signal-safe functions (clock_gettime, write, raise).
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
    write_all(fd, g_signal_stop.head, strlen(g_signal_stop.head));
    write_all(fd, digits + sizeof digits - n, (size_t)n);
    write_all(fd, g_signal_stop.tail, strlen(g_signal_stop.tail));
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_stop_signals(TrainerRun *run) {
  if (!run->log.enabled) return;
  MLMeta meta[] = {{"status", mlv_str("aborted")}, {"reason", mlv_str("signal")}};
  char line[600];
  mllog_format(line, sizeof line, 0, __FILE__, __LINE__, MLLOG_INTERVAL_END, "run_stop", mlv_null(),
               meta, 2);
  const char *time = strstr(line, "\"time_ms\": 0");
  if (!time) DIE("trainer: no time_ms in a formatted MLLOG line");
  size_t head = (size_t)(time - line) + strlen("\"time_ms\": ");
  snprintf(g_signal_stop.head, sizeof g_signal_stop.head, ":::MLLOG %.*s", (int)head, line);
  snprintf(g_signal_stop.tail, sizeof g_signal_stop.tail, "%s\n", time + strlen("\"time_ms\": 0"));
  g_signal_stop.n_fds = 0;
  if (run->log.to_stdout) g_signal_stop.fds[g_signal_stop.n_fds++] = STDOUT_FILENO;
  if (run->log.file) g_signal_stop.fds[g_signal_stop.n_fds++] = fileno(run->log.file);
  // A signal ignored when the run began (nohup, a background job of a
  // script) stays ignored.
  for (size_t i = 0; i < sizeof kStopSignals / sizeof kStopSignals[0]; i++)
    if (signal(kStopSignals[i], stop_on_signal) == SIG_IGN) signal(kStopSignals[i], SIG_IGN);
}

static void release_stop_signals(void) {
  for (size_t i = 0; i < sizeof kStopSignals / sizeof kStopSignals[0]; i++)
    if (signal(kStopSignals[i], SIG_DFL) == SIG_IGN) signal(kStopSignals[i], SIG_IGN);
}

void trainer_start(TrainerRun *run) {
  MLLOG_END(&run->log, "init_stop");
  MLLOG_START(&run->log, "run_start");
  run->run_start_ms = time_unix_ms();
  check_set_exit_hook(abort_on_error, run);
  catch_stop_signals(run);
}

void trainer_finish(TrainerRun *run, bool reached_target) {
  check_set_exit_hook(NULL, NULL);
  release_stop_signals();
  MLLOG_END(&run->log, "run_stop", {"status", mlv_str(reached_target ? "success" : "aborted")});
  run->run_stop_ms = time_unix_ms();
  if (run->rank == 0) {
    double seconds = (double)(run->run_stop_ms - run->run_start_ms) / 1000.0;
    printf("%s: %s, time to train %.1f s (%.2f min); log %s\n", run->benchmark,
           reached_target ? "target reached" : "target NOT reached (aborted)", seconds,
           seconds / 60.0, run->log_path);
    fflush(stdout);
  }
}

void trainer_start_benchmark(TrainerRun *run, const char *what) {
  MLLOG_END(&run->log, "init_stop");
  MLLOG_START(&run->log, "benchmark_start", {"what", mlv_str(what)});
  run->benchmark_what = what;
  check_set_exit_hook(abort_on_error, run);
}

void trainer_finish_benchmark(TrainerRun *run, double throughput, const char *unit) {
  check_set_exit_hook(NULL, NULL);
  MLLOG_END(&run->log, "benchmark_stop", {"throughput", mlv_float(throughput)},
            {"unit", mlv_str(unit)});
  if (run->rank == 0) {
    printf("%s: benchmark of %s: %.1f %s (not a training run: no target); log %s\n", run->benchmark,
           run->benchmark_what, throughput, unit, run->log_path);
    fflush(stdout);
  }
}

void trainer_close(TrainerRun *run) {
  mllog_close(&run->log);
  device_close(&run->dev);
}

bool trainer_update(const Device *dev, Dist *dist, LossScaler *s, Optimizer *opt, ParamSet *ps,
                    float lr) {
  PROFILE_REGION(dev, "gradient all-reduce wait", dist_grad_wait(dist));
  PROFILE_REGION(dev, "amp unscale and check", amp_unscale(s, dev, ps->grads, ps->total_numel, 1.0f));
  if (!amp_update(s, dev)) return false;
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
