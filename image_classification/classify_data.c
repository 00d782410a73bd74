// classify_data.c: image+label records -> augmented NHWC batches.
#include "classify_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/augment.h"
#include "data/lmdb_store.h"
#include "data/record.h"

static int32_t uniform_int(Rng *rng, int32_t lo, int32_t hi) {  // [lo, hi]
  return lo + (int32_t)rng_next_below(rng, (uint32_t)(hi - lo + 1));
}

CropBox classify_random_resized_crop_box(int32_t width, int32_t height, float scale_min,
                                         float scale_max, float ratio_min, float ratio_max,
                                         Rng *rng) {
  double area = (double)width * height;
  double log_lo = log(ratio_min), log_hi = log(ratio_max);
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * (scale_min + (scale_max - scale_min) * rng_next_uniform(rng));
    double ratio = exp(log_lo + (log_hi - log_lo) * rng_next_uniform(rng));
    int32_t w = (int32_t)lround(sqrt(target * ratio));
    int32_t h = (int32_t)lround(sqrt(target / ratio));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int32_t y = uniform_int(rng, 0, height - h);
      int32_t x = uniform_int(rng, 0, width - w);
      return (CropBox){x, y, w, h};
    }
  }
  // Fallback: the whole image, cut down to the nearest allowed aspect ratio.
  double in_ratio = (double)width / height;
  int32_t w = width, h = height;
  if (in_ratio < ratio_min) {
    h = (int32_t)lround(width / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = (int32_t)lround(height * ratio_max);
  }
  return (CropBox){(width - w) / 2, (height - h) / 2, w, h};
}

CropBox classify_center_crop_box(int32_t width, int32_t height, int32_t resize_side,
                                 int32_t out_side) {
  // After scaling the short side to resize_side, out_side pixels of it are
  // kept: the same fraction of the source's short side.
  int32_t shorter = width < height ? width : height;
  int32_t side = (int32_t)lround((double)shorter * out_side / resize_side);
  if (side < 1) side = 1;
  if (side > shorter) side = shorter;
  return (CropBox){(width - side) / 2, (height - side) / 2, side, side};
}

ClassifyAugment classify_augment_imagenet(bool train, uint64_t seed) {
  return (ClassifyAugment){
      .train = train, .out_side = 224, .resize_side = 256,
      .scale_min = 0.08f, .scale_max = 1.0f, .ratio_min = 3.0f / 4.0f, .ratio_max = 4.0f / 3.0f,
      .float_output = false,
      .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f},
      .seed = seed};
}

void classify_scratch_free(ClassifyScratch *s) {
  image_free(&s->rgb);
  image_planes_free(&s->planes);
}

void classify_augment_image(ImageDecoder *d, ClassifyScratch *scratch, const ClassifyAugment *a,
                            const uint8_t *bytes, size_t n_bytes, const char *name,
                            int64_t epoch, int64_t index, uint8_t *out) {
  char msg[512];
  ImageInfo info;
  if (image_header(d, bytes, n_bytes, &info, msg, sizeof msg) != IMAGE_OK) die_input(name, "%s", msg);
  int32_t width = info.width, height = info.height;
  Rng rng = augment_sample_rng(a->seed, epoch, index);
  CropBox box = a->train ? classify_random_resized_crop_box(width, height, a->scale_min, a->scale_max,
                                                           a->ratio_min, a->ratio_max, &rng)
                         : classify_center_crop_box(width, height, a->resize_side, a->out_side);
  bool flip = a->train && rng_next_uniform(&rng) < 0.5f;
  augment_decode_crop_resize(d, &scratch->rgb, &scratch->planes, bytes, n_bytes, &info, name,
                             (float)box.x, (float)box.y, (float)box.width, (float)box.height, flip,
                             out, a->out_side, a->out_side);
}

typedef struct ClassifySource {
  LmdbReader *reader;
  ClassifyAugment augment;
  int32_t num_classes;
} ClassifySource;

