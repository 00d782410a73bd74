// ssd_data.c: image+boxes records -> augmented NHWC batches with SSD targets.
#include "ssd_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"

// ---------------------------------------------------------------- geometry

const float kSsdCropMinIou[SSD_CROP_MODES] = {NAN, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, -INFINITY};

static float uniform(Rng *rng, float lo, float hi) { return lo + (hi - lo) * rng_next_uniform(rng); }

// One candidate of a mode; true when accepted (crop set).
static bool crop_candidate(const float *boxes, int32_t n, int mode, float min_iou, Rng *rng,
                           SsdCrop *crop) {
  float w = uniform(rng, 0.3f, 1.0f), h = uniform(rng, 0.3f, 1.0f);
  if (w / h < 0.5f || w / h > 2.0f) return false;
  float left = uniform(rng, 0.0f, 1.0f - w), top = uniform(rng, 0.0f, 1.0f - h);
  float c[4] = {left, top, left + w, top + h};
  bool any_centre = false;
  for (int32_t i = 0; i < n; i++) {
    const float *b = boxes + 4 * i;
    if (!(ssd_iou(b, c) > min_iou)) return false;
    float xc = 0.5f * (b[0] + b[2]), yc = 0.5f * (b[1] + b[3]);
    any_centre |= xc > c[0] && xc < c[2] && yc > c[1] && yc < c[3];
  }
  if (!any_centre) return false;
  *crop = (SsdCrop){c[0], c[1], c[2], c[3], mode};
  return true;
}

int32_t ssd_random_crop(const float *boxes, const int32_t *labels, int32_t n, int max_tries,
                        Rng *rng, SsdCrop *crop, float *out_boxes, int32_t *out_labels) {
  const float *kMinIou = kSsdCropMinIou;
  *crop = (SsdCrop){0, 0, 1, 1, 0};
  bool cropped = false;
  for (int round = 0; round < SSD_CROP_MAX_ROUNDS && !cropped; round++) {
    uint32_t mode = rng_next_below(rng, SSD_CROP_MODES);
    if (mode == 0) break;  // the whole image
    for (int t = 0; t < max_tries && !cropped; t++)
      cropped = crop_candidate(boxes, n, (int)mode, kMinIou[mode], rng, crop);
  }
  if (!cropped) {
    crop->mode = 0;
    memcpy(out_boxes, boxes, (size_t)n * 4 * sizeof(float));
    memcpy(out_labels, labels, (size_t)n * sizeof(int32_t));
    return n;
  }
  return ssd_crop_boxes(crop, boxes, labels, n, out_boxes, out_labels);
}

int32_t ssd_crop_boxes(const SsdCrop *crop, const float *boxes, const int32_t *labels, int32_t n,
                       float *out_boxes, int32_t *out_labels) {
  float w = crop->right - crop->left, h = crop->bottom - crop->top;
  int32_t kept = 0;
  for (int32_t i = 0; i < n; i++) {
    const float *b = boxes + 4 * i;
    float xc = 0.5f * (b[0] + b[2]), yc = 0.5f * (b[1] + b[3]);
    if (!(xc > crop->left && xc < crop->right && yc > crop->top && yc < crop->bottom)) continue;
    float *o = out_boxes + 4 * kept;
    o[0] = (fmaxf(b[0], crop->left) - crop->left) / w;
    o[1] = (fmaxf(b[1], crop->top) - crop->top) / h;
    o[2] = (fminf(b[2], crop->right) - crop->left) / w;
    o[3] = (fminf(b[3], crop->bottom) - crop->top) / h;
    // A sliver of a box whose clipped sides round together would give
    // ssd_encode a log of 0: left out (the reference would pass it on).
    if (!(o[2] > o[0] && o[3] > o[1])) continue;
    out_labels[kept++] = labels[i];
  }
  return kept;
}

CropBox ssd_crop_pixels(const SsdCrop *crop, int32_t width, int32_t height) {
  int32_t x0 = (int32_t)(crop->left * (float)width), x1 = (int32_t)(crop->right * (float)width);
  int32_t y0 = (int32_t)(crop->top * (float)height), y1 = (int32_t)(crop->bottom * (float)height);
  if (x1 > width) x1 = width;
  if (y1 > height) y1 = height;
  if (x0 > x1 - 1) x0 = x1 - 1;
  if (y0 > y1 - 1) y0 = y1 - 1;
  return (CropBox){x0, y0, x1 - x0, y1 - y0};
}

void ssd_flip_boxes(float *boxes, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    float *b = boxes + 4 * i, l = b[0];
    b[0] = 1.0f - b[2];
    b[2] = 1.0f - l;
  }
}

