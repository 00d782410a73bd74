// sampler.c: per-epoch shuffle and rank sharding (sampler.h).
#include "data/sampler.h"

#include <stdlib.h>

#include "core/check.h"
#include "core/rng.h"

// Shuffle streams live in the top half of the stream space, apart from the
// per-sample augmentation streams (epoch << 40 | index).
static const uint64_t kShuffleStream = 1ull << 63;

int64_t sampler_shard_count(const Sampler *s) {
  if (s->world <= 0 || s->rank < 0 || s->rank >= s->world)
    DIE("sampler: rank %d of world %d", s->rank, s->world);
  int64_t even = s->count / s->world;
  if (s->shuffle && !s->keep_rest) return even;
  return even + (s->rank < s->count % s->world);
}

int64_t sampler_epoch_steps(int64_t count, int world, int64_t batch, bool keep_rest) {
  int64_t global = batch * world, whole = count / global, left = count % global;
  if (!keep_rest || left == 0) return whole;
  return left < world ? -1 : whole + 1;
}

void sampler_epoch_order(const Sampler *s, int64_t epoch, uint32_t *out) {
  if (s->count < 0 || s->count > (int64_t)UINT32_MAX) DIE("sampler: %lld records", (long long)s->count);
  int64_t n = sampler_shard_count(s);
  if (!s->shuffle) {
    for (int64_t k = 0; k < n; k++) out[k] = (uint32_t)(s->rank + k * s->world);
    return;
  }
  uint32_t *perm = xmalloc((size_t)s->count * sizeof *perm);  // (count,)
  for (int64_t i = 0; i < s->count; i++) perm[i] = (uint32_t)i;
  Rng rng = rng_make(s->seed, kShuffleStream | (uint64_t)epoch);
  rng_shuffle_u32(&rng, perm, (size_t)s->count);
  for (int64_t k = 0; k < n; k++) out[k] = perm[s->rank + k * s->world];
  free(perm);
}
