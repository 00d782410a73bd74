// loader.c: worker threads filling a ring of pinned batches (loader.h).
//
// Work is handed out one sample at a time from one counter over the batch
// stream: task t is sample t % batch_size of stream batch t / batch_size, so
// all workers help finish the oldest batch first. Batch k goes into ring slot
// k % ring_batches, once the trainer has released batch k - ring_batches.
// The worker that completes a batch starts its device copy and tells the
// trainer.
#include "data/loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/progress.h"

typedef struct RingSlot {
  void *host[LOADER_MAX_FIELDS];    // (batch_size, sample_bytes[f])
  void *device[LOADER_MAX_FIELDS];
  atomic_int_fast64_t done;         // samples filled
  int64_t ready_batch;              // stream batch held, once complete; -1 before
  struct CUevent_st *copied, *consumed;
} RingSlot;

// Per-epoch record orders; an epoch's entry is computed by the first worker
// that needs it. Live batches span at most ring_batches epochs, so
// ring_batches + 1 entries indexed by epoch never evict one in use.
typedef struct EpochOrder {
  int64_t epoch;  // -1: empty
  uint32_t *records;  // (shard_count,)
} EpochOrder;

struct Loader {
  LoaderConfig cfg;
  Loader *next_open;  // the list of open loaders
  int64_t shard_count, batches_per_epoch;
  bool cuda;
  RingSlot *slots;      // (ring_batches,)
  EpochOrder *orders;   // (ring_batches + 1,)
  pthread_t *threads;   // (threads,)
  atomic_int_fast64_t next_task;
  pthread_mutex_t mu;  // released, stop and the slots' ready_batch
  pthread_mutex_t order_mu;
  pthread_cond_t slot_freed, batch_ready;
  int64_t released;     // batches the trainer is done with
  int64_t current;      // stream batch handed out last; -1 before the first
  bool stop;
  bool joined;          // the workers have been joined
  int started;          // workers started
  // The first fatal error of a worker (check.h's error hook): the trainer's
  // thread stops the workers and exits with it from loader_next.
  int error_status;  // 0: none
  char error[2048];
  LoaderBatch batch;
  LoaderStats stats;
};

typedef struct BatchPlace {
  int64_t epoch, step, count, global_count;
} BatchPlace;

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

static BatchPlace batch_place(const Loader *l, int64_t k) {
  BatchPlace p = {l->cfg.start_epoch + k / l->batches_per_epoch, k % l->batches_per_epoch, 0, 0};
  int64_t batch = l->cfg.batch_size, global = batch * l->cfg.sampler.world;
  p.count = min_i64(batch, l->shard_count - p.step * batch);
  // The step is positions [step x global, ...) of the epoch's order (sampler.h).
  p.global_count = min_i64(global, l->cfg.sampler.count - p.step * global);
  return p;
}

static const uint32_t *epoch_order(Loader *l, int64_t epoch) {
  EpochOrder *o = &l->orders[epoch % (l->cfg.ring_batches + 1)];
  // A lock of its own: shuffling a large data set takes a while, and the
  // trainer must not wait on it to release a batch.
  pthread_mutex_lock(&l->order_mu);
  if (o->epoch != epoch) {
    sampler_epoch_order(&l->cfg.sampler, epoch, o->records);
    o->epoch = epoch;
  }
  pthread_mutex_unlock(&l->order_mu);
  return o->records;
}

// Blocks until stream batch k may be written into its slot; false on stop.
static bool wait_for_slot(Loader *l, int64_t k) {
  pthread_mutex_lock(&l->mu);
  while (!l->stop && k >= l->released + l->cfg.ring_batches)
    pthread_cond_wait(&l->slot_freed, &l->mu);
  bool go = !l->stop;
  pthread_mutex_unlock(&l->mu);
  return go;
}

static void finish_batch(Loader *l, RingSlot *s, int64_t k, int64_t count) {
#if HAVE_CUDA
  if (l->cuda)
    for (int f = 0; f < l->cfg.field_count; f++)
      loader_copy_async_cuda(l->cfg.dev, s->device[f], s->host[f],
                             (size_t)count * l->cfg.sample_bytes[f], s->consumed, s->copied);
#else
  (void)count;
#endif
  pthread_mutex_lock(&l->mu);
  s->ready_batch = k;
  pthread_cond_broadcast(&l->batch_ready);
  pthread_mutex_unlock(&l->mu);
}

