// test.h: the tiny test harness. A test program runs cases with TEST_RUN; each
// case prints one line, "PASS name", "FAIL name: where: what" or
// "SKIP name: why", and the program exits non-zero if any case failed.
// tests/run_tests.sh adds up the lines of every program.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/emu/emu_activity.h"

struct Device;

// Runs fn as case `name`; a failed CHECK marks the case failed and goes on, a
// failed REQUIRE or test_skip() ends the case at once. With TEST_ONLY set (case
// names, space- or comma-separated), every other case reports a skip.
void test_run(const char *name, void (*fn)(void));
#define TEST_RUN(fn) test_run(#fn, fn)
// Ends the program: 0 when no case failed.
int test_finish(void);

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void test_abort_case(void);
_Noreturn void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                        \
  do {                                                     \
    if (!(cond)) test_fail(__FILE__, __LINE__, "%s", #cond); \
  } while (0)
#define REQUIRE(cond)                                      \
  do {                                                     \
    if (!(cond)) {                                         \
      test_fail(__FILE__, __LINE__, "%s", #cond);          \
      test_abort_case();                                   \
    }                                                      \
  } while (0)
#define CHECK_MSG(cond, ...)                                   \
  do {                                                         \
    if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)
#define CHECK_EQ_INT(a, b)                                                        \
  do {                                                                            \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);               \
    if (check_a_ != check_b_)                                                     \
      test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, check_a_, check_b_); \
  } while (0)
#define CHECK_NEAR(a, b, tol)                                                      \
  do {                                                                             \
    double check_a_ = (double)(a), check_b_ = (double)(b);                         \
    if (!(fabs(check_a_ - check_b_) <= (tol)))                                     \
      test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b,      \
                check_a_, check_b_, (double)(tol));                                \
  } while (0)
#define CHECK_STR(a, b)                                                            \
  do {                                                                             \
    const char *check_a_ = (a), *check_b_ = (b);                                   \
    if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0)                 \
      test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,          \
                check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");   \
  } while (0)
#define CHECK_CONTAINS(haystack, needle)                                           \
  do {                                                                             \
    const char *check_h_ = (haystack), *check_n_ = (needle);                       \
    if (!check_h_ || !strstr(check_h_, check_n_))                                  \
      test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"",              \
                check_h_ ? check_h_ : "(null)", check_n_);                         \
  } while (0)

// Runs fn(ctx) in a child process and captures its stderr. Returns the exit
// status (128 + signal number when it died of a signal); its stderr goes to
// msg (cut to fit). For checking that bad input exits with a message.
int test_run_child(void (*fn)(void *), void *ctx, char *msg, size_t msg_bytes);
// The child must exit non-zero (not by a signal) and print needle to stderr
// (its first 8 KB: a trainer's effective config comes before its error).
#define CHECK_DIES_WITH(fn, ctx, needle)                                           \
  do {                                                                             \
    char check_msg_[8192];                                                         \
    int check_st_ = test_run_child((fn), (ctx), check_msg_, sizeof check_msg_);    \
    CHECK_MSG(check_st_ > 0 && check_st_ < 128, "%s: exit status %d (want 1..127)", \
              #fn, check_st_);                                                     \
    CHECK_CONTAINS(check_msg_, needle);                                            \
  } while (0)

// The larger of two errors, NaN when either is NaN: a NaN must fail every
// comparison, and fmax() or `if (err > worst)` would drop it.
double test_worst(double a, double b);
// Relative L2 error ||a - b|| / max(||b||, tiny) in double.
double test_rel_error(const float *a, const float *b, int64_t n);
// Checks err <= tol (a failure names what and dtype) and, when the
// environment names a file in TEST_ERROR_TABLE, appends a row to it:
// program, case, what, dtype, err, tol, tab-separated. Every GPU-against-CPU
// comparison goes through here, so tests/gpu_error_table.sh can print the
// measured error of every op and dtype beside its tolerance.
void test_check_error(const char *what, const char *dtype, double err, double tol);
// A fresh temporary directory (removed at exit); returns its path.
const char *test_tmpdir(void);
// Whether a usable GPU is present (CUDA build and a device).
bool test_have_gpu(void);

// What this thread asks of a GPU device between test_device_watch_begin and
// test_device_watch_end: host waits, allocations, and work queued on a stream
// other than dev's compute stream (tests/emu/emu_activity.h). Only the CUDA
// emulation (make test-emu) can count them; elsewhere begin returns false and
// the case should skip.
bool test_device_watch_begin(const struct Device *dev);
struct EmuActivity test_device_watch_end(void);
// Checks counts of a training step or an op call: `waits` host waits, no
// allocation, nothing queued off the compute stream; what names it in
// failures. Skips the case when counts is NULL (nothing was counted).
void test_check_device_activity(const char *what, const struct EmuActivity *counts, long waits);

// Fills x[0..n) with uniform numbers on [lo, hi) from (seed, stream 0).
void test_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi);

// Finite-difference gradient check. loss(ctx) runs the forward pass on the
// current inputs and returns a scalar in double (typically sum(out * w) for a
// fixed random w). For up to max_points indices i of x (spread evenly),
// compares grad[i] with (loss(x + eps e_i) - loss(x - eps e_i)) / (2 eps);
// returns the largest |analytic - numeric| / max(|numeric|, floor), NaN if any is.
//
// The forward is the op's own fp32 CPU code (the code under test; there is no
// fp64 copy of it): only the final sum is in double. So the numeric
// derivative carries two errors, and each caller's tolerance is derived from
// them in a comment beside it:
//   truncation  O(eps^2 f'''), zero for ops linear in x; larger where a step
//               of eps crosses a kink (ReLU, max pool), which callers avoid;
//   rounding    the fp32 outputs' rounding, about 6e-8 (2^-24) times |loss|
//               times a small growth factor, divided by 2 eps.
// eps = 1e-2..1e-3 keeps both near 1e-4..1e-3 of gradients of order 1; a
// wrong backward is off by order 1.
typedef double (*TestLossFn)(void *ctx);
double test_gradcheck(TestLossFn loss, void *ctx, float *x, const float *grad, int64_t n,
                      float eps, int max_points, double floor);

// Golden files: tensors computed by PyTorch (tests/golden/gen_*.py, all rewritten
// by `make goldens`) and committed, so CI checks CPU ops against PyTorch without
// PyTorch; tests/ops/test_goldens.py checks they still match their generators.
// Layout, little-endian: "GLD2", u32 meta length, meta (one line of key=value
// pairs: generator, torch, numpy, python, cpu, threads), u32 count, then per
// tensor: u32 name length, name, u32 ndim, i64 dims[ndim], f32 data. Integer
// tensors (indices, labels) are stored as exact f32 values.
typedef struct GoldenFile GoldenFile;
// Loads path relative to tests/golden/; a missing file fails the case.
GoldenFile *golden_load(const char *name);
// The tensor (fp32, CPU) called name; a missing name fails the case.
float *golden_get(GoldenFile *g, const char *name, int64_t *numel);
// Whether g holds a tensor called name.
bool golden_has(const GoldenFile *g, const char *name);
void golden_free(GoldenFile *g);
