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

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/image.h"
#include "datasets/convert_util.h"
#include "datasets/fmnist_idx.h"

static const ConfigKey KEYS[] = {
    {"src", CFG_STRING, FMNIST_DIR,
     "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz", NULL},
    {"out", CFG_STRING, "", "output root (created; must not hold train/ yet)", NULL},
    {"side", CFG_INT, "32", "output side length in pixels", "[8, 1024]"},
    {"train_count", CFG_INT, "60000", "training images to write (the first N)", "[0, 60000]"},
    {"val_count", CFG_INT, "10000", "validation images to write (the first N test images)", "[0, 10000]"},
    {"quality", CFG_INT, "90", "JPEG quality", "[1, 100]"},
    {"rgb", CFG_BOOL, "false", "write RGB JPEGs (default: grey JPEGs)", NULL},
};

typedef struct Writer {
  int32_t side;
  int quality;
  bool rgb;
  uint8_t *grey, *rgb_pixels;  // (side, side, 3) resized; (side, side) grey
} Writer;

// The 28x28 grey image resized to side x side, encoded and written.
static void write_image(Writer *w, const Idx *images, int64_t i, const char *path) {
  fmnist_resize(images, i, w->rgb_pixels, w->side, w->side);
  for (int32_t p = 0; p < w->side * w->side; p++) w->grey[p] = w->rgb_pixels[3 * p];
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(w->rgb ? w->rgb_pixels : w->grey, w->side, w->side,
                                    w->rgb ? 3 : 1, w->quality, &n);
  file_write(path, jpeg, n);
  free(jpeg);
}

// A class with no training image would leave its folder empty.
static void check_every_class(const Idx *labels, int64_t count) {
  int64_t seen[10] = {0};
  for (int64_t i = 0; i < count; i++) seen[labels->data[i]]++;
  for (int c = 0; c < 10; c++)
    if (!seen[c])
      die_input("--train_count", "the first %lld training images hold no %s (label %d); every class needs one",
                (long long)count, fmnist_class_name(c), c);
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
  static const char *const kOutputs[] = {"train", "val", "LOC_val_solution.csv", "classes.txt", NULL};
  check_outputs_free(out, kOutputs);
  double start = time_now_s();
  Idx train_images, train_labels, val_images, val_labels;
  fmnist_read_split(src, "train", train_count, "--train_count", &train_images, &train_labels);
  check_every_class(&train_labels, train_count);
  fmnist_read_split(src, "t10k", val_count, "--val_count", &val_images, &val_labels);
  w.grey = xmalloc((size_t)w.side * w.side);
  w.rgb_pixels = xmalloc((size_t)w.side * w.side * 3);
  write_train(&w, &train_images, &train_labels, out, train_count);
  write_val(&w, &val_images, &val_labels, out, val_count);
  char path[1200];
  snprintf(path, sizeof path, "%s/classes.txt", out);
  FILE *f = fopen(path, "w");
  CHECK_FILE(f, path);
  for (int c = 0; c < 10; c++) fprintf(f, "n%08d %s\n", c, fmnist_class_name(c));
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
