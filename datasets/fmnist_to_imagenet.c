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
// file are taken (Fashion-MNIST's files are already shuffled); every class
// must be among the training images taken, or the class indices that
// imagenet_to_lmdb gives would shift. Both splits are read and checked
// before anything is written, and <out> must not hold any of it yet.
//   fmnist_to_imagenet --out=data/fmnist_small/raw --side=32 --train_count=20000
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/augment.h"
#include "data/image.h"

static const ConfigKey KEYS[] = {
    {"src", CFG_STRING, "/usr/share/datasets/fashion-mnist",
     "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz", NULL},
    {"out", CFG_STRING, "", "output root (created; must not hold train/ yet)", NULL},
    {"side", CFG_INT, "32", "output side length in pixels", "[8, 1024]"},
    {"train_count", CFG_INT, "60000", "training images to write (the first N)", "[0, 60000]"},
    {"val_count", CFG_INT, "10000", "validation images to write (the first N test images)", "[0, 10000]"},
    {"quality", CFG_INT, "90", "JPEG quality", "[1, 100]"},
    {"rgb", CFG_BOOL, "false", "write RGB JPEGs (default: grey JPEGs)", NULL},
};

static const char *kClassNames[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

typedef struct Idx {
  int64_t count;       // items in the file
  int32_t rows, cols;  // images only
  uint8_t *data;       // the first ones read: (n, rows, cols) or (n,)
} Idx;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Reads up to n bytes of f; fewer only at the end of the file.
static size_t gz_read_up_to(gzFile f, const char *path, uint8_t *buf, size_t n) {
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
// 3 (images) dimensions, gzip'ed as Debian ships them (or not). flag is the
// option that asked for them.
static Idx idx_read(const char *path, int dims, int64_t want, const char *flag) {
  gzFile f = gzopen(path, "rb");
  if (!f) die_input(path, "cannot open: %s", strerror(errno));
  uint8_t head[16];
  size_t head_bytes = 4 + 4 * (size_t)dims;
  if (gz_read_up_to(f, path, head, head_bytes) != head_bytes) die_input(path, "too short for an IDX header");
  if (be32(head) != (0x0800u | (uint32_t)dims))
    die_input(path, "not an IDX file of %d-dimensional unsigned bytes (magic %08x)", dims, be32(head));
  Idx idx = {.count = be32(head + 4), .rows = 1, .cols = 1};
  if (dims == 3) {
    uint32_t rows = be32(head + 8), cols = be32(head + 12);
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

// The first `want` images and labels of split prefix ("train", "t10k").
static void read_split(const char *src, const char *prefix, int64_t want, const char *flag, Idx *images,
                       Idx *labels) {
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

// A class with no training image would leave its folder empty.
static void check_every_class(const Idx *labels, int64_t count) {
  int64_t seen[10] = {0};
  for (int64_t i = 0; i < count; i++) seen[labels->data[i]]++;
  for (int c = 0; c < 10; c++)
    if (!seen[c])
      die_input("--train_count", "the first %lld training images hold no %s (label %d); every class needs one",
                (long long)count, kClassNames[c], c);
}

static void write_train(Writer *w, const Idx *images, const Idx *labels, const char *out, int64_t count) {
  char path[1200];
  for (int c = 0; c < 10; c++) {
    snprintf(path, sizeof path, "%s/train/n%08d", out, c);
    file_make_dirs(path);
  }
  Progress p;
  progress_start(&p, "fmnist train", count);
  for (int64_t i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/train/n%08d/fmnist_train_%05lld.JPEG", out, labels->data[i],
             (long long)i);
    write_image(w, images, i, path);
    progress_update(&p, i + 1, i + 1, -1);
  }
}

static void write_val(Writer *w, const Idx *images, const Idx *labels, const char *out, int64_t count) {
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
    write_image(w, images, i, path);
    // One box, the whole image, as in the ImageNet localisation solution.
    fprintf(csv, "fmnist_val_%05lld,n%08d 0 0 %d %d \n", (long long)i, labels->data[i], last, last);
    progress_update(&p, i + 1, i + 1, -1);
  }
  CHECK_FILE(fclose(csv) == 0, "LOC_val_solution.csv");
}

// Output left by an earlier run would mix with this one's.
static void check_out_free(const char *out) {
  static const char *const kOutputs[] = {"train", "val", "LOC_val_solution.csv", "classes.txt"};
  char path[1200];
  struct stat st;
  if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) die_input("--out", "'%s' is not a folder", out);
  for (size_t i = 0; i < sizeof kOutputs / sizeof *kOutputs; i++) {
    snprintf(path, sizeof path, "%s/%s", out, kOutputs[i]);
    if (stat(path, &st) == 0) die_input(path, "already exists; remove it first");
  }
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
  check_out_free(out);
  double start = time_now_s();
  Idx train_images, train_labels, val_images, val_labels;
  read_split(src, "train", train_count, "--train_count", &train_images, &train_labels);
  check_every_class(&train_labels, train_count);
  read_split(src, "t10k", val_count, "--val_count", &val_images, &val_labels);
  w.grey = xmalloc((size_t)w.side * w.side);
  w.rgb_pixels = xmalloc((size_t)w.side * w.side * 3);
  write_train(&w, &train_images, &train_labels, out, train_count);
  write_val(&w, &val_images, &val_labels, out, val_count);
  char path[1200];
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
  Idx *all[4] = {&train_images, &train_labels, &val_images, &val_labels};
  for (int i = 0; i < 4; i++) free(all[i]->data);
  config_free(&cfg);
  return 0;
}
