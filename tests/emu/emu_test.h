// emu_test.h: the case lines of the emulator's own test programs, in the
// form tests/run_tests.sh counts: "PASS name" or "FAIL name: what".
#pragma once
#include <cmath>
#include <cstdarg>
#include <cstdio>

static int g_failures;

static void check(bool ok, const char *name, const char *fmt, ...) {
  if (ok) {
    printf("PASS %s\n", name);
    return;
  }
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  printf("FAIL %s: %s\n", name, what);
  g_failures++;
}

// The larger error, NaN when either is: std::fmax would report a NaN error
// as the other one.
static inline double worst_of(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : a > b ? a : b;
}
