// run.h: the run lifecycle every trainer shares. Each trainer's main calls
// the same functions in the same order and still reads top to bottom as its
// training procedure (llm.c style):
//
//   Run run;
//   run_init(&run, &kSpec, &argc, &argv);   // flags, ranks, device, precision, log, seed
//   ... the trainer's own flag checks ...
//   ... the data set checked, not read: its counts ...     (before run_start)
//   run_check(&run);                        // cadence, checkpoint path, resume
//   ... build model and optimizer, log hyperparameters ...
//   run_resume(&run, &params, &buffers, &opt);
//   if (benchmark)                          // throughput only, no target
//     run_benchmark(&run, "synthetic data", measure, &t, "images/s");
//   else                                    // the training run proper:
//     run_train(&run, &kTraining, &t, epoch_samples, epoch_steps);
//   ... free the model ...
//   run_close(&run);
//
// run_train is the one copy of what every training run does once its
// model is built, each part a function of the trainer's (its RunTraining,
// a constant table):
//
//   run_start(&run, samples, steps);        // init_stop, run_start: the clock
//   open_data(&t);                          // loader, tables on the device
//   while (run_next_epoch(&run)) {          // block_start, epoch_start
//     plan_epoch(&t, run.epoch);            // the epoch's order or batches
//     for (i = 0; i < steps; i++)
//       train_step(&t, run.epoch, i);       // its loss to run_add_loss; progress line
//     if (run_epoch_stop(&run, mean loss))  // epoch_stop; an eval is due
//       run_eval_stop(&run, evaluate(&t, more), more);  // epoch line, stop, checkpoint
//   }
//   close_data(&t);                         // e.g. the training loader's stats line
//   run_stop(&run);                         // run_stop success or aborted
//
// The trainer keeps what differs (what an epoch and an eval are); the order
// of the MLPerf events, the cadence and the stop live here once. The parts
// stay public for the tests and for a trainer whose run is not of this shape.
//
// What may come before run_start: MLPerf's clock starts at run_start, and
// reading the data set is timed work (the MLPerf training rules: run_start comes "before the
// data set is touched for training"). Before it a trainer only checks that
// the data is there and complete, from what describes it (an LMDB's record
// counts, a file's header against its size), so that a missing, truncated
// or unfinished data set fails at once without a run_start in the log; the
// records themselves (the loader, the tables a trainer copies to the
// device) are read after run_start. Building the model, the optimizer and
// reading a checkpoint to resume from are initialisation (init_start to
// init_stop) and come before it too; so do all the checks of run_check, so
// that a bad cadence or an unwritable checkpoint path is not found after
// the first epochs.
//
// The eval cadence: an eval after epoch e when (e + eval_offset) is a
// multiple of eval_every, or, when eval_epochs lists epochs (a schedule
// the rules fix, such as 40, 50, 55, ..., 80), after exactly those
// epochs; the epochs between two evals are a block
// (block_start / block_stop). The run stops after the first eval whose
// metric reaches target_accuracy on every rank (run_stop success) or after
// max_epochs (aborted). Evals come on the cadence only, never off it at
// max_epochs: a target first reached there would be a success the rules do
// not allow.
//
// Every trainer prints its lines on stdout, one format (an eval's line):
//   <benchmark>: epoch N: <metric> X (target Y)[, <more>], mean train loss Z; train T s (R samples/s), eval E s
//   resnet: epoch 5: top-1 0.9123 (target 0.9100), mean train loss 0.4321; train 41.2 s (1456 samples/s), eval 3.1 s
// (train: the epochs since the last eval; more: a trainer's further results,
// e.g. a second metric), and so does the live progress line of the steps,
// in progress.h's format over the whole run's steps:
//   train: step 1170/2340 (50%)  952.3 samples/s  loss 0.6812  eta 2m41s
// Errors and warnings go to stderr, and so does the effective config.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mllog.h"
#include "core/progress.h"
#include "device/device.h"
#include "train/amp.h"
#include "train/ckpt.h"
#include "train/dist.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

