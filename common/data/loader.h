// loader.h: the input pipeline. A pool of worker threads runs a per-sample
// function (read a record, decode, augment) into a ring of pinned host
// batches, ahead of the trainer; a finished batch is copied to the device
// asynchronously on dev->copy_stream, and the compute stream is made to wait
// for that copy, so the trainer never blocks on input in steady state.
//
// The loader knows nothing of images: a batch is up to LOADER_MAX_FIELDS
// arrays, each with a fixed number of bytes per sample (pixels and a label;
// an image, its boxes and a box count; token ids and a length), and the task
// supplies the function that fills one sample's slot of each. Batches follow
// one another across epochs without a pause: batch k of the stream belongs to
// epoch start_epoch + k / batches_per_epoch. The record order of each epoch
// comes from a Sampler (per-epoch shuffle, rank shard); what a sample holds
// depends only on (epoch, record), never on which thread made it.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "data/sampler.h"
#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOADER_MAX_FIELDS 4

// Fills one sample: slots[f] points at sample_bytes[f] bytes of field f.
// state is the calling worker's own (from thread_init).
typedef void (*LoaderSampleFn)(void *ctx, void *state, int64_t epoch, int64_t record,
                               void *const *slots);

typedef struct LoaderConfig {
  int64_t batch_size;
  int threads;           // worker threads
  int ring_batches;      // batches in flight ahead of the trainer (>= 2)
  // Only full batches, the sampler's remainder resting (training's default);
  // else a short last batch: evaluation, and training that keeps every
  // record of an epoch (the loader then sets the sampler's keep_rest).
  bool drop_last;
  int field_count;
  size_t sample_bytes[LOADER_MAX_FIELDS];
  Sampler sampler;
  int64_t start_epoch;   // resume: the epoch the first batch belongs to
  const Device *dev;     // CUDA: batches are copied to it; NULL or CPU: host only
  LoaderSampleFn sample;
  void *ctx;                                   // passed to every callback
  void *(*thread_init)(void *ctx);             // per-worker state, in the worker; may be NULL
  void (*thread_free)(void *ctx, void *state);
  void (*ctx_free)(void *ctx);                 // at loader_close; may be NULL
} LoaderConfig;

typedef struct LoaderBatch {
  int64_t epoch;
  int64_t step;         // batch index within the epoch
  int64_t count;        // samples filled (batch_size but for a short last batch)
  int64_t global_count; // the step's samples over every rank (world x batch_size
                        // but for a short last step; sampler.h)
  bool last_in_epoch;
  void *host[LOADER_MAX_FIELDS];    // (batch_size, sample_bytes[f]) pinned
  void *device[LOADER_MAX_FIELDS];  // the same on the device (== host without one)
} LoaderBatch;

typedef struct LoaderStats {
  int64_t batches;      // handed to the trainer
  double wait_s;        // the trainer's time blocked in loader_next
  double first_wait_s;  // of which the wait for the very first batch
  int64_t stalls;       // calls that blocked for more than 1 ms
} LoaderStats;

// The training loader's last batch of an epoch, a key of every trainer that
// reads epochs of records through the loader (in its key table): drop (only
// full batches: the few records left over rest until another epoch's
// shuffle) or keep (a short last batch: every record once an epoch, which the
// MLPerf training rules allow, "Equivalence exceptions"). A short batch's
// mean loss then weighs by its share of the step (loader_share).
#define LOADER_LAST_BATCH_KEY                                                        \
  {"train_last_batch", CFG_STRING, "drop",                                           \
   "training's last batch of an epoch: drop (full batches only) or keep (a short one)", \
   "drop|keep"}
bool loader_keeps_last(const Config *cfg);  // train_last_batch = keep
// The weight of a mean loss over `rows` of a step's global_count samples
// (LoaderBatch.global_count) when the step's gradient is the average of
// `parts` such means (ranks, or ranks x micro-batches): rows x parts /
// global_count, so that every sample of the step weighs 1 / global_count;
// exactly 1 when every part is full.
double loader_share(int64_t rows, int64_t global_count, int64_t parts);
// The training steps of an epoch of `count` records at `global_batch` over
// `world` ranks under train_last_batch (sampler_epoch_steps), checked before
// run_start: one-line errors naming --batch_size (more than the records;
// `unit`: what they are, "images") or --train_last_batch (keep, with fewer
// records left for the last step than ranks).
int64_t loader_train_steps(const Config *cfg, int64_t count, int world, int64_t global_batch,
                           const char *unit);

typedef struct Loader Loader;
Loader *loader_open(const LoaderConfig *cfg);
// The next batch, blocking until it is ready. It stays valid (host and
// device) until the next call; on CUDA the work the trainer queues on
// dev->stream after this call sees the copied data.
const LoaderBatch *loader_next(Loader *l);
int64_t loader_batches_per_epoch(const Loader *l);
LoaderStats loader_stats(const Loader *l);
// Stops the workers (mid-epoch is fine) and frees everything.
void loader_close(Loader *l);
// loader_close, after the stats as a line on out (NULL: none): "loader:
// trainer waited 1.2 s over 300 batches (4 stalls)".
void loader_close_report(Loader *l, FILE *out);

#if HAVE_CUDA
// loader_cuda.cu: the ring's events and copies.
void loader_thread_start_cuda(const Device *dev);  // a worker selects dev's GPU
struct CUevent_st *loader_event_create_cuda(void);
void loader_event_destroy_cuda(struct CUevent_st *event);
// copy_stream waits for `consumed`, copies host to device, records `copied`.
void loader_copy_async_cuda(const Device *dev, void *dst, const void *src, size_t bytes,
                            struct CUevent_st *consumed, struct CUevent_st *copied);
void loader_stream_wait_cuda(const Device *dev, struct CUevent_st *copied);
void loader_record_cuda(const Device *dev, struct CUevent_st *consumed);
void loader_event_sync_cuda(struct CUevent_st *event);
#endif

#ifdef __cplusplus
}
#endif
