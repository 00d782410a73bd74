// coco_json.c: COCO's annotation and results files (coco_json.h), read and
// read with cJSON; results written with printf (coco_json_format says why).
#include "object_detection/coco_json.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/file.h"
#include "core/json.h"

// Ids are read as JSON numbers, doubles: past 2^53 they are no longer exact.
#define COCO_JSON_ID_MAX 9007199254740992.0

// Where a value sits, for errors: the file and the item ("annotations[3]").
typedef struct CocoJsonAt {
  const char *path;
  char item[64];
} CocoJsonAt;

static double coco_json_number(const cJSON *obj, const char *key, const CocoJsonAt *at) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v)) die_input(at->path, "%s: \"%s\" missing or not a number", at->item, key);
  if (!isfinite(v->valuedouble)) die_input(at->path, "%s: \"%s\" is not finite", at->item, key);
  return v->valuedouble;
}

// A number that must be a whole one in [lo, hi].
static int64_t coco_json_int(const cJSON *obj, const char *key, double lo, double hi,
                             const CocoJsonAt *at) {
  double x = coco_json_number(obj, key, at);
  if (x != floor(x) || x < lo || x > hi)
    die_input(at->path, "%s: \"%s\" %.17g is not an integer in [%.17g, %.17g]", at->item, key, x, lo, hi);
  return (int64_t)x;
}

static int64_t coco_json_id(const cJSON *obj, const char *key, const CocoJsonAt *at) {
  return coco_json_int(obj, key, 0, COCO_JSON_ID_MAX, at);
}

// "bbox": [x, y, width, height], four numbers, width and height >= 0.
static void coco_json_bbox(const cJSON *obj, const CocoJsonAt *at, double bbox[4]) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "bbox");
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 4)
    die_input(at->path, "%s: \"bbox\" missing or not [x, y, width, height]", at->item);
  int i = 0;
  for (const cJSON *e = v->child; e; e = e->next, i++) {
    if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
      die_input(at->path, "%s: \"bbox\" holds something other than finite numbers", at->item);
    bbox[i] = e->valuedouble;
  }
  if (bbox[2] < 0 || bbox[3] < 0)
    die_input(at->path, "%s: bbox %s %.17g is negative", at->item, bbox[2] < 0 ? "width" : "height",
              bbox[2] < 0 ? bbox[2] : bbox[3]);
}

// The array under key of the root object, each element an object.
static const cJSON *coco_json_list(const cJSON *root, const char *key, const char *path) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!cJSON_IsArray(v)) die_input(path, "no \"%s\" array", key);
  return v;
}

// Names item i of list `name` in at for the errors that follow; an item
// that is not an object is one.
static void coco_json_item(const cJSON *item, const char *name, int64_t i, CocoJsonAt *at) {
  snprintf(at->item, sizeof at->item, "%s[%lld]", name, (long long)i);
  if (!cJSON_IsObject(item)) die_input(at->path, "%s: not an object", at->item);
}

static void coco_gt_read_images(CocoGt *gt, const cJSON *root, CocoJsonAt *at) {
  int64_t i = 0;
  for (const cJSON *im = coco_json_list(root, "images", at->path)->child; im; im = im->next) {
    coco_json_item(im, "images", i++, at);
    int64_t id = coco_json_id(im, "id", at);
    int64_t w = coco_json_int(im, "width", 1, INT32_MAX, at);
    int64_t h = coco_json_int(im, "height", 1, INT32_MAX, at);
    coco_gt_add_image(gt, id, (int32_t)w, (int32_t)h);
  }
}

static void coco_gt_read_categories(CocoGt *gt, const cJSON *root, CocoJsonAt *at) {
  int64_t i = 0;
  for (const cJSON *c = coco_json_list(root, "categories", at->path)->child; c; c = c->next) {
    coco_json_item(c, "categories", i++, at);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    coco_gt_add_category(gt, coco_json_id(c, "id", at), cJSON_IsString(name) ? name->valuestring : "");
  }
}