// A worker's fatal error (a corrupt record, an image that does not decode)
// must not exit the process while the trainer and the other workers run:
// it is handed to the trainer's thread and the worker ends.
static void worker_error(void *ctx, int status, const char *message) {
  Loader *l = ctx;
  pthread_mutex_lock(&l->mu);
  if (!l->error_status) {
    l->error_status = status;
    snprintf(l->error, sizeof l->error, "%s", message);
  }
  l->stop = true;
  pthread_cond_broadcast(&l->batch_ready);
  pthread_cond_broadcast(&l->slot_freed);
  pthread_mutex_unlock(&l->mu);
  pthread_exit(NULL);
}

static void *worker_main(void *arg) {
  Loader *l = arg;
  check_set_error_hook(worker_error, l);
#if HAVE_CUDA
  if (l->cuda) loader_thread_start_cuda(l->cfg.dev);
#endif
  void *state = l->cfg.thread_init ? l->cfg.thread_init(l->cfg.ctx) : NULL;
  for (;;) {
    int64_t task = atomic_fetch_add(&l->next_task, 1);
    int64_t k = task / l->cfg.batch_size, j = task % l->cfg.batch_size;
    BatchPlace p = batch_place(l, k);
    if (j >= p.count) continue;
    if (!wait_for_slot(l, k)) break;
    RingSlot *s = &l->slots[k % l->cfg.ring_batches];
#if HAVE_CUDA
    // The host buffer is free once the previous batch's copy out of it is done.
    if (l->cuda) loader_event_sync_cuda(s->copied);
#endif
    int64_t record = epoch_order(l, p.epoch)[p.step * l->cfg.batch_size + j];
    void *sample_slots[LOADER_MAX_FIELDS];
    for (int f = 0; f < l->cfg.field_count; f++)
      sample_slots[f] = (uint8_t *)s->host[f] + (size_t)j * l->cfg.sample_bytes[f];
    l->cfg.sample(l->cfg.ctx, state, p.epoch, record, sample_slots);
    if (atomic_fetch_add(&s->done, 1) + 1 == p.count) finish_batch(l, s, k, p.count);
  }
  if (l->cfg.thread_free) l->cfg.thread_free(l->cfg.ctx, state);
  return NULL;
}

static void join_workers(Loader *l) {
  pthread_mutex_lock(&l->mu);
  bool joined = l->joined;
  l->stop = true;
  l->joined = true;
  pthread_cond_broadcast(&l->slot_freed);
  pthread_mutex_unlock(&l->mu);
  if (!joined)
    for (int i = 0; i < l->started; i++) pthread_join(l->threads[i], NULL);
}

// Every open loader, so that a fatal error on the trainer's thread stops all
// their workers before the process exits (check_set_thread_stopper).
static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static Loader *g_open;

static void stop_all_loaders(void) {
  pthread_mutex_lock(&g_open_mu);
  for (Loader *l = g_open; l; l = l->next_open) join_workers(l);
  pthread_mutex_unlock(&g_open_mu);
}

static void list_add(Loader *l) {
  pthread_mutex_lock(&g_open_mu);
  l->next_open = g_open;
  g_open = l;
  check_set_thread_stopper(stop_all_loaders);
  pthread_mutex_unlock(&g_open_mu);
}

static void list_remove(Loader *l) {
  pthread_mutex_lock(&g_open_mu);
  for (Loader **p = &g_open; *p; p = &(*p)->next_open)
    if (*p == l) {
      *p = l->next_open;
      break;
    }
  pthread_mutex_unlock(&g_open_mu);
}

// On the trainer's thread: the worker's error ends the process as if the
// trainer had raised it (check_exit_with stops every loader's workers first).
static _Noreturn void fail_from_worker(Loader *l) { check_exit_with(l->error_status, l->error); }

