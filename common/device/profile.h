// profile.h: where a training step's time goes, op by op. While profiling is
// on, every op called through its dispatcher (OP_DISPATCH in ops.h) and every
// region a trainer marks with PROFILE_REGION is timed: on CUDA by a pair of
// events recorded on dev->stream around it (no host sync inside the step; the
// times are read by profile_collect after it), on the CPU by the wall clock.
// Times are inclusive: a region that contains ops counts them too. Off, the
// cost is one branch per op.
//
//   profile_start(dev);
//   for each profiled step: step(); profile_collect(dev);
//   profile_report(stdout, steps, wall_s);
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

extern bool g_profile_on;

// Clears the totals and turns timing on.
void profile_start(const Device *dev);
// Turns timing off (the totals stay for profile_report).
void profile_stop(void);
// Around one op or region; name must outlive the profile (a literal).
void profile_begin(const Device *dev, const char *name);
void profile_end(const Device *dev, const char *name);
// After a step: waits for the device and adds the step's times to the totals.
void profile_collect(const Device *dev);

typedef struct ProfileRow {
  const char *name;
  int64_t calls;
  double ms;
} ProfileRow;
// The totals so far, largest first; returns the count (at most max).
int profile_rows(ProfileRow *rows, int max);
// Profiles `steps` calls of step(ctx, i), i = 0.., each a "training step"
// region followed by profile_collect, and writes profile_report to out
// (NULL: no report, e.g. on ranks other than 0). Leaves profiling off;
// steps <= 0 does nothing.
void profile_run(const Device *dev, int64_t steps, void (*step)(void *ctx, int64_t i), void *ctx,
                 FILE *out);
// Times step(ctx, i) for i = warmup .. warmup + steps - 1, after the
// untimed warmup calls i = 0 .. warmup - 1, the device synchronised before
// and after the timed ones; returns their wall seconds (a trainer's
// --bench_steps).
double profile_time_steps(const Device *dev, int64_t warmup, int64_t steps,
                          void (*step)(void *ctx, int64_t i), void *ctx);
// A table of the totals per step: name, calls per step, ms per step, share of
// wall_s (the steps' wall time). Rows below 0.5% are summed into one line.
void profile_report(FILE *out, int64_t steps, double wall_s);

#define PROFILE_REGION(dev, name, ...)               \
  do {                                               \
    bool profile_on_ = g_profile_on;                 \
    if (profile_on_) profile_begin((dev), (name));   \
    __VA_ARGS__;                                     \
    if (profile_on_) profile_end((dev), (name));     \
  } while (0)

#if HAVE_CUDA
// The CUDA half (profile_cuda.cu): a pool of events.
void profile_cuda_record(const Device *dev, int event);
float profile_cuda_elapsed_ms(int begin_event, int end_event);
int profile_cuda_pool_size(void);
#endif

#ifdef __cplusplus
}
#endif
