// coco_to_lmdb: COCO 2017 (or a set in its layout, coco_generate's) into the
// LMDB data sets the object-detection trainer reads:
//   <coco>/annotations/instances_train2017.json + <coco>/train2017/*.jpg -> <out>/train
//   <coco>/annotations/instances_val2017.json   + <coco>/val2017/*.jpg   -> <out>/val
//   the label of each category                                         -> <out>/categories.json
// One record per image (kind IMAGE_BOXES, common/data/record.h), in the
// order of the JSON's "images", holding the image file's bytes as found, its
// COCO image id, and its boxes:
//   box    (x_min, y_min, x_max, y_max) as fractions of the image's width and
//          height from the JSON (bbox [x, y, w, h] -> x/W, y/H, (x+w)/W,
//          (y+h)/H), as the MLPerf SSD reference feeds its model;
//   label  the category's position in the JSON's "categories" plus one
//          (1..N; 0 is the SSD's background), as the reference numbers them;
//          negative (-label) for a crowd annotation (iscrowd=1), which
//          training ignores and evaluation needs. <out>/categories.json maps
//          each label back to the data set's category id, for detections
//          written in COCO's own ids.
// Training images without annotations are left out, as the reference's
// data set does. Validation images are all kept by default (an image
// without boxes still counts its detections as false positives); with
// --val_images=annotated only those with an annotation are, as the MLPerf
// reference evaluates (its COCODetection keeps the 4,952 of val2017's 5,000
// images that have one, crowd or not).
// Boxes: one that reaches outside its image by at most 1 pixel is clipped to
// it (float rounding in the JSON); by more, an error. A negative width or
// height is an error; a zero one (COCO train2017 has two, annotations 918
// and 2206849) is dropped with a warning line. Every image file is decoded
// once (at 1/8 scale) and its size checked against the JSON. Both JSON files
// are read and checked, and every image file found, before anything is
// written; each LMDB is written into <dir>.partial and renamed when
// complete, categories.json last, so a run that fails leaves neither.
//   coco_to_lmdb --coco=/data/coco2017 --out=data/ssd/full/lmdb
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "datasets/convert_util.h"

static const ConfigKey KEYS[] = {
    {"coco", CFG_STRING, "", "COCO root holding annotations/, train2017/ and val2017/", NULL},
    {"out", CFG_STRING, "", "output folder: train/ and val/ LMDBs and categories.json", NULL},
    {"split", CFG_STRING, "both", "which splits to convert", "train|val|both"},
    {"accept_warnings", CFG_BOOL, "false", "keep JPEGs libjpeg decodes with a warning", NULL},
    {"val_images", CFG_STRING, "all",
     "val images to keep: all, or annotated (those with an annotation: the MLPerf reference's eval set)",
     "all|annotated"},
};

#define BOX_TOLERANCE 1.0  // pixels a box may reach outside its image, clipped

typedef struct CocoImage {
  int64_t id;
  const char *file_name;  // inside the parsed JSON
  int32_t width, height;
  int64_t first_box, box_count;  // its boxes in Split.boxes, once sorted
  int64_t annotations;           // listed in the JSON, boxes without area too
} CocoImage;

typedef struct CocoBox {
  int64_t image;  // index in Split.images
  int64_t order;  // position among the annotations
  float box[4];
  int32_t label;  // negative: crowd
} CocoBox;

// An id and what it maps to (an image's index, a category's label).
typedef struct IdMap {
  int64_t id, value;
} IdMap;

typedef struct Split {
  const char *name;  // "train", "val"
  bool val_annotated_only;  // --val_images=annotated
  char json_path[4096];
  cJSON *root;
  const cJSON *categories;
  CocoImage *images;
  int64_t image_count;
  CocoBox *boxes;
  int64_t box_count, box_capacity;
  IdMap *category_ids, *image_ids;  // sorted by id
  int64_t category_count;
  int64_t crowd, zero_dropped;
} Split;

static int compare_ids(const void *a, const void *b) {
  int64_t x = ((const IdMap *)a)->id, y = ((const IdMap *)b)->id;
  return (x > y) - (x < y);
}

static int compare_boxes(const void *a, const void *b) {
  const CocoBox *x = a, *y = b;
  if (x->image != y->image) return (x->image > y->image) - (x->image < y->image);
  return (x->order > y->order) - (x->order < y->order);
}

