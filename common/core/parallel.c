// parallel.c: the size of the CPU ops' OpenMP team (parallel.h).
#include "core/parallel.h"

#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int64_t parallel_min_work = 1 << 15;

void parallel_set_threads(int threads, int fallback) {
#ifdef _OPENMP
  const char *env = getenv("OMP_NUM_THREADS");
  if (threads <= 0) threads = env && atoi(env) > 0 ? atoi(env) : fallback;
  omp_set_num_threads(threads > 0 ? threads : 1);
#else
  (void)threads, (void)fallback;  // a build without OpenMP runs every op on one thread
#endif
}

int parallel_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int parallel_thread_index(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

void parallel_add_pieces(const double *part, int64_t pieces, int64_t width, double *total) {
  for (int64_t j = 0; j < width; j++) total[j] = 0;
  for (int64_t p = 0; p < pieces; p++)
    for (int64_t j = 0; j < width; j++) total[j] += part[p * width + j];
}
