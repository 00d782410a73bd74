// profile.c: per-op timing (profile.h). A step's spans are kept in order of
// their begin; CUDA spans hold event indices that profile_collect resolves.
#include "device/profile.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/progress.h"

bool g_profile_on;

#define PROFILE_MAX_NAMES 256
#define PROFILE_MAX_SPANS 4096  // per step; CUDA needs two events a span

typedef struct Span {
  int row;            // index into g_rows
  int begin, end;     // CUDA: event indices; -1 end: still open
  double begin_s;     // CPU: wall clock at begin
  double ms;          // CPU: measured at end
} Span;

static ProfileRow g_rows[PROFILE_MAX_NAMES];
static int g_n_rows;
static Span g_spans[PROFILE_MAX_SPANS];
static int g_n_spans;
static bool g_overflow_warned;

static int row_of(const char *name) {
  for (int i = 0; i < g_n_rows; i++)
    if (g_rows[i].name == name || strcmp(g_rows[i].name, name) == 0) return i;
  if (g_n_rows == PROFILE_MAX_NAMES) DIE("profile: more than %d names", PROFILE_MAX_NAMES);
  g_rows[g_n_rows] = (ProfileRow){name, 0, 0.0};
  return g_n_rows++;
}

void profile_start(const Device *dev) {
  (void)dev;
  memset(g_rows, 0, sizeof g_rows);
  g_n_rows = 0;
  g_n_spans = 0;
  g_profile_on = true;
}

void profile_stop(void) { g_profile_on = false; }

#if HAVE_CUDA
static bool is_cuda(const Device *dev) { return dev->kind == DEVICE_CUDA; }
#endif

static int span_capacity(const Device *dev) {
#if HAVE_CUDA
  if (is_cuda(dev)) {
    int events = profile_cuda_pool_size() / 2;
    return events < PROFILE_MAX_SPANS ? events : PROFILE_MAX_SPANS;
  }
#endif
  (void)dev;
  return PROFILE_MAX_SPANS;
}

void profile_begin(const Device *dev, const char *name) {
  if (g_n_spans == span_capacity(dev)) {
    if (!g_overflow_warned)
      fprintf(stderr, "profile: more than %d spans in a step; the rest are not timed\n",
              g_n_spans);
    g_overflow_warned = true;
    return;
  }
  Span *s = &g_spans[g_n_spans++];
  *s = (Span){.row = row_of(name), .begin = -1, .end = -1};
#if HAVE_CUDA
  if (is_cuda(dev)) {
    s->begin = 2 * (int)(s - g_spans);
    profile_cuda_record(dev, s->begin);
    return;
  }
#endif
  s->begin_s = time_now_s();
}

void profile_end(const Device *dev, const char *name) {
  int row = row_of(name);
  // The innermost open span of this name.
  for (int i = g_n_spans - 1; i >= 0; i--) {
    Span *s = &g_spans[i];
    if (s->row != row || s->end >= 0) continue;
    s->end = 2 * i + 1;
#if HAVE_CUDA
    if (is_cuda(dev)) {
      profile_cuda_record(dev, s->end);
      return;
    }
#endif
    (void)dev;
    s->ms = 1e3 * (time_now_s() - s->begin_s);
    return;
  }
}

void profile_collect(const Device *dev) {
#if HAVE_CUDA
  if (is_cuda(dev) && g_n_spans > 0) {
    device_sync(dev);
    for (int i = 0; i < g_n_spans; i++)
      if (g_spans[i].end >= 0) g_spans[i].ms = profile_cuda_elapsed_ms(g_spans[i].begin, g_spans[i].end);
  }
#endif
  (void)dev;
  for (int i = 0; i < g_n_spans; i++) {
    if (g_spans[i].end < 0) continue;  // never closed: not counted
    g_rows[g_spans[i].row].calls++;
    g_rows[g_spans[i].row].ms += g_spans[i].ms;
  }
  g_n_spans = 0;
}

static int by_time(const void *a, const void *b) {
  double d = ((const ProfileRow *)b)->ms - ((const ProfileRow *)a)->ms;
  return (d > 0) - (d < 0);
}

int profile_rows(ProfileRow *rows, int max) {
  int n = g_n_rows < max ? g_n_rows : max;
  ProfileRow all[PROFILE_MAX_NAMES];
  memcpy(all, g_rows, (size_t)g_n_rows * sizeof *all);
  qsort(all, (size_t)g_n_rows, sizeof *all, by_time);
  memcpy(rows, all, (size_t)n * sizeof *rows);
  return n;
}

void profile_report(FILE *out, int64_t steps, double wall_s) {
  ProfileRow rows[PROFILE_MAX_NAMES];
  int n = profile_rows(rows, PROFILE_MAX_NAMES);
  double step_ms = 1e3 * wall_s / (double)steps, small_ms = 0;
  int64_t small_calls = 0;
  fprintf(out, "profile: %lld steps, %.3f ms a step (times are inclusive: a region counts its ops)\n",
          (long long)steps, step_ms);
  fprintf(out, "  %-28s %10s %12s %8s\n", "op or region", "calls/step", "ms/step", "share");
  for (int i = 0; i < n; i++) {
    double ms = rows[i].ms / (double)steps;
    if (ms < 0.005 * step_ms) {
      small_ms += ms;
      small_calls += rows[i].calls;
      continue;
    }
    fprintf(out, "  %-28s %10.1f %12.3f %7.1f%%\n", rows[i].name,
            (double)rows[i].calls / (double)steps, ms, 100.0 * ms / step_ms);
  }
  if (small_calls)
    fprintf(out, "  %-28s %10.1f %12.3f %7.1f%%\n", "(each under 0.5%)",
            (double)small_calls / (double)steps, small_ms, 100.0 * small_ms / step_ms);
}

double profile_time_steps(const Device *dev, int64_t warmup, int64_t steps,
                          void (*step)(void *ctx, int64_t i), void *ctx) {
  for (int64_t i = 0; i < warmup; i++) step(ctx, i);
  device_sync(dev);
  double t0 = time_now_s();
  for (int64_t i = 0; i < steps; i++) step(ctx, warmup + i);
  device_sync(dev);
  return time_now_s() - t0;
}

void profile_run(const Device *dev, int64_t steps, void (*step)(void *ctx, int64_t i), void *ctx,
                 FILE *out) {
  if (steps <= 0) return;
  profile_start(dev);
  double start = time_now_s();
  for (int64_t i = 0; i < steps; i++) {
    PROFILE_REGION(dev, "training step", step(ctx, i));
    profile_collect(dev);
  }
  double seconds = time_now_s() - start;
  profile_stop();
  if (out) profile_report(out, steps, seconds);
}
