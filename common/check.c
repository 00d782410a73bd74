// check.c: the failure paths behind the check macros.
#include "check.h"

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

// Exit without calling MPI_Finalize: a rank that fails must not wait for the
// others. Under mpirun, the launcher then ends the whole job.
static _Noreturn void check_exit(int status) {
  fflush(stdout);
  fflush(stderr);
  exit(status);
}

static void print_rank(void) {
  if (g_rank >= 0) fprintf(stderr, " [rank %d]", g_rank);
}

void check_fail(const char *what, const char *detail, const char *file, int line,
                const char *hint) {
  fprintf(stderr, "error: %s failed (%s) at %s:%d", what, detail, file, line);
  print_rank();
  fputc('\n', stderr);
  if (hint) fprintf(stderr, "HINT: %s\n", hint);
  check_exit(1);
}

void die_input(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "error: %s: ", name);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  print_rank();
  fputc('\n', stderr);
  check_exit(2);
}

void check_die_impl(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "internal error at %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  print_rank();
  fputc('\n', stderr);
  check_exit(3);
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