static void coco_gt_read_annotations(CocoGt *gt, const cJSON *root, CocoJsonAt *at) {
  int64_t i = 0;
  for (const cJSON *a = coco_json_list(root, "annotations", at->path)->child; a; a = a->next) {
    coco_json_item(a, "annotations", i++, at);
    CocoAnnotation ann = {.id = coco_json_id(a, "id", at),
                          .image_id = coco_json_id(a, "image_id", at),
                          .category_id = coco_json_id(a, "category_id", at),
                          .area = coco_json_number(a, "area", at),
                          .iscrowd = coco_json_int(a, "iscrowd", 0, 1, at) == 1};
    if (ann.area < 0) die_input(at->path, "%s: \"area\" %.17g is negative", at->item, ann.area);
    coco_json_bbox(a, at, ann.bbox);
    coco_gt_add_annotation(gt, &ann);
  }
}

void coco_gt_load_json(CocoGt *gt, const char *path) {
  cJSON *root = json_read_file(path);
  if (!cJSON_IsObject(root))
    die_input(path, "not a COCO annotations file (want an object with \"images\", "
                    "\"categories\" and \"annotations\")");
  CocoJsonAt at = {.path = path};
  coco_gt_init(gt);
  coco_gt_read_images(gt, root, &at);
  coco_gt_read_categories(gt, root, &at);
  coco_gt_read_annotations(gt, root, &at);
  cJSON_Delete(root);
  coco_gt_index(gt, path);
}

void coco_dets_load_json(CocoDetections *dets, const CocoGt *gt, const char *path) {
  cJSON *root = json_read_file(path);
  if (!cJSON_IsArray(root))
    die_input(path, "not a results file (want an array of {\"image_id\", \"category_id\", "
                    "\"bbox\", \"score\"})");
  CocoJsonAt at = {.path = path};
  int64_t i = 0;
  for (const cJSON *r = root->child; r; r = r->next) {
    coco_json_item(r, "results", i++, &at);
    CocoDetection d = {.image_id = coco_json_id(r, "image_id", &at),
                       .category_id = coco_json_id(r, "category_id", &at),
                       .score = coco_json_number(r, "score", &at)};
    if (coco_gt_image_index(gt, d.image_id) < 0)
      die_input(path, "%s: unknown image_id %lld", at.item, (long long)d.image_id);
    if (coco_gt_category_index(gt, d.category_id) < 0)
      die_input(path, "%s: unknown category_id %lld", at.item, (long long)d.category_id);
    coco_json_bbox(r, &at, d.bbox);
    coco_dets_add(dets, &d);
  }
  cJSON_Delete(root);
}

// x as the shortest of %.15g, %.16g, %.17g that reads back as x exactly
// (cJSON's printer settles for a double within an epsilon of it).
static void coco_json_format(char *out, size_t n_out, double x) {
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(out, n_out, "%.*g", digits, x);
    if (strtod(out, NULL) == x) return;
  }
}

// One result as one line of JSON: only numbers, so nothing to escape.
static void coco_det_write(AtomicFile *f, const CocoDetection *d) {
  char v[5][32];
  for (int i = 0; i < 4; i++) coco_json_format(v[i], sizeof v[i], d->bbox[i]);
  coco_json_format(v[4], sizeof v[4], d->score);
  atomic_file_printf(f, "{\"image_id\":%lld,\"category_id\":%lld,\"bbox\":[%s,%s,%s,%s],\"score\":%s}",
                     (long long)d->image_id, (long long)d->category_id, v[0], v[1], v[2], v[3], v[4]);
}

void coco_dets_write_json(const CocoDetections *dets, const char *path) {
  AtomicFile f;
  atomic_file_begin(&f, path);
  atomic_file_puts(&f, "[");
  for (int64_t i = 0; i < dets->n; i++) {
    atomic_file_puts(&f, i > 0 ? ",\n" : "\n");
    coco_det_write(&f, &dets->dets[i]);
  }
  atomic_file_puts(&f, "\n]\n");
  atomic_file_commit(&f);
}
