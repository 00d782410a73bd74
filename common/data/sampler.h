// sampler.h: which records a rank reads in an epoch, and in what order.
// Training: the epoch's permutation of all records is drawn from (seed,
// epoch), and rank r of W takes every W-th position starting at r; every rank
// takes count / W records (the remainder, a different few each epoch, rests).
// Evaluation: no shuffle and no remainder dropped, so the ranks together read
// every record exactly once.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Sampler {
  int64_t count;  // records in the data set (< 2^32)
  uint64_t seed;
  int rank, world;
  bool shuffle;   // training: shuffle per epoch and give every rank as many
} Sampler;

// Records rank s->rank reads per epoch.
int64_t sampler_shard_count(const Sampler *s);
// Writes the record indices of this rank's shard of `epoch` into
// out[0 .. sampler_shard_count(s)).
void sampler_epoch_order(const Sampler *s, int64_t epoch, uint32_t *out);

#ifdef __cplusplus
}
#endif
