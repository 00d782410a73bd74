// Counter-based RNG: Philox known-answer vectors, distribution sanity, host
// draws, and CPU/GPU parity.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/device.h"
#include "tests/harness/test.h"

// Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
static void philox_known_answers(void) {
  struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
    RngBlock ctr = {{kat[k].ctr[0], kat[k].ctr[1], kat[k].ctr[2], kat[k].ctr[3]}};
    RngBlock out = rng_philox(ctr, kat[k].key[0], kat[k].key[1]);
    for (int w = 0; w < 4; w++)
      CHECK_MSG(out.w[w] == kat[k].out[w], "vector %zu word %d: %08x != %08x", k, w,
                out.w[w], kat[k].out[w]);
  }
}

static void streams_differ_and_repeat(void) {
  CHECK(rng_u32(1, 0, 5) == rng_u32(1, 0, 5));
  CHECK(rng_u32(1, 0, 5) != rng_u32(2, 0, 5));
  CHECK(rng_u32(1, 0, 5) != rng_u32(1, 1, 5));
  CHECK(rng_u32(1, 0, 5) != rng_u32(1, 0, 6));
}

static void uniform_moments(void) {
  enum { N = 200000 };
  float *x = malloc(N * sizeof(float));
  rng_fill_uniform_cpu(x, N, 42, 7, 0, -1.0f, 3.0f);
  double mean = 0, var = 0;
  int outside = 0;  // NaN included
  for (int i = 0; i < N; i++) {
    mean += x[i];
    outside += !(x[i] >= -1.0f && x[i] < 3.0f);
  }
  mean /= N;
  for (int i = 0; i < N; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= N;
  // Uniform(-1, 3): mean 1, variance 16/12; 5 standard errors of the mean.
  CHECK_NEAR(mean, 1.0, 5 * sqrt(16.0 / 12 / N));
  CHECK_NEAR(var, 16.0 / 12, 0.02);
  CHECK_EQ_INT(outside, 0);
  free(x);
}

static void normal_moments(void) {
  enum { N = 200000 };
  float *x = malloc(N * sizeof(float));
  rng_fill_normal_cpu(x, N, 3, 0, 0, 2.0f, 0.5f);
  double mean = 0, var = 0, tail = 0;
  for (int i = 0; i < N; i++) mean += x[i];
  mean /= N;
  for (int i = 0; i < N; i++) {
    var += (x[i] - mean) * (x[i] - mean);
    tail += fabs(x[i] - 2.0) > 1.0;  // beyond 2 sigma: 4.55%
  }
  var /= N;
  CHECK_NEAR(mean, 2.0, 5 * 0.5 / sqrt(N));
  CHECK_NEAR(var, 0.25, 0.005);
  CHECK_NEAR(tail / N, 0.0455, 0.003);
  free(x);
}

static void host_draws(void) {
  Rng a = rng_make(9, 1), b = rng_make(9, 1);
  for (int i = 0; i < 10; i++) CHECK(rng_next_u32(&a) == rng_u32(9, 1, (uint64_t)i));
  // rng_next_below is uniform: counts of 0..6 over 70000 draws.
  int counts[7] = {0};
  for (int i = 0; i < 70000; i++) counts[rng_next_below(&b, 7)]++;
  for (int k = 0; k < 7; k++) CHECK_NEAR(counts[k], 10000, 5 * sqrt(10000 * 6.0 / 7));
  // A shuffle is a permutation, and the same seed gives the same one.
  uint32_t p[100], q[100];
  for (int i = 0; i < 100; i++) p[i] = q[i] = (uint32_t)i;
  Rng s1 = rng_make(5, 0), s2 = rng_make(5, 0);
  rng_shuffle_u32(&s1, p, 100);
  rng_shuffle_u32(&s2, q, 100);
  int seen[100] = {0}, moved = 0;
  for (int i = 0; i < 100; i++) {
    seen[p[i]]++;
    moved += p[i] != (uint32_t)i;
  }
  for (int i = 0; i < 100; i++) CHECK(seen[i] == 1);
  CHECK(memcmp(p, q, sizeof p) == 0);
  CHECK(moved > 90);
}

// The batched blocks equal rng_block's one by one: a count that is not a
// multiple of the lanes, a start that crosses into the counter's high word,
// a 64-bit seed and stream.
static void batched_blocks(void) {
  enum { N = 37 };
  const uint64_t seeds[] = {1, 0x123456789abcdefull}, streams[] = {0, 0xfedcba9876543210ull};
  const uint64_t firsts[] = {0, 0xffffffffull - 20, 5};
  uint32_t out[4 * N];
  for (int s = 0; s < 2; s++)
    for (int f = 0; f < 3; f++) {
      rng_blocks_cpu(out, N, seeds[s], streams[s], firsts[f]);
      for (int j = 0; j < N; j++) {
        RngBlock b = rng_block(seeds[s], streams[s], firsts[f] + (uint64_t)j);
        for (int w = 0; w < 4; w++)
          CHECK_MSG(out[4 * j + w] == b.w[w], "seed %d start %d block %d word %d: %08x != %08x", s,
                    f, j, w, out[4 * j + w], b.w[w]);
      }
    }
}

static void gpu_matches_cpu(void) {
#if HAVE_CUDA
  if (!test_have_gpu()) test_skip("no GPU");
  enum { N = 100003 };  // odd, not a multiple of the block size
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  float *cpu = malloc(N * sizeof(float)), *gpu = malloc(N * sizeof(float));
  float *d = device_alloc(DEVICE_CUDA, N * sizeof(float));
  // A range whose width is not a power of two: lo + (hi - lo) u rounds twice.
  rng_fill_uniform_cpu(cpu, N, 1234, 5, 77, -1.5f, 2.25f);
  rng_fill_uniform_cuda(d, N, 1234, 5, 77, -1.5f, 2.25f, dev.stream);
  device_sync(&dev);
  device_copy(DEVICE_CPU, gpu, DEVICE_CUDA, d, N * sizeof(float));
  CHECK_MSG(memcmp(cpu, gpu, N * sizeof(float)) == 0, "uniform streams differ");
  rng_fill_normal_cpu(cpu, N, 99, 2, 0, 0.0f, 1.0f);
  rng_fill_normal_cuda(d, N, 99, 2, 0, 0.0f, 1.0f, dev.stream);
  device_sync(&dev);
  device_copy(DEVICE_CPU, gpu, DEVICE_CUDA, d, N * sizeof(float));
  // Same uniforms; logf/cosf on the GPU are within 2 ulp of the host's, so
  // |x| < 6 normals agree to ~1e-5 absolute.
  double worst = 0;
  for (int i = 0; i < N; i++) worst = test_worst(worst, fabs((double)cpu[i] - gpu[i]));
  CHECK_MSG(worst < 1e-4, "normal streams differ by %g", worst);
  device_free(DEVICE_CUDA, d);
  free(cpu);
  free(gpu);
  device_close(&dev);
#else
  test_skip("built without CUDA");
#endif
}

int main(void) {
  TEST_RUN(philox_known_answers);
  TEST_RUN(streams_differ_and_repeat);
  TEST_RUN(uniform_moments);
  TEST_RUN(normal_moments);
  TEST_RUN(host_draws);
  TEST_RUN(batched_blocks);
  TEST_RUN(gpu_matches_cpu);
  return test_finish();
}
