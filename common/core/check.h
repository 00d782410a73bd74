// check.h: error checks. One macro per library status type; each prints the
// failed expression, file:line, the rank and a hint where one helps, then exits
// non-zero. die_input() is for bad user input: one line naming the input.
#pragma once
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
#define NORETURN [[noreturn]]
extern "C" {
#else
#define NORETURN _Noreturn
#endif

// The rank printed in error messages; set once by the distributed layer.
void check_set_rank(int rank);
int check_rank(void);

// Who handles a fatal error. By default the process prints the message and
// exits with its status (1 a failed check, 2 bad input, 3 internal). A
// thread may hand its fatal errors to a hook instead: a loader worker must
// not exit the process while the trainer and the other workers still run,
// so its hook passes the message to the trainer's thread and ends the worker
// (the hook must not return; if it does, the process exits as usual). The
// hook is per thread; NULL removes it.
typedef void (*CheckErrorHook)(void *ctx, int status, const char *message);
void check_set_error_hook(CheckErrorHook hook, void *ctx);

// Runs once before the process exits on a fatal error of the main thread
// (or one passed to it: check_exit_with): the trainer logs run_stop aborted
// there once the run has started. NULL removes it.
void check_set_exit_hook(void (*hook)(void *ctx), void *ctx);

// Runs first on a fatal error of the main thread: stops the worker threads
// (the loaders'), so none runs on while the process exits under it.
void check_set_thread_stopper(void (*stop_threads)(void));

// Prints message (one or more lines, without the final newline), runs the
// exit hook and exits with status: how a worker's error ends the process
// once the trainer's thread has stopped the workers.
NORETURN void check_exit_with(int status, const char *message);

// Prints "error: <what> failed (<detail>) at file:line [rank r]" and a HINT line
// when hint is non-NULL, then exits with status 1.
NORETURN void check_fail(const char *what, const char *detail, const char *file,
                          int line, const char *hint);

// Bad input: "error: <name>: <message>" on one line, exit status 2.
NORETURN void die_input(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Internal error (a broken invariant): exit status 3.
#define DIE(...) check_die_impl(__FILE__, __LINE__, __VA_ARGS__)
NORETURN void check_die_impl(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK_TRUE(cond, hint)                                          \
  do {                                                                  \
    if (!(cond)) check_fail(#cond, "false", __FILE__, __LINE__, hint);  \
  } while (0)

// Files and the C library: errno-style calls returning NULL or -1.
#define CHECK_FILE(expr, path)                                          \
  do {                                                                  \
    if (!(expr)) check_errno(#expr, path, __FILE__, __LINE__);          \
  } while (0)
NORETURN void check_errno(const char *what, const char *path, const char *file,
                           int line);

void *check_malloc(size_t bytes, const char *file, int line);
void *check_calloc(size_t count, size_t size, const char *file, int line);
#define xmalloc(bytes) check_malloc((bytes), __FILE__, __LINE__)
void *check_realloc(void *p, size_t bytes, const char *file, int line);
char *check_strdup(const char *s, const char *file, int line);
#define xcalloc(count, size) check_calloc((count), (size), __FILE__, __LINE__)
#define xrealloc(p, bytes) check_realloc((p), (bytes), __FILE__, __LINE__)
#define xstrdup(s) check_strdup((s), __FILE__, __LINE__)

// LMDB (int status, mdb_strerror).
#define CHECK_LMDB(expr)                                                 \
  do {                                                                   \
    int check_rc_ = (expr);                                              \
    if (check_rc_ != 0) check_lmdb_fail(#expr, check_rc_, __FILE__, __LINE__); \
  } while (0)
NORETURN void check_lmdb_fail(const char *what, int rc, const char *file, int line);

// MPI (int status, MPI_Error_string).
#define CHECK_MPI(expr)                                                  \
  do {                                                                   \
    int check_rc_ = (expr);                                              \
    if (check_rc_ != 0) check_mpi_fail(#expr, check_rc_, __FILE__, __LINE__); \
  } while (0)
NORETURN void check_mpi_fail(const char *what, int rc, const char *file, int line);

// libjpeg-turbo (tjhandle status, tjGetErrorStr2).
#define CHECK_TJ(expr, handle)                                           \
  do {                                                                   \
    if ((expr) != 0) check_tj_fail(#expr, (handle), __FILE__, __LINE__); \
  } while (0)
NORETURN void check_tj_fail(const char *what, void *handle, const char *file, int line);

#ifdef __cplusplus
}
#endif
