// The loader: order and coverage per epoch, identical batches whatever the
// thread count, short last batches, shutdown mid-epoch, wait counters; and
// the classification pipeline over a small LMDB of generated images.
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/config.h"
#include "core/rng.h"
#include "data/augment.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/loader.h"
#include "data/record.h"
#include "image_classification/classify_data.h"
#include "ops/elementwise.h"
#include "tests/harness/test.h"

// ---------------------------------------------------------------- generic

enum { kPayload = 16 };

typedef struct SynthCtx {
  uint64_t seed;
  int sleep_us;  // per sample: a slow producer
  atomic_int inits, frees, ctx_frees;
} SynthCtx;

typedef struct SynthSample {
  int64_t epoch, record;
} SynthSample;

static void sleep_us(int us) {
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void *synth_init(void *ctx) {
  SynthCtx *c = ctx;
  atomic_fetch_add(&c->inits, 1);
  return malloc(1);
}

static void synth_free(void *ctx, void *state) {
  SynthCtx *c = ctx;
  atomic_fetch_add(&c->frees, 1);
  free(state);
}

static void synth_ctx_free(void *ctx) {
  SynthCtx *c = ctx;
  atomic_fetch_add(&c->ctx_frees, 1);
}

// Field 0: which sample this is; field 1: bytes that depend on (epoch, record).
static void synth_sample(void *ctx, void *state, int64_t epoch, int64_t record, void *const *slots) {
  SynthCtx *c = ctx;
  (void)state;
  if (c->sleep_us) sleep_us(c->sleep_us);
  SynthSample s = {epoch, record};
  memcpy(slots[0], &s, sizeof s);
  Rng rng = augment_sample_rng(c->seed, epoch, record);
  uint8_t *bytes = slots[1];
  for (int i = 0; i < kPayload; i++) bytes[i] = (uint8_t)rng_next_u32(&rng);
}

static LoaderConfig synth_config(SynthCtx *c, int64_t count, int64_t batch, int threads,
                                 bool train) {
  return (LoaderConfig){
      .batch_size = batch, .threads = threads, .ring_batches = 3, .drop_last = train,
      .field_count = 2, .sample_bytes = {sizeof(SynthSample), kPayload},
      .sampler = {.count = count, .seed = c->seed, .rank = 0, .world = 1, .shuffle = train},
      .sample = synth_sample, .ctx = c, .thread_init = synth_init, .thread_free = synth_free,
      .ctx_free = synth_ctx_free};
}

static void eval_every_record_once_in_order(void) {
  enum { kCount = 50, kBatch = 8 };
  SynthCtx c = {.seed = 3};
  LoaderConfig cfg = synth_config(&c, kCount, kBatch, 3, false);
  Loader *l = loader_open(&cfg);
  CHECK_EQ_INT(loader_batches_per_epoch(l), 7);
  for (int64_t epoch = 0; epoch < 2; epoch++) {
    int64_t next = 0;
    for (int64_t step = 0; step < 7; step++) {
      const LoaderBatch *b = loader_next(l);
      CHECK_EQ_INT(b->epoch, epoch);
      CHECK_EQ_INT(b->step, step);
      CHECK_EQ_INT(b->count, step < 6 ? kBatch : kCount - 6 * kBatch);
      CHECK_EQ_INT(b->last_in_epoch, step == 6);
      CHECK(b->device[0] == b->host[0]);
      const SynthSample *s = b->host[0];
      for (int64_t j = 0; j < b->count; j++, next++)
        CHECK_MSG(s[j].record == next && s[j].epoch == epoch, "epoch %lld step %lld sample %lld: "
                  "record %lld of epoch %lld", (long long)epoch, (long long)step, (long long)j,
                  (long long)s[j].record, (long long)s[j].epoch);
    }
    CHECK_EQ_INT(next, kCount);
  }
  loader_close(l);
  CHECK_EQ_INT(atomic_load(&c.inits), 3);
  CHECK_EQ_INT(atomic_load(&c.frees), 3);
  CHECK_EQ_INT(atomic_load(&c.ctx_frees), 1);
}

// Reads `batches` batches, appending both fields of every sample to out.
static void read_stream(Loader *l, int batches, int64_t batch_size, uint8_t *out) {
  size_t per = sizeof(SynthSample) + kPayload;
  for (int k = 0; k < batches; k++) {
    const LoaderBatch *b = loader_next(l);
    for (int64_t j = 0; j < b->count; j++) {
      uint8_t *dst = out + ((size_t)k * batch_size + j) * per;
      memcpy(dst, (uint8_t *)b->host[0] + j * sizeof(SynthSample), sizeof(SynthSample));
      memcpy(dst + sizeof(SynthSample), (uint8_t *)b->host[1] + j * kPayload, kPayload);
    }
  }
}

static void train_follows_sampler_across_epochs(void) {
  enum { kCount = 101, kBatch = 10, kEpochs = 3 };
  SynthCtx c = {.seed = 11};
  LoaderConfig cfg = synth_config(&c, kCount, kBatch, 2, true);
  cfg.start_epoch = 4;  // as after a resume
  Loader *l = loader_open(&cfg);
  CHECK_EQ_INT(loader_batches_per_epoch(l), 10);  // the short batch is dropped
  for (int64_t epoch = 4; epoch < 4 + kEpochs; epoch++) {
    uint32_t order[kCount];
    sampler_epoch_order(&cfg.sampler, epoch, order);
    int mismatched = 0;
    for (int step = 0; step < 10; step++) {
      const LoaderBatch *b = loader_next(l);
      CHECK(b->epoch == epoch && b->step == step && b->count == kBatch);
      const SynthSample *s = b->host[0];
      for (int j = 0; j < kBatch; j++)
        mismatched += s[j].epoch != epoch || s[j].record != order[step * kBatch + j];
    }
    CHECK_EQ_INT(mismatched, 0);
  }
  loader_close(l);
}

static void same_batches_whatever_the_threads(void) {
  enum { kCount = 300, kBatch = 16, kBatches = 40 };
  size_t bytes = (size_t)kBatches * kBatch * (sizeof(SynthSample) + kPayload);
  uint8_t *one = calloc(1, bytes), *many = calloc(1, bytes);
  SynthCtx c1 = {.seed = 99}, c5 = {.seed = 99};
  LoaderConfig cfg = synth_config(&c1, kCount, kBatch, 1, true);
  Loader *l = loader_open(&cfg);
  read_stream(l, kBatches, kBatch, one);
  loader_close(l);
  cfg = synth_config(&c5, kCount, kBatch, 5, true);
  l = loader_open(&cfg);
  read_stream(l, kBatches, kBatch, many);
  loader_close(l);
  CHECK(memcmp(one, many, bytes) == 0);
  free(one);
  free(many);
}

static void close_mid_epoch_and_wait_counters(void) {
  // A slow producer: the trainer waits on every batch.
  SynthCtx slow = {.seed = 1, .sleep_us = 2000};
  LoaderConfig cfg = synth_config(&slow, 1000, 4, 2, true);
  Loader *l = loader_open(&cfg);
  for (int k = 0; k < 5; k++) loader_next(l);
  LoaderStats st = loader_stats(l);
  CHECK_EQ_INT(st.batches, 5);
  // 4 samples of 2 ms on 2 threads: about 4 ms a batch.
  CHECK_MSG(st.wait_s > 0.010, "waited %.4f s for 5 slow batches", st.wait_s);
  CHECK_MSG(st.stalls >= 4, "%lld stalls", (long long)st.stalls);
  loader_close(l);  // workers blocked on a full ring and mid-sample both stop
  CHECK_EQ_INT(atomic_load(&slow.frees), 2);
  // A slow trainer: after the first batch the ring is always full. A batch
  // takes microseconds; 20 ms between calls leaves a loaded machine's
  // scheduler ample time to run the workers.
  SynthCtx fast = {.seed = 1};
  cfg = synth_config(&fast, 1000, 4, 2, true);
  l = loader_open(&cfg);
  for (int k = 0; k < 10; k++) {
    loader_next(l);
    sleep_us(20000);
  }
  st = loader_stats(l);
  CHECK_MSG(st.stalls <= 1, "%lld stalls with a slow trainer", (long long)st.stalls);
  CHECK(st.first_wait_s <= st.wait_s);
  loader_close(l);
}

// Each record's count over every rank's shard of an epoch, in seen[].
static void count_shards(Sampler s, int64_t epoch, int *seen) {
  uint32_t order[64];
  memset(seen, 0, (size_t)s.count * sizeof *seen);
  for (s.rank = 0; s.rank < s.world; s.rank++) {
    int64_t n = sampler_shard_count(&s);
    sampler_epoch_order(&s, epoch, order);
    for (int64_t k = 0; k < n; k++) seen[order[k]]++;
  }
}

// With keep_rest the ranks together take every record once an epoch, for
// counts that the ranks (and their batches) divide and that they do not;
// without it, count % world records rest.
static void sampler_keep_rest_every_record_once(void) {
  const int64_t counts[] = {48, 50, 53};
  int seen[64];
  for (int c = 0; c < 3; c++)
    for (int world = 1; world <= 2; world++)
      for (int keep = 0; keep <= 1; keep++) {
        Sampler s = {.count = counts[c], .seed = 7, .world = world, .shuffle = true, .keep_rest = keep};
        for (int64_t epoch = 1; epoch <= 2; epoch++) {
          count_shards(s, epoch, seen);
          int once = 0, none = 0;
          for (int64_t r = 0; r < s.count; r++) {
            once += seen[r] == 1;
            none += seen[r] == 0;
          }
          int64_t rest = keep ? 0 : s.count % world;
          CHECK_MSG(once == s.count - rest && none == rest, "count %lld, %d ranks, keep %d: %d "
                    "records once, %d never", (long long)s.count, world, keep, once, none);
        }
      }
}

// Every rank takes sampler_epoch_steps steps (batches of its shard); keeping
// the rest with fewer records left than ranks is refused.
static void sampler_epoch_steps_agree_over_ranks(void) {
  CHECK_EQ_INT(sampler_epoch_steps(53, 2, 8, false), 3);
  CHECK_EQ_INT(sampler_epoch_steps(53, 2, 8, true), 4);   // 5 left: 3 + 2
  CHECK_EQ_INT(sampler_epoch_steps(48, 2, 8, true), 3);   // none left
  CHECK_EQ_INT(sampler_epoch_steps(49, 2, 8, true), -1);  // 1 left for 2 ranks
  CHECK_EQ_INT(sampler_epoch_steps(49, 1, 8, true), 7);
  for (int64_t count = 20; count < 60; count++)
    for (int world = 1; world <= 3; world++) {
      int64_t steps = sampler_epoch_steps(count, world, 4, true);
      for (int rank = 0; rank < world && steps > 0; rank++) {
        Sampler s = {.count = count, .rank = rank, .world = world, .shuffle = true, .keep_rest = true};
        CHECK_EQ_INT((sampler_shard_count(&s) + 3) / 4, steps);
      }
    }
}

// A training loader that keeps the last batch, on each of two ranks: both
// take the same steps; a step's batches add up to its global_count, the last
// one short; their loss shares (loader_share) average to 1 over the ranks,
// each exactly 1 in a full step; the two ranks read every record once an
// epoch; epochs follow one another.
static void train_keep_last_batch_two_ranks(void) {
  enum { kCount = 53, kBatch = 8, kSteps = 4, kEpochs = 2 };
  SynthCtx c[2] = {{.seed = 5}, {.seed = 5}};
  Loader *l[2];
  for (int r = 0; r < 2; r++) {
    LoaderConfig cfg = synth_config(&c[r], kCount, kBatch, 2, true);
    cfg.drop_last = false;
    cfg.sampler.rank = r;
    cfg.sampler.world = 2;
    l[r] = loader_open(&cfg);
    CHECK_EQ_INT(loader_batches_per_epoch(l[r]), kSteps);
  }
  for (int64_t epoch = 0; epoch < kEpochs; epoch++) {
    int seen[kCount] = {0};
    for (int step = 0; step < kSteps; step++) {
      int64_t sum = 0;
      double shares = 0;
      for (int r = 0; r < 2; r++) {
        const LoaderBatch *b = loader_next(l[r]);
        CHECK(b->epoch == epoch && b->step == step && b->last_in_epoch == (step == kSteps - 1));
        CHECK_EQ_INT(b->global_count, step < kSteps - 1 ? 2 * kBatch : kCount - 3 * 2 * kBatch);
        double share = loader_share(b->count, b->global_count, 2);
        CHECK(step == kSteps - 1 || share == 1.0);
        shares += share;
        sum += b->count;
        const SynthSample *s = b->host[0];
        for (int64_t j = 0; j < b->count; j++) seen[s[j].record] += s[j].epoch == epoch;
      }
      CHECK_EQ_INT(sum, step < kSteps - 1 ? 2 * kBatch : 5);
      CHECK_NEAR(shares / 2, 1.0, 1e-15);  // the last step: 3 x 2 / 5 and 2 x 2 / 5
    }
    int once = 0;
    for (int r = 0; r < kCount; r++) once += seen[r] == 1;
    CHECK_EQ_INT(once, kCount);
  }
  for (int r = 0; r < 2; r++) loader_close(l[r]);
}

static void keep_without_a_record_for_each_rank_child(void *arg) {
  SynthCtx *c = arg;
  LoaderConfig cfg = synth_config(c, 49, 8, 1, true);
  cfg.drop_last = false;
  cfg.sampler.world = 2;
  loader_open(&cfg);
}

static const ConfigKey kLastBatchKey[] = {LOADER_LAST_BATCH_KEY};

static void train_steps_child(void *arg) {
  const char *value = arg;
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kLastBatchKey, 1);
  char err[256];
  if (config_set(&cfg, "train_last_batch", value, "flag", err, sizeof err)) config_die(err);
  fprintf(stderr, "steps %lld\n", (long long)loader_train_steps(&cfg, 49, 2, 16, "images"));
  exit(1);  // the steps, seen by the parent as a message
}