// Keys every trainer has, at fixed defaults; run_init declares them:
//   device, seed, data_dir (checked by run_data_dir), log_file, submission_org,
//   submission_division, submission_status, submission_platform, threads,
//   profile_steps (run_time_steps), print_config (the effective config on
//   stdout, then exit 0 before any data, device or log is touched)
extern const ConfigKey run_keys[];
extern const int run_key_count;

// What a trainer tells the lifecycle about its benchmark. The lifecycle's
// own keys (max_epochs, target_accuracy, eval_every, eval_offset,
// eval_epochs, checkpoint, resume) are declared by run_init with these
// defaults.
typedef struct RunSpec {
  const char *benchmark;   // the suite's name, MLPerf's submission_benchmark: "resnet"
  // The log's submission_benchmark where MLPerf's name would mislead (NULL:
  // benchmark): a fine-tune that shares its model's name with another MLPerf
  // benchmark logs a name of its own, so that no checker applies that
  // benchmark's rules to it.
  const char *logged_as;
  const char *metric;      // the eval's metric in the epoch line: "top-1"
  const char *max_epochs;  // default epoch limit
  const char *target;      // default target_accuracy (MLPerf's target)
  const char *eval_every;  // default eval cadence in epochs
  const ConfigKey *keys;   // the trainer's own keys
  int n_keys;
  // The trainer's keys a resumed run may change (how fast the input is read,
  // what a benchmark run times), NULL-terminated; the common keys that do not
  // shape the training (where things are, the log's labels, the epoch limit)
  // are added by the lifecycle. Every other key shapes the run: a resume with
  // another value is refused by name.
  const char *const *resume_may_change;
  // The trainer's keys that name a file rank 0 writes (a run's predictions),
  // NULL-terminated: run_check tries each path, so that a bad one fails
  // before the run, naming its flag, and a resumed run may change them. The
  // writer goes through a temporary name and a rename (file.h: atomic_file).
  const char *const *outputs;
} RunSpec;

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
// The latest loss, (1) fp32 on the device, read on the host (waits for the
// device): the progress line's and a benchmark's.
double loss_read(const Device *dev, const Tensor *loss);

#define RUN_OWN_KEYS 7
#define RUN_MAX_EPOCH_LIST 64  // the most epochs a list key holds (run_epoch_list)
#define RUN_MAX_IGNORED 64

typedef struct Run {
  RunSpec spec;
  Config cfg;
  Dist dist;
  Device dev;
  AmpConfig amp;       // the precision (--precision) and fp16's loss scaling
  LossScaler scaler;   // the run's loss scaler (amp.h): its scale, steps skipped
  MLLog log;
  int rank;
  // The cadence and the stop, from the config (run_init).
  int64_t max_epochs, eval_every, eval_offset;
  int64_t eval_epochs[RUN_MAX_EPOCH_LIST];  // run_check's, from --eval_epochs
  int n_eval_epochs;                        // 0: the eval_every cadence
  double target;
  const char *checkpoint;  // "" without --checkpoint
  // The loop: the current epoch, the first of its block, whether the target
  // was reached.
  int64_t first_epoch;  // 1, or the epoch after a resumed checkpoint's
  int64_t epoch, block_first;
  bool reached;
  int64_t epoch_samples, epoch_steps;  // run_start's: the epoch line's rate, the progress
  Progress progress;             // the steps of the whole run (run_progress)
  double epoch_start_s, eval_start_s, train_s, train_loss;
  LossMean epoch_loss;           // the epoch's steps' losses (run_add_loss)
  const Tensor *last_loss;       // the latest step's, for the progress line
  int64_t trained_epochs;        // since the last eval
  // The training state a checkpoint holds (run_resume).
  ParamSet *params, *buffers;
  Optimizer *opt;
  char run_config[CKPT_RUN_CONFIG_BYTES];
  int64_t run_start_ms, run_stop_ms;
  char log_path[1024];
  const char *benchmark_what;  // run_start_benchmark's; NULL in a training run
  ConfigKey keys[RUN_OWN_KEYS];  // the lifecycle's keys with the spec's defaults
  char target_help[96];
  const char *ignored[RUN_MAX_IGNORED];  // resume_may_change with the common keys
} Run;