static void validate_config(const LoaderConfig *c) {
  if (c->batch_size <= 0) die_input("loader", "batch size %lld (must be > 0)", (long long)c->batch_size);
  if (c->threads <= 0) die_input("loader", "%d threads (must be > 0)", c->threads);
  if (c->ring_batches < 2) die_input("loader", "ring of %d batches (must be >= 2)", c->ring_batches);
  if (c->field_count < 1 || c->field_count > LOADER_MAX_FIELDS)
    DIE("loader: %d fields (1..%d)", c->field_count, LOADER_MAX_FIELDS);
  if (!c->sample) DIE("loader: no sample function");
}

// Training's steps are all-reduces: every rank takes as many, and when the
// last one is kept every rank must have a part in it (sampler_epoch_steps).
// Evaluation reads this rank's shard to its end.
static int64_t batches_per_epoch(const LoaderConfig *c, int64_t shard_count) {
  const Sampler *s = &c->sampler;
  if (!s->shuffle)
    return c->drop_last ? shard_count / c->batch_size
                        : (shard_count + c->batch_size - 1) / c->batch_size;
  int64_t steps = sampler_epoch_steps(s->count, s->world, c->batch_size, s->keep_rest);
  if (steps < 0)
    die_input("loader", "keeping the last batch, its %lld records do not reach each of the %d ranks",
              (long long)(s->count % (c->batch_size * s->world)), s->world);
  return steps;
}

static void alloc_slot(Loader *l, RingSlot *s) {
  s->ready_batch = -1;
  atomic_init(&s->done, 0);
  for (int f = 0; f < l->cfg.field_count; f++) {
    size_t bytes = (size_t)l->cfg.batch_size * l->cfg.sample_bytes[f];
    // Pinned only when the batches go on to a GPU: a CPU run touches no CUDA.
    s->host[f] = l->cuda ? device_alloc_pinned(bytes) : xmalloc(bytes);
    memset(s->host[f], 0, bytes);
    s->device[f] = l->cuda ? device_alloc(DEVICE_CUDA, bytes) : s->host[f];
  }
#if HAVE_CUDA
  if (l->cuda) {
    s->copied = loader_event_create_cuda();
    s->consumed = loader_event_create_cuda();
  }
#endif
}

Loader *loader_open(const LoaderConfig *cfg) {
  validate_config(cfg);
  Loader *l = xcalloc(1, sizeof *l);
  l->cfg = *cfg;
  l->cuda = cfg->dev && cfg->dev->kind == DEVICE_CUDA;
  l->cfg.sampler.keep_rest = cfg->sampler.shuffle && !cfg->drop_last;
  l->shard_count = sampler_shard_count(&l->cfg.sampler);
  l->batches_per_epoch = batches_per_epoch(&l->cfg, l->shard_count);
  if (l->batches_per_epoch == 0)
    die_input("loader", "batch size %lld is larger than this rank's %lld records",
              (long long)cfg->batch_size, (long long)l->shard_count);
  l->slots = xcalloc((size_t)cfg->ring_batches, sizeof *l->slots);
  for (int i = 0; i < cfg->ring_batches; i++) alloc_slot(l, &l->slots[i]);
  l->orders = xcalloc((size_t)cfg->ring_batches + 1, sizeof *l->orders);
  for (int i = 0; i <= cfg->ring_batches; i++) {
    l->orders[i].epoch = -1;
    l->orders[i].records = xmalloc((size_t)l->shard_count * sizeof(uint32_t));
  }
  atomic_init(&l->next_task, 0);
  l->current = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->order_mu, NULL);
  pthread_cond_init(&l->slot_freed, NULL);
  pthread_cond_init(&l->batch_ready, NULL);
  l->threads = xcalloc((size_t)cfg->threads, sizeof *l->threads);
  list_add(l);
  for (int i = 0; i < cfg->threads; i++) {
    int rc = pthread_create(&l->threads[i], NULL, worker_main, l);
    if (rc != 0)
      die_input("--loader_threads", "cannot start loader thread %d of %d: %s", i + 1, cfg->threads,
                strerror(rc));
    l->started++;
  }
  return l;
}

int64_t loader_batches_per_epoch(const Loader *l) { return l->batches_per_epoch; }

double loader_share(int64_t rows, int64_t global_count, int64_t parts) {
  return (double)(rows * parts) / (double)global_count;
}

