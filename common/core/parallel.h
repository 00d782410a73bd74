// parallel.h: the worker threads of the CPU ops - OpenMP's team, one per
// process - and the rules that keep their results independent of how many
// threads there are.
//
// An op splits its work with `#pragma omp parallel for` over independent
// outputs (rows, channels, elements). Where it sums across pieces, the pieces
// are fixed by the data's shape alone (parallel_pieces) and their partial
// sums are added in piece order, so 1, 2 or 16 threads give the same bits.
#pragma once
#include <stdint.h>
#include <string.h>

// A loop over fewer elements than this runs on the calling thread: waking
// the team costs microseconds. 32768 by default; tests set 1, so that every
// loop runs on the team whatever its size.
extern int64_t parallel_min_work;

// The team's size for the ops: threads > 0, else OMP_NUM_THREADS when set,
// else `fallback` (a rank's share of the cores, device_cpu_share).
void parallel_set_threads(int threads, int fallback);
int parallel_threads(void);
// Inside a parallel region: this thread's index in the team (0 outside one).
int parallel_thread_index(void);

// How many pieces of `grain` items [0, n) is cut into (the last may be
// shorter); piece p is [p * grain, min(n, (p + 1) * grain)).
static inline int64_t parallel_pieces(int64_t n, int64_t grain) {
  return n <= 0 ? 0 : (n + grain - 1) / grain;
}
// The end of piece p: min(n, (p + 1) * grain).
static inline int64_t parallel_piece_end(int64_t n, int64_t grain, int64_t p) {
  return n < (p + 1) * grain ? n : (p + 1) * grain;
}

// total[j] = the sum over p of part[p * width + j], p in order: the partial
// sums of `pieces` pieces of `width` values each, added the one way that
// keeps the bits independent of the team.
void parallel_add_pieces(const double *part, int64_t pieces, int64_t width, double *total);

// CPU_VECTORISED before a function: with GCC (the build's compiler) it is
// compiled twice, for AVX2 and for the x86-64 baseline, the one the CPU can
// run chosen at load time, and vectorised (which -O2 does only when asked).
// Both give the same bits: the build keeps a * b + c two roundings (-std=c11
// turns off contraction into fused multiply-adds) and a vectorised loop must
// keep each sum in its order. Clang (the fuzz build) vectorises at -O2 by
// itself and gets the baseline. A parallel region's body is a function of
// its own that does not inherit this: call a CPU_VECTORISED one from it.
#if defined(__GNUC__) && !defined(__clang__)
#define CPU_VECTORISED __attribute__((target_clones("avx2", "default"), optimize("tree-vectorize")))
#else
#define CPU_VECTORISED
#endif

// v where mask is all ones, +0 where it is 0: a select done on the bits. GCC
// vectorises a loop with it where a conditional (`keep ? v : 0`) next to a
// conversion or a wider accumulator leaves the loop scalar.
static inline float cpu_float_masked(float v, uint32_t mask) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= mask;
  memcpy(&v, &bits, sizeof bits);
  return v;
}

// a where c is true, else b, picked on the bits as above: both are computed
// before, so the loop has no branch to keep it scalar.
static inline float cpu_float_select(int c, float a, float b) {
  uint32_t mask = -(uint32_t)(c != 0), a_bits, b_bits;
  memcpy(&a_bits, &a, sizeof a_bits);
  memcpy(&b_bits, &b, sizeof b_bits);
  a_bits = (a_bits & mask) | (b_bits & ~mask);
  memcpy(&a, &a_bits, sizeof a);
  return a;
}
