// ncf_batch.h: which (user, item, label) is sample s of an epoch - the
// epoch's shuffle and its training negatives - as pure functions of
// (seed, epoch, s), host and device code, so the CPU loader and the CUDA
// kernel build the same batches and nothing is materialised per epoch.
//
// An epoch has n_train * (1 + n_neg) samples: index p < n_train is training
// positive p (label 1); p = n_train + k * n_train + t is the k-th negative
// of positive t (label 0): its user's item, drawn uniformly from the items
// outside that user's training items (the MLPerf reference's rule: it
// resampled a negative found in the training matrix; the held-out test item
// may be drawn, as there - excluding it would leak the test label). Fresh
// negatives every epoch: the draw is Philox (seed, stream epoch:TRAIN_NEG, p).
//
// The order: sample s of the epoch is p = perm(s), perm a keyed bijection of
// [0, n): a 4-round Feistel network over the smallest 2^(2h) >= n, with
// cycle walking (apply again while the result is >= n; the expected number
// of walks is below 4). Its round function is Philox, keyed by the seed and
// the epoch, so each epoch has its own order.
#pragma once
#include <stdint.h>

#include "core/rng.h"
#include "device/device.h"
#include "movielens_sampling.h"
#include "ops/ops.h"

// The training positives as the sampler reads them (host or device memory).
typedef struct NcfTrainView {
  const int64_t *offsets;  // (n_users + 1) CSR row starts into items
  const int32_t *items;    // (n_train) each user's training items, ascending
  const int32_t *users;    // (n_train) the user of each training positive
  int64_t n_train;
  int64_t n_items;
  int64_t n_neg;           // training negatives per positive
  uint64_t seed;
} NcfTrainView;

ML_FN int64_t ncf_epoch_samples(const NcfTrainView *v) { return v->n_train * (1 + v->n_neg); }

// Half the bit width of the Feistel domain for n elements.
ML_FN int ncf_feistel_half_bits(int64_t n) {
  int half = 1;
  while (((int64_t)1 << (2 * half)) < n) half++;
  return half;
}

ML_FN int64_t ncf_feistel(int64_t x, int half, uint64_t seed, uint64_t stream) {
  uint64_t mask = ((uint64_t)1 << half) - 1;
  uint64_t left = (uint64_t)x >> half, right = (uint64_t)x & mask;
  for (uint64_t round = 0; round < 4; round++) {
    uint64_t f = rng_u32(seed, stream, (right << 2) | round);
    uint64_t next = (left ^ f) & mask;
    left = right;
    right = next;
  }
  return (int64_t)((left << half) | right);
}

// The stream of an epoch's order (the Feistel rounds' Philox).
ML_FN uint64_t ncf_shuffle_stream(int64_t epoch) {
  return ((uint64_t)epoch << 32) | ML_STREAM_SHUFFLE;
}

// perm(s) for s in [0, n).
ML_FN int64_t ncf_permute(int64_t s, int64_t n, uint64_t seed, int64_t epoch) {
  int half = ncf_feistel_half_bits(n);
  uint64_t stream = ncf_shuffle_stream(epoch);
  int64_t x = s;
  do {
    x = ncf_feistel(x, half, seed, stream);
  } while (x >= n);
  return x;
}

// Epoch position p (= perm(s)) as (user, item, label); a negative's item
// comes from draw, its word of Philox (ncf_neg_draw; unused for a positive).
ML_FN void ncf_sample_at(const NcfTrainView *v, int64_t p, uint32_t draw, int32_t *user,
                         int32_t *item, float *label) {
  int64_t t = p < v->n_train ? p : (p - v->n_train) % v->n_train;
  int32_t u = v->users[t];
  *user = u;
  if (p < v->n_train) {
    *item = v->items[p];
    *label = 1.0f;
    return;
  }
  const int32_t *rated = v->items + v->offsets[u];
  int64_t n_rated = v->offsets[u + 1] - v->offsets[u];
  *item = ml_unrated_item(rated, n_rated, ml_draw_below(draw, (uint32_t)(v->n_items - n_rated)));
  *label = 0.0f;
}

// The stream of an epoch's negative draws: position p draws rng_u32(seed,
// this stream, p).
ML_FN uint64_t ncf_neg_stream(int64_t epoch) {
  return ((uint64_t)epoch << 32) | ML_STREAM_TRAIN_NEG;
}

// Sample s of the epoch into (user, item, label).
ML_FN void ncf_train_sample(const NcfTrainView *v, int64_t epoch, int64_t s, int32_t *user,
                            int32_t *item, float *label) {
  int64_t p = ncf_permute(s, ncf_epoch_samples(v), v->seed, epoch);
  uint32_t draw = p < v->n_train ? 0 : rng_u32(v->seed, ncf_neg_stream(epoch), (uint64_t)p);
  ncf_sample_at(v, p, draw, user, item, label);
}

#ifdef __cplusplus
extern "C" {
#endif

// The batch builders: CUDA runs ncf_train_sample per sample
// (ncf_data_cuda.cu), the CPU the same draws for groups of samples at once
// (ncf_data.c), so the same seed gives the same batches on both.
// Samples [s0, s0 + n) of the epoch's order: users, items (n) int32 and
// labels (n) fp32, in dev's memory.
void ncf_train_batch_cpu(const Device *dev, const NcfTrainView *v, int64_t epoch, int64_t s0,
                         int64_t n, int32_t *users, int32_t *items, float *labels);
// The eval candidates of users [u0, u0 + n): per user its test positive, then
// its n_neg test negatives; users, items: (n, 1 + n_neg) int32.
void ncf_eval_batch_cpu(const Device *dev, const int32_t *test_items, const int32_t *test_negs,
                        int64_t n_neg, int64_t u0, int64_t n, int32_t *users, int32_t *items);
#if HAVE_CUDA
void ncf_train_batch_cuda(const Device *dev, const NcfTrainView *v, int64_t epoch, int64_t s0,
                          int64_t n, int32_t *users, int32_t *items, float *labels);
void ncf_eval_batch_cuda(const Device *dev, const int32_t *test_items, const int32_t *test_negs,
                         int64_t n_neg, int64_t u0, int64_t n, int32_t *users, int32_t *items);
#endif

// Dispatchers (inline: see ncf_metric.h).
static inline void ncf_train_batch(const Device *dev, const NcfTrainView *v, int64_t epoch,
                                   int64_t s0, int64_t n, int32_t *users, int32_t *items,
                                   float *labels) {
  OP_DISPATCH(dev, ncf_train_batch, v, epoch, s0, n, users, items, labels);
}

static inline void ncf_eval_batch(const Device *dev, const int32_t *test_items,
                                  const int32_t *test_negs, int64_t n_neg, int64_t u0, int64_t n,
                                  int32_t *users, int32_t *items) {
  OP_DISPATCH(dev, ncf_eval_batch, test_items, test_negs, n_neg, u0, n, users, items);
}

#ifdef __cplusplus
}
#endif
