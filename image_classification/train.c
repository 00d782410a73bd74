// train.c: ResNet v1.5 on an ImageNet-layout LMDB data set to a top-1
// target, MLPerf style. Reads top to bottom as the procedure:
//   init: flags, device, ranks, model, optimizer, schedule, data
//   run:  blocks of epochs, each followed by an eval over the whole val set,
//         until top-1 >= target (run_stop success) or the epoch limit (aborted)
//
//   resnet --config=image_classification/configs/small.conf --data_dir=data/resnet/small
//   mpirun -np 8 resnet --config=image_classification/configs/full_8gpu.conf --data_dir=...
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify_data.h"
#include "core/check.h"
#include "core/config.h"
#include "core/progress.h"
#include "core/rng.h"
#include "data/lmdb_store.h"
#include "device/profile.h"
#include "models/resnet.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "train/amp.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/schedule.h"

static const ConfigKey kKeys[] = {
    // Model.
    {"block", CFG_STRING, "bottleneck", "residual block: bottleneck or basic", "bottleneck|basic"},
    {"stages", CFG_STRING, "3,4,6,3", "blocks per stage (ResNet-50: 3,4,6,3)", NULL},
    {"width", CFG_INT, "64", "channels of the first stage", "[1, 4096]"},
    {"image_size", CFG_INT, "224", "side of the training and eval crops", "[8, 4096]"},
    {"imagenet_stem", CFG_BOOL, "true", "7x7/2 conv + max pool; false: one 3x3 conv", NULL},
    {"num_classes", CFG_INT, "1000", "classes of the data set", "[2, inf)"},
    {"conv_init_scale", CFG_FLOAT, "2", "convolution init: variance scale / fan (TF's variance scaling)",
     "(0, inf)"},
    {"conv_init_fan", CFG_STRING, "out", "convolution init: the fan, in_c k k or out_c k k", "in|out"},
    {"conv_init_dist", CFG_STRING, "normal",
     "convolution init: a normal, or one truncated at 2 standard deviations (same variance)",
     "normal|truncated_normal"},
    {"zero_init_residual", CFG_BOOL, "true", "the last BN of each residual branch starts at gamma 0", NULL},
    // Data.
    {"resize_side", CFG_INT, "256", "eval: short side before the centre crop", "[8, 4096]"},
    {"crop", CFG_STRING, "random_resized",
     "train crop: torchvision's random_resized or TF's distorted_box (sample_distorted_bounding_box)",
     "random_resized|distorted_box"},
    {"crop_scale_min", CFG_FLOAT, "0.08", "train: smallest crop area, a fraction of the image's", "(0, 1]"},
    {"crop_scale_max", CFG_FLOAT, "1", "train: largest crop area, a fraction of the image's", "(0, 1]"},
    {"crop_ratio_min", CFG_FLOAT, "0.75", "train: smallest crop width / height", "(0, inf)"},
    {"crop_ratio_max", CFG_FLOAT, "1.3333333333333333", "train: largest crop width / height", "(0, inf)"},
    {"crop_attempts", CFG_INT, "10", "train: crop draws before the fallback", "[1, 1000]"},
    {"crop_min_covered", CFG_FLOAT, "0", "train: least fraction of the image a crop covers", "[0, 1]"},
    {"normalize", CFG_STRING, "mean_std",
     "input: (x/255 - mean) / std (torchvision's) or mean, x - the TF reference's pixel means",
     "mean_std|mean"},
    LOADER_LAST_BATCH_KEY,
    {"loader_threads", CFG_INT, "8", "decode and augment threads per rank", "[1, 256]"},
    {"synthetic", CFG_BOOL, "false", "random data on the device: throughput only, no eval", NULL},
    {"synthetic_steps", CFG_INT, "100", "timed steps of a synthetic run (after 10 warm-up)", "[1, inf)"},
    {"bench_steps", CFG_INT, "0",
     "throughput with the real loader: time this many training steps (after 10 warm-up), no eval", "[0, inf)"},
    // Optimisation.
    {"batch_size", CFG_INT, "256", "global batch (all ranks together)", "[1, inf)"},
    {"grad_accumulation", CFG_INT, "1",
     "micro-batches per step and rank: gradients summed over them (less memory; BN span shrinks)", "[1, inf)"},
    {"optimizer", CFG_STRING, "lars", "lars or sgd", "lars|sgd"},
    {"base_lr", CFG_FLOAT, "10.5", "peak learning rate", "(0, inf)"},
    {"end_lr", CFG_FLOAT, "0.0001", "learning rate at the end of the polynomial decay", "[0, inf)"},
    {"poly_power", CFG_FLOAT, "2", "power of the polynomial decay", "(0, inf)"},
    {"warmup_epochs", CFG_FLOAT, "2", "linear warmup", "[0, inf)"},
    {"decay_epochs", CFG_FLOAT, "0", "warmup + decay length in epochs; 0: max_epochs", "[0, inf)"},
    {"momentum", CFG_FLOAT, "0.9", "SGD/LARS momentum", "[0, 1)"},
    {"weight_decay", CFG_FLOAT, "5e-5", "L2 weight decay (not on biases and BN)", "[0, inf)"},
    {"lars_eta", CFG_FLOAT, "0.001", "LARS trust coefficient", "(0, inf)"},
    {"label_smoothing", CFG_FLOAT, "0.1", "cross-entropy label smoothing", "[0, 1)"},
};

