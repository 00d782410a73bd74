// bench_loader: throughput of the classification input pipeline - LMDB read,
// JPEG decode, random-resized-crop + flip to 224x224, batching into the
// pinned ring and, on a GPU machine, the copy to the device - with a trainer
// that takes batches as fast as they come. The data set is generated first:
// --images JPEGs of --width x --height at ImageNet-typical quality and size,
// cut from the photos in --list (random crops, resized, with grain), or
// patterned when no list is given. Prints "images/s" and the trainer's wait counters.
//   bench_loader --threads=16 --list=photos.txt
// With --out=DIR it only writes the data set, as DIR/lmdb/train and a val
// split a tenth its size, for the ResNet trainer's --bench_steps (the real
// input pipeline inside training: tests/bench/bench_resnet.py), and the same
// training JPEGs as files, DIR/raw/train/cLLLL/NNNNNN.JPEG (L the label), for
// PyTorch's ImageFolder.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/augment.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "device/device.h"
#include "image_classification/classify_data.h"

static const ConfigKey KEYS[] = {
    {"threads", CFG_INT, "2", "loader threads", NULL},
    {"images", CFG_INT, "512", "JPEGs in the generated data set", NULL},
    {"width", CFG_INT, "500", "their width", "[1, 4096]"},
    {"height", CFG_INT, "375", "their height", NULL},
    {"quality", CFG_INT, "90", "their JPEG quality", "[1, 100]"},
    // The photos, cropped and enlarged, are smoother than ImageNet's: about
    // 42 KB a JPEG against ImageNet's ~110 KB. Grain of +-40 brings them to
    // ~109 KB, so that the entropy decoding costs what it does on ImageNet.
    {"grain", CFG_INT, "40", "uniform noise of +-grain added to every sample", NULL},
    {"list", CFG_STRING, "", "photos (one path a line) to cut the images from", NULL},
    {"batch", CFG_INT, "128", "batch size", NULL},
    {"batches", CFG_INT, "40", "batches timed (after 4 of warm-up)", NULL},
    {"device", CFG_STRING, "auto", "cpu | cuda | auto: cuda copies each batch to the GPU", "auto|cpu|cuda"},
    {"out", CFG_STRING, "", "only write the data set here (DIR/lmdb/train, DIR/lmdb/val) and stop", NULL},
};

typedef struct Photos {
  Image *images;
  int count;
} Photos;

static Photos decode_photos(const char *list) {
  Photos p = {xcalloc(1024, sizeof(Image)), 0};
  if (!*list) return p;
  FILE *f = fopen(list, "r");
  if (!f) die_input(list, "cannot open the photo list");
  ImageDecoder *d = image_decoder_create();
  char path[4096], msg[512];
  while (p.count < 1024 && fgets(path, sizeof path, f)) {
    path[strcspn(path, "\n")] = 0;
    size_t n;
    uint8_t *b = file_read(path, &n);
    if (image_decode(d, b, n, 0, 0, &p.images[p.count], msg, sizeof msg) != IMAGE_ERROR) p.count++;
    free(b);
  }
  fclose(f);
  image_decoder_free(d);
  return p;
}