static void keep_refused_without_a_record_for_each_rank(void) {
  SynthCtx c = {.seed = 1};
  CHECK_DIES_WITH(keep_without_a_record_for_each_rank_child, &c,
                  "keeping the last batch, its 1 records do not reach each of the 2 ranks");
  CHECK_DIES_WITH(train_steps_child, "keep",
                  "error: --train_last_batch: keep: the last step's 1 images cannot give each of "
                  "the 2 ranks one (drop them, or choose another --batch_size)");
  CHECK_DIES_WITH(train_steps_child, "drop", "steps 3");
  CHECK_DIES_WITH(train_steps_child, "all", "error: --train_last_batch: 'all' is not one of drop|keep");
}

static void batch_larger_than_shard_child(void *arg) {
  SynthCtx *c = arg;
  LoaderConfig cfg = synth_config(c, 10, 16, 1, true);
  loader_open(&cfg);
}

static void bad_config_named(void) {
  SynthCtx c = {.seed = 1};
  CHECK_DIES_WITH(batch_larger_than_shard_child, &c, "batch size 16 is larger than this rank's 10");
}

// A worker's fatal error (a corrupt record) once called exit() on the
// worker's thread while the trainer and the other workers ran on, and the
// process often died of SIGSEGV after the message. Now the error reaches the
// trainer's thread, which stops every worker of every open loader and exits
// with the worker's message and status. Here every record from 40 on is bad,
// so four workers fail at about the same time while a second loader's
// workers are busy; the exit hook, on the trainer's thread, counts the
// workers still inside a sample: none may be.
static atomic_int g_in_sample;
static pthread_t g_trainer_thread;

