// fmnist_to_imagenet: Fashion-MNIST (IDX files, gzip'ed as Debian ships them)
// into the raw ImageNet layout, as real JPEG files, so that the small and
// medium image-classification benchmarks go through the same converter
// (imagenet_to_lmdb) as ImageNet itself:
//   <out>/train/<wnid>/fmnist_train_00042.JPEG      one folder per class
//   <out>/val/fmnist_val_00007.JPEG                 flat, labels in
//   <out>/LOC_val_solution.csv                      ImageId,PredictionString
//   <out>/classes.txt                               wnid and class name
// The wnids n00000000 .. n00000009 sort in label order. Images are upscaled
// from 28x28 to --side (bilinear) and kept grey unless --rgb; the decoder
// makes RGB of either. The first --train_count / --val_count images of each
// file are taken (Fashion-MNIST's files are already shuffled).
//   fmnist_to_imagenet --out=data/fmnist_small/raw --side=32 --train_count=20000
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "augment.h"
#include "check.h"
#include "file.h"
#include "config.h"
#include "image.h"
#include "timer.h"

static const ConfigKey KEYS[] = {
    {"src", CFG_STRING, "/usr/share/datasets/fashion-mnist",
     "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz", NULL},
    {"out", CFG_STRING, "", "output root (created; must not hold train/ yet)", NULL},
    {"side", CFG_INT, "32", "output side length in pixels", "[1, 1024]"},
    {"train_count", CFG_INT, "60000", "training images to write (the first N)", "[0, 60000]"},
    {"val_count", CFG_INT, "10000", "validation images to write (the first N test images)", "[0, 10000]"},
    {"quality", CFG_INT, "90", "JPEG quality", "[1, 100]"},
    {"rgb", CFG_BOOL, "false", "write RGB JPEGs (default: grey JPEGs)", NULL},
};

static const char *kClassNames[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

typedef struct Idx {
  int64_t count;
  int32_t rows, cols;  // images only
  uint8_t *data;       // (count, rows, cols) or (count,)
} Idx;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Reads a gzip'ed IDX file of unsigned bytes with 1 (labels) or 3 (images)
// dimensions through gzip -dc.
static Idx idx_read(const char *path, int dims) {
  FILE *check = fopen(path, "rb");
  if (!check) die_input(path, "cannot open: %s", strerror(errno));
  fclose(check);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
  FILE *f = popen(cmd, "r");
  CHECK_FILE(f, path);
  uint8_t head[16];
  size_t head_bytes = 4 + 4 * (size_t)dims;
  if (fread(head, 1, head_bytes, f) != head_bytes) die_input(path, "too short for an IDX header");
  if (be32(head) != (0x0800u | (uint32_t)dims))
    die_input(path, "not an IDX file of %d-dimensional unsigned bytes (magic %08x)", dims, be32(head));
  Idx idx = {.count = be32(head + 4), .rows = 1, .cols = 1};
  if (dims == 3) {
    idx.rows = (int32_t)be32(head + 8);
    idx.cols = (int32_t)be32(head + 12);
  }
  size_t bytes = (size_t)idx.count * idx.rows * idx.cols;
  idx.data = xmalloc(bytes);
  if (fread(idx.data, 1, bytes, f) != bytes) die_input(path, "truncated: fewer than %zu data bytes", bytes);
  if (pclose(f) != 0) die_input(path, "gzip -dc failed on it");
  return idx;
}

typedef struct Writer {
  int32_t side;
  int quality;
  bool rgb;
  uint8_t *grey, *rgb_pixels;  // (side, side, 3) resized; (side, side) grey
} Writer;

// The 28x28 grey image resized to side x side, encoded and written.
static void write_image(Writer *w, const Idx *images, int64_t i, const char *path) {
  const uint8_t *src = images->data + (size_t)i * images->rows * images->cols;
  int32_t n_px = images->rows * images->cols;
  uint8_t *src_rgb = xmalloc((size_t)n_px * 3);  // (28, 28, 3)
  for (int32_t p = 0; p < n_px; p++) src_rgb[3 * p] = src_rgb[3 * p + 1] = src_rgb[3 * p + 2] = src[p];
  augment_crop_resize(src_rgb, images->cols, images->rows, 0, 0, (float)images->cols,
                      (float)images->rows, false, w->rgb_pixels, w->side, w->side);
  for (int32_t p = 0; p < w->side * w->side; p++) w->grey[p] = w->rgb_pixels[3 * p];
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(w->rgb ? w->rgb_pixels : w->grey, w->side, w->side,
                                    w->rgb ? 3 : 1, w->quality, &n);
  file_write(path, jpeg, n);
  free(jpeg);
  free(src_rgb);
}

static void read_split(const char *src, const char *prefix, int64_t want, Idx *images, Idx *labels) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", src, prefix);
  *images = idx_read(path, 3);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", src, prefix);
  *labels = idx_read(path, 1);
  if (labels->count != images->count)
    die_input(path, "%lld labels for %lld images", (long long)labels->count, (long long)images->count);
  if (want > images->count)
    die_input(prefix, "%lld images asked for, the file has %lld", (long long)want,
              (long long)images->count);
  for (int64_t i = 0; i < want; i++)
    if (labels->data[i] > 9) die_input(path, "label %d of image %lld is not 0..9", labels->data[i], (long long)i);
}