// dist_init (MPI), the keys (run_keys, the lifecycle's, the precision's,
// the spec's), the flags (dies on bad ones), the device (the rank's GPU
// when it is CUDA), the precision and loss scaler (amp_setup), the log
// (rank 0); writes init_start, the submission keys and the seed, prints the
// effective config.
void run_init(Run *run, const RunSpec *spec, int *argc, char ***argv);
// The data_dir flag; a one-line error when it was not given.
const char *run_data_dir(const Run *run);
// A schedule-length key (a number of epochs) whose 0 means "until
// max_epochs" gets max_epochs' value now, so that the effective config and a
// checkpoint hold the schedule's length itself, and a resume may raise the
// epoch limit without stretching the schedule.
void run_resolve_epochs(Run *run, const char *key);
// A list key of epochs ("40,50"): whole epochs from 1, strictly
// ascending, at most max of them, into out; returns the count (0 for an
// empty value). Anything else is a one-line error naming the key.
int run_epoch_list(const Run *run, const char *key, int64_t *out, int max);
// The checks of the lifecycle's keys, before run_start: the eval cadence
// (or the eval_epochs list) against max_epochs, --resume with a
// --checkpoint, the checkpoint's and the spec's output paths writable (rank
// 0); and the snapshot of the config a checkpoint keeps (after the
// trainer's own changes to the config).
void run_check(Run *run);
// The training state checkpoints hold, with the run's loss scaler (buffers
// may be NULL: a model without untrained state); with --resume and an
// existing --checkpoint, read into it, the run continuing after the
// checkpoint's epoch (first_epoch). A
// checkpoint of a run with other settings is refused by name.
void run_resume(Run *run, ParamSet *params, ParamSet *buffers, Optimizer *opt);
// init_stop, then run_start: the clock of time-to-train starts here. From
// here a fatal error or a stop signal ends the log with run_stop aborted.
// epoch_samples, epoch_steps: the samples (over all ranks) and the steps of
// an epoch.
void run_start(Run *run, int64_t epoch_samples, int64_t epoch_steps);
// For a trainer whose epoch length follows from the data it reads after
// run_start (batches by token count): the epoch's samples and steps once
// known, for the progress line and the epoch line's rate.
void run_set_epoch_size(Run *run, int64_t epoch_samples, int64_t epoch_steps);
// The next epoch (run->epoch): false once the target was reached or after
// max_epochs; else logs block_start (when a block begins) and epoch_start.
bool run_next_epoch(Run *run);
// The progress line after a training step: run_progress_due says whether
// rank 0 prints one now (every PROGRESS_INTERVAL_S, 10 s by default), so
// that a trainer reads its loss from the device (a wait) only then;
// run_progress prints it, given step (1-based) and the samples done in the
// current epoch.
bool run_progress_due(const Run *run);
void run_progress(Run *run, int64_t step, int64_t samples, double loss);
// The end of the epoch's training (train_loss: its mean training loss):
// epoch_stop; whether an eval is due, and then block_stop and eval_start.
// An epoch limit off the cadence ends its block without an eval.
bool run_epoch_stop(Run *run, double train_loss);
// The end of the eval (metric: over every rank's share, the same on each):
// eval_accuracy and eval_stop, the epoch line (more: further results for
// it, such as "NDCG@10 0.3712", or NULL), the stop decision (the target
// reached on every rank), and the checkpoint (rank 0, with --checkpoint).
void run_eval_stop(Run *run, double metric, const char *more);
// run_stop with status success (the target reached) or aborted, the loss
// scaler's report, and the time-to-train line on stdout.
void run_stop(Run *run);
// A throughput benchmark (synthetic data, or --bench_steps with the real
// loader) is not a training run and must not look like a failed one: its log
// has init_stop, then benchmark_start (value: what is timed, e.g. "synthetic
// data") where a training run has run_start, and benchmark_stop with the
// throughput where it has run_stop. run_stop_benchmark prints
//   resnet: benchmark of synthetic data: 1234.5 images/s (not a training run: no target); log PATH
void run_start_benchmark(Run *run, const char *what);
void run_stop_benchmark(Run *run, double throughput, const char *unit);
// Closes the log and the device, frees the loss scaler and the config, then
// dist_finalize.
void run_close(Run *run);