static void bad_from_40(void *ctx, void *state, int64_t epoch, int64_t record, void *const *slots) {
  atomic_fetch_add(&g_in_sample, 1);
  sleep_us(200);
  if (record >= 40) {
    atomic_fetch_sub(&g_in_sample, 1);
    die_input("synthetic", "record %lld is bad", (long long)record);
  }
  synth_sample(ctx, state, epoch, record, slots);
  atomic_fetch_sub(&g_in_sample, 1);
}

static void exit_hook_reports(void *ctx) {
  (void)ctx;
  fprintf(stderr, "exit hook: trainer thread %s, workers in a sample %d\n",
          pthread_equal(pthread_self(), g_trainer_thread) ? "yes" : "no", atomic_load(&g_in_sample));
}

static void worker_error_child(void *arg) {
  (void)arg;
  static SynthCtx c = {.seed = 1}, busy = {.seed = 2, .sleep_us = 300};
  g_trainer_thread = pthread_self();
  check_set_exit_hook(exit_hook_reports, NULL);
  LoaderConfig other = synth_config(&busy, 1000, 8, 2, true);
  loader_open(&other);  // never read: its workers fill the ring and wait
  LoaderConfig cfg = synth_config(&c, 200, 8, 4, false);
  cfg.sample = bad_from_40;
  Loader *l = loader_open(&cfg);
  for (int k = 0; k < 25; k++) loader_next(l);
  fprintf(stderr, "not reached\n");
}

