// fuzz_seeds: writes the binary seed corpora, small valid inputs made with
// the suite's own writers, so they follow the formats when those change:
//   fuzz_seeds OUT  ->  OUT/<target>/<seed> for record, lmdb_record, image,
//                       ckpt, ckpt_named, ncf_bin, movielens_csv,
//                       coco_results, safetensors, subword and wordpiece.
// The other text seeds (config files, LOC_val_solution.csv, COCO and SQuAD
// JSON, vocabularies, parallel text) are committed under tests/fuzz/corpus/.
#include <cjson/cJSON.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/file.h"
#include "data/image.h"
#include "data/record.h"
#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "object_detection/coco_json.h"
#include "recommendation/movielens.h"
#include "train/ckpt.h"
#include "translation/subword.h"

static const char *g_out;

// OUT/target/name, its folder made; valid until the next call.
static const char *seed_path(const char *target, const char *name) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", g_out, target);
  file_make_dirs(path);
  snprintf(path, sizeof path, "%s/%s/%s", g_out, target, name);
  return path;
}

static void put(const char *target, const char *name, const void *bytes, size_t n) {
  file_write(seed_path(target, name), bytes, n);
}

// A w x h picture with every channel varying, so the encoders keep detail.
static uint8_t *picture(int32_t w, int32_t h, int channels) {
  uint8_t *p = malloc((size_t)w * h * channels);
  for (int32_t y = 0; y < h; y++)
    for (int32_t x = 0; x < w; x++)
      for (int c = 0; c < channels; c++)
        p[((size_t)y * w + x) * channels + c] = (uint8_t)(x * 37 + y * 91 + c * 59);
  return p;
}

static uint8_t *jpeg(int32_t w, int32_t h, int channels, size_t *n) {
  uint8_t *pixels = picture(w, h, channels);
  uint8_t *bytes = image_encode_jpeg(pixels, w, h, channels, 90, n);
  free(pixels);
  return bytes;
}

static uint8_t *png(int32_t w, int32_t h, int channels, size_t *n) {
  uint8_t *pixels = picture(w, h, channels);
  uint8_t *bytes = image_encode_png(pixels, w, h, channels, n);
  free(pixels);
  return bytes;
}

// JPEG variants the suite's encoder does not make: other chroma subsampling,
// progressive.
static uint8_t *jpeg_variant(int32_t w, int32_t h, int subsamp, int flags, size_t *n) {
  uint8_t *pixels = picture(w, h, 3);
  tjhandle tj = tjInitCompress();
  unsigned char *out = NULL;
  unsigned long bytes = 0;
  if (!tj || tjCompress2(tj, pixels, w, 0, h, TJPF_RGB, &out, &bytes, subsamp, 85, flags) != 0) {
    fprintf(stderr, "fuzz_seeds: tjCompress2: %s\n", tjGetErrorStr2(tj));
    exit(1);
  }
  uint8_t *copy = malloc(bytes);
  memcpy(copy, out, bytes);
  *n = bytes;
  tjFree(out);
  tjDestroy(tj);
  free(pixels);
  return copy;
}

// PNG variants: 16-bit with alpha, and a palette.
static uint8_t *png_variant(int32_t w, int32_t h, bool palette, size_t *n) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w;
  img.height = (png_uint_32)h;
  img.format = palette ? PNG_FORMAT_RGB_COLORMAP : PNG_FORMAT_LINEAR_RGB_ALPHA;
  uint8_t colormap[4 * 3];
  void *pixels;
  if (palette) {
    img.colormap_entries = 4;
    for (int i = 0; i < 12; i++) colormap[i] = (uint8_t)(i * 21);
    uint8_t *index = malloc((size_t)w * h);  // (h, w)
    for (int32_t i = 0; i < w * h; i++) index[i] = (uint8_t)(i % 4);
    pixels = index;
  } else {
    uint16_t *rgba = malloc((size_t)w * h * 4 * sizeof(uint16_t));  // (h, w, 4)
    for (int32_t i = 0; i < w * h * 4; i++) rgba[i] = (uint16_t)(i * 4099);
    pixels = rgba;
  }
  png_alloc_size_t bytes = 0;
  uint8_t *out = NULL;
  if (png_image_write_to_memory(&img, NULL, &bytes, 0, pixels, 0, palette ? colormap : NULL))
    out = malloc(bytes);
  if (!out || !png_image_write_to_memory(&img, out, &bytes, 0, pixels, 0, palette ? colormap : NULL)) {
    fprintf(stderr, "fuzz_seeds: png_image_write_to_memory: %s\n", img.message);
    exit(1);
  }
  free(pixels);
  *n = bytes;
  return out;
}