// Sorts map by id; an id twice is an error naming what ("category", "image").
static void sort_ids(const Split *s, IdMap *map, int64_t count, const char *what) {
  if (count) qsort(map, (size_t)count, sizeof *map, compare_ids);
  for (int64_t i = 1; i < count; i++)
    if (map[i].id == map[i - 1].id) die_input(s->json_path, "%s id %lld appears twice", what, (long long)map[i].id);
}

// The value of id in map, or -1.
static int64_t find_id(const IdMap *map, int64_t count, int64_t id) {
  if (!count) return -1;
  const IdMap *hit = bsearch(&(IdMap){.id = id}, map, (size_t)count, sizeof *map, compare_ids);
  return hit ? hit->value : -1;
}

// Whether text stops inside a string, object or array: a file cut short.
static bool ends_open(const char *text, size_t n) {
  int64_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else {
      depth += (c == '{' || c == '[') - (c == '}' || c == ']');
    }
  }
  return in_string || depth > 0;
}

// The JSON of path, whole; a file that is not JSON is an error naming the
// line and byte where parsing stopped.
static cJSON *parse_json(const char *path) {
  size_t n;
  uint8_t *bytes = file_read(path, &n);
  if (n == 0) die_input(path, "empty (0 bytes), not a COCO annotation file");
  const char *text = (const char *)bytes, *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, false);
  if (!root) {
    size_t at = end ? (size_t)(end - text) : 0;
    if (ends_open(text, n)) die_input(path, "the JSON ends inside a value after %zu bytes (truncated?)", n);
    int64_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at; i++)
      if (text[i] == '\n') line++, line_start = i + 1;
    die_input(path, "not valid JSON at line %lld, column %zu (byte %zu)", (long long)line, at - line_start + 1,
              at + 1);
  }
  for (const char *p = end; p < text + n; p++)
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t')
      die_input(path, "more after the JSON's end, at byte %zu", (size_t)(p - text) + 1);
  free(bytes);
  return root;
}

static const cJSON *top_array(const Split *s, const char *key) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(s->root, key);
  if (!cJSON_IsArray(a)) die_input(s->json_path, "no \"%s\" array at the top level (not a COCO instances file?)", key);
  return a;
}

// An integer member of o, or false.
static bool get_int(const cJSON *o, const char *key, int64_t *v) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) || fabs(item->valuedouble) > 9e15)
    return false;
  *v = (int64_t)item->valuedouble;
  return true;
}

static int64_t need_int(const Split *s, const char *where, const cJSON *o, const char *key) {
  int64_t v;
  if (!get_int(o, key, &v)) die_input(s->json_path, "%s: no integer \"%s\"", where, key);
  return v;
}

// Labels 1..N in the order of "categories", as the reference gives them.
static void read_categories(Split *s) {
  s->categories = top_array(s, "categories");
  s->category_count = cJSON_GetArraySize(s->categories);
  if (!s->category_count) die_input(s->json_path, "\"categories\" is empty");
  s->category_ids = xmalloc((size_t)s->category_count * sizeof *s->category_ids);
  char where[64];
  int64_t label = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, s->categories) {
    snprintf(where, sizeof where, "categories[%lld]", (long long)label);
    int64_t id = need_int(s, where, c, "id");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "name")))
      die_input(s->json_path, "category %lld: no string \"name\"", (long long)id);
    s->category_ids[label] = (IdMap){id, label + 1};
    label++;
  }
  sort_ids(s, s->category_ids, s->category_count, "category");
}

static void read_images(Split *s) {
  const cJSON *images = top_array(s, "images");
  s->image_count = cJSON_GetArraySize(images);
  s->images = xcalloc((size_t)s->image_count + 1, sizeof *s->images);
  s->image_ids = xmalloc(((size_t)s->image_count + 1) * sizeof *s->image_ids);
  char where[64];
  int64_t i = 0;
  const cJSON *im;
  cJSON_ArrayForEach(im, images) {
    snprintf(where, sizeof where, "images[%lld]", (long long)i);
    CocoImage *c = &s->images[i];
    c->id = need_int(s, where, im, "id");
    snprintf(where, sizeof where, "image %lld", (long long)c->id);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(im, "file_name");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strchr(name->valuestring, '/'))
      die_input(s->json_path, "%s: no \"file_name\" (a file name without a folder)", where);
    c->file_name = name->valuestring;
    int64_t w = need_int(s, where, im, "width"), h = need_int(s, where, im, "height");
    if (w < 1 || h < 1 || w > 65535 || h > 65535)
      die_input(s->json_path, "%s: a size of %lldx%lld pixels", where, (long long)w, (long long)h);
    c->width = (int32_t)w;
    c->height = (int32_t)h;
    s->image_ids[i] = (IdMap){c->id, i};
    i++;
  }
  sort_ids(s, s->image_ids, s->image_count, "image");
}