static void write_train(Writer *w, const char *src, const char *out, int64_t count) {
  Idx images, labels;
  read_split(src, "train", count, &images, &labels);
  char path[1200];
  snprintf(path, sizeof path, "%s/train", out);
  file_make_dirs(path);
  for (int c = 0; c < 10; c++) {
    snprintf(path, sizeof path, "%s/train/n%08d", out, c);
    file_make_dirs(path);
  }
  Progress p;
  progress_start(&p, "fmnist train", count);
  for (int64_t i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/train/n%08d/fmnist_train_%05lld.JPEG", out, labels.data[i],
             (long long)i);
    write_image(w, &images, i, path);
    progress_update(&p, i + 1, i + 1, -1);
  }
  free(images.data);
  free(labels.data);
}

static void write_val(Writer *w, const char *src, const char *out, int64_t count) {
  Idx images, labels;
  read_split(src, "t10k", count, &images, &labels);
  char path[1200];
  snprintf(path, sizeof path, "%s/val", out);
  file_make_dirs(path);
  snprintf(path, sizeof path, "%s/LOC_val_solution.csv", out);
  FILE *csv = fopen(path, "w");
  CHECK_FILE(csv, path);
  fprintf(csv, "ImageId,PredictionString\n");
  Progress p;
  progress_start(&p, "fmnist val", count);
  int32_t last = w->side - 1;
  for (int64_t i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/val/fmnist_val_%05lld.JPEG", out, (long long)i);
    write_image(w, &images, i, path);
    // One box, the whole image, as in the ImageNet localisation solution.
    fprintf(csv, "fmnist_val_%05lld,n%08d 0 0 %d %d \n", (long long)i, labels.data[i], last, last);
    progress_update(&p, i + 1, i + 1, -1);
  }
  CHECK_FILE(fclose(csv) == 0, "LOC_val_solution.csv");
  free(images.data);
  free(labels.data);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "fmnist_to_imagenet");
  const char *src = config_string(&cfg, "src"), *out = config_string(&cfg, "out");
  Writer w = {.side = (int32_t)config_int(&cfg, "side"), .quality = (int)config_int(&cfg, "quality"),
              .rgb = config_bool(&cfg, "rgb")};
  int64_t train_count = config_int(&cfg, "train_count"), val_count = config_int(&cfg, "val_count");
  if (!*out) die_input("--out", "missing: the output root");
  if (w.side < 8 || w.side > 1024) die_input("--side", "want 8..1024, got %d", w.side);
  if (w.quality < 1 || w.quality > 100) die_input("--quality", "want 1..100, got %d", w.quality);
  if (train_count < 0 || val_count < 0) die_input("--train_count", "counts must be >= 0");
  file_make_dirs(out);
  char path[1200];
  snprintf(path, sizeof path, "%s/train", out);
  struct stat st;
  if (stat(path, &st) == 0) die_input(path, "already exists; remove it first");
  w.grey = xmalloc((size_t)w.side * w.side);
  w.rgb_pixels = xmalloc((size_t)w.side * w.side * 3);
  double start = time_now_s();
  write_train(&w, src, out, train_count);
  write_val(&w, src, out, val_count);
  snprintf(path, sizeof path, "%s/classes.txt", out);
  FILE *f = fopen(path, "w");
  CHECK_FILE(f, path);
  for (int c = 0; c < 10; c++) fprintf(f, "n%08d %s\n", c, kClassNames[c]);
  CHECK_FILE(fclose(f) == 0, path);
  printf("fmnist_to_imagenet: %lld train + %lld val %s JPEGs of %dx%d (quality %d) in %s, %.1f s\n",
         (long long)train_count, (long long)val_count, w.rgb ? "RGB" : "grey", w.side, w.side,
         w.quality, out, time_now_s() - start);
  free(w.grey);
  free(w.rgb_pixels);
  config_free(&cfg);
  return 0;
}