// An image seed of fuzz_image: the options byte, then the file.
static void put_image(const char *name, uint8_t options, uint8_t *file, size_t n) {
  uint8_t *seed = malloc(n + 1);
  seed[0] = options;
  memcpy(seed + 1, file, n);
  put("image", name, seed, n + 1);
  free(seed);
  free(file);
}

static void image_seeds(void) {
  size_t n;
  // options: bit 0 train, bits 1-2 side (224, 32, 7, 1), bit 3 float output, bits 4-6 seed,
  // bit 7 PNG chunk CRCs set right
  put_image("rgb.jpg", 0x01, jpeg(16, 12, 3, &n), n);
  put_image("grey.jpg", 0x12, jpeg(9, 7, 1, &n), n);
  put_image("cmyk.jpg", 0x25, jpeg(8, 8, 4, &n), n);
  put_image("444_progressive.jpg", 0x0b, jpeg_variant(13, 9, TJSAMP_444, TJFLAG_PROGRESSIVE, &n), n);
  put_image("422.jpg", 0x30, jpeg_variant(17, 5, TJSAMP_422, 0, &n), n);
  put_image("440.jpg", 0x43, jpeg_variant(6, 19, TJSAMP_440, 0, &n), n);
  put_image("411.jpg", 0x56, jpeg_variant(33, 8, TJSAMP_411, 0, &n), n);
  put_image("rgb.png", 0x86, png(10, 6, 3, &n), n);
  put_image("grey.png", 0x61, png(3, 11, 1, &n), n);
  put_image("rgba16.png", 0xf3, png_variant(7, 5, false, &n), n);
  put_image("palette.png", 0x8c, png_variant(5, 4, true, &n), n);
}

// The same records seed fuzz_record and fuzz_lmdb_record.
static void put_record(const char *name, const Record *r) {
  size_t bytes = record_encoded_bytes(r);
  uint8_t *value = malloc(bytes);
  record_encode(r, value, bytes);
  put("record", name, value, bytes);
  put("lmdb_record", name, value, bytes);
  free(value);
}

static void record_seeds(void) {
  size_t n;
  uint8_t *image = jpeg(12, 10, 3, &n);
  put_record("label_jpeg", &(Record){.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG,
                                     .image = image, .image_bytes = n, .label = 7});
  free(image);
  image = png(5, 7, 1, &n);
  put_record("label_png", &(Record){.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_PNG,
                                    .image = image, .image_bytes = n, .label = 999});
  const float boxes[2][4] = {{0.1f, 0.2f, 0.5f, 0.6f}, {0, 0, 1, 1}};
  const int32_t box_labels[2] = {3, 80};
  put_record("boxes_png", &(Record){.kind = RECORD_IMAGE_BOXES, .image_format = IMAGE_FORMAT_PNG,
                                    .image = image, .image_bytes = n, .image_id = 139,
                                    .box_count = 2, .boxes = boxes, .box_labels = box_labels});
  free(image);
  const int32_t question[5] = {101, 2054, 2003, 1029, 102}, context[3] = {2023, 2003, 102};
  put_record("tokens", &(Record){.kind = RECORD_TOKENS, .seq_count = 2, .seq_len = {5, 3},
                                 .seqs = {question, context}});
}

// A checkpoint of the fuzz model's table plus a classifier it does not have,
// in another order: what ckpt_named's warm start picks tensors from.
static void ckpt_named_seed(void) {
  ParamSpec specs[FUZZ_CKPT_N_PARAMS + 1];
  specs[0] = (ParamSpec){"head.weight", 2, {3, 4}, 0};
  for (int i = 0; i < FUZZ_CKPT_N_PARAMS; i++) specs[1 + i] = kFuzzCkptParams[FUZZ_CKPT_N_PARAMS - 1 - i];
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  ParamSet ps, buffers;
  paramset_init(&ps, specs, FUZZ_CKPT_N_PARAMS + 1, 1, DEVICE_CPU);
  paramset_init(&buffers, kFuzzCkptBuffers, FUZZ_CKPT_N_BUFFERS, 0, DEVICE_CPU);
  for (int64_t i = 0; i < ps.total_numel; i++) ps.params[i] = ps.state[0][i] = 0.5f - 0.01f * (float)i;
  CkptMeta meta = {.epoch = 1, .step = 10, .rng = rng_make(1, 2), .loss_scale = 1.0f};
  ckpt_write(seed_path("ckpt_named", "with_head.ckpt"), &dev, &ps, &buffers, &meta);
  paramset_free(&ps);
  paramset_free(&buffers);
}

