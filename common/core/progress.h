// progress.h: clocks and the progress line for long work.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

double time_now_s(void);      // monotonic seconds
int64_t time_unix_ms(void);   // wall clock, ms since the Unix epoch

// A progress line on stderr at most every interval_s seconds:
//   train: step 120/1000 (12%)  812.3 samples/s  loss 2.3141  eta 1m05s
typedef struct Progress {
  const char *label;
  int64_t total_steps;
  double interval_s;
  double start_s;
  double last_print_s;
  int64_t last_samples;
  FILE *out;
} Progress;

void progress_start(Progress *p, const char *label, int64_t total_steps);
// Whether progress_update would print now: lets a trainer read a device-side
// loss (a sync) only when it is shown.
bool progress_due(const Progress *p);
// samples: samples done since progress_start; loss < 0 hides the loss field.
void progress_update(Progress *p, int64_t step, int64_t samples, double loss);
// Formats the line (no newline) into buf; used by progress_update and tests.
void progress_format(const Progress *p, int64_t step, double samples_per_s, double loss,
                     double elapsed_s, char *buf, size_t buf_bytes);

#ifdef __cplusplus
}
#endif
