// check.c: the failure paths behind the check macros.
#include "core/check.h"

#include <errno.h>
#include <lmdb.h>
#include <stdarg.h>
#include <string.h>
#include <turbojpeg.h>
#if HAVE_MPI
#include <mpi.h>
#endif
#if HAVE_CUDA
#include <cuda_runtime.h>
#endif

static int g_rank = -1;

void check_set_rank(int rank) { g_rank = rank; }
int check_rank(void) { return g_rank; }

// The message of a fatal error is formatted whole before anyone sees it, so
// that a hook can pass it on; longer messages are cut.
enum { kMessageBytes = 2048 };

static _Thread_local CheckErrorHook t_error_hook;
static _Thread_local void *t_error_ctx;
static void (*g_stop_threads)(void);
static void (*g_exit_hook)(void *);
static void *g_exit_ctx;

void check_set_error_hook(CheckErrorHook hook, void *ctx) {
  t_error_hook = hook;
  t_error_ctx = ctx;
}

void check_set_thread_stopper(void (*stop_threads)(void)) { g_stop_threads = stop_threads; }

void check_set_exit_hook(void (*hook)(void *ctx), void *ctx) {
  g_exit_hook = hook;
  g_exit_ctx = ctx;
}

// Exit without calling MPI_Finalize: a rank that fails must not wait for the
// others. Under mpirun, the launcher then ends the whole job.
void check_exit_with(int status, const char *message) {
  fprintf(stderr, "%s\n", message);
  void (*stop)(void) = g_stop_threads;
  g_stop_threads = NULL;
  if (stop) stop();
  void (*hook)(void *) = g_exit_hook;
  g_exit_hook = NULL;  // an error inside the hook must not run it again
  if (hook) hook(g_exit_ctx);
  fflush(stdout);
  fflush(stderr);
  exit(status);
}

static _Noreturn void raise_error(int status, const char *message) {
  if (t_error_hook) t_error_hook(t_error_ctx, status, message);
  check_exit_with(status, message);
}

typedef struct Message {
  char text[kMessageBytes];
  size_t len;
} Message;

static void add(Message *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vadd(Message *m, const char *fmt, va_list ap) {
  if (m->len >= sizeof m->text - 1) return;
  int n = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
  if (n > 0) m->len += (size_t)n;
  if (m->len > sizeof m->text - 1) m->len = sizeof m->text - 1;
}
static void add(Message *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vadd(m, fmt, ap);
  va_end(ap);
}

static void add_rank(Message *m) {
  if (g_rank >= 0) add(m, " [rank %d]", g_rank);
}

void check_fail(const char *what, const char *detail, const char *file, int line,
                const char *hint) {
  Message m = {.len = 0};
  add(&m, "error: %s failed (%s) at %s:%d", what, detail, file, line);
  add_rank(&m);
  if (hint) add(&m, "\nHINT: %s", hint);
  raise_error(1, m.text);
}

void die_input(const char *name, const char *fmt, ...) {
  Message m = {.len = 0};
  add(&m, "error: %s: ", name);
  va_list ap;
  va_start(ap, fmt);
  vadd(&m, fmt, ap);
  va_end(ap);
  add_rank(&m);
  raise_error(2, m.text);
}

void check_die_impl(const char *file, int line, const char *fmt, ...) {
  Message m = {.len = 0};
  add(&m, "internal error at %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vadd(&m, fmt, ap);
  va_end(ap);
  add_rank(&m);
  raise_error(3, m.text);
}

void check_errno(const char *what, const char *path, const char *file, int line) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s: %s", path ? path : "?", strerror(errno));
  check_fail(what, detail, file, line, NULL);
}

void *check_malloc(size_t bytes, const char *file, int line) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    char detail[64];
    snprintf(detail, sizeof detail, "%zu bytes", bytes);
    check_fail("malloc", detail, file, line, "the host is out of memory");
  }
  return p;
}

void *check_realloc(void *p, size_t bytes, const char *file, int line) {
  void *q = realloc(p, bytes ? bytes : 1);
  if (!q) {
    char detail[64];
    snprintf(detail, sizeof detail, "%zu bytes", bytes);
    check_fail("realloc", detail, file, line, "the host is out of memory");
  }
  return q;
}

char *check_strdup(const char *s, const char *file, int line) {
  size_t n = strlen(s) + 1;
  return memcpy(check_malloc(n, file, line), s, n);
}

void *check_calloc(size_t count, size_t size, const char *file, int line) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) {
    char detail[64];
    snprintf(detail, sizeof detail, "%zu x %zu bytes", count, size);
    check_fail("calloc", detail, file, line, "the host is out of memory");
  }
  return p;
}

void check_lmdb_fail(const char *what, int rc, const char *file, int line) {
  const char *hint = rc == MDB_MAP_FULL ? "the LMDB map size is too small for this data set"
                     : rc == ENOENT     ? "the LMDB directory does not exist or has no data.mdb"
                                        : NULL;
  check_fail(what, mdb_strerror(rc), file, line, hint);
}

void check_mpi_fail(const char *what, int rc, const char *file, int line) {
  char detail[256] = "MPI error";
#if HAVE_MPI
  int len = 0;
  MPI_Error_string(rc, detail, &len);
#else
  snprintf(detail, sizeof detail, "MPI error %d", rc);
#endif
  check_fail(what, detail, file, line, NULL);
}

void check_tj_fail(const char *what, void *handle, const char *file, int line) {
  check_fail(what, tjGetErrorStr2((tjhandle)handle), file, line, NULL);
}

#if HAVE_CUDA
const char *check_cuda_hint(int cuda_error) {
  switch ((cudaError_t)cuda_error) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
      return "no usable GPU: run with --device=cpu, or check the driver (nvidia-smi)";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower the batch size";
    case cudaErrorNoKernelImageForDevice:
      return "this build has code for sm_80 and sm_90 only";
    default:
      return NULL;
  }
}
#endif