static void ckpt_seeds(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  ParamSet ps, buffers;
  paramset_init(&ps, kFuzzCkptParams, FUZZ_CKPT_N_PARAMS, FUZZ_CKPT_N_STATE, DEVICE_CPU);
  paramset_init(&buffers, kFuzzCkptBuffers, FUZZ_CKPT_N_BUFFERS, 0, DEVICE_CPU);
  for (int64_t i = 0; i < ps.total_numel; i++) {
    ps.params[i] = 0.01f * (float)i;
    for (int k = 0; k < ps.n_state; k++) ps.state[k][i] = 0.001f * (float)(i + k);
  }
  for (int64_t i = 0; i < buffers.total_numel; i++) buffers.params[i] = 1.0f + (float)i;
  CkptMeta meta = {.epoch = 3, .step = 120, .data_position = 640, .rng = rng_make(42, 7),
                   .opt_kind = 1, .loss_scale = 1024.0f, .scaler_good_steps = 17,
                   .scaler_skipped_steps = 2};
  Config config;
  fuzz_trainer_config(&config);
  char err[600];
  if (config_snapshot(&config, NULL, meta.run_config, sizeof meta.run_config, err, sizeof err)) {
    fprintf(stderr, "fuzz_seeds: %s\n", err);
    exit(1);
  }
  config_free(&config);
  ckpt_write(seed_path("ckpt", "adam_bn.ckpt"), &dev, &ps, &buffers, &meta);
  paramset_free(&ps);
  paramset_free(&buffers);
}

// Ratings of users 1..n_users, each rating n_each of items 10, 20, ...
// with timestamps that make the last line of each user its latest.
static char *ratings_csv(int n_users, int n_each) {
  size_t cap = 64 + (size_t)n_users * n_each * 40, len = 0;
  char *text = malloc(cap);
  len += (size_t)snprintf(text, cap, "%s\n", ML_CSV_HEADER);
  for (int u = 1; u <= n_users; u++)
    for (int k = 0; k < n_each; k++)
      len += (size_t)snprintf(text + len, cap - len, "%d,%d,%s,%d\n", u, 10 * (k + u % 3 + 1),
                              k % 2 ? "3.5" : "4", 978300000 + 60 * k + u);
  return text;
}

static void movielens_seeds(void) {
  char *small = ratings_csv(3, 5), *mlperf = ratings_csv(2, ML_MIN_RATINGS + 1);
  put("movielens_csv", "three_users.csv", small, strlen(small));
  put("movielens_csv", "twenty_one_each.csv", mlperf, strlen(mlperf));
  // ncf.bin of the small ratings, split as the harness splits.
  char path[1024], dir[1024];
  snprintf(path, sizeof path, "%s/movielens_csv/three_users.csv", g_out);
  MlRatings r;
  ml_ratings_read(path, &r);
  MlData d;
  ml_split(&r, FUZZ_ML_MIN_RATINGS, 4, 7, &d);
  snprintf(dir, sizeof dir, "%s/ncf_bin", g_out);
  file_make_dirs(dir);
  ml_data_write(&d, dir);
  char from[1100], to[1100];
  snprintf(from, sizeof from, "%s/%s", dir, ML_FILE_NAME);
  snprintf(to, sizeof to, "%s/three_users.bin", dir);
  CHECK_FILE(rename(from, to) == 0, to);
  ml_data_free(&d);
  ml_ratings_free(&r);
  free(small);
  free(mlperf);
}

// Results over fuzz_coco_gt: a hit, a near miss, a false positive, one on
// the crowd, written as coco_eval's results files are.
static void coco_seeds(void) {
  CocoDetections d;
  coco_dets_init(&d);
  const CocoDetection dets[] = {{1, 1, {11, 10, 50, 40}, 0.9},  {1, 3, {90, 80, 200, 150}, 0.75},
                                {5, 3, {50, 50, 10, 10}, 0.5},  {5, 90, {6, 6, 30, 30}, 0.3},
                                {139, 1, {3, 4, 1, 7}, 1e-3},   {1, 1, {0, 0, 640, 480}, 0.9}};
  for (size_t i = 0; i < sizeof dets / sizeof dets[0]; i++) coco_dets_add(&d, &dets[i]);
  coco_dets_write_json(&d, seed_path("coco_results", "six.json"));
  coco_dets_free(&d);
}

// The tensors of fuzz_safetensors' BERT in Hugging Face's names, as
// bert_model_load asks for them (the first spelling it tries of each).
typedef struct StTable {
  int n;
  char names[BERT_MAX_PARAMS][160];
  int ndim[BERT_MAX_PARAMS];
  int64_t shape[BERT_MAX_PARAMS][2];
} StTable;

