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

// The box of w x h pixels covers enough of an image of image_area pixels:
// inside the image, the part of it covered is the box's own area.
static bool covers_enough(int32_t w, int32_t h, double image_area, float min_covered) {
  return (double)w * h >= min_covered * image_area;
}

CropBox classify_random_resized_crop_box(int32_t width, int32_t height, const ClassifyCrop *c,
                                         Rng *rng) {
  double area = (double)width * height;
  double log_lo = log(c->ratio_min), log_hi = log(c->ratio_max);
  for (int attempt = 0; attempt < c->attempts; attempt++) {
    double target = area * (c->scale_min + (c->scale_max - c->scale_min) * rng_next_uniform(rng));
    double ratio = exp(log_lo + (log_hi - log_lo) * rng_next_uniform(rng));
    int32_t w = (int32_t)lround(sqrt(target * ratio));
    int32_t h = (int32_t)lround(sqrt(target / ratio));
    if (w > 0 && h > 0 && w <= width && h <= height && covers_enough(w, h, area, c->min_covered)) {
      int32_t y = uniform_int(rng, 0, height - h);
      int32_t x = uniform_int(rng, 0, width - w);
      return (CropBox){x, y, w, h};
    }
  }
  // Fallback: the whole image, cut down to the nearest allowed aspect ratio.
  double in_ratio = (double)width / height;
  int32_t w = width, h = height;
  if (in_ratio < c->ratio_min) {
    h = (int32_t)lround(width / c->ratio_min);
  } else if (in_ratio > c->ratio_max) {
    w = (int32_t)lround(height * c->ratio_max);
  }
  return (CropBox){(width - w) / 2, (height - h) / 2, w, h};
}

// One draw of the distorted box at aspect `ratio`, as TensorFlow's
// GenerateRandomCrop (sample_distorted_bounding_box_op.cc): the heights
// whose boxes come nearest the area bounds [min_area, max_area] (the taller
// one cut to what fits the image), one of them uniformly, the width rounded
// from it; a pixel of height more or less where that rounding left the area
// outside the bounds. False when no box of this ratio fits. The offsets are
// uniform over [0, side - box side), the last position never drawn, as
// there.
static bool distorted_box_draw(int32_t width, int32_t height, double min_area, double max_area,
                               double ratio, Rng *rng, CropBox *box) {
  int32_t h = (int32_t)lrint(sqrt(min_area / ratio));
  int32_t h_max = (int32_t)lrint(sqrt(max_area / ratio));
  if (lrint(h_max * ratio) > width) h_max = (int32_t)((width + 0.5 - 1e-7) / ratio);
  if (h_max > height) h_max = height;
  if (h >= h_max) h = h_max;
  else h = uniform_int(rng, h, h_max);
  int32_t w = (int32_t)lrint(h * ratio);
  if ((double)w * h < min_area) w = (int32_t)lrint(++h * ratio);
  if ((double)w * h > max_area) w = (int32_t)lrint(--h * ratio);
  double area = (double)w * h;
  if (area < min_area || area > max_area || w <= 0 || h <= 0 || w > width || h > height) return false;
  box->y = h < height ? uniform_int(rng, 0, height - h - 1) : 0;
  box->x = w < width ? uniform_int(rng, 0, width - w - 1) : 0;
  box->width = w;
  box->height = h;
  return true;
}

CropBox classify_distorted_box(int32_t width, int32_t height, const ClassifyCrop *c, Rng *rng) {
  double area = (double)width * height;
  for (int attempt = 0; attempt < c->attempts; attempt++) {
    double ratio = c->ratio_min + (c->ratio_max - c->ratio_min) * (double)rng_next_uniform(rng);
    CropBox box;
    if (distorted_box_draw(width, height, c->scale_min * area, c->scale_max * area, ratio, rng, &box) &&
        covers_enough(box.width, box.height, area, c->min_covered))
      return box;
  }
  return (CropBox){0, 0, width, height};
}

CropBox classify_train_crop_box(int32_t width, int32_t height, const ClassifyCrop *c, Rng *rng) {
  return c->method == CLASSIFY_CROP_DISTORTED_BOX ? classify_distorted_box(width, height, c, rng)
                                                  : classify_random_resized_crop_box(width, height, c, rng);
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
      .crop = {.method = CLASSIFY_CROP_RANDOM_RESIZED, .scale_min = 0.08f, .scale_max = 1.0f,
               .ratio_min = 3.0f / 4.0f, .ratio_max = 4.0f / 3.0f, .attempts = 10, .min_covered = 0},
      .float_output = false, .norm = CLASSIFY_NORM_MEAN_STD,
      .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f},
      .seed = seed};
}

// The MLPerf v0.7 ResNet reference's _CHANNEL_MEANS (imagenet_preprocessing.py).
static const float kReferenceChannelMeans[3] = {123.68f, 116.78f, 103.94f};

ChannelAffine classify_input_affine(const ClassifyAugment *a) {
  if (a->norm == CLASSIFY_NORM_MEAN_STD) return channel_affine_normalize_u8(a->mean, a->std);
  ChannelAffine ca = {{0}, {0}};
  for (int c = 0; c < 3; c++) {
    ca.scale[c] = 1.0f;
    ca.shift[c] = -kReferenceChannelMeans[c];
  }
  return ca;
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
  CropBox box = a->train ? classify_train_crop_box(width, height, &a->crop, &rng)
                         : classify_center_crop_box(width, height, a->resize_side, a->out_side);
  bool flip = a->train && rng_next_uniform(&rng) < 0.5f;
  augment_decode_crop_resize(d, &scratch->rgb, &scratch->planes, bytes, n_bytes, &info, name,
                             (float)box.x, (float)box.y, (float)box.width, (float)box.height, flip,
                             out, a->out_side, a->out_side);
}

typedef struct ClassifySource {
  LmdbReader *reader;
  ClassifyAugment augment;
  ChannelAffine affine;  // float_output's normalisation
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
    augment_affine_cpu(pixels, slots[0], (int64_t)a->out_side * a->out_side, src->affine.scale,
                       src->affine.shift);
  memcpy(slots[1], &r.label, sizeof r.label);
}

Loader *classify_loader_open(const ClassifyLoaderConfig *cfg, int64_t *record_count) {
  ClassifySource *src = xcalloc(1, sizeof *src);
  src->reader = lmdb_reader_open(cfg->lmdb_dir);
  src->augment = cfg->augment;
  src->affine = classify_input_affine(&cfg->augment);
  src->num_classes = cfg->num_classes;
  if (cfg->num_classes < 1) DIE("classify_loader_open: num_classes %d", (int)cfg->num_classes);
  int64_t count = lmdb_reader_count(src->reader);
  if (record_count) *record_count = count;
  size_t pixels = (size_t)cfg->augment.out_side * cfg->augment.out_side * 3;
  LoaderConfig lc = {
      .batch_size = cfg->batch_size, .threads = cfg->threads, .ring_batches = cfg->ring_batches,
      .drop_last = cfg->augment.train && !cfg->keep_last, .field_count = 2,
      .sample_bytes = {pixels * (cfg->augment.float_output ? sizeof(float) : 1), sizeof(int32_t)},
      .sampler = {.count = count, .seed = cfg->augment.seed, .rank = cfg->rank,
                  .world = cfg->world, .shuffle = cfg->augment.train},
      .start_epoch = cfg->start_epoch, .dev = cfg->dev, .sample = classify_sample, .ctx = src,
      .thread_init = classify_thread_init, .thread_free = classify_thread_free,
      .ctx_free = classify_ctx_free};
  return loader_open(&lc);
}