bool loader_keeps_last(const Config *cfg) {
  return strcmp(config_string(cfg, "train_last_batch"), "keep") == 0;
}

int64_t loader_train_steps(const Config *cfg, int64_t count, int world, int64_t global_batch,
                           const char *unit) {
  if (global_batch > count)
    die_input("--batch_size", "%lld is larger than the %lld training %s", (long long)global_batch,
              (long long)count, unit);
  int64_t steps = sampler_epoch_steps(count, world, global_batch / world, loader_keeps_last(cfg));
  if (steps < 0)
    die_input("--train_last_batch", "keep: the last step's %lld %s cannot give each of the %d "
              "ranks one (drop them, or choose another --batch_size)",
              (long long)(count % global_batch), unit, world);
  return steps;
}

LoaderStats loader_stats(const Loader *l) { return l->stats; }

void loader_close_report(Loader *l, FILE *out) {
  if (out)
    fprintf(out, "loader: trainer waited %.1f s over %lld batches (%lld stalls)\n", l->stats.wait_s,
            (long long)l->stats.batches, (long long)l->stats.stalls);
  loader_close(l);
}

// The trainer is done with the batch handed out last: its slot may refill.
static void release_current(Loader *l) {
  RingSlot *s = &l->slots[l->current % l->cfg.ring_batches];
#if HAVE_CUDA
  if (l->cuda) loader_record_cuda(l->cfg.dev, s->consumed);
#endif
  pthread_mutex_lock(&l->mu);
  atomic_store(&s->done, 0);
  s->ready_batch = -1;
  l->released = l->current + 1;
  pthread_cond_broadcast(&l->slot_freed);
  pthread_mutex_unlock(&l->mu);
}

const LoaderBatch *loader_next(Loader *l) {
  if (l->current >= 0) release_current(l);
  int64_t k = ++l->current;
  RingSlot *s = &l->slots[k % l->cfg.ring_batches];
  double start = time_now_s();
  pthread_mutex_lock(&l->mu);
  while (s->ready_batch != k && !l->error_status) pthread_cond_wait(&l->batch_ready, &l->mu);
  bool failed = l->error_status != 0;
  pthread_mutex_unlock(&l->mu);
  if (failed) fail_from_worker(l);
  double waited = time_now_s() - start;
#if HAVE_CUDA
  if (l->cuda) loader_stream_wait_cuda(l->cfg.dev, s->copied);
#endif
  l->stats.wait_s += waited;
  if (k == 0) l->stats.first_wait_s = waited;
  l->stats.stalls += waited > 1e-3;
  l->stats.batches++;
  BatchPlace p = batch_place(l, k);
  l->batch = (LoaderBatch){.epoch = p.epoch, .step = p.step, .count = p.count,
                           .global_count = p.global_count,
                           .last_in_epoch = p.step == l->batches_per_epoch - 1};
  for (int f = 0; f < l->cfg.field_count; f++) {
    l->batch.host[f] = s->host[f];
    l->batch.device[f] = s->device[f];
  }
  return &l->batch;
}

static void free_slot(Loader *l, RingSlot *s) {
#if HAVE_CUDA
  if (l->cuda) {
    loader_event_sync_cuda(s->copied);  // a copy out of the slot may be in flight
    loader_event_destroy_cuda(s->copied);
    loader_event_destroy_cuda(s->consumed);
  }
#endif
  for (int f = 0; f < l->cfg.field_count; f++) {
    if (l->cuda) {
      device_free(DEVICE_CUDA, s->device[f]);
      device_free_pinned(s->host[f]);
    } else {
      free(s->host[f]);
    }
  }
}

void loader_close(Loader *l) {
  join_workers(l);
  list_remove(l);
  for (int i = 0; i < l->cfg.ring_batches; i++) free_slot(l, &l->slots[i]);
  for (int i = 0; i <= l->cfg.ring_batches; i++) free(l->orders[i].records);
  if (l->cfg.ctx_free) l->cfg.ctx_free(l->cfg.ctx);
  pthread_cond_destroy(&l->slot_freed);
  pthread_cond_destroy(&l->batch_ready);
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->order_mu);
  free(l->orders);
  free(l->slots);
  free(l->threads);
  free(l);
}