static bool note_tensor(void *ctx, const char *name, int ndim, const int64_t *shape, float *out) {
  StTable *t = ctx;
  snprintf(t->names[t->n], sizeof t->names[t->n], "%s", name);
  t->ndim[t->n] = ndim;
  for (int d = 0; d < ndim; d++) t->shape[t->n][d] = shape[d];
  t->n++;
  (void)out;
  return true;
}

// A safetensors file of the table: names with prefix, every tensor of dtype
// (F32, F16 or BF16; values 0.25 apart, exact in each), __metadata__, and
// an int64 tensor the model does not use. The header is padded with spaces
// to a multiple of 8 bytes, as the format's writers do.
static void put_safetensors(const StTable *t, const char *name, const char *prefix, const char *dtype) {
  size_t elem = strcmp(dtype, "F32") ? 2 : 4, data_bytes = 0;
  cJSON *header = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(header, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  size_t numel[BERT_MAX_PARAMS + 1];
  for (int i = 0; i <= t->n; i++) {
    bool extra = i == t->n;  // embeddings.position_ids, I64 (1, 8)
    char full[200];
    snprintf(full, sizeof full, "%s%s", prefix, extra ? "embeddings.position_ids" : t->names[i]);
    cJSON *e = cJSON_AddObjectToObject(header, full);
    cJSON_AddStringToObject(e, "dtype", extra ? "I64" : dtype);
    int64_t one_by_eight[2] = {1, 8};
    const int64_t *shape = extra ? one_by_eight : t->shape[i];
    int ndim = extra ? 2 : t->ndim[i];
    cJSON *dims = cJSON_AddArrayToObject(e, "shape");
    numel[i] = 1;
    for (int d = 0; d < ndim; d++) {
      cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)shape[d]));
      numel[i] *= (size_t)shape[d];
    }
    size_t bytes = numel[i] * (extra ? 8 : elem);
    cJSON *offsets = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)data_bytes));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(data_bytes + bytes)));
    data_bytes += bytes;
  }
  char *json = cJSON_PrintUnformatted(header);
  size_t json_bytes = strlen(json), padded = (json_bytes + 7) / 8 * 8;
  uint8_t *file = calloc(8 + padded + data_bytes, 1);
  for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memset(file + 8, ' ', padded);
  memcpy(file + 8, json, json_bytes);
  uint8_t *at = file + 8 + padded;
  for (int i = 0; i < t->n; i++)  // the I64 tensor stays 0
    for (size_t k = 0; k < numel[i]; k++, at += elem) {
      float x = 0.25f * (float)(k % 8) - 1.0f;
      uint16_t half = !strcmp(dtype, "BF16") ? f32_to_bf16(x) : f32_to_f16(x);
      memcpy(at, elem == 4 ? (const void *)&x : (const void *)&half, elem);
    }
  put("safetensors", name, file, 8 + padded + data_bytes);
  free(file);
  free(json);
  cJSON_Delete(header);
}

static void safetensors_seeds(void) {
  BertModel m;
  BertShape shape = fuzz_bert_shape();
  bert_model_init(&m, &shape, 0, 1, DEVICE_CPU);
  static StTable t;
  bert_model_load(&m, (BertSource){note_tensor, &t}, "fuzz_seeds");
  bert_model_free(&m);
  put_safetensors(&t, "f32.safetensors", "", "F32");
  put_safetensors(&t, "bert_f16.safetensors", "bert.", "F16");
  put_safetensors(&t, "bert_bf16.safetensors", "bert.", "BF16");
}

// A vocabulary built from a few sentences (as wmt_to_lmdb --vocab_size
// builds one) and the WordPiece vocabulary of fuzz_squad_json.
static void vocab_seeds(void) {
  static const char *const kLines[] = {
      "The cat sat on the mat.", "Die Katze saß auf der Matte.", "Resumption of the session",
      "Wiederaufnahme der Sitzungsperiode", "It's 1990; naïve \\ under_score"};
  SubwordCounts *c = subword_counts_new();
  for (size_t i = 0; i < sizeof kLines / sizeof kLines[0]; i++) subword_counts_add(c, kLines[i], strlen(kLines[i]));
  Subword *sw = subword_build(c, 80);
  subword_save(sw, seed_path("subword", "built.subwords"));
  subword_free(sw);
  subword_counts_free(c);
  fuzz_write_lines(seed_path("wordpiece", "fuzz_squad_vocab.txt"), kFuzzWpTokens, FUZZ_WP_N_TOKENS);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds OUT\n");
    return 2;
  }
  g_out = argv[1];
  record_seeds();
  image_seeds();
  ckpt_seeds();
  ckpt_named_seed();
  movielens_seeds();
  coco_seeds();
  safetensors_seeds();
  vocab_seeds();
  return 0;
}