static void worker_error_reaches_trainer(void) {
  for (int i = 0; i < 20; i++) {
    char msg[1024];
    int st = test_run_child(worker_error_child, NULL, msg, sizeof msg);
    CHECK_MSG(st == 2, "try %d: exit status %d (want 2); stderr: %s", i, st, msg);
    CHECK_MSG(strncmp(msg, "error: synthetic: record ", 25) == 0 && strstr(msg, " is bad\n"),
              "try %d: first line is not the worker's error: %s", i, msg);
    const char *second = strchr(msg, '\n');
    CHECK_MSG(second && strcmp(second + 1, "exit hook: trainer thread yes, workers in a sample 0") == 0,
              "try %d: want one error line, then the hook on the trainer's thread with no worker "
              "running; got: %s", i, msg);
  }
}

// ---------------------------------------------------------------- images

enum { kImages = 24, kSide = 32 };

// Record i: a 48..70 x 40..62 pattern, label i % 5; record 5 a PNG, record 6 a
// CMYK JPEG, record 7 a grey JPEG.
static uint8_t *make_image(int i, size_t *n, ImageFormat *format) {
  int32_t w = 48 + i % 23, h = 40 + (i * 7) % 23;
  uint8_t *px = malloc((size_t)w * h * 4);
  int channels = i == 6 ? 4 : i == 7 ? 1 : 3;
  for (int32_t p = 0; p < w * h; p++)
    for (int c = 0; c < channels; c++)
      px[p * channels + c] = (uint8_t)((p % w) * 3 + (p / w) * 2 + c * 40 + i * 9);
  *format = i == 5 ? IMAGE_FORMAT_PNG : IMAGE_FORMAT_JPEG;
  uint8_t *bytes = i == 5 ? image_encode_png(px, w, h, 3, n) : image_encode_jpeg(px, w, h, channels, 90, n);
  free(px);
  return bytes;
}

