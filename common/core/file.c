// file.c: whole-file reads and writes, directory creation.
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

uint8_t *file_read(const char *path, size_t *n_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) die_input(path, "cannot open: %s", strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fileno(f), &st) == 0, path);
  *n_bytes = (size_t)st.st_size;
  uint8_t *bytes = xmalloc(*n_bytes + 1);
  if (fread(bytes, 1, *n_bytes, f) != *n_bytes) die_input(path, "read failed: %s", strerror(errno));
  bytes[*n_bytes] = 0;
  fclose(f);
  return bytes;
}

// mkdir -p of path's parents; an error names flag, or the directory when
// flag is NULL.
static void make_parents(const char *flag, const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      if (flag) die_input(flag, "cannot create directory %s: %s", dir, strerror(errno));
      die_input(dir, "cannot create directory: %s", strerror(errno));
    }
    *p = '/';
  }
}

void file_make_parent_dirs(const char *path) { make_parents(NULL, path); }

void file_make_parent_dirs_for(const char *flag, const char *path) { make_parents(flag, path); }

void file_check_writable(const char *flag, const char *path) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    die_input(flag, "%s is not a file (a directory?)", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) die_input(flag, "cannot write %s: %s", tmp, strerror(errno));
  fclose(f);
  unlink(tmp);
}

void file_write_atomic(const char *path, const void *bytes, size_t n) {
  AtomicFile a;
  atomic_file_begin(&a, path);
  atomic_file_write(&a, bytes, n);
  atomic_file_commit(&a);
}

void file_make_dirs(const char *dir) {
  file_make_parent_dirs(dir);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die_input(dir, "cannot create directory: %s", strerror(errno));
}

void file_write(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK_FILE(f, path);
  CHECK_FILE(fwrite(bytes, 1, n, f) == n, path);
  CHECK_FILE(fclose(f) == 0, path);
}

void atomic_file_begin(AtomicFile *a, const char *path) {
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
  if (unlink(a->tmp) != 0 && errno != ENOENT)
    die_input(a->tmp, "cannot remove this stale temporary file: %s", strerror(errno));
  a->f = fopen(a->tmp, "wb");
  if (!a->f) die_input(a->tmp, "cannot create: %s", strerror(errno));
}

// A failed write or flush: the temporary file goes (a full disk gets its
// space back), PATH stays as it was, and the error says why.
static NORETURN void atomic_file_fail(AtomicFile *a) {
  int err = errno;
  if (a->f) fclose(a->f);
  a->f = NULL;
  unlink(a->tmp);
  die_input(a->path, "cannot write: %s (left as it was)", strerror(err));
}

void atomic_file_write(AtomicFile *a, const void *bytes, size_t n) {
  if (fwrite(bytes, 1, n, a->f) != n) atomic_file_fail(a);
}

void atomic_file_puts(AtomicFile *a, const char *text) { atomic_file_write(a, text, strlen(text)); }

void atomic_file_printf(AtomicFile *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vfprintf(a->f, fmt, ap);
  va_end(ap);
  if (n < 0) atomic_file_fail(a);
}

void atomic_file_write_at(AtomicFile *a, uint64_t offset, const void *bytes, size_t n) {
  if (fseeko(a->f, (off_t)offset, SEEK_SET) != 0) atomic_file_fail(a);
  atomic_file_write(a, bytes, n);
}

// The rename is durable only once the directory entry is on disk too.
static void fsync_parent_dir(const char *path) {
  char *copy = strdup(path);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(copy);
}

void atomic_file_commit(AtomicFile *a) {
  if (ferror(a->f) || fflush(a->f) != 0 || fsync(fileno(a->f)) != 0) atomic_file_fail(a);
  FILE *f = a->f;
  a->f = NULL;
  if (fclose(f) != 0) atomic_file_fail(a);
  if (rename(a->tmp, a->path) != 0)
    die_input(a->path, "cannot rename %s to it: %s", a->tmp, strerror(errno));
  fsync_parent_dir(a->path);
}