// One annotation's box, checked, clipped and made fractions of its image;
// false when it has no area (dropped with a warning).
static bool read_box(Split *s, const cJSON *a, const char *where, const CocoImage *im, float out[4]) {
  const cJSON *bbox = cJSON_GetObjectItemCaseSensitive(a, "bbox");
  double v[4];
  int n = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, bbox) {
    if (n == 4 || !cJSON_IsNumber(item)) break;
    v[n++] = item->valuedouble;
  }
  if (!cJSON_IsArray(bbox) || n != 4 || cJSON_GetArraySize(bbox) != 4 || !isfinite(v[0] + v[1] + v[2] + v[3]))
    die_input(s->json_path, "%s: \"bbox\" is not 4 numbers [x, y, width, height]", where);
  if (v[2] < 0 || v[3] < 0)
    die_input(s->json_path, "%s: bbox [%g, %g, %g, %g] has a negative %s", where, v[0], v[1], v[2], v[3],
              v[2] < 0 ? "width" : "height");
  double W = im->width, H = im->height;
  if (v[0] < -BOX_TOLERANCE || v[1] < -BOX_TOLERANCE || v[0] + v[2] > W + BOX_TOLERANCE ||
      v[1] + v[3] > H + BOX_TOLERANCE)
    die_input(s->json_path, "%s: bbox [%g, %g, %g, %g] reaches outside the %dx%d image by more than %g pixel",
              where, v[0], v[1], v[2], v[3], im->width, im->height, BOX_TOLERANCE);
  double x0 = fmax(v[0], 0), y0 = fmax(v[1], 0), x1 = fmin(v[0] + v[2], W), y1 = fmin(v[1] + v[3], H);
  if (x1 <= x0 || y1 <= y0) {
    fprintf(stderr, "warning: %s: %s: bbox [%g, %g, %g, %g] has no area; dropped\n", s->json_path, where, v[0],
            v[1], v[2], v[3]);
    s->zero_dropped++;
    return false;
  }
  out[0] = (float)(x0 / W);
  out[1] = (float)(y0 / H);
  out[2] = (float)(x1 / W);
  out[3] = (float)(y1 / H);
  return true;
}

static void read_annotations(Split *s) {
  const cJSON *anns = top_array(s, "annotations");
  IdMap *ann_ids = xmalloc(((size_t)cJSON_GetArraySize(anns) + 1) * sizeof *ann_ids);
  char where[128];
  int64_t order = 0;
  const cJSON *a;
  cJSON_ArrayForEach(a, anns) {
    snprintf(where, sizeof where, "annotations[%lld]", (long long)order);
    int64_t id = need_int(s, where, a, "id");
    ann_ids[order] = (IdMap){id, order};
    snprintf(where, sizeof where, "annotation %lld", (long long)id);
    int64_t image_id = need_int(s, where, a, "image_id");
    int64_t image = find_id(s->image_ids, s->image_count, image_id);
    if (image < 0) die_input(s->json_path, "%s: image_id %lld is not among the images", where, (long long)image_id);
    snprintf(where, sizeof where, "annotation %lld (image %lld)", (long long)id, (long long)image_id);
    int64_t category = need_int(s, where, a, "category_id"), crowd = 0;
    int64_t label = find_id(s->category_ids, s->category_count, category);
    if (label < 0)
      die_input(s->json_path, "%s: category_id %lld is not among the categories", where, (long long)category);
    if (cJSON_GetObjectItemCaseSensitive(a, "iscrowd") && (!get_int(a, "iscrowd", &crowd) || crowd < 0 || crowd > 1))
      die_input(s->json_path, "%s: \"iscrowd\" is not 0 or 1", where);
    CocoBox b = {.image = image, .order = order++, .label = (int32_t)(crowd ? -label : label)};
    s->images[image].annotations++;
    if (!read_box(s, a, where, &s->images[image], b.box)) continue;
    s->boxes = grow(s->boxes, s->box_count, &s->box_capacity, sizeof *s->boxes);
    s->boxes[s->box_count++] = b;
    s->crowd += crowd;
  }
  sort_ids(s, ann_ids, order, "annotation");
  free(ann_ids);
  if (s->box_count) qsort(s->boxes, (size_t)s->box_count, sizeof *s->boxes, compare_boxes);
  for (int64_t i = 0; i < s->box_count; i++) {
    CocoImage *im = &s->images[s->boxes[i].image];
    if (!im->box_count) im->first_box = i;
    im->box_count++;
  }
}

