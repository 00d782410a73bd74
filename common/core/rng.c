// rng.c: host-side sequential draws and the CPU fills.
#include "core/rng.h"

#include "core/parallel.h"

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

// RNG_LANES blocks side by side, one array per counter word, so that each
// round is a loop over the lanes the compiler vectorises (two or four 32 x
// 32 -> 64 bit products an instruction); the same rounds as rng_philox.
enum { RNG_LANES = 16 };

// An AVX2 and a baseline version, chosen at load time (core/parallel.h).
CPU_VECTORISED
void rng_blocks_at_cpu(uint32_t *out, const uint64_t *blocks, int64_t n, uint64_t seed,
                       uint64_t stream) {
  for (int64_t done = 0; done < n; done += RNG_LANES) {
    int64_t lanes = n - done < RNG_LANES ? n - done : RNG_LANES;
    uint32_t c0[RNG_LANES], c1[RNG_LANES], c2[RNG_LANES], c3[RNG_LANES];
    for (int l = 0; l < RNG_LANES; l++) {
      uint64_t block = l < lanes ? blocks[done + l] : 0;  // idle lanes compute a block of 0
      c0[l] = (uint32_t)block;
      c1[l] = (uint32_t)(block >> 32);
      c2[l] = (uint32_t)stream;
      c3[l] = (uint32_t)(stream >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
      for (int l = 0; l < RNG_LANES; l++) {
        uint64_t p0 = (uint64_t)RNG_PHILOX_M0 * c0[l], p1 = (uint64_t)RNG_PHILOX_M1 * c2[l];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
        c0[l] = n0;
        c1[l] = (uint32_t)p1;
        c2[l] = n2;
        c3[l] = (uint32_t)p0;
      }
      k0 += RNG_PHILOX_W0;
      k1 += RNG_PHILOX_W1;
    }
    for (int l = 0; l < lanes; l++) {
      uint32_t *w = out + 4 * (done + l);
      w[0] = c0[l];
      w[1] = c1[l];
      w[2] = c2[l];
      w[3] = c3[l];
    }
  }
}

void rng_blocks_cpu(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first) {
  for (int64_t done = 0; done < n; done += RNG_LANES) {
    uint64_t blocks[RNG_LANES];
    int64_t lanes = n - done < RNG_LANES ? n - done : RNG_LANES;
    for (int l = 0; l < lanes; l++) blocks[l] = first + (uint64_t)done + (uint64_t)l;
    rng_blocks_at_cpu(out + 4 * done, blocks, lanes, seed, stream);
  }
}