static void write_images(const char *dir, int bad_record) {
  LmdbWriter *w = lmdb_writer_open(dir);
  for (int i = 0; i < kImages; i++) {
    size_t n;
    ImageFormat format;
    uint8_t *img = make_image(i, &n, &format);
    Record r = {.kind = RECORD_IMAGE_LABEL, .image_format = format, .image = img,
                .image_bytes = n, .label = i % 5};
    size_t bytes = record_encoded_bytes(&r);
    uint8_t *value = malloc(bytes);
    record_encode(&r, value, bytes);
    if (i == bad_record) value[4] = 7;  // another layout version
    lmdb_writer_put(w, value, bytes);
    free(value);
    free(img);
  }
  lmdb_writer_close(w);
}

static const char *image_store(void) {
  static char dir[512];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s/images", test_tmpdir());
    write_images(dir, -1);
  }
  return dir;
}

static ClassifyLoaderConfig image_config(bool train, int threads, int64_t batch) {
  ClassifyAugment a = classify_augment_imagenet(train, 2024);
  a.out_side = kSide;
  a.resize_side = 37;
  return (ClassifyLoaderConfig){.lmdb_dir = image_store(), .augment = a, .batch_size = batch,
                                .threads = threads, .ring_batches = 2, .world = 1,
                                .num_classes = 5};
}