// Whether an image goes into the split's LMDB: a training image needs a box
// to learn from; val keeps every image, or with --val_images=annotated
// those the JSON gives an annotation.
static bool keeps_image(const Split *s, const CocoImage *im) {
  if (strcmp(s->name, "train") == 0) return im->box_count > 0;
  return !s->val_annotated_only || im->annotations > 0;
}

// Reads and checks the split's JSON, and that the file of every image it
// keeps is there.
static void read_split(Split *s, const char *coco) {
  snprintf(s->json_path, sizeof s->json_path, "%s/annotations/instances_%s2017.json", coco, s->name);
  s->root = parse_json(s->json_path);
  if (!cJSON_IsObject(s->root)) die_input(s->json_path, "not a JSON object (not a COCO instances file?)");
  read_categories(s);
  read_images(s);
  read_annotations(s);
  char path[8300];
  struct stat st;
  for (int64_t i = 0; i < s->image_count; i++) {
    const CocoImage *im = &s->images[i];
    if (!keeps_image(s, im)) continue;
    snprintf(path, sizeof path, "%s/%s2017/%s", coco, s->name, im->file_name);
    if (stat(path, &st) != 0) die_input(path, "image %lld: %s", (long long)im->id, strerror(errno));
    if (!S_ISREG(st.st_mode)) die_input(path, "image %lld: not a file", (long long)im->id);
  }
}

static void convert_split(Split *s, ImageCheck *check, const char *coco, const char *out) {
  char dir[4096], path[8300], name[8400];
  snprintf(dir, sizeof dir, "%s/%s", out, s->name);
  LmdbWriter *w = lmdb_writer_open(dir);
  Progress p;
  progress_start(&p, s->name, s->image_count);
  uint8_t *value = NULL;
  size_t value_bytes = 0;
  int64_t kept = 0, total_bytes = 0, boxes = 0;
  float *coords = xmalloc(4 * sizeof(float) * ((size_t)s->box_count + 1));
  int32_t *labels = xmalloc(sizeof(int32_t) * ((size_t)s->box_count + 1));
  for (int64_t i = 0; i < s->image_count; i++) {
    const CocoImage *im = &s->images[i];
    progress_update(&p, i + 1, i + 1, -1);
    if (!keeps_image(s, im)) continue;
    kept++;
    snprintf(path, sizeof path, "%s/%s2017/%s", coco, s->name, im->file_name);
    snprintf(name, sizeof name, "%s: image %lld", path, (long long)im->id);
    size_t n;
    uint8_t *bytes = file_read(path, &n);
    Record r = {.kind = RECORD_IMAGE_BOXES, .image = bytes, .image_bytes = n, .image_id = im->id,
                .box_count = (int32_t)im->box_count, .boxes = coords, .box_labels = labels,
                .image_format = image_check(check, name, bytes, n)};
    ImageInfo info;
    char msg[512];
    if (image_header(check->decoder, bytes, n, &info, msg, sizeof msg) != IMAGE_OK) die_input(name, "%s", msg);
    if (info.width != im->width || info.height != im->height)
      die_input(name, "%dx%d pixels, but %s says %dx%d", info.width, info.height, s->json_path, im->width,
                im->height);
    for (int64_t b = 0; b < im->box_count; b++) {
      memcpy(coords + 4 * b, s->boxes[im->first_box + b].box, 4 * sizeof(float));
      labels[b] = s->boxes[im->first_box + b].label;
    }
    put_record(w, &r, &value, &value_bytes);
    total_bytes += (int64_t)n;
    boxes += im->box_count;
    free(bytes);
  }
  lmdb_writer_close(w);
  printf("coco_to_lmdb: %s: %lld images, %lld boxes (%lld crowd), %lld images without %s left out, "
         "%lld boxes without area dropped, %.1f MB -> %s\n",
         s->name, (long long)kept, (long long)boxes, (long long)s->crowd, (long long)(s->image_count - kept),
         strcmp(s->name, "train") == 0 ? "boxes" : "annotations", (long long)s->zero_dropped,
         total_bytes / 1e6, dir);
  free(value);
  free(coords);
  free(labels);
}

