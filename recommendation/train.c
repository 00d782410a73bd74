// train.c: NCF (NeuMF) on MovieLens to an HR@10 target, MLPerf style.
//   ncf --config=recommendation/configs/small.conf --data_dir=data/ncf/small
//
// Each epoch: n_train positives plus train_negatives fresh negatives each,
// in a fresh order (ncf_batch.h), in global batches of batch_size; BCE with
// logits; Adam at a constant learning rate. After each epoch, HR@10 over
// every user's held-out positive and its test negatives (ncf_metric.h); the
// run stops at target_accuracy (run_stop success) or after max_epochs
// (aborted), on the lifecycle every trainer shares (train/run.h; its eval
// cadence defaults to every epoch here). On CUDA every part of a step -
// sampling, lookups, MLP, loss, optimizer - runs on the GPU and the host
// only launches. With --bench_steps=N it times N steps instead, a benchmark
// run (run.h: benchmark_start / benchmark_stop, no eval and no target).
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/check.h"
#include "core/config.h"
#include "core/progress.h"
#include "device/profile.h"
#include "ncf_data.h"
#include "ncf_metric.h"
#include "ncf_model.h"
#include "train/amp.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/schedule.h"

#define NCF_TOPK 10  // MLPerf's HR@10
#define NCF_BENCH_WARMUP 5  // untimed steps before a bench_steps measurement

static const ConfigKey NCF_KEYS[] = {
    {"batch_size", CFG_INT, "2048", "global batch: (user, item) pairs per step", "[1, 1073741824]"},
    {"learning_rate", CFG_FLOAT, "0.0005", "Adam learning rate (constant)", "(0, inf)"},
    OPTIM_ADAM_KEYS("0.999", "1e-8"),
    {"mf_dim", CFG_INT, "64", "GMF embedding width", "[1, 65536]"},
    {"mlp_layers", CFG_STRING, "256,256,128,64",
     "MLP widths; the first is the concatenated user+item embedding width", NULL},
    {"train_negatives", CFG_INT, "4", "negatives per training positive, resampled each epoch",
     "[1, 1000]"},
    {"grad_accumulation", CFG_INT, "1",
     "micro-batches per step and rank, gradients summed over them: activations for a "
     "micro-batch's rows only (less memory)", "[1, inf)"},
    {"eval_users", CFG_INT, "1024", "users scored per eval forward pass (at most a rank's users)",
     "[1, inf)"},
    {"bench_steps", CFG_INT, "0",
     "throughput only: time this many training steps (after 5 warm-up), no eval or target", "[0, inf)"},
    {"draw_test_negatives", CFG_BOOL, "false",
     "draw the test negatives again after run_start, from ncf.bin's seed (the same ones), so that "
     "their drawing is timed as in the v0.5 reference (its convert.py starts the clock first)", NULL},
};

typedef struct NcfTrainer {
  Run run;
  MlFileHeader head;  // ncf.bin's counts, checked before run_start
  int64_t epoch_samples;  // n_train positives with train_negatives each
  NcfData data;       // the data set on the device, read after run_start
  NcfModel model;
  Optimizer opt;
  int64_t batch;
  int64_t micro_batches;  // per step and rank (grad_accumulation)
  int64_t max_micro_rows;  // rows of the largest micro-batch a step has
  int64_t eval_users;
  float lr;
  double *eval_acc;  // (2) device scratch of the CUDA metric; NULL on CPU
} NcfTrainer;

// The benchmark for the lifecycle (run.h). A resumed run may change, besides
// the common keys, the eval's step of users and what a benchmark run times.
static const RunSpec NCF_SPEC = {
    .benchmark = "ncf", .metric = "HR@10", .max_epochs = "20", .target = "0.635",
    .eval_every = "1", .keys = NCF_KEYS, .n_keys = (int)(sizeof NCF_KEYS / sizeof NCF_KEYS[0]),
    .resume_may_change = (const char *const[]){"eval_users", "bench_steps", NULL},
};