// The benchmark for the lifecycle (run.h). A resumed run may change, besides
// the common keys, how fast the input is read and what a benchmark run times;
// every other key shapes the training (the schedule's length is decay_epochs,
// resolved at the start).
static const RunSpec kSpec = {
    .benchmark = "resnet", .metric = "top-1", .max_epochs = "41", .target = "0.759",
    .eval_every = "4", .keys = kKeys, .n_keys = (int)(sizeof kKeys / sizeof kKeys[0]),
    .resume_may_change = (const char *const[]){"loader_threads", "synthetic", "synthetic_steps",
                                                "bench_steps", NULL},
};

typedef struct Trainer {
  Run run;
  Resnet net;
  Optimizer opt;
  Schedule sched;
  int64_t global_batch, local_batch;
  int64_t micro_batches, micro_batch;  // local_batch = micro_batches * micro_batch
  int64_t train_samples, eval_samples;
  int64_t steps_per_epoch;
  float label_smoothing;
  Tensor loss;     // (1) fp32 on the device
  Tensor dlogits;  // (local_batch, classes)
  Tensor logits_host;  // (local_batch, classes) eval scores on the host
  Tensor images;       // (local_batch, S, S, 3) normalised input on the device, compute dtype
  ChannelAffine affine;
  char lmdb[1100];  // DATA_DIR/lmdb: the splits
  Loader *train;    // the training split, from the first epoch on
} Trainer;

static ResnetConfig model_config(const Config *cfg) {
  ResnetConfig m = resnet_config_50();
  const char *block = config_string(cfg, "block");
  m.block = strcmp(block, "basic") == 0 ? RESNET_BASIC : RESNET_BOTTLENECK;  // or bottleneck: config.c
  if (!resnet_parse_stages(&m, config_string(cfg, "stages")))
    die_input("--stages", "'%s' is not 1 to 4 comma-separated block counts", config_string(cfg, "stages"));
  m.width = (int)config_int(cfg, "width");
  m.image_size = (int)config_int(cfg, "image_size");
  m.stem_7x7 = config_bool(cfg, "imagenet_stem");
  m.num_classes = (int)config_int(cfg, "num_classes");
  m.zero_init_residual = config_bool(cfg, "zero_init_residual");
  m.conv_init = (ResnetConvInit){
      .scale = (float)config_float(cfg, "conv_init_scale"),
      .fan_in = strcmp(config_string(cfg, "conv_init_fan"), "in") == 0,  // or out: config.c
      .truncated = strcmp(config_string(cfg, "conv_init_dist"), "truncated_normal") == 0};
  return m;
}