typedef struct ClassifyWorker {
  LmdbTxn *txn;
  ImageDecoder *decoder;
  ClassifyScratch scratch;
  uint8_t *pixels;  // (out_side, out_side, 3) before normalising
} ClassifyWorker;

static void *classify_thread_init(void *ctx) {
  ClassifySource *src = ctx;
  ClassifyWorker *w = xcalloc(1, sizeof *w);
  w->txn = lmdb_txn_begin(src->reader);
  w->decoder = image_decoder_create();
  int32_t side = src->augment.out_side;
  w->pixels = xmalloc((size_t)side * side * 3);
  return w;
}

static void classify_thread_free(void *ctx, void *state) {
  (void)ctx;
  ClassifyWorker *w = state;
  lmdb_txn_end(w->txn);
  image_decoder_free(w->decoder);
  classify_scratch_free(&w->scratch);
  free(w->pixels);
  free(w);
}

static void classify_ctx_free(void *ctx) {
  ClassifySource *src = ctx;
  lmdb_reader_close(src->reader);
  free(src);
}

static void classify_sample(void *ctx, void *state, int64_t epoch, int64_t record,
                            void *const *slots) {
  ClassifySource *src = ctx;
  ClassifyWorker *w = state;
  const ClassifyAugment *a = &src->augment;
  char name[1200];
  lmdb_record_name(lmdb_reader_dir(src->reader), record, name, sizeof name);
  size_t value_bytes;
  const void *value = lmdb_txn_get(w->txn, record, &value_bytes);
  Record r;
  record_parse(value, value_bytes, name, &r);
  if (r.kind != RECORD_IMAGE_LABEL)
    die_input(name, "a %s record where image+label records belong", record_kind_name(r.kind));
  // A label out of range was once ignored in training (it matched the loss's
  // ignore index -1) and counted wrong in eval, without a word.
  if (r.label < 0 || r.label >= src->num_classes)
    die_input(name, "label %d is outside the %d classes of this run (--num_classes)", (int)r.label,
              (int)src->num_classes);
  uint8_t *pixels = a->float_output ? w->pixels : slots[0];
  classify_augment_image(w->decoder, &w->scratch, a, r.image, r.image_bytes, name, epoch, record,
                         pixels);
  if (a->float_output)
    augment_normalize_cpu(pixels, slots[0], (int64_t)a->out_side * a->out_side, a->mean, a->std);
  memcpy(slots[1], &r.label, sizeof r.label);
}

Loader *classify_loader_open(const ClassifyLoaderConfig *cfg, int64_t *record_count) {
  ClassifySource *src = xcalloc(1, sizeof *src);
  src->reader = lmdb_reader_open(cfg->lmdb_dir);
  src->augment = cfg->augment;
  src->num_classes = cfg->num_classes;
  if (cfg->num_classes < 1) DIE("classify_loader_open: num_classes %d", (int)cfg->num_classes);
  int64_t count = lmdb_reader_count(src->reader);
  if (record_count) *record_count = count;
  size_t pixels = (size_t)cfg->augment.out_side * cfg->augment.out_side * 3;
  LoaderConfig lc = {
      .batch_size = cfg->batch_size, .threads = cfg->threads, .ring_batches = cfg->ring_batches,
      .drop_last = cfg->augment.train, .field_count = 2,
      .sample_bytes = {pixels * (cfg->augment.float_output ? sizeof(float) : 1), sizeof(int32_t)},
      .sampler = {.count = count, .seed = cfg->augment.seed, .rank = cfg->rank,
                  .world = cfg->world, .shuffle = cfg->augment.train},
      .start_epoch = cfg->start_epoch, .dev = cfg->dev, .sample = classify_sample, .ctx = src,
      .thread_init = classify_thread_init, .thread_free = classify_thread_free,
      .ctx_free = classify_ctx_free};
  return loader_open(&lc);
}
