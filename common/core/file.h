// file.h: whole-file reads and writes, and directory creation, for
// converters, logs and benchmarks.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The bytes of the file at path (malloc'd; *n_bytes its size), followed by a
// NUL that n_bytes does not count (text can be read as a string). A missing
// or unreadable file is a one-line error naming it.
uint8_t *file_read(const char *path, size_t *n_bytes);
// Writes n bytes to the file at path (created or truncated); a failure is
// an error naming the file.
void file_write(const char *path, const void *bytes, size_t n);
// Creates directory dir and every missing one on the way (mkdir -p); one
// that cannot be made is a one-line error naming it.
void file_make_dirs(const char *dir);
// The same for the directories leading to file `path` (not path itself).
void file_make_parent_dirs(const char *path);
// The same, the error naming `flag`, the flag that gave the path.
void file_make_parent_dirs_for(const char *flag, const char *path);
// A file a run will write later, tried now so that a bad path fails before
// any work does: path is not a directory, and PATH.tmp (the name the file is
// written under before it is renamed, atomic_file) can be created in its
// folder (it is removed again). Else a one-line error naming `flag`.
void file_check_writable(const char *flag, const char *path);
// file_write through atomic_file: the file whole, or as it was.
void file_write_atomic(const char *path, const void *bytes, size_t n);

// A file written whole or not at all (checkpoints, converted data sets):
// atomic_file_begin opens PATH.tmp for writing (a stale one of a killed
// writer is replaced); atomic_file_commit flushes it to disk, closes it,
// renames it over PATH and syncs the directory. A writer that dies in
// between leaves PATH as it was: the old file, or none. Write through
// atomic_file_write / _puts / _printf: a write that fails (a full disk)
// removes PATH.tmp, leaves PATH as it was and ends the program with a
// one-line error naming PATH and the reason (the commit also checks the
// stream's error flag, for anything written to f directly).
typedef struct AtomicFile {
  FILE *f;
  char path[4096];
  char tmp[4100];  // PATH.tmp
} AtomicFile;
void atomic_file_begin(AtomicFile *a, const char *path);
void atomic_file_write(AtomicFile *a, const void *bytes, size_t n);
void atomic_file_puts(AtomicFile *a, const char *text);
void atomic_file_printf(AtomicFile *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The bytes at offset (a header written last, a table in place).
void atomic_file_write_at(AtomicFile *a, uint64_t offset, const void *bytes, size_t n);
void atomic_file_commit(AtomicFile *a);

#ifdef __cplusplus
}
#endif
