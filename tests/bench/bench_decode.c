// bench_decode: the training input pipeline of one image on one core -
// decode + random-resized-crop (scale 0.08-1, ratio 3/4-4/3) + flip to
// 224x224 RGB - over a list of JPEG files held in memory, in two variants:
//   dct:  classify_augment_image, the trainer's path (TurboJPEG with DCT
//         scaling chosen from the crop, YCbCr planes, only the crop
//         converted to RGB)
//   full: a full-size RGB decode, then the same crop-resize, to show what
//         the scaling and the planar path buy
// Prints one "variant images per CPU-second" line each. tests/bench/bench_decode.sh runs it
// beside PIL on the same files.
//   bench_decode --list=files.txt --seconds=5
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/augment.h"
#include "data/image.h"
#include "image_classification/classify_data.h"

static const ConfigKey KEYS[] = {
    {"list", CFG_STRING, "", "a file naming one JPEG per line", NULL},
    {"seconds", CFG_FLOAT, "5", "time per variant", NULL},
    {"side", CFG_INT, "224", "output side", "[1, 1024]"},
};

typedef struct Files {
  uint8_t **bytes;
  size_t *n_bytes;
  int count;
} Files;

static Files read_list(const char *list) {
  FILE *f = fopen(list, "r");
  if (!f) die_input(list, "cannot open the file list");
  Files files = {xcalloc(4096, sizeof(uint8_t *)), xcalloc(4096, sizeof(size_t)), 0};
  char path[4096];
  while (files.count < 4096 && fgets(path, sizeof path, f)) {
    path[strcspn(path, "\n")] = 0;
    if (!path[0]) continue;
    size_t n;
    uint8_t *b = file_read(path, &n);
    if (image_sniff(b, n) != IMAGE_FORMAT_JPEG) die_input(path, "not a JPEG");
    files.bytes[files.count] = b;
    files.n_bytes[files.count++] = n;
  }
  fclose(f);
  if (files.count == 0) die_input(list, "names no files");
  return files;
}

// One sample without DCT scaling: the crop is taken from the full-size image.
static void augment_full_decode(ImageDecoder *d, ClassifyScratch *scratch, const ClassifyAugment *a,
                                const uint8_t *bytes, size_t n, int64_t index, uint8_t *out) {
  char msg[512];
  ImageInfo info;
  if (image_header(d, bytes, n, &info, msg, sizeof msg) != IMAGE_OK) die_input("image", "%s", msg);
  int32_t w = info.width, h = info.height;
  Rng rng = augment_sample_rng(a->seed, 0, index);
  CropBox box = classify_train_crop_box(w, h, &a->crop, &rng);
  bool flip = rng_next_uniform(&rng) < 0.5f;
  if (image_decode(d, bytes, n, 0, 0, &scratch->rgb, msg, sizeof msg) == IMAGE_ERROR)
    die_input("image", "%s", msg);
  augment_crop_resize(scratch->rgb.pixels, w, h, (float)box.x, (float)box.y, (float)box.width,
                      (float)box.height, flip, out, a->out_side, a->out_side);
}

// CPU time, not wall time: images per CPU-second is images/s per core, and
// it holds steady when other work shares the machine.
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double run_variant(const Files *files, const ClassifyAugment *a, bool dct, double seconds) {
  ImageDecoder *d = image_decoder_create();
  ClassifyScratch scratch = {0};
  uint8_t *out = xmalloc((size_t)a->out_side * a->out_side * 3);  // (side, side, 3)
  int64_t done = 0;
  double start = cpu_seconds(), now = start;
  while (now - start < seconds) {
    for (int i = 0; i < files->count; i++, done++) {
      if (dct)
        classify_augment_image(d, &scratch, a, files->bytes[i], files->n_bytes[i], "image", 0, done, out);
      else
        augment_full_decode(d, &scratch, a, files->bytes[i], files->n_bytes[i], done, out);
    }
    now = cpu_seconds();
  }
  free(out);
  classify_scratch_free(&scratch);
  image_decoder_free(d);
  return (double)done / (now - start);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "bench_decode");
  const char *list = config_string(&cfg, "list");
  if (!*list) die_input("--list", "missing: a file naming the JPEGs");
  Files files = read_list(list);
  ClassifyAugment a = classify_augment_imagenet(true, 1);
  a.out_side = (int32_t)config_int(&cfg, "side");
  double seconds = config_float(&cfg, "seconds");
  printf("files %d\n", files.count);
  printf("dct %.1f\n", run_variant(&files, &a, true, seconds));
  printf("full %.1f\n", run_variant(&files, &a, false, seconds));
  for (int i = 0; i < files.count; i++) free(files.bytes[i]);
  free(files.bytes);
  free(files.n_bytes);
  config_free(&cfg);
  return 0;
}
