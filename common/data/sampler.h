// sampler.h: which records a rank reads in an epoch, and in what order.
// Training: the epoch's permutation of all records is drawn from (seed,
// epoch), and rank r of W takes every W-th position starting at r. Either
// every rank takes count / W records (the remainder, a different few each
// epoch, rests), or with keep_rest the first count % W ranks take one more,
// so that the ranks together read every record once an epoch.
// Evaluation: no shuffle and no remainder dropped, so the ranks together read
// every record exactly once.
//
// Steps: global step s is positions [s B, (s + 1) B) of the epoch's
// permutation (B = W x the batch per rank), rank r's part of it the positions
// that are r modulo W. Keeping the rest, the last step holds the count % B
// records left; every rank must take a part of it, or the ranks would not
// agree on the number of steps (each step is an all-reduce).
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
  bool shuffle;   // training: shuffle per epoch
  bool keep_rest; // training: the count % world records left over go to the
                  // first ranks, rather than resting this epoch
} Sampler;

// Records rank s->rank reads per epoch.
int64_t sampler_shard_count(const Sampler *s);
// Writes the record indices of this rank's shard of `epoch` into
// out[0 .. sampler_shard_count(s)).
void sampler_epoch_order(const Sampler *s, int64_t epoch, uint32_t *out);
// The training steps of an epoch of `count` records over `world` ranks at
// `batch` records per rank and step: count / (world x batch) whole steps,
// and with keep_rest one more, shorter, for what is left. The same on every
// rank; -1 when the records left are fewer than the ranks (some rank would
// have no part in the last step).
int64_t sampler_epoch_steps(int64_t count, int world, int64_t batch, bool keep_rest);

#ifdef __cplusplus
}
#endif