SsdAugment ssd_augment_mlperf(bool train, uint64_t seed) {
  return (SsdAugment){
      .train = train, .side = 300, .crop = true, .flip = true, .max_tries = 1,
      .jitter = {.brightness = 0.125f, .contrast = 0.5f, .saturation = 0.5f, .hue = 0.05f},
      .float_output = false,
      .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f},
      .seed = seed};
}

int32_t ssd_augment_boxes(const SsdAugment *a, const float *boxes, const int32_t *labels,
                          int32_t n, Rng *rng, SsdCrop *crop, bool *flip, float *out_boxes,
                          int32_t *out_labels) {
  int32_t kept;
  if (a->crop) {
    kept = ssd_random_crop(boxes, labels, n, a->max_tries, rng, crop, out_boxes, out_labels);
  } else {
    *crop = (SsdCrop){0, 0, 1, 1, 0};
    memcpy(out_boxes, boxes, (size_t)n * 4 * sizeof(float));
    memcpy(out_labels, labels, (size_t)n * sizeof(int32_t));
    kept = n;
  }
  // The reference's RandomHorizontalFlip: random.random() < 0.5.
  *flip = a->flip && rng_next_uniform(rng) < 0.5f;
  if (*flip) ssd_flip_boxes(out_boxes, kept);
  return kept;
}

// ---------------------------------------------------------------- loader

typedef struct SsdSource {
  LmdbReader *reader;
  SsdAugment augment;
  SsdDefaultBoxes boxes;  // training
  int32_t num_classes;
} SsdSource;

typedef struct SsdWorker {
  LmdbTxn *txn;
  ImageDecoder *decoder;
  Image rgb;
  ImagePlanes planes;
  uint8_t *pixels;  // (side, side, 3) before normalising
  int32_t capacity;  // boxes the four arrays below hold
  float *boxes, *kept_boxes;  // (capacity, 4)
  int32_t *labels, *kept_labels;
} SsdWorker;

static void *ssd_thread_init(void *ctx) {
  SsdSource *src = ctx;
  SsdWorker *w = xcalloc(1, sizeof *w);
  w->txn = lmdb_txn_begin(src->reader);
  w->decoder = image_decoder_create();
  w->pixels = xmalloc((size_t)src->augment.side * src->augment.side * 3);
  return w;
}

static void ssd_thread_free(void *ctx, void *state) {
  (void)ctx;
  SsdWorker *w = state;
  lmdb_txn_end(w->txn);
  image_decoder_free(w->decoder);
  image_free(&w->rgb);
  image_planes_free(&w->planes);
  free(w->pixels);
  free(w->boxes);
  free(w->kept_boxes);
  free(w->labels);
  free(w->kept_labels);
  free(w);
}

static void ssd_ctx_free(void *ctx) {
  SsdSource *src = ctx;
  lmdb_reader_close(src->reader);
  ssd_default_boxes_free(&src->boxes);
  free(src);
}

static void worker_reserve(SsdWorker *w, int32_t n) {
  if (n <= w->capacity) return;
  free(w->boxes), free(w->kept_boxes), free(w->labels), free(w->kept_labels);
  w->boxes = xmalloc((size_t)n * 4 * sizeof(float));
  w->kept_boxes = xmalloc((size_t)n * 4 * sizeof(float));
  w->labels = xmalloc((size_t)n * sizeof(int32_t));
  w->kept_labels = xmalloc((size_t)n * sizeof(int32_t));
  w->capacity = n;
}

// Checks every box of r and copies the non-crowd ones into w; returns their count.
static int32_t read_boxes(const SsdSource *src, SsdWorker *w, const Record *r, const char *name) {
  worker_reserve(w, r->box_count);
  int32_t n = 0;
  for (int32_t i = 0; i < r->box_count; i++) {
    float b[4];
    record_box(r, i, b);
    int32_t label = record_box_label(r, i);
    for (int k = 0; k < 4; k++)
      if (!(b[k] >= 0.0f && b[k] <= 1.0f))
        die_input(name, "box %d (%g, %g, %g, %g) is not inside [0, 1]", (int)i, b[0], b[1], b[2],
                  b[3]);
    if (!(b[2] > b[0] && b[3] > b[1]))
      die_input(name, "box %d (%g, %g, %g, %g) has no positive width and height", (int)i, b[0],
                b[1], b[2], b[3]);
    if (label == 0 || label <= -src->num_classes || label >= src->num_classes)
      die_input(name, "box %d has label %d, not in 1..%d (or its negative, a crowd box)", (int)i,
                (int)label, (int)src->num_classes - 1);
    if (label < 0) continue;  // crowd: training ignores it
    memcpy(w->boxes + 4 * n, b, sizeof b);
    w->labels[n++] = label;
  }
  return n;
}