static void classify_eval_every_image_with_label(void) {
  ClassifyLoaderConfig cfg = image_config(false, 2, 5);
  int64_t count;
  Loader *l = classify_loader_open(&cfg, &count);
  CHECK_EQ_INT(count, kImages);
  REQUIRE(loader_batches_per_epoch(l) == 5);
  ImageDecoder *d = image_decoder_create();
  ClassifyScratch scratch = {0};
  uint8_t expect[kSide * kSide * 3];
  int64_t seen = 0, same = 0;
  for (int k = 0; k < 5; k++) {
    const LoaderBatch *b = loader_next(l);
    const int32_t *labels = b->host[1];
    for (int64_t j = 0; j < b->count; j++, seen++) {
      CHECK_EQ_INT(labels[j], seen % 5);
      size_t n;
      ImageFormat format;
      uint8_t *img = make_image((int)seen, &n, &format);
      classify_augment_image(d, &scratch, &cfg.augment, img, n, "expected", 0, seen, expect);
      same += memcmp((uint8_t *)b->host[0] + j * sizeof expect, expect, sizeof expect) == 0;
      free(img);
    }
  }
  CHECK_EQ_INT(seen, kImages);
  CHECK_EQ_INT(same, kImages);
  classify_scratch_free(&scratch);
  image_decoder_free(d);
  loader_close(l);
}

static void read_images(ClassifyLoaderConfig *cfg, int batches, uint8_t *pixels, int32_t *labels) {
  Loader *l = classify_loader_open(cfg, NULL);
  size_t image_bytes = (size_t)kSide * kSide * 3 * (cfg->augment.float_output ? 4 : 1);
  for (int k = 0; k < batches; k++) {
    const LoaderBatch *b = loader_next(l);
    memcpy(pixels + (size_t)k * b->count * image_bytes, b->host[0], b->count * image_bytes);
    memcpy(labels + k * b->count, b->host[1], b->count * sizeof(int32_t));
  }
  loader_close(l);
}

static void classify_train_same_whatever_the_threads(void) {
  enum { kBatches = 3 * (kImages / 4) };  // three epochs
  size_t bytes = (size_t)kBatches * 4 * kSide * kSide * 3;
  uint8_t *one = malloc(bytes), *many = malloc(bytes);
  int32_t labels_one[kBatches * 4], labels_many[kBatches * 4];
  ClassifyLoaderConfig cfg = image_config(true, 1, 4);
  read_images(&cfg, kBatches, one, labels_one);
  cfg.threads = 3;
  read_images(&cfg, kBatches, many, labels_many);
  CHECK(memcmp(one, many, bytes) == 0);
  CHECK(memcmp(labels_one, labels_many, sizeof labels_one) == 0);
  // Each epoch holds every label as often as the data set does.
  for (int epoch = 0; epoch < 3; epoch++) {
    int per_label[5] = {0};
    for (int i = 0; i < kImages; i++) per_label[labels_one[epoch * kImages + i]]++;
    CHECK(per_label[0] == 5 && per_label[4] == 4);
  }
  // Float output is the uint8 output normalised.
  float *normalised = malloc(bytes * sizeof(float)), *expect = malloc(bytes * sizeof(float));
  cfg.augment.float_output = true;
  read_images(&cfg, kBatches, (uint8_t *)normalised, labels_many);
  augment_normalize_cpu(one, expect, (int64_t)(bytes / 3), cfg.augment.mean, cfg.augment.std);
  CHECK(test_rel_error(normalised, expect, (int64_t)bytes) < 1e-6);
  free(normalised);
  free(expect);
  free(one);
  free(many);
}

static void bad_record_child(void *arg) {
  ClassifyLoaderConfig cfg = image_config(false, 2, 4);
  cfg.lmdb_dir = arg;
  Loader *l = classify_loader_open(&cfg, NULL);
  for (int k = 0; k < 6; k++) loader_next(l);
}

// Labels run 0..4: with 4 classes, the first record labelled 4 (record 4) is
// named, in eval and in training alike.
static void four_classes_child(void *arg) {
  ClassifyLoaderConfig cfg = image_config(*(bool *)arg, 2, 4);
  cfg.num_classes = 4;
  Loader *l = classify_loader_open(&cfg, NULL);
  for (int k = 0; k < 6; k++) loader_next(l);
}

static void classify_label_out_of_range_named(void) {
  bool train = false;
  CHECK_DIES_WITH(four_classes_child, &train, "record 4: label 4 is outside the 4 classes of this run (--num_classes)");
  train = true;
  CHECK_DIES_WITH(four_classes_child, &train, "label 4 is outside the 4 classes of this run (--num_classes)");
}

