// file.h: whole-file reads and writes, and directory creation, for
// converters, logs and benchmarks.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The bytes of the file at path (malloc'd; *n_bytes its size). A missing or
// unreadable file is a one-line error naming it.
uint8_t *file_read(const char *path, size_t *n_bytes);
// Writes n bytes to the file at path (created or truncated); a failure is
// an error naming the file.
void file_write(const char *path, const void *bytes, size_t n);
// Creates directory dir and every missing one on the way (mkdir -p); one
// that cannot be made is a one-line error naming it.
void file_make_dirs(const char *dir);
// The same for the directories leading to file `path` (not path itself).
void file_make_parent_dirs(const char *path);

#ifdef __cplusplus
}
#endif