static ClassifyAugment augment_config(const Trainer *t, bool train) {
  const Config *cfg = &t->run.cfg;
  ClassifyAugment a = classify_augment_imagenet(train, (uint64_t)config_int(cfg, "seed"));
  a.out_side = (int32_t)config_int(cfg, "image_size");
  a.resize_side = (int32_t)config_int(cfg, "resize_side");
  a.crop = (ClassifyCrop){
      .method = strcmp(config_string(cfg, "crop"), "distorted_box") == 0 ? CLASSIFY_CROP_DISTORTED_BOX
                                                                          : CLASSIFY_CROP_RANDOM_RESIZED,
      .scale_min = (float)config_float(cfg, "crop_scale_min"),
      .scale_max = (float)config_float(cfg, "crop_scale_max"),
      .ratio_min = (float)config_float(cfg, "crop_ratio_min"),
      .ratio_max = (float)config_float(cfg, "crop_ratio_max"),
      .attempts = (int)config_int(cfg, "crop_attempts"),
      .min_covered = (float)config_float(cfg, "crop_min_covered")};
  a.norm = strcmp(config_string(cfg, "normalize"), "mean") == 0 ? CLASSIFY_NORM_MEAN : CLASSIFY_NORM_MEAN_STD;
  a.float_output = false;  // bytes cross to the device; op_affine_u8 normalises there
  return a;
}

// The crop's ranges, before run_start.
static void check_crop(const Config *cfg) {
  if (config_float(cfg, "crop_scale_min") > config_float(cfg, "crop_scale_max"))
    die_input("--crop_scale_min", "%g is above --crop_scale_max=%g", config_float(cfg, "crop_scale_min"),
              config_float(cfg, "crop_scale_max"));
  if (config_float(cfg, "crop_ratio_min") > config_float(cfg, "crop_ratio_max"))
    die_input("--crop_ratio_min", "%g is above --crop_ratio_max=%g", config_float(cfg, "crop_ratio_min"),
              config_float(cfg, "crop_ratio_max"));
}

// A batch's images as network input: (n, S, S, 3) on the device, in the
// compute dtype.
static Tensor batch_images(Trainer *t, const LoaderBatch *batch) {
  const Device *dev = &t->run.dev;
  int64_t n = batch->count, side = t->net.cfg.image_size;
  Tensor bytes = TENSOR(batch->device[0], DT_U8, dev->kind, n, side, side, 3);
  Tensor images = TENSOR(t->images.data, t->net.cfg.dtype, dev->kind, n, side, side, 3);
  op_affine_u8(dev, &bytes, &t->affine, &images);
  return images;
}

static Loader *open_loader(Trainer *t, bool train, int64_t start_epoch) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/%s", t->lmdb, train ? "train" : "val");
  ClassifyLoaderConfig lc = {
      .lmdb_dir = dir, .augment = augment_config(t, train),
      .batch_size = train ? t->local_batch : t->micro_batch,  // eval fits the network's buffers
      .threads = (int)config_int(&t->run.cfg, "loader_threads"), .ring_batches = 4,
      .rank = t->run.dist.rank, .world = t->run.dist.size, .start_epoch = start_epoch, .dev = &t->run.dev,
      .num_classes = (int32_t)config_int(&t->run.cfg, "num_classes"),
      .keep_last = train && loader_keeps_last(&t->run.cfg),
  };
  return classify_loader_open(&lc, NULL);
}

// The training split's loader, from the run's first epoch on.
static void open_train_loader(void *trainer) {
  Trainer *t = trainer;
  t->train = open_loader(t, true, t->run.first_epoch);
}