// The optimizer from the config, logged under the checker's keys.
static OptConfig ncf_optimizer_config(const Config *cfg, MLLog *log) {
  OptConfig oc = optim_adam_config(cfg, OPT_ADAM);
  optim_log(&oc, log);
  Schedule sched = {.kind = SCHED_CONSTANT, .base_lr = config_float(cfg, "learning_rate")};
  schedule_check(&sched, "--learning_rate");
  schedule_log(&sched, OPT_ADAM, log);
  return oc;
}

// Limits eval_users to this rank's share of the users (a larger pass would
// only allocate more) and returns the rows of one eval pass: each user's
// positive and test negatives. A GEMM takes them as an int.
static int64_t ncf_plan_eval(NcfTrainer *r) {
  int64_t users = (r->head.n_users + r->run.dist.size - 1) / r->run.dist.size;
  if (r->eval_users > users) r->eval_users = users;
  int64_t rows = r->eval_users * (1 + r->head.n_neg);
  if (rows > INT32_MAX)
    die_input("--eval_users", "%lld users of %lld candidates each are %lld rows in one pass, "
              "more than 2^31 - 1", (long long)r->eval_users, (long long)(1 + r->head.n_neg),
              (long long)rows);
  return rows;
}

// Builds the model and optimizer from ncf.bin's counts (before run_start:
// the data itself is read after it, by ncf_data_open).
static void ncf_setup(NcfTrainer *r) {
  const Config *cfg = &r->run.cfg;
  OptConfig oc = ncf_optimizer_config(cfg, &r->run.log);
  DeviceKind kind = r->run.dev.kind;
  const MlFileHeader *h = &r->head;
  r->epoch_samples = ncf_epoch_samples(
      &(NcfTrainView){.n_train = h->n_train, .n_neg = config_int(cfg, "train_negatives")});
  MLLOG_POINT(&r->run.log, "train_samples", mlv_int(r->epoch_samples));
  MLLOG_POINT(&r->run.log, "eval_samples", mlv_int(h->n_users * (1 + h->n_neg)));

  NcfShape shape = {.n_users = h->n_users, .n_items = h->n_items,
                    .mf_dim = config_int(cfg, "mf_dim"),
                    .dtype = amp_compute_dtype(r->run.amp.precision)};
  ncf_parse_layers("--mlp_layers", config_string(cfg, "mlp_layers"), &shape);
  // A step has at most a batch of rows, and no more than the epoch has, in
  // micro_batches pieces; the activations are sized for the largest piece or
  // an eval pass, whichever is larger.
  int64_t eval_rows = ncf_plan_eval(r);
  int64_t rows = r->batch < r->epoch_samples ? r->batch : r->epoch_samples;
  int64_t rank_rows = (rows + r->run.dist.size - 1) / r->run.dist.size;
  r->max_micro_rows = (rank_rows + r->micro_batches - 1) / r->micro_batches;
  ncf_model_init(&r->model, &shape, optim_state_count(OPT_ADAM),
                 r->max_micro_rows > eval_rows ? r->max_micro_rows : eval_rows,
                 (uint64_t)config_int(cfg, "seed"), kind);
  optim_init(&r->opt, &oc, &r->model.ps);
  dist_attach(&r->run.dist, &r->run.dev, &r->model.ps, DIST_BUCKET_BYTES);
  dist_broadcast_params(&r->run.dist);
  r->eval_acc = kind == DEVICE_CUDA ? device_alloc(kind, 2 * sizeof(double)) : NULL;
  if (r->run.rank == 0)
    printf("ncf: %lld users, %lld items, %lld training positives; %lld parameters; "
           "%lld samples per epoch in batches of %lld; %s\n",
           (long long)h->n_users, (long long)h->n_items, (long long)h->n_train,
           (long long)paramset_count_params(&r->model.ps), (long long)r->epoch_samples,
           (long long)r->batch, amp_precision_name(r->run.amp.precision));
}

