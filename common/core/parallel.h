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

// total[j] = the sum over p of part[p * width + j], p in order: the partial
// sums of `pieces` pieces of `width` values each, added the one way that
// keeps the bits independent of the team.
void parallel_add_pieces(const double *part, int64_t pieces, int64_t width, double *total);