static void setup_optimizer(Trainer *t) {
  const Config *cfg = &t->run.cfg;
  int kind = optim_kind_parse(config_string(cfg, "optimizer"));  // checked in main
  OptConfig oc = optim_defaults((OptKind)kind);
  oc.momentum = (float)config_float(cfg, "momentum");
  oc.weight_decay = (float)config_float(cfg, "weight_decay");
  oc.lars_eta = (float)config_float(cfg, "lars_eta");
  optim_init(&t->opt, &oc, &t->net.params);

  double warmup = config_float(cfg, "warmup_epochs"), decay = config_float(cfg, "decay_epochs");
  t->sched = (Schedule){
      .kind = SCHED_POLY, .base_lr = config_float(cfg, "base_lr"),
      .warmup_steps = (int64_t)llround(warmup * (double)t->steps_per_epoch),
      .steps_per_epoch = t->steps_per_epoch, .end_lr = config_float(cfg, "end_lr"),
      .power = config_float(cfg, "poly_power"),
      .decay_steps = (int64_t)llround((decay - warmup) * (double)t->steps_per_epoch),
  };
  schedule_check(&t->sched, "--warmup_epochs, --decay_epochs");
  optim_log(&oc, &t->run.log);
  schedule_log(&t->sched, (OptKind)kind, &t->run.log);
}

// One step on a batch already on the device (n of the step's global_count
// images over all ranks): forward, loss, backward (per micro-batch of up to
// micro_batch images, the gradients summing), all-reduce, update. Returns
// nothing; the loss (of the last micro-batch) stays on the device. The
// gradient of each micro-batch's mean loss is scaled by 1/micro_batches and
// its share of the step (loader_share: 1 in a full batch), so that the sum
// over micro-batches, averaged over the ranks by the all-reduce, is the
// mean over the step's images. The all-reduce starts during the last
// backward. Under fp16 the loss gradient is scaled too, the averaged
// gradients unscaled and checked, and a step whose gradients overflowed is
// skipped (amp.h).
static void train_step(Trainer *t, const Tensor *images, const Tensor *labels, int64_t global_count,
                       int64_t step) {
  const Device *dev = &t->run.dev;
  ParamSet *ps = &t->net.params;
  int64_t n = images->shape[0], k = t->micro_batches, size = t->micro_batch;
  int64_t parts = (n + size - 1) / size;  // k, but for a short last batch
  optim_grads_zero(dev, ps);
  for (int64_t m = 0; m < parts; m++) {
    int64_t rows = m < parts - 1 ? size : n - m * size;
    Tensor x = tensor_rows(images, m * size, rows), y = tensor_rows(labels, m * size, rows);
    const Tensor *logits = resnet_forward(&t->net, dev, &x, true);
    Tensor dlogits = t->dlogits;
    dlogits.shape[0] = rows;
    // The micro-batches add up and the ranks average: k x ranks parts.
    float share = (float)loader_share(rows, global_count, k * t->run.dist.size);
    op_softmax_xent(dev, logits, &y, t->label_smoothing, -1,
                    amp_loss_scale(&t->run.scaler) / (float)k * share, &t->loss, NULL, &dlogits);
    run_add_loss(&t->run, &t->loss);
    resnet_backward(&t->net, dev, &dlogits, m == parts - 1 ? dist_grad_hook(&t->run.dist) : (GradHook){0});
  }
  run_update(dev, &t->run.dist, &t->run.scaler, &t->opt, ps, (float)schedule_lr(&t->sched, step));
}

// Top-1 over the whole validation set, every rank a shard, counts summed.
static double evaluate(void *trainer, char *more, size_t more_bytes) {
  Trainer *t = trainer;
  (void)more, (void)more_bytes;  // top-1 alone
  const Device *dev = &t->run.dev;
  Loader *l = open_loader(t, false, 0);
  int64_t counts[2] = {0, 0};  // correct, seen
  int64_t classes = t->net.cfg.num_classes;
  for (int64_t b = 0; b < loader_batches_per_epoch(l); b++) {
    const LoaderBatch *batch = loader_next(l);
    int64_t n = batch->count;
    Tensor x = batch_images(t, batch);
    const Tensor *logits = resnet_forward(&t->net, dev, &x, false);
    device_sync(dev);
    device_copy(DEVICE_CPU, t->logits_host.data, dev->kind, logits->data, tensor_bytes(logits));
    const float *s = t->logits_host.data;
    const int32_t *labels = batch->host[1];
    for (int64_t i = 0; i < n; i++) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; c++)
        if (s[i * classes + c] > s[i * classes + best]) best = c;
      counts[0] += best == labels[i];
    }
    counts[1] += n;
  }
  loader_close(l);
  dist_sum_i64(&t->run.dist, counts, 2);
  if (counts[1] != t->eval_samples)
    DIE("eval saw %lld images of %lld", (long long)counts[1], (long long)t->eval_samples);
  return (double)counts[0] / (double)counts[1];
}