// Two splits must number their categories alike.
static void check_same_categories(const Split *a, const Split *b) {
  if (a->category_count != b->category_count)
    die_input(b->json_path, "%lld categories, %s has %lld", (long long)b->category_count, a->json_path,
              (long long)a->category_count);
  for (int i = 0; i < (int)a->category_count; i++) {
    int64_t x = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a->categories, i), "id")->valuedouble;
    int64_t y = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(b->categories, i), "id")->valuedouble;
    if (x != y)
      die_input(b->json_path, "category %d is id %lld, in %s id %lld: the labels would differ", i + 1,
                (long long)y, a->json_path, (long long)x);
  }
}

// categories.json: {"categories": [{"label": 1, "id": .., "name": ..}, ..]},
// written whole or not at all.
static void write_categories(const Split *s, const char *out) {
  cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "categories");
  int label = 1;
  const cJSON *c;
  cJSON_ArrayForEach(c, s->categories) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "label", label++);
    cJSON_AddNumberToObject(e, "id", cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble);
    cJSON_AddStringToObject(e, "name", cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
    cJSON_AddItemToArray(list, e);
  }
  char path[4200], *text = cJSON_Print(root);
  CHECK_TRUE(text, "out of memory printing categories.json");
  snprintf(path, sizeof path, "%s/categories.json", out);
  AtomicFile f;
  atomic_file_begin(&f, path);
  atomic_file_puts(&f, text);
  atomic_file_puts(&f, "\n");
  atomic_file_commit(&f);
  free(text);
  cJSON_Delete(root);
}

static void split_free(Split *s) {
  cJSON_Delete(s->root);
  free(s->images);
  free(s->boxes);
  free(s->category_ids);
  free(s->image_ids);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "coco_to_lmdb");
  const char *coco = config_string(&cfg, "coco"), *out = config_string(&cfg, "out");
  const char *split = config_string(&cfg, "split");
  if (!*coco) die_input("--coco", "missing: the COCO root (with annotations/, train2017/, val2017/)");
  if (!*out) die_input("--out", "missing: the output folder");
  require_folder("--coco", coco);
  bool do_train = strcmp(split, "val") != 0, do_val = strcmp(split, "train") != 0;
  check_splits_free(out, do_train, do_val, "--split");
  double start = time_now_s();
  Split splits[2] = {{.name = "train"},
                     {.name = "val", .val_annotated_only = strcmp(config_string(&cfg, "val_images"), "annotated") == 0}};
  bool wanted[2] = {do_train, do_val};
  for (int k = 0; k < 2; k++)
    if (wanted[k]) read_split(&splits[k], coco);
  if (do_train && do_val) check_same_categories(&splits[0], &splits[1]);
  const Split *first = do_train ? &splits[0] : &splits[1];
  printf("coco_to_lmdb: %lld categories; %lld train and %lld val images, %lld and %lld boxes listed\n",
         (long long)first->category_count, (long long)splits[0].image_count, (long long)splits[1].image_count,
         (long long)splits[0].box_count, (long long)splits[1].box_count);
  file_make_dirs(out);
  ImageCheck check = {.decoder = image_decoder_create(), .accept_warnings = config_bool(&cfg, "accept_warnings")};
  for (int k = 0; k < 2; k++)
    if (wanted[k]) convert_split(&splits[k], &check, coco, out);
  write_categories(first, out);
  printf("coco_to_lmdb: done in %.1f s\n", time_now_s() - start);
  image_free(&check.scratch);
  image_decoder_free(check.decoder);
  for (int k = 0; k < 2; k++) split_free(&splits[k]);
  config_free(&cfg);
  return 0;
}