// The global batch (over all ranks) split evenly over the ranks: this
// rank's share, or a one-line error naming --batch_size (`unit`: what a
// batch holds, "images").
int64_t run_local_batch(const Run *run, int64_t global_batch, const char *unit);

// The training run proper, from run_start to run_stop (the outline at the
// top), in the trainer's terms; each function gets the trainer's state.
typedef struct RunTraining {
  void (*open_data)(void *trainer);    // after run_start: reading the data is timed; NULL: none
  // Before an epoch's steps (NULL: none): its order or batches, and
  // run_set_epoch_size where they decide its size.
  void (*plan_epoch)(void *trainer, int64_t epoch);
  // Step i (0-based) of the epoch's epoch_steps: forward, backward, update,
  // the loss to run_add_loss; returns the samples it took over all ranks.
  int64_t (*train_step)(void *trainer, int64_t epoch, int64_t i);
  // The eval's metric over every rank's share (the same on each); `more`
  // ("" on entry, more_bytes) may take further results for the epoch line.
  double (*evaluate)(void *trainer, char *more, size_t more_bytes);
  void (*close_data)(void *trainer);   // before run_stop; NULL: none
} RunTraining;
// epoch_samples, epoch_steps: run_start's (plan_epoch may change them).
void run_train(Run *run, const RunTraining *training, void *trainer, int64_t epoch_samples,
               int64_t epoch_steps);
// A training step's loss, (1) fp32 on the device, into the epoch's mean
// training loss (summed on the device: the step does not wait for it); the
// progress line reads the latest.
void run_add_loss(Run *run, const Tensor *loss);
// A throughput benchmark in one call: run_start_benchmark(what), then
// measure(trainer) (the throughput, in `unit`), then run_stop_benchmark.
void run_benchmark(Run *run, const char *what, double (*measure)(void *trainer), void *trainer,
                   const char *unit);
// --profile_steps profiles a benchmark run's steps: an error naming it, and
// `give` (what makes a run a benchmark: "--bench_steps=N"), when this run
// is not one.
void run_check_profile(const Run *run, bool benchmark, const char *give);
// A benchmark's steps: `steps` timed calls of step(ctx, i), i = warmup..,
// after `warmup` untimed ones (i = 0..), then --profile_steps more (i going
// on) timed op by op, the table on rank 0's stdout (profile.h). Returns the
// timed steps' seconds.
double run_time_steps(Run *run, int64_t warmup, int64_t steps, void (*step)(void *ctx, int64_t i),
                      void *ctx);

// The end of a training step, after the backward: waits for the gradient
// all-reduce, unscales and checks the gradients (fp16: amp.h), and, unless
// they overflowed, clips them (OptConfig.max_grad_norm) and steps the
// optimizer with lr; each part is a profile region.
// Returns whether the optimizer stepped.
bool run_update(const Device *dev, Dist *dist, LossScaler *s, Optimizer *opt, ParamSet *ps,
                float lr);


#ifdef __cplusplus
}
#endif