// Training step i of an epoch, on the training loader's next batch;
// returns the images it took over all ranks.
static int64_t train_batch(void *trainer, int64_t epoch, int64_t i) {
  Trainer *t = trainer;
  const LoaderBatch *batch = loader_next(t->train);
  // The loader's epochs are the trainer's (both count train_last_batch's steps).
  if (batch->epoch != epoch || batch->step != i)
    DIE("train_batch: the loader's step %lld of epoch %lld where the trainer is at step %lld of epoch %lld",
        (long long)batch->step, (long long)batch->epoch, (long long)i, (long long)epoch);
  Tensor x = batch_images(t, batch);
  Tensor y = TENSOR(batch->device[1], DT_I32, t->run.dev.kind, batch->count);
  // Not opt.step: under fp16 that omits the skipped steps, and the schedule
  // counts every step of the uninterrupted run.
  train_step(t, &x, &y, batch->global_count, (epoch - 1) * t->steps_per_epoch + i);
  return batch->global_count;
}

// Throughput with the real input pipeline (LMDB, decode, augmentation,
// copies) on the training split: bench_steps timed steps after 10 warm-up
// ones, wrapping around epochs; no eval, no target. Returns images/s.
static double bench_run(void *trainer) {
  Trainer *t = trainer;
  const Device *dev = &t->run.dev;
  int64_t steps = config_int(&t->run.cfg, "bench_steps");
  t->train = open_loader(t, true, 1);
  LoaderStats warm = {0};
  double start = 0;
  int64_t images = 0;  // timed, over all ranks (a kept short batch counts its own)
  for (int64_t s = 0; s < 10 + steps; s++) {
    if (s == 10) {
      device_sync(dev);
      warm = loader_stats(t->train);
      start = time_now_s();
    }
    int64_t took = train_batch(t, 1 + s / t->steps_per_epoch, s % t->steps_per_epoch);
    if (s >= 10) images += took;
  }
  device_sync(dev);
  double seconds = time_now_s() - start;
  LoaderStats st = loader_stats(t->train);
  if (t->run.dist.rank == 0)
    printf("real data: %lld steps of %lld images: %.1f images/s; trainer waited for the loader "
           "%.1f%% of the time (loss %.4f)\n",
           (long long)steps, (long long)t->global_batch, (double)images / seconds,
           100.0 * (st.wait_s - warm.wait_s) / seconds, loss_read(dev, &t->loss));
  loader_close(t->train);
  return (double)images / seconds;
}

// Step i of the synthetic run (run_time_steps).
typedef struct SyntheticStep {
  Trainer *t;
  const Tensor *x, *y;
} SyntheticStep;

static void synthetic_step(void *ctx, int64_t i) {
  SyntheticStep *s = ctx;
  train_step(s->t, s->x, s->y, s->t->global_batch, i);
}

