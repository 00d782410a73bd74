// fmnist_idx.h: Fashion-MNIST's IDX files (gzip'ed as Debian's
// dataset-fashion-mnist ships them, or not), read by the tools of datasets/
// that draw on it (fmnist_to_imagenet, coco_generate). Each datasets/*.c is
// a program of its own, so the shared functions are static inline here.
#pragma once
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/check.h"
#include "data/augment.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static inline const char *fmnist_class_name(int label) {
  static const char *const kNames[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return kNames[label];
}

typedef struct Idx {
  int64_t count;       // items in the file
  int32_t rows, cols;  // images only
  uint8_t *data;       // the first ones read: (n, rows, cols) or (n,)
} Idx;

static inline uint32_t idx_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Reads up to n bytes of f; fewer only at the end of the file.
static inline size_t gz_read_up_to(gzFile f, const char *path, uint8_t *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    unsigned chunk = n - done < (1u << 30) ? (unsigned)(n - done) : 1u << 30;
    int got = gzread(f, buf + done, chunk);
    int zerr = Z_OK;
    const char *why = gzerror(f, &zerr);  // "<path>: <what>"
    size_t path_len = strlen(path);
    if (strncmp(why, path, path_len) == 0 && strncmp(why + path_len, ": ", 2) == 0) why += path_len + 2;
    if (got < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR)) die_input(path, "cannot read: %s", why);
    if (got == 0) break;
    done += (size_t)got;
  }
  return done;
}

// The first `want` items of an IDX file of unsigned bytes with 1 (labels) or
// 3 (images) dimensions. flag is the option that asked for them.
static inline Idx idx_read(const char *path, int dims, int64_t want, const char *flag) {
  gzFile f = gzopen(path, "rb");
  if (!f) die_input(path, "cannot open: %s", strerror(errno));
  uint8_t head[16];
  size_t head_bytes = 4 + 4 * (size_t)dims;
  if (gz_read_up_to(f, path, head, head_bytes) != head_bytes) die_input(path, "too short for an IDX header");
  if (idx_be32(head) != (0x0800u | (uint32_t)dims))
    die_input(path, "not an IDX file of %d-dimensional unsigned bytes (magic %08x)", dims, idx_be32(head));
  Idx idx = {.count = idx_be32(head + 4), .rows = 1, .cols = 1};
  if (dims == 3) {
    uint32_t rows = idx_be32(head + 8), cols = idx_be32(head + 12);
    if (rows < 1 || rows > 1024 || cols < 1 || cols > 1024)
      die_input(path, "images of %ux%u pixels: want 1..1024 a side", rows, cols);
    idx.rows = (int32_t)rows;
    idx.cols = (int32_t)cols;
  }
  if (want > idx.count) die_input(flag, "%lld asked for, %s holds %lld", (long long)want, path, (long long)idx.count);
  size_t bytes = (size_t)want * idx.rows * idx.cols;
  idx.data = xmalloc(bytes);
  size_t got = gz_read_up_to(f, path, idx.data, bytes);
  if (got != bytes) die_input(path, "truncated: %zu of the %zu bytes of its first %lld items", got, bytes, (long long)want);
  gzclose(f);
  return idx;
}

// The first `want` images and labels of split prefix ("train", "t10k") of
// the folder src.
static inline void fmnist_read_split(const char *src, const char *prefix, int64_t want, const char *flag,
                                     Idx *images, Idx *labels) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", src, prefix);
  *images = idx_read(path, 3, want, flag);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", src, prefix);
  *labels = idx_read(path, 1, want, flag);
  if (labels->count != images->count)
    die_input(path, "%lld labels for %lld images", (long long)labels->count, (long long)images->count);
  for (int64_t i = 0; i < want; i++)
    if (labels->data[i] > 9) die_input(path, "label %d of image %lld is not 0..9", labels->data[i], (long long)i);
}

// Grey image i of images resized (bilinear) to out_w x out_h RGB: out is
// (out_h, out_w, 3), grey in every channel.
static inline void fmnist_resize(const Idx *images, int64_t i, uint8_t *out, int32_t out_w, int32_t out_h) {
  const uint8_t *src = images->data + (size_t)i * images->rows * images->cols;
  int32_t n_px = images->rows * images->cols;
  uint8_t *src_rgb = xmalloc((size_t)n_px * 3);
  for (int32_t p = 0; p < n_px; p++) src_rgb[3 * p] = src_rgb[3 * p + 1] = src_rgb[3 * p + 2] = src[p];
  augment_crop_resize(src_rgb, images->cols, images->rows, 0, 0, (float)images->cols, (float)images->rows,
                      false, out, out_w, out_h);
  free(src_rgb);
}