// The data set onto the device (after run_start: this reads it).
static void ncf_open_data(void *trainer) {
  NcfTrainer *r = trainer;
  ncf_data_open(&r->data, run_data_dir(&r->run), config_int(&r->run.cfg, "train_negatives"),
                (uint64_t)config_int(&r->run.cfg, "seed"), r->run.dev.kind);
  if (!config_bool(&r->run.cfg, "draw_test_negatives")) return;
  double seconds = ncf_data_draw_test_negs(&r->data);
  if (r->run.rank == 0)
    printf("ncf: test negatives drawn after run_start: %lld users x %lld in %.2f s\n",
           (long long)r->data.n_users, (long long)r->data.n_test_neg, seconds);
}

// This rank's share [*first, *first + *rows) of global batch `step`: the
// batch's samples split evenly over the ranks (the last, partial batch too,
// to one sample). Returns the batch's samples over all ranks.
static int64_t ncf_rank_slice(const NcfTrainer *r, int64_t n, int64_t step, int64_t *first,
                              int64_t *rows) {
  int64_t s0 = step * r->batch, global = n - s0 < r->batch ? n - s0 : r->batch;
  int64_t lo = global * r->run.dist.rank / r->run.dist.size;
  int64_t hi = global * (r->run.dist.rank + 1) / r->run.dist.size;
  *first = s0 + lo;
  *rows = hi - lo;
  return global;
}

// Global batch `step` of `epoch`: sampling, forward, backward, all-reduce,
// Adam (skipped when fp16 gradients overflowed: amp.h). This rank's rows go
// in micro_batches pieces of max_micro_rows (the last one shorter), each
// sampled, run forward and backward in turn, the gradients added up, each
// piece's scaled by its share of the rows, so their sum is the batch mean's.
// The all-reduce starts during the last piece's backward. Returns the
// batch's samples over all ranks.
static int64_t ncf_train_step(void *trainer, int64_t epoch, int64_t step) {
  NcfTrainer *r = trainer;
  const NcfActs *a = &r->model.a;
  int64_t first, rows;
  int64_t global = ncf_rank_slice(r, ncf_epoch_samples(&r->data.train), step, &first, &rows);
  for (int64_t done = 0; done < rows; done += r->max_micro_rows) {
    int64_t piece = rows - done < r->max_micro_rows ? rows - done : r->max_micro_rows;
    bool last = done + piece == rows;
    ncf_train_batch(&r->run.dev, &r->data.train, epoch, first + done, piece, a->users.data,
                    a->items.data, a->labels.data);
    ncf_model_forward(&r->model, &r->run.dev, piece);
    ncf_model_backward(&r->model, &r->run.dev, piece,
                       amp_loss_scale(&r->run.scaler) * (float)((double)piece / (double)rows), done > 0,
                       last ? dist_grad_hook(&r->run.dist) : (GradHook){0});
    run_add_loss(&r->run, &a->loss);
  }
  run_update(&r->run.dev, &r->run.dist, &r->run.scaler, &r->opt, &r->model.ps, r->lr);
  return global;
}

// Step i of a bench run (timed, then profiled): epoch 1's full batches from
// `first` on, wrapping around.
typedef struct NcfBenchStep {
  NcfTrainer *r;
  int64_t full;
} NcfBenchStep;

static void ncf_bench_step(void *ctx, int64_t i) {
  NcfBenchStep *s = ctx;
  ncf_train_step(s->r, 1, i % s->full);
}

// Throughput only: the data set read, then bench_steps timed training steps
// of epoch 1's full batches (wrapping around the epoch) after
// NCF_BENCH_WARMUP untimed ones; no eval. Returns the samples per second.
static double ncf_bench(void *trainer) {
  NcfTrainer *r = trainer;
  int64_t steps = config_int(&r->run.cfg, "bench_steps");
  ncf_open_data(r);
  int64_t n = ncf_epoch_samples(&r->data.train), full = n / r->batch;
  if (full < 1)
    die_input("--batch_size", "%lld is larger than an epoch (%lld samples); a bench run times "
              "full batches", (long long)r->batch, (long long)n);
  NcfBenchStep bench = {r, full};
  double seconds = run_time_steps(&r->run, NCF_BENCH_WARMUP, steps, ncf_bench_step, &bench);
  double samples_per_s = (double)(steps * r->batch) / seconds;
  if (r->run.rank == 0)
    printf("ncf: bench: %lld steps of %lld samples: %.3f ms/step, %.0f samples/s (loss %.4f)\n",
           (long long)steps, (long long)r->batch, 1e3 * seconds / (double)steps, samples_per_s,
           loss_read(&r->run.dev, &r->model.a.loss));
  return samples_per_s;
}

