// rng.c: host-side sequential draws and the CPU fills.
#include "core/rng.h"

Rng rng_make(uint64_t seed, uint64_t stream) {
  Rng r = {seed, stream, 0};
  return r;
}

uint32_t rng_next_u32(Rng *r) { return rng_u32(r->seed, r->stream, r->counter++); }

float rng_next_uniform(Rng *r) { return rng_u32_to_unit(rng_next_u32(r)); }

uint32_t rng_next_below(Rng *r, uint32_t n) {
  // Reject the top sliver of the u32 range that would favour small values.
  uint32_t limit = n ? (uint32_t)(-n) % n : 0;
  for (;;) {
    uint32_t u = rng_next_u32(r);
    if (u >= limit) return u % n;
  }
}

float rng_next_normal(Rng *r) {
  // Keep the counter even so each normal consumes one aligned pair.
  r->counter += r->counter & 1;
  float x = rng_normal(r->seed, r->stream, r->counter >> 1);
  r->counter += 2;
  return x;
}

void rng_shuffle_u32(Rng *r, uint32_t *items, size_t count) {
  for (size_t i = count; i > 1; i--) {
    uint32_t j = rng_next_below(r, (uint32_t)i);
    uint32_t tmp = items[i - 1];
    items[i - 1] = items[j];
    items[j] = tmp;
  }
}

void rng_fill_uniform_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream,
                          uint64_t offset, float lo, float hi) {
  for (int64_t i = 0; i < n; i++)
    out[i] = lo + (hi - lo) * rng_uniform(seed, stream, offset + (uint64_t)i);
}

void rng_fill_normal_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream,
                         uint64_t offset, float mean, float std) {
  for (int64_t i = 0; i < n; i++)
    out[i] = mean + std * rng_normal(seed, stream, offset + (uint64_t)i);
}
