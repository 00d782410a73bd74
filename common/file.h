// file.h: whole-file reads for converters and benchmarks.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The bytes of the file at path (malloc'd; *n_bytes its size). A missing or
// unreadable file is a one-line error naming it.
uint8_t *file_read(const char *path, size_t *n_bytes);

#ifdef __cplusplus
}
#endif
