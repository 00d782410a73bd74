// harness.c: the test harness behind test.h.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/rng.h"
#include "device/device.h"
#include "test.h"

static jmp_buf g_case_jump;
static const char *g_case_name;
static bool g_case_failed;
static int g_failed_cases;

void test_fail(const char *file, int line, const char *fmt, ...) {
  // The first failure names the case; later ones add detail lines.
  printf("%s %s: %s:%d: ", g_case_failed ? "  also" : "FAIL", g_case_name, file, line);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  g_case_failed = true;
}

void test_abort_case(void) { longjmp(g_case_jump, 1); }

void test_skip(const char *fmt, ...) {
  printf("SKIP %s: ", g_case_name);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  longjmp(g_case_jump, 2);
}

// TEST_ONLY="a b,c": run only the cases named (to look at one case alone, under
// a debugger or compute-sanitizer); each other case reports a skip.
static bool case_selected(const char *name) {
  const char *only = getenv("TEST_ONLY");
  if (!only || !only[0]) return true;
  size_t len = strlen(name);
  for (const char *p = only; (p = strstr(p, name)) != NULL; p += len) {
    bool starts = p == only || p[-1] == ' ' || p[-1] == ',';
    bool ends = p[len] == 0 || p[len] == ' ' || p[len] == ',';
    if (starts && ends) return true;
  }
  return false;
}

void test_run(const char *name, void (*fn)(void)) {
  g_case_name = name;
  g_case_failed = false;
  if (!case_selected(name)) {
    printf("SKIP %s: not named in TEST_ONLY\n", name);
    fflush(stdout);
    return;
  }
  int jumped = setjmp(g_case_jump);
  if (jumped == 0) fn();
  // A case that failed and then skipped is a failure: the skip must not hide it.
  if (jumped == 2 && !g_case_failed) return;  // skipped, already reported
  if (g_case_failed)
    g_failed_cases++;
  else
    printf("PASS %s\n", name);
  fflush(stdout);
}

int test_finish(void) { return g_failed_cases ? 1 : 0; }

// A forked child that dies through exit() (as die() does) leaves at once with
// its status: the exit handlers and library destructors it inherited are the
// parent's (the CUDA runtime's, a tool's such as compute-sanitizer's), and run
// in a copy of the process they can crash or hang it. Registered in the child,
// this runs before every handler inherited from the parent; it flushes the
// child's open streams, as exit() would have.
static void child_exit_now(int status, void *arg) {
  (void)arg;
  fflush(NULL);
  _exit(status);
}

int test_run_child(void (*fn)(void *), void *ctx, char *msg, size_t msg_bytes) {
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(msg, msg_bytes, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    on_exit(child_exit_now, NULL);
    close(fds[0]);
    dup2(fds[1], 2);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    fn(ctx);
    _exit(0);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t got;
  char chunk[512];
  msg[0] = 0;
  while ((got = read(fds[0], chunk, sizeof chunk)) > 0) {
    for (ssize_t i = 0; i < got && len + 1 < msg_bytes; i++) msg[len++] = chunk[i];
    msg[len] = 0;
  }
  close(fds[0]);
  while (len > 0 && msg[len - 1] == '\n') msg[--len] = 0;
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

double test_worst(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

double test_rel_error(const float *a, const float *b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)b[i];
    if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    diff += d * d;
    norm += (double)b[i] * b[i];
  }
  return sqrt(diff) / fmax(sqrt(norm), 1e-30);
}

void test_check_error(const char *what, const char *dtype, double err, double tol) {
  CHECK_MSG(err <= tol, "%s (%s): relative error %.3g > %.3g", what, dtype, err, tol);
  const char *path = getenv("TEST_ERROR_TABLE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) {
    CHECK_MSG(false, "TEST_ERROR_TABLE %s: cannot open: %s", path, strerror(errno));
    return;
  }
  fprintf(f, "%s\t%s\t%s\t%s\t%.3g\t%.3g\n", program_invocation_short_name, g_case_name, what,
          dtype, err, tol);
  fclose(f);
}

static char g_tmpdir[256];
static pid_t g_tmpdir_owner;

static void remove_tmpdir(void) {
  // A child from test_run_child that exits through exit() must not remove it.
  if (getpid() != g_tmpdir_owner) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_tmpdir);
}

const char *test_tmpdir(void) {
  if (!g_tmpdir[0]) {
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/mlsuite-test-XXXXXX");
    if (!mkdtemp(g_tmpdir)) {
      perror("mkdtemp");
      exit(1);
    }
    g_tmpdir_owner = getpid();
    atexit(remove_tmpdir);
  }
  return g_tmpdir;
}

bool test_have_gpu(void) { return device_cuda_available(); }

// Weak: defined only in a build against the CUDA emulation.
extern void emu_activity_begin(void *stream) __attribute__((weak));
extern EmuActivity emu_activity_end(void) __attribute__((weak));