// Image i: a random crop of a photo resized to width x height, or, with no
// photos, a pattern with noise (which compresses like a busy photo).
static void make_pixels(const Photos *p, int64_t i, int32_t w, int32_t h, int grain,
                        uint8_t *out) {
  Rng rng = rng_make(7, (uint64_t)i);
  if (p->count) {
    const Image *src = &p->images[i % p->count];
    ClassifyCrop crop = {.scale_min = 0.3f, .scale_max = 1.0f, .ratio_min = 1.2f, .ratio_max = 1.45f,
                         .attempts = 10};
    CropBox box = classify_random_resized_crop_box(src->width, src->height, &crop, &rng);
    augment_crop_resize(src->pixels, src->width, src->height, (float)box.x, (float)box.y,
                        (float)box.width, (float)box.height, i % 2, out, w, h);
    for (size_t k = 0; grain > 0 && k < (size_t)w * h * 3; k++) {
      int v = out[k] + (int)(rng_next_u32(&rng) % (2u * grain + 1)) - grain;
      out[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    return;
  }
  for (int32_t y = 0; y < h; y++)
    for (int32_t x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        out[((size_t)y * w + x) * 3 + c] =
            (uint8_t)(120 + 60 * sin(0.02 * (x + 13 * i) * (c + 1)) * cos(0.03 * y) +
                      (float)(rng_next_u32(&rng) % 48) - 24);
}

// n images, the first one numbered `first` (its pixels and label follow the
// number), into the LMDB at dir and, when raw is not NULL, as files under raw.
static void write_data_set(const char *dir, const char *raw, const Config *cfg, int64_t first,
                           int64_t n) {
  int32_t w = (int32_t)config_int(cfg, "width"), h = (int32_t)config_int(cfg, "height");
  Photos photos = decode_photos(config_string(cfg, "list"));
  uint8_t *px = xmalloc((size_t)w * h * 3);  // (h, w, 3)
  LmdbWriter *lw = lmdb_writer_open(dir);
  double jpeg_bytes = 0;
  for (int64_t i = first; i < first + n; i++) {
    make_pixels(&photos, i, w, h, (int)config_int(cfg, "grain"), px);
    size_t bytes;
    uint8_t *jpeg = image_encode_jpeg(px, w, h, 3, (int)config_int(cfg, "quality"), &bytes);
    Record r = {.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG, .image = jpeg,
                .image_bytes = bytes, .label = (int32_t)(i % 1000)};
    if (raw) {
      char path[4200];
      snprintf(path, sizeof path, "%s/c%04d/%06lld.JPEG", raw, (int)r.label, (long long)i);
      file_make_parent_dirs(path);
      file_write(path, jpeg, bytes);
    }
    size_t value_bytes = record_encoded_bytes(&r);
    uint8_t *value = xmalloc(value_bytes);
    lmdb_writer_put(lw, value, record_encode(&r, value, value_bytes));
    jpeg_bytes += (double)bytes;
    free(value);
    free(jpeg);
  }
  lmdb_writer_close(lw);
  printf("data %lld JPEGs %dx%d, mean %.1f KB, cut from %d photos\n", (long long)n, w, h,
         jpeg_bytes / n / 1e3, photos.count);
  for (int i = 0; i < photos.count; i++) image_free(&photos.images[i]);
  free(photos.images);
  free(px);
}

// What a record costs to check on the read path: microseconds of
// record_decode (the checksum over the whole record, then the header's
// fields) per record, on one thread, the mean over every record of the set
// read five times.
static double decode_us_per_record(const char *lmdb_dir) {
  LmdbReader *r = lmdb_reader_open(lmdb_dir);
  LmdbTxn *t = lmdb_txn_begin(r);
  int64_t n = lmdb_reader_count(r);
  double start = time_now_s();
  for (int pass = 0; pass < 5; pass++)
    for (int64_t i = 0; i < n; i++) {
      size_t bytes;
      const void *value = lmdb_txn_get(t, i, &bytes);
      Record rec;
      char err[256];
      if (!record_decode(value, bytes, &rec, err, sizeof err)) DIE("record %lld: %s", (long long)i, err);
    }
  double us = 1e6 * (time_now_s() - start) / (double)(5 * n);
  lmdb_txn_end(t);
  lmdb_reader_close(r);
  return us;
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "bench_loader");
  int64_t images = config_int(&cfg, "images");
  if (images < 1) die_input("images", "%lld is not a positive count", (long long)images);
  const char *out = config_string(&cfg, "out");
  if (*out) {
    char path[4096], raw[4096];
    snprintf(path, sizeof path, "%s/lmdb/train", out);
    snprintf(raw, sizeof raw, "%s/raw/train", out);
    write_data_set(path, raw, &cfg, 0, images);
    snprintf(path, sizeof path, "%s/lmdb/val", out);
    write_data_set(path, NULL, &cfg, images, images / 10 > 0 ? images / 10 : 1);
    config_free(&cfg);
    return 0;
  }
  char dir[] = "/tmp/bench_loader-XXXXXX";
  CHECK_FILE(mkdtemp(dir), dir);
  char lmdb_dir[64];
  snprintf(lmdb_dir, sizeof lmdb_dir, "%s/train", dir);
  write_data_set(lmdb_dir, NULL, &cfg, 0, images);

  Device dev;
  device_open(&dev, device_kind_parse("--device", config_string(&cfg, "device")), 0);
  ClassifyLoaderConfig lc = {.lmdb_dir = lmdb_dir, .augment = classify_augment_imagenet(true, 1),
                             .batch_size = config_int(&cfg, "batch"),
                             .threads = (int)config_int(&cfg, "threads"), .ring_batches = 4,
                             .world = 1, .dev = &dev, .num_classes = 1000};  // labels i % 1000
  Loader *l = classify_loader_open(&lc, NULL);
  for (int k = 0; k < 4; k++) loader_next(l);
  device_sync(&dev);
  LoaderStats warm = loader_stats(l);
  int64_t batches = config_int(&cfg, "batches");
  double start = time_now_s();
  for (int64_t k = 0; k < batches; k++) loader_next(l);
  device_sync(&dev);
  double seconds = time_now_s() - start;
  LoaderStats st = loader_stats(l);
  char name[300];
  device_describe(&dev, name, sizeof name);
  printf("device %s\n", name);
  printf("threads %d\n", lc.threads);
  printf("images/s %.1f\n", (double)batches * lc.batch_size / seconds);
  printf("wait_fraction %.3f\n", (st.wait_s - warm.wait_s) / seconds);
  loader_close(l);
  // The check's share of a loader thread's time per image (read, checksum,
  // decode, crop, batch).
  double check_us = decode_us_per_record(lmdb_dir);
  double thread_us_per_image = 1e6 * lc.threads * seconds / (double)(batches * lc.batch_size);
  printf("record_check_us %.2f\n", check_us);
  printf("record_check_share %.4f\n", check_us / thread_us_per_image);
  device_close(&dev);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
  config_free(&cfg);
  return 0;
}