// HR@10 over all users, and "NDCG@10 X" in more: each rank scores its slice
// of them, eval_users at a time, and the sums are added over the ranks.
static double ncf_evaluate(void *trainer, char *more, size_t more_bytes) {
  NcfTrainer *r = trainer;
  const NcfActs *a = &r->model.a;
  const NcfData *d = &r->data;
  NcfMetricSums sums = {0};
  int64_t lo = d->n_users * r->run.dist.rank / r->run.dist.size;
  int64_t hi = d->n_users * (r->run.dist.rank + 1) / r->run.dist.size;
  for (int64_t u0 = lo; u0 < hi; u0 += r->eval_users) {
    int64_t n = hi - u0 < r->eval_users ? hi - u0 : r->eval_users;
    ncf_eval_batch(&r->run.dev, d->test_items, d->test_negs, d->n_test_neg, u0, n, a->users.data,
                   a->items.data);
    ncf_model_forward(&r->model, &r->run.dev, n * (1 + d->n_test_neg));
    ncf_metric_add(&r->run.dev, a->logits.data, d->test_negs + u0 * d->n_test_neg, n,
                   d->n_test_neg, NCF_TOPK, r->eval_acc, &sums);
  }
  dist_sum_f64(&r->run.dist, &sums.hits, 3);
  snprintf(more, more_bytes, "NDCG@%d %.4f", NCF_TOPK, ncf_metric_ndcg(&sums));
  return ncf_metric_hr(&sums);
}

// The trainer's own flags, checked.
static void ncf_read_flags(NcfTrainer *r) {
  const Config *cfg = &r->run.cfg;
  r->batch = config_int(cfg, "batch_size");
  if (r->batch < r->run.dist.size)
    die_input("--batch_size", "%lld is smaller than the %d ranks", (long long)r->batch,
              r->run.dist.size);
  r->micro_batches = config_int(cfg, "grad_accumulation");
  r->eval_users = config_int(cfg, "eval_users");
  run_check_profile(&r->run, config_int(cfg, "bench_steps") > 0, "--bench_steps=N");
  r->lr = (float)config_float(cfg, "learning_rate");
}

static const RunTraining kNcfTraining = {
    .open_data = ncf_open_data, .train_step = ncf_train_step, .evaluate = ncf_evaluate};

int main(int argc, char **argv) {
  NcfTrainer r = {0};
  run_init(&r.run, &NCF_SPEC, &argc, &argv);
  ncf_read_flags(&r);
  // The data set, checked before run_start (run.h): ncf.bin's header.
  r.head = ncf_data_check(run_data_dir(&r.run));
  run_check(&r.run);
  MLLOG_POINT(&r.run.log, "global_batch_size", mlv_int(r.batch));
  MLLOG_POINT(&r.run.log, "gradient_accumulation_steps", mlv_int(r.micro_batches));
  ncf_setup(&r);
  run_resume(&r.run, &r.model.ps, NULL, &r.opt);

  if (config_int(&r.run.cfg, "bench_steps") > 0)
    run_benchmark(&r.run, "training steps on the data set", ncf_bench, &r, "samples/s");
  else
    run_train(&r.run, &kNcfTraining, &r, r.epoch_samples, (r.epoch_samples + r.batch - 1) / r.batch);

  if (r.eval_acc) device_free(r.run.dev.kind, r.eval_acc);
  optim_free(&r.opt);
  ncf_model_free(&r.model);
  ncf_data_close(&r.data);
  run_close(&r.run);
  return 0;
}
