// progress.c: clocks and the progress line.
#include "core/progress.h"

#include <stdlib.h>
#include <time.h>

double time_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t time_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void progress_start(Progress *p, const char *label, int64_t total_steps) {
  p->label = label;
  p->total_steps = total_steps;
  // PROGRESS_INTERVAL_S lets tests and logs ask for more or fewer lines.
  const char *env = getenv("PROGRESS_INTERVAL_S");
  p->interval_s = env ? atof(env) : 10.0;
  p->start_s = time_now_s();
  p->last_print_s = p->start_s;
  p->last_samples = 0;
  p->out = stderr;
}

static void format_duration(double s, char *buf, size_t buf_bytes) {
  long total = (long)(s + 0.5);
  if (total >= 3600)
    snprintf(buf, buf_bytes, "%ldh%02ldm", total / 3600, total / 60 % 60);
  else if (total >= 60)
    snprintf(buf, buf_bytes, "%ldm%02lds", total / 60, total % 60);
  else
    snprintf(buf, buf_bytes, "%lds", total);
}

void progress_format(const Progress *p, int64_t step, double samples_per_s, double loss,
                     double elapsed_s, char *buf, size_t buf_bytes) {
  int n = snprintf(buf, buf_bytes, "%s: step %lld", p->label, (long long)step);
  if (p->total_steps > 0)
    n += snprintf(buf + n, buf_bytes - n, "/%lld (%d%%)", (long long)p->total_steps,
                  (int)(100 * step / p->total_steps));
  n += snprintf(buf + n, buf_bytes - n, "  %.1f samples/s", samples_per_s);
  if (loss >= 0) n += snprintf(buf + n, buf_bytes - n, "  loss %.4f", loss);
  if (p->total_steps > 0 && step > 0 && step < p->total_steps) {
    char eta[32];
    format_duration(elapsed_s * (double)(p->total_steps - step) / (double)step, eta, sizeof eta);
    snprintf(buf + n, buf_bytes - n, "  eta %s", eta);
  }
}

bool progress_due(const Progress *p) { return time_now_s() - p->last_print_s >= p->interval_s; }

void progress_update(Progress *p, int64_t step, int64_t samples, double loss) {
  double now = time_now_s();
  if (now - p->last_print_s < p->interval_s && step != p->total_steps) return;
  double window_s = now - p->last_print_s;
  double rate = window_s > 0 ? (double)(samples - p->last_samples) / window_s : 0;
  char line[256];
  progress_format(p, step, rate, loss, now - p->start_s, line, sizeof line);
  fprintf(p->out, "%s\n", line);
  fflush(p->out);
  p->last_print_s = now;
  p->last_samples = samples;
}