static void ssd_sample(void *ctx, void *state, int64_t epoch, int64_t record, void *const *slots) {
  SsdSource *src = ctx;
  SsdWorker *w = state;
  const SsdAugment *a = &src->augment;
  char name[1200], msg[512];
  lmdb_record_name(lmdb_reader_dir(src->reader), record, name, sizeof name);
  size_t value_bytes;
  const void *value = lmdb_txn_get(w->txn, record, &value_bytes);
  Record r;
  record_parse(value, value_bytes, name, &r);
  if (r.kind != RECORD_IMAGE_BOXES)
    die_input(name, "a %s record where image+boxes records belong", record_kind_name(r.kind));
  int32_t n = read_boxes(src, w, &r, name);
  ImageInfo info;
  if (image_header(w->decoder, r.image, r.image_bytes, &info, msg, sizeof msg) != IMAGE_OK)
    die_input(name, "%s", msg);
  uint8_t *pixels = a->float_output ? w->pixels : slots[0];
  if (a->train) {
    Rng rng = augment_sample_rng(a->seed, epoch, record);
    SsdCrop crop;
    bool flip;
    int32_t kept = ssd_augment_boxes(a, w->boxes, w->labels, n, &rng, &crop, &flip,
                                     w->kept_boxes, w->kept_labels);
    CropBox px = ssd_crop_pixels(&crop, info.width, info.height);
    augment_decode_crop_resize(w->decoder, &w->rgb, &w->planes, r.image, r.image_bytes, &info,
                               name, (float)px.x, (float)px.y, (float)px.width,
                               (float)px.height, flip, pixels, a->side, a->side);
    ColorJitterDraw jitter = augment_color_jitter_draw(&a->jitter, &rng);
    augment_color_jitter(pixels, (int64_t)a->side * a->side, &jitter);
    ssd_match(&src->boxes, w->kept_boxes, w->kept_labels, kept, slots[1], slots[2]);
  } else {
    augment_decode_crop_resize(w->decoder, &w->rgb, &w->planes, r.image, r.image_bytes, &info,
                               name, 0.0f, 0.0f, (float)info.width, (float)info.height, false,
                               pixels, a->side, a->side);
    int32_t size[2] = {info.height, info.width};
    memcpy(slots[1], &r.image_id, sizeof r.image_id);
    memcpy(slots[2], size, sizeof size);
  }
  if (a->float_output)
    augment_normalize_cpu(pixels, slots[0], (int64_t)a->side * a->side, a->mean, a->std);
}

Loader *ssd_loader_open(const SsdLoaderConfig *cfg, int64_t *record_count) {
  const SsdAugment *a = &cfg->augment;
  if (cfg->num_classes < 2) DIE("ssd_loader_open: num_classes %d", (int)cfg->num_classes);
  if (a->side < 1) DIE("ssd_loader_open: side %d", (int)a->side);
  if (a->train && (!cfg->boxes || cfg->boxes->image_size != a->side))
    DIE("ssd_loader_open: training needs default boxes for %d-pixel images", (int)a->side);
  if (a->train && a->crop && a->max_tries < 1) DIE("ssd_loader_open: max_tries %d", a->max_tries);
  SsdSource *src = xcalloc(1, sizeof *src);
  src->reader = lmdb_reader_open(cfg->lmdb_dir);
  src->augment = *a;
  src->num_classes = cfg->num_classes;
  if (a->train) src->boxes = ssd_default_boxes(cfg->boxes);
  int64_t count = lmdb_reader_count(src->reader);
  if (record_count) *record_count = count;
  size_t pixels = (size_t)a->side * a->side * 3 * (a->float_output ? sizeof(float) : 1);
  size_t n = (size_t)src->boxes.n;
  LoaderConfig lc = {
      .batch_size = cfg->batch_size, .threads = cfg->threads, .ring_batches = cfg->ring_batches,
      .drop_last = a->train && !cfg->keep_last, .field_count = 3,
      .sample_bytes = {pixels, a->train ? n * sizeof(int32_t) : sizeof(int64_t),
                       a->train ? n * 4 * sizeof(float) : 2 * sizeof(int32_t)},
      .sampler = {.count = count, .seed = a->seed, .rank = cfg->rank, .world = cfg->world,
                  .shuffle = a->train},
      .start_epoch = cfg->start_epoch, .dev = cfg->dev, .sample = ssd_sample, .ctx = src,
      .thread_init = ssd_thread_init, .thread_free = ssd_thread_free, .ctx_free = ssd_ctx_free};
  return loader_open(&lc);
}