bool test_device_watch_begin(const Device *dev) {
  if (!emu_activity_begin || !emu_activity_end) return false;
  emu_activity_begin(dev->stream);
  return true;
}

EmuActivity test_device_watch_end(void) {
  return emu_activity_end ? emu_activity_end() : (EmuActivity){0};
}

void test_check_device_activity(const char *what, const EmuActivity *counts, long waits) {
  if (!counts) test_skip("counting host waits needs the CUDA emulation (make test-emu)");
  CHECK_MSG(counts->host_waits == waits, "%s: %ld host waits (first: %s), expected %ld", what,
            counts->host_waits, counts->first_wait, waits);
  CHECK_MSG(counts->allocations == 0, "%s: %ld device allocations", what, counts->allocations);
  CHECK_MSG(counts->other_streams == 0, "%s: %ld calls queued off the compute stream", what,
            counts->other_streams);
}

void test_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi) {
  rng_fill_uniform_cpu(x, n, seed, 0, 0, lo, hi);
}

double test_gradcheck(TestLossFn loss, void *ctx, float *x, const float *grad, int64_t n,
                      float eps, int max_points, double floor) {
  double worst = 0;
  int64_t step = n > max_points ? n / max_points : 1;
  for (int64_t i = 0; i < n; i += step) {
    float saved = x[i];
    x[i] = saved + eps;
    double up = loss(ctx);
    x[i] = saved - eps;
    double down = loss(ctx);
    x[i] = saved;
    double numeric = (up - down) / (2.0 * eps);
    double err = fabs((double)grad[i] - numeric) / fmax(fabs(numeric), floor);
    worst = test_worst(worst, err);
  }
  return worst;
}

typedef struct GoldenTensor {
  char name[128];
  int64_t numel;
  float *data;
} GoldenTensor;

struct GoldenFile {
  char path[512];
  char *meta;  // "generator=tests/golden/gen_conv.py torch=...", for messages
  int count;
  GoldenTensor *tensors;
};

static bool read_exact(FILE *f, void *dst, size_t bytes) { return fread(dst, 1, bytes, f) == bytes; }

GoldenFile *golden_load(const char *name) {
  GoldenFile *g = calloc(1, sizeof *g);
  // Test programs run from the repository root (tests/run_tests.sh cds there).
  snprintf(g->path, sizeof g->path, "tests/golden/%s", name);
  FILE *f = fopen(g->path, "rb");
  if (!f) {
    test_fail(__FILE__, __LINE__, "golden file %s: %s", g->path, strerror(errno));
    golden_free(g);
    test_abort_case();
  }
  char magic[4];
  uint32_t meta_len = 0, count = 0;
  bool ok = read_exact(f, magic, 4) && memcmp(magic, "GLD2", 4) == 0 &&
            read_exact(f, &meta_len, 4) && meta_len < 4096;
  g->meta = calloc(ok ? meta_len + 1 : 1, 1);
  ok = ok && read_exact(f, g->meta, meta_len) && read_exact(f, &count, 4);
  g->tensors = calloc(count ? count : 1, sizeof(GoldenTensor));
  for (uint32_t i = 0; ok && i < count; i++) {
    GoldenTensor *t = &g->tensors[i];
    uint32_t name_len = 0, ndim = 0;
    ok = read_exact(f, &name_len, 4) && name_len < sizeof t->name &&
         read_exact(f, t->name, name_len) && read_exact(f, &ndim, 4) && ndim <= 8;
    t->numel = 1;
    for (uint32_t d = 0; ok && d < ndim; d++) {
      int64_t dim;
      ok = read_exact(f, &dim, 8) && dim >= 0;
      t->numel *= dim;
    }
    if (!ok) break;
    t->data = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    ok = read_exact(f, t->data, (size_t)t->numel * sizeof(float));
    g->count = (int)i + 1;
  }
  fclose(f);
  if (!ok) {
    test_fail(__FILE__, __LINE__, "golden file %s: truncated or not a GLD2 file (make goldens)",
              g->path);
    golden_free(g);
    test_abort_case();
  }
  return g;
}

float *golden_get(GoldenFile *g, const char *name, int64_t *numel) {
  for (int i = 0; i < g->count; i++)
    if (strcmp(g->tensors[i].name, name) == 0) {
      if (numel) *numel = g->tensors[i].numel;
      return g->tensors[i].data;
    }
  test_fail(__FILE__, __LINE__, "golden tensor '%s' not in %s (%s)", name, g->path, g->meta);
  test_abort_case();
}

bool golden_has(const GoldenFile *g, const char *name) {
  for (int i = 0; i < g->count; i++)
    if (strcmp(g->tensors[i].name, name) == 0) return true;
  return false;
}

void golden_free(GoldenFile *g) {
  if (!g) return;
  for (int i = 0; i < g->count; i++) free(g->tensors[i].data);
  free(g->tensors);
  free(g->meta);
  free(g);
}