// Throughput on random data already on the device: training steps, then
// as many eval forward passes of the same batch; no eval of the val split,
// no target. Returns the training images/s.
static double synthetic_run(void *trainer) {
  Trainer *t = trainer;
  const Device *dev = &t->run.dev;
  int64_t n = t->local_batch, side = t->net.cfg.image_size, classes = t->net.cfg.num_classes;
  int64_t pixels = n * side * side * 3;
  size_t x_bytes = (size_t)pixels * sizeof(float);
  float *x_host = xmalloc(x_bytes);
  int32_t *y_host = xmalloc((size_t)n * sizeof(int32_t));
  rng_fill_normal_cpu(x_host, pixels, 1, 0, 0, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; i++) y_host[i] = (int32_t)(rng_u32(1, 1, (uint64_t)i) % classes);
  void *x_dev = device_upload(dev->kind, x_host, x_bytes);
  void *y_dev = device_upload(dev->kind, y_host, (size_t)n * 4);
  free(x_host);
  free(y_host);
  // The input in the compute dtype, in the trainer's image buffer.
  Tensor x32 = TENSOR(x_dev, DT_F32, dev->kind, pixels);
  Tensor x_flat = TENSOR(t->images.data, t->net.cfg.dtype, dev->kind, pixels);
  op_cast(dev, &x32, &x_flat);
  Tensor x = TENSOR(t->images.data, t->net.cfg.dtype, dev->kind, n, side, side, 3);
  Tensor y = TENSOR(y_dev, DT_I32, dev->kind, n);
  int64_t steps = config_int(&t->run.cfg, "synthetic_steps");
  SyntheticStep step = {t, &x, &y};  // schedule steps 0.., the first 10 untimed
  double seconds = run_time_steps(&t->run, 10, steps, synthetic_step, &step);
  if (t->run.dist.rank == 0)
    printf("synthetic: %lld steps of %lld images: %.1f images/s (loss %.4f)\n", (long long)steps,
           (long long)t->global_batch, (double)(steps * t->global_batch) / seconds, loss_read(dev, &t->loss));
  // The eval forward (running batch-norm statistics) on the same batch.
  for (int64_t s = 0; s < 3; s++) resnet_forward(&t->net, dev, &x, false);
  device_sync(dev);
  double start = time_now_s();
  for (int64_t s = 0; s < steps; s++) resnet_forward(&t->net, dev, &x, false);
  device_sync(dev);
  double eval_seconds = time_now_s() - start;
  if (t->run.dist.rank == 0)
    printf("synthetic eval: %lld forward passes of %lld images: %.1f images/s\n", (long long)steps,
           (long long)t->local_batch, (double)(steps * t->local_batch) / eval_seconds);
  device_free(dev->kind, x_dev);
  device_free(dev->kind, y_dev);
  return (double)(steps * t->global_batch) / seconds;
}

static void close_train_loader(void *trainer) {
  Trainer *t = trainer;
  loader_close_report(t->train, t->run.rank == 0 ? stdout : NULL);
}

static const RunTraining kTraining = {.open_data = open_train_loader, .train_step = train_batch,
                                      .evaluate = evaluate, .close_data = close_train_loader};

