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
#define xcalloc(count, size) check_calloc((count), (size), __FILE__, __LINE__)

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
