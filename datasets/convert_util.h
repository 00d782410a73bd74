// convert_util.h: what the converters of datasets/ that write LMDB records
// share (imagenet_to_lmdb, coco_to_lmdb): a growing array, a folder flag's
// check, the check that an image file decodes, and a record appended to an
// LMDB. Each datasets/*.c is a program of its own, so these are static
// inline here rather than in a library.
#pragma once
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"

// Room for one more element in an array of count elements of elem_bytes each.
static inline void *grow(void *array, int64_t count, int64_t *capacity, size_t elem_bytes) {
  if (count < *capacity) return array;
  *capacity = *capacity ? 2 * *capacity : 64;
  void *grown = xmalloc((size_t)*capacity * elem_bytes);
  if (count) memcpy(grown, array, (size_t)count * elem_bytes);
  free(array);
  return grown;
}

// A required flag that was not given.
static inline void die_missing(const char *flag, const char *what) {
  die_input(flag, "missing: %s", what);
}

// Dies unless path is a regular file; flag names it in the message.
static inline void require_file(const char *flag, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) die_input(flag, "'%s': %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) die_input(flag, "'%s' is not a file", path);
}

// Dies unless path is a folder; flag names it in the message.
static inline void require_folder(const char *flag, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) die_input(flag, "'%s': %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) die_input(flag, "'%s' is not a folder", path);
}

// Every image is decoded once (at 1/8 scale, which is quick) so that a bad
// file stops the conversion, not a training run.
typedef struct ImageCheck {
  ImageDecoder *decoder;
  Image scratch;
  bool accept_warnings;  // keep JPEGs libjpeg decodes with a warning
} ImageCheck;

// Checks that the file decodes and returns its format.
static inline ImageFormat image_check(ImageCheck *c, const char *path, const uint8_t *bytes, size_t n) {
  char msg[512];
  ImageStatus st = image_decode(c->decoder, bytes, n, 1, 1, &c->scratch, msg, sizeof msg);
  if (st == IMAGE_ERROR) die_input(path, "%s", msg);
  if (st == IMAGE_WARNING) {
    if (!c->accept_warnings)
      die_input(path, "%s (corrupt or truncated; --accept_warnings keeps such files)", msg);
    fprintf(stderr, "warning: %s: %s (kept)\n", path, msg);
  }
  return image_sniff(bytes, n);
}

// Appends r to w, encoded in *buf (grown as needed, freed by the caller).
static inline void put_record(LmdbWriter *w, const Record *r, uint8_t **buf, size_t *buf_bytes) {
  size_t need = record_encoded_bytes(r);
  if (need > *buf_bytes) {
    free(*buf);
    *buf = xmalloc(need);
    *buf_bytes = need;
  }
  lmdb_writer_put(w, *buf, record_encode(r, *buf, *buf_bytes));
}

// A split already in out would stop the run only once the splits before it
// are converted (hours of a full data set): refuse it before converting any.
// flag is the option that chooses the splits.
static inline void check_splits_free(const char *out, bool do_train, bool do_val, const char *flag) {
  struct stat st;
  if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) die_input("--out", "'%s' is not a folder", out);
  const char *splits[2] = {do_train ? "train" : NULL, do_val ? "val" : NULL};
  char dir[4096];
  for (int i = 0; i < 2; i++) {
    if (!splits[i]) continue;
    snprintf(dir, sizeof dir, "%s/%s", out, splits[i]);
    if (stat(dir, &st) == 0)
      die_input(dir, "already exists; remove it first (or leave %s out of %s)", splits[i], flag);
  }
}

// Output left by an earlier run would mix with this one's: dies when out is
// not a folder or holds any of outputs (a NULL-terminated list of names).
static inline void check_outputs_free(const char *out, const char *const *outputs) {
  char path[4200];
  struct stat st;
  if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) die_input("--out", "'%s' is not a folder", out);
  for (; *outputs; outputs++) {
    snprintf(path, sizeof path, "%s/%s", out, *outputs);
    if (stat(path, &st) == 0) die_input(path, "already exists; remove it first");
  }
}