int main(int argc, char **argv) {
  Trainer t = {0};
  run_init(&t.run, &kSpec, &argc, &argv);
  const Config *cfg = &t.run.cfg;
  const Dist *dist = &t.run.dist;
  MLLog *log = &t.run.log;
  bool synthetic = config_bool(cfg, "synthetic");
  int64_t bench_steps = config_int(cfg, "bench_steps");
  if (synthetic && bench_steps) die_input("--bench_steps", "a synthetic run has no loader to time");
  run_check_profile(&t.run, synthetic, "--synthetic");

  t.global_batch = config_int(cfg, "batch_size");
  t.local_batch = run_local_batch(&t.run, t.global_batch, "images");
  t.micro_batches = config_int(cfg, "grad_accumulation");
  if (t.micro_batches < 1 || t.local_batch % t.micro_batches)
    die_input("--grad_accumulation", "%lld does not split the %lld images per rank evenly",
              (long long)t.micro_batches, (long long)t.local_batch);
  t.micro_batch = t.local_batch / t.micro_batches;
  t.label_smoothing = (float)config_float(cfg, "label_smoothing");

  // The data set, checked before run_start (run.h): its splits' record counts.
  if (synthetic) {
    t.train_samples = t.eval_samples = t.global_batch;
  } else {
    snprintf(t.lmdb, sizeof t.lmdb, "%s/lmdb", run_data_dir(&t.run));
    t.train_samples = lmdb_split_count(t.lmdb, "train");
    t.eval_samples = lmdb_split_count(t.lmdb, "val");
  }
  t.steps_per_epoch = loader_train_steps(cfg, t.train_samples, dist->size, t.global_batch, "images");
  check_crop(cfg);

  ResnetConfig model = model_config(cfg);
  if (config_int(cfg, "resize_side") < model.image_size)
    die_input("--resize_side", "%lld is smaller than the %d-pixel eval crop (--image_size)",
              (long long)config_int(cfg, "resize_side"), model.image_size);
  run_resolve_epochs(&t.run, "decay_epochs");
  run_check(&t.run);
  model.dtype = amp_compute_dtype(t.run.amp.precision);
  int opt_kind = optim_kind_parse(config_string(cfg, "optimizer"));  // lars or sgd: config.c
  resnet_init(&t.net, &model, t.micro_batch, optim_state_count((OptKind)opt_kind), t.run.dev.kind,
              (uint64_t)config_int(cfg, "seed"));
  dist_attach(&t.run.dist, &t.run.dev, &t.net.params, DIST_BUCKET_BYTES);
  dist_broadcast_params(&t.run.dist);
  int64_t classes = model.num_classes;
  t.loss = TENSOR(device_alloc(t.run.dev.kind, sizeof(float)), DT_F32, t.run.dev.kind, 1);
  t.dlogits = TENSOR(device_alloc(t.run.dev.kind, (size_t)(t.micro_batch * classes) * sizeof(float)),
                     DT_F32, t.run.dev.kind, t.micro_batch, classes);
  t.logits_host = TENSOR(xmalloc((size_t)(t.micro_batch * classes) * sizeof(float)), DT_F32,
                         DEVICE_CPU, t.micro_batch, classes);
  int64_t side = model.image_size;
  t.images = TENSOR(device_alloc(t.run.dev.kind,
                                 (size_t)(t.local_batch * side * side * 3) * dtype_size(model.dtype)),
                    model.dtype, t.run.dev.kind, t.local_batch, side, side, 3);
  {
    ClassifyAugment a = augment_config(&t, false);  // the loader's normalisation, applied on the device
    t.affine = classify_input_affine(&a);
  }

  MLLOG_POINT(log, "global_batch_size", mlv_int(t.global_batch));
  MLLOG_POINT(log, "gradient_accumulation_steps", mlv_int(t.micro_batches));
  MLLOG_POINT(log, "model_bn_span", mlv_int(t.micro_batch));
  MLLOG_POINT(log, "train_samples", mlv_int(t.train_samples));
  MLLOG_POINT(log, "eval_samples", mlv_int(t.eval_samples));
  setup_optimizer(&t);
  run_resume(&t.run, &t.net.params, &t.net.buffers, &t.opt);
  if (dist->rank == 0)
    printf("resnet: %lld parameters, %s, %d rank(s), %lld images per rank per step in %lld micro-batch(es), %lld steps per epoch\n",
           (long long)paramset_count_params(&t.net.params), amp_precision_name(t.run.amp.precision),
           dist->size, (long long)t.local_batch, (long long)t.micro_batches,
           (long long)t.steps_per_epoch);

  if (synthetic)
    run_benchmark(&t.run, "synthetic data", synthetic_run, &t, "images/s");
  else if (bench_steps)
    run_benchmark(&t.run, "the real input pipeline", bench_run, &t, "images/s");
  else
    run_train(&t.run, &kTraining, &t,
              loader_keeps_last(cfg) ? t.train_samples : t.steps_per_epoch * t.global_batch,
              t.steps_per_epoch);

  device_free(t.loss.device, t.loss.data);
  device_free(t.dlogits.device, t.dlogits.data);
  free(t.logits_host.data);
  device_free(t.images.device, t.images.data);
  optim_free(&t.opt);
  dist_detach(&t.run.dist);
  resnet_free(&t.net);
  run_close(&t.run);
  return 0;
}
