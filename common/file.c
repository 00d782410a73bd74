// file.c: whole-file reads.
#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

uint8_t *file_read(const char *path, size_t *n_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) die_input(path, "cannot open: %s", strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fileno(f), &st) == 0, path);
  *n_bytes = (size_t)st.st_size;
  uint8_t *bytes = xmalloc(*n_bytes);
  if (fread(bytes, 1, *n_bytes, f) != *n_bytes) die_input(path, "read failed: %s", strerror(errno));
  fclose(f);
  return bytes;
}
