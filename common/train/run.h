// trainer.h: the run lifecycle every trainer shares, so that each trainer's
// main reads as its training procedure:
//
//   Config cfg; config_init(&cfg); config_add_keys(&cfg, my_keys, n);
//   TrainerRun run;
//   trainer_begin(&run, "resnet", &cfg, argc, argv, rank, gpu);  // init_start, submission_*
//   ... build model, log hyperparameters (MLLOG_POINT(&run.log, ...)) ...
//   trainer_start(&run);                          // init_stop, run_start
//   ... epochs, evals ...
//   trainer_finish(&run, reached_target);         // run_stop, time to train
//   ... free the model ...
//   trainer_close(&run);                          // log and device
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mllog.h"
#include "device/device.h"
#include "train/amp.h"
#include "train/dist.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

// Keys every trainer has; trainer_begin declares them.
//   device, seed, data_dir (checked by trainer_data_dir), log_file, submission_org, submission_division,
//   submission_status, submission_platform
extern const ConfigKey trainer_keys[];
extern const int trainer_key_count;

typedef struct TrainerRun {
  const char *benchmark;  // MLPerf's submission_benchmark value
  Config *cfg;
  Device dev;
  MLLog log;
  int rank;
  int64_t run_start_ms;
  int64_t run_stop_ms;
  char log_path[1024];
  const char *benchmark_what;  // trainer_start_benchmark's; NULL in a training run
} TrainerRun;

// Parses flags (dies on bad ones), opens the device (GPU device_index when
// it is CUDA), opens the log (rank 0), writes init_start and the submission
// keys, prints the effective config.
void trainer_begin(TrainerRun *run, const char *benchmark, Config *cfg, int argc, char **argv,
                   int rank, int device_index);
// The data_dir flag; a one-line error when it was not given.
const char *trainer_data_dir(const TrainerRun *run);
// init_stop, then run_start: the clock of time-to-train starts here.
void trainer_start(TrainerRun *run);
// run_stop with status success or aborted and the time-to-train line on
// stdout.
void trainer_finish(TrainerRun *run, bool reached_target);
// A throughput benchmark (synthetic data, or --bench_steps with the real
// loader) is not a training run and must not look like a failed one: its log
// has init_stop, then benchmark_start (value: what is timed, e.g. "synthetic
// data") where a training run has run_start, and benchmark_stop with the
// throughput where it has run_stop. trainer_finish_benchmark prints
//   resnet: benchmark of synthetic data: 1234.5 images/s (not a training run: no target); log PATH
void trainer_start_benchmark(TrainerRun *run, const char *what);
void trainer_finish_benchmark(TrainerRun *run, double throughput, const char *unit);
// Closes the log and the device.
void trainer_close(TrainerRun *run);

// The end of a training step, after the backward: waits for the gradient
// all-reduce, unscales and checks the gradients (fp16: amp.h), and steps the
// optimizer with lr unless they overflowed; each part is a profile region.
// Returns whether the optimizer stepped.
bool trainer_update(const Device *dev, Dist *dist, LossScaler *s, Optimizer *opt, ParamSet *ps,
                    float lr);

// The mean training loss over an epoch, summed on the device as the steps
// go, so that a step never waits for the host: reset at the epoch's start,
// add each step's loss, read (waits for the device) at its end. Steadier
// than the last batch's loss for comparing two runs.
typedef struct LossMean {
  Tensor sum;  // (1) fp32 on the device
  int64_t count;
} LossMean;
void loss_mean_init(LossMean *m, const Device *dev);
void loss_mean_reset(LossMean *m, const Device *dev);
// loss: (1) fp32 on the device.
void loss_mean_add(LossMean *m, const Device *dev, const Tensor *loss);
// The mean of the losses added since the reset; NaN when none were.
double loss_mean_read(const LossMean *m, const Device *dev);
void loss_mean_free(LossMean *m);

#ifdef __cplusplus
}
#endif