static void classify_bad_record_named(void) {
  static char dir[600];
  snprintf(dir, sizeof dir, "%s/bad_version", test_tmpdir());
  write_images(dir, 13);
  CHECK_DIES_WITH(bad_record_child, dir, "bad_version record 13: record layout version 7");
}

// On a GPU: what the trainer's compute stream reads from a batch's device
// buffer is that batch, the way a trainer reads it. Each image batch goes
// through op_affine_u8 on the compute stream (scale 1, shift 0: the bytes as
// floats) into a buffer of its own, and the stream is synchronised only after
// every 4th batch, so that the compute stream both reads batches just handed
// out and lags several batches behind the copies into the 2-slot ring. A
// compute stream that does not wait for a batch's copy, or a copy that does
// not wait for the compute stream to be done with the slot it overwrites,
// gives other bytes here on the emulated GPU (tests/emu/README.md) as it can
// on a real one.
static void classify_device_copy_matches_host(void) {
  if (!test_have_gpu()) test_skip("no GPU");
  enum { kBatches = 12, kBatch = 4 };
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  ClassifyLoaderConfig cfg = image_config(true, 2, kBatch);
  cfg.dev = &dev;
  Loader *l = classify_loader_open(&cfg, NULL);
  size_t image_count = (size_t)kBatch * kSide * kSide * 3;
  uint8_t *expect = malloc(kBatches * image_count);
  float *out = device_alloc(DEVICE_CUDA, kBatches * image_count * sizeof(float));
  float *got = malloc(image_count * sizeof(float));
  int32_t labels[kBatch];
  const ChannelAffine bytes_as_floats = {{1, 1, 1, 1}, {0, 0, 0, 0}};
  for (int k = 0; k < kBatches; k++) {
    const LoaderBatch *b = loader_next(l);
    CHECK(b->device[0] != b->host[0]);
    memcpy(expect + k * image_count, b->host[0], image_count);
    Tensor x = TENSOR(b->device[0], DT_U8, DEVICE_CUDA, kBatch, kSide, kSide, 3);
    Tensor y = TENSOR(out + k * image_count, DT_F32, DEVICE_CUDA, kBatch, kSide, kSide, 3);
    op_affine_u8(&dev, &x, &bytes_as_floats, &y);
    if (k % 4 == 3) {
      device_sync(&dev);  // the compute stream, as a trainer reading its loss
      device_copy(DEVICE_CPU, labels, DEVICE_CUDA, b->device[1], sizeof labels);
      CHECK_MSG(memcmp(labels, b->host[1], sizeof labels) == 0, "batch %d: device labels differ",
                k);
    }
  }
  device_sync(&dev);
  for (int k = 0; k < kBatches; k++) {
    device_copy(DEVICE_CPU, got, DEVICE_CUDA, out + k * image_count, image_count * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < image_count; i++) bad += got[i] != (float)expect[k * image_count + i];
    CHECK_MSG(bad == 0, "batch %d: %zu of %zu device image bytes differ from the host batch", k,
              bad, image_count);
  }
  loader_close(l);
  free(expect);
  free(got);
  device_free(DEVICE_CUDA, out);
  device_close(&dev);
}

int main(void) {
  TEST_RUN(eval_every_record_once_in_order);
  TEST_RUN(train_follows_sampler_across_epochs);
  TEST_RUN(same_batches_whatever_the_threads);
  TEST_RUN(close_mid_epoch_and_wait_counters);
  TEST_RUN(bad_config_named);
  TEST_RUN(sampler_keep_rest_every_record_once);
  TEST_RUN(sampler_epoch_steps_agree_over_ranks);
  TEST_RUN(train_keep_last_batch_two_ranks);
  TEST_RUN(keep_refused_without_a_record_for_each_rank);
  TEST_RUN(worker_error_reaches_trainer);
  TEST_RUN(classify_eval_every_image_with_label);
  TEST_RUN(classify_train_same_whatever_the_threads);
  TEST_RUN(classify_bad_record_named);
  TEST_RUN(classify_label_out_of_range_named);
  TEST_RUN(classify_device_copy_matches_host);
  return test_finish();
}
