// coco_generate: a small object-detection data set in the real COCO 2017
// layout, from real pixels, so that the scaled SSD benchmarks go through the
// same converter (coco_to_lmdb) as COCO itself:
//   <out>/train2017/000000000001.jpg ...           JPEG files, --side square
//   <out>/val2017/000000000002.jpg ...
//   <out>/annotations/instances_{train,val}2017.json
// Each image is a random square crop of one of the photos in --photos
// (Debian opencv-doc's examples, JPEG and PNG), resized to --side, with 1-4
// Fashion-MNIST items (Debian dataset-fashion-mnist; train images draw on
// its training file, val images on its test file) pasted at random places
// and sizes of 24-80 pixels (for a side of 128; scaled with the side). An
// item's dark background is transparent (alpha rises from 0 at grey 24 to 1
// at grey 64), so the object is its silhouette, tinted with a random colour;
// its box is the tight extent of its visible pixels. Items overlap a box
// already placed by at most IoU 0.2 (after 20 tries an item is left out).
// Every 20th image (index 3, 23, ...) holds no item and no annotation; every
// 25th (index 5, 30, ...) also holds a crowd: 3-5 small items of one class
// close together, annotated once with iscrowd=1 and the box around them.
// The ten classes have the non-contiguous category ids 1, 3, 5, 8, 13, 21,
// 34, 55, 70, 90. Image ids are 3i+1 (train) and 3i+2 (val), annotation ids
// count from 1 (train) and 100000001 (val). Boxes are whole pixels; a box's
// segmentation is its polygon (non-crowd) or an uncompressed RLE of it
// (crowd), as pycocotools reads them; area = w*h. Everything follows from
// --seed (counter-based random numbers per split and image), and the JSON
// files are written last, each whole or not at all.
//   coco_generate --out=data/ssd/small/raw --train_count=4000 --val_count=500
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/rng.h"
#include "data/augment.h"
#include "data/image.h"
#include "datasets/convert_util.h"
#include "datasets/fmnist_idx.h"

static const ConfigKey KEYS[] = {
    {"out", CFG_STRING, "", "output root (created; must not hold train2017/, val2017/ or annotations/)", NULL},
    {"train_count", CFG_INT, "4000", "training images", "[0, 1000000]"},
    {"val_count", CFG_INT, "500", "validation images", "[0, 1000000]"},
    {"side", CFG_INT, "128", "image side in pixels", "[32, 1024]"},
    {"seed", CFG_INT, "1", "random seed: the same seed gives the same files", "[0, inf)"},
    {"photos", CFG_STRING, "/usr/share/doc/opencv-doc/examples/data",
     "folder of JPEG/PNG photos for the backgrounds (Debian opencv-doc)", NULL},
    {"fmnist", CFG_STRING, FMNIST_DIR, "folder of Fashion-MNIST's IDX files (Debian dataset-fashion-mnist)", NULL},
    {"quality", CFG_INT, "90", "JPEG quality", "[1, 100]"},
};

static const int kCategoryIds[10] = {1, 3, 5, 8, 13, 21, 34, 55, 70, 90};
static const char *const kSupercategory[10] = {"clothing", "clothing", "clothing", "clothing", "clothing",
                                               "footwear", "clothing", "footwear", "accessory", "footwear"};
enum { EMPTY_EVERY = 20, EMPTY_AT = 3, CROWD_EVERY = 25, CROWD_AT = 5, MAX_TRIES = 20 };
#define ALPHA_LOW 24.0f  // grey at or below: transparent
#define ALPHA_SPAN 40.0f // grey ALPHA_LOW + ALPHA_SPAN and above: opaque
#define MAX_IOU 0.2f

// The random numbers of one image: number n of (seed, stream).
typedef struct Draw {
  uint64_t seed, stream, n;
} Draw;

static float draw_unit(Draw *d) { return rng_uniform(d->seed, d->stream, d->n++); }

// Uniform on [lo, hi].
static int32_t draw_int(Draw *d, int32_t lo, int32_t hi) {
  int32_t v = lo + (int32_t)(draw_unit(d) * (float)(hi - lo + 1));
  return v > hi ? hi : v;
}

typedef struct Box {
  int32_t x0, y0, x1, y1;  // pixels; x1, y1 one past the last
} Box;

static float box_iou(Box a, Box b) {
  int32_t w = (a.x1 < b.x1 ? a.x1 : b.x1) - (a.x0 > b.x0 ? a.x0 : b.x0);
  int32_t h = (a.y1 < b.y1 ? a.y1 : b.y1) - (a.y0 > b.y0 ? a.y0 : b.y0);
  if (w <= 0 || h <= 0) return 0;
  float inter = (float)w * h;
  float area_a = (float)(a.x1 - a.x0) * (a.y1 - a.y0), area_b = (float)(b.x1 - b.x0) * (b.y1 - b.y0);
  return inter / (area_a + area_b - inter);
}

static Box box_union(Box a, Box b) {
  return (Box){a.x0 < b.x0 ? a.x0 : b.x0, a.y0 < b.y0 ? a.y0 : b.y0, a.x1 > b.x1 ? a.x1 : b.x1,
               a.y1 > b.y1 ? a.y1 : b.y1};
}

// The photos of a folder, decoded (JPEG at a DCT scale no smaller than twice
// the side), in name order.
typedef struct Photos {
  Image *images;
  int count;
} Photos;

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_photo_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".png") == 0);
}

static Photos load_photos(const char *dir, int32_t side) {
  DIR *d = opendir(dir);
  if (!d)
    die_input("--photos", "'%s': %s (Debian's opencv-doc puts photos in "
                          "/usr/share/doc/opencv-doc/examples/data)", dir, strerror(errno));
  char **names = NULL;
  int count = 0, capacity = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !is_photo_name(e->d_name)) continue;
    if (count == capacity) {
      capacity = capacity ? 2 * capacity : 64;
      char **grown = xmalloc((size_t)capacity * sizeof *grown);
      if (count) memcpy(grown, names, (size_t)count * sizeof *grown);
      free(names);
      names = grown;
    }
    names[count++] = strdup(e->d_name);
  }
  closedir(d);
  if (!count) die_input("--photos", "no .jpg, .jpeg or .png files in '%s'", dir);
  qsort(names, (size_t)count, sizeof *names, compare_strings);
  Photos p = {.images = xcalloc((size_t)count, sizeof(Image)), .count = count};
  ImageDecoder *decoder = image_decoder_create();
  char path[4096], msg[512];
  for (int i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    size_t n;
    uint8_t *bytes = file_read(path, &n);
    if (image_decode(decoder, bytes, n, 2 * side, 2 * side, &p.images[i], msg, sizeof msg) == IMAGE_ERROR)
      die_input(path, "%s", msg);
    if (p.images[i].width < 16 || p.images[i].height < 16)
      die_input(path, "a photo of %dx%d pixels: want 16 or more a side", p.images[i].width, p.images[i].height);
    free(bytes);
    free(names[i]);
  }
  free(names);
  image_decoder_free(decoder);
  return p;
}

typedef struct Gen {
  int32_t side;
  int quality;
  uint64_t seed;
  Photos photos;
  uint8_t *canvas;  // (side, side, 3)
  uint8_t *item;    // (side, side, 3): one item, resized
} Gen;

// A random square crop of a random photo, resized into the canvas.
static void draw_background(Gen *g, Draw *d) {
  const Image *im = &g->photos.images[draw_int(d, 0, g->photos.count - 1)];
  float short_side = (float)(im->width < im->height ? im->width : im->height);
  float crop = short_side * (0.3f + 0.7f * draw_unit(d));
  float x = draw_unit(d) * ((float)im->width - crop), y = draw_unit(d) * ((float)im->height - crop);
  bool flip = draw_unit(d) < 0.5f;
  augment_crop_resize(im->pixels, im->width, im->height, x, y, crop, crop, flip, g->canvas, g->side, g->side);
}

static float item_alpha(uint8_t grey) {
  float a = ((float)grey - ALPHA_LOW) / ALPHA_SPAN;
  return a < 0 ? 0 : a > 1 ? 1 : a;
}

// Item `index` resized to size x size into g->item; returns the extent of its
// visible pixels (x1 == 0 when none is).
static Box prepare_item(Gen *g, const Idx *images, int64_t index, int32_t size) {
  fmnist_resize(images, index, g->item, size, size);
  Box b = {size, size, 0, 0};
  for (int32_t y = 0; y < size; y++)
    for (int32_t x = 0; x < size; x++)
      if (item_alpha(g->item[3 * (y * size + x)]) > 0) b = box_union(b, (Box){x, y, x + 1, y + 1});
  return b;
}

// Blends the item prepared in g->item (size x size) into the canvas at
// (x, y), tinted.
static void paste_item(Gen *g, int32_t size, int32_t x, int32_t y, const float tint[3]) {
  for (int32_t r = 0; r < size; r++)
    for (int32_t c = 0; c < size; c++) {
      uint8_t grey = g->item[3 * (r * size + c)];
      float a = item_alpha(grey);
      if (a == 0) continue;
      uint8_t *px = g->canvas + 3 * ((size_t)(y + r) * g->side + (x + c));
      for (int ch = 0; ch < 3; ch++) px[ch] = (uint8_t)lrintf(a * tint[ch] * grey + (1 - a) * px[ch]);
    }
}

// A random item of class `label` (any class when label < 0).
static int64_t draw_item(Draw *d, const Idx *labels, int label) {
  for (;;) {
    int64_t i = draw_int(d, 0, (int32_t)labels->count - 1);
    if (label < 0 || labels->data[i] == label) return i;
  }
}

// One annotated object of an image.
typedef struct Object {
  Box box;
  int label;
  bool crowd;
} Object;

enum { MAX_OBJECTS = 8 };

// Places the item of index at a random spot whose box overlaps none of the
// objects by more than MAX_IOU; within `area` (the canvas or a crowd's
// region). Returns false when no spot was found.
static bool place_item(Gen *g, Draw *d, const Idx *images, int64_t index, int32_t size, Box area,
                       const Object *objects, int n_objects, Box *placed) {
  Box local = prepare_item(g, images, index, size);
  if (local.x1 == 0) return false;
  float tint[3];
  for (int ch = 0; ch < 3; ch++) tint[ch] = 0.35f + 0.65f * draw_unit(d);
  for (int t = 0; t < MAX_TRIES; t++) {
    int32_t x = draw_int(d, area.x0, area.x1 - size), y = draw_int(d, area.y0, area.y1 - size);
    Box b = {x + local.x0, y + local.y0, x + local.x1, y + local.y1};
    bool clear = true;
    for (int o = 0; o < n_objects && clear; o++) clear = box_iou(b, objects[o].box) <= MAX_IOU;
    if (!clear) continue;
    paste_item(g, size, x, y, tint);
    *placed = b;
    return true;
  }
  return false;
}

// A pixel length given for a side of 128, scaled to the side.
static int32_t scaled(const Gen *g, float px128) { return (int32_t)lrintf(px128 * (float)g->side / 128.0f); }

// A crowd: 3-5 small items of one class in a region; its box is around them.
static int add_crowd(Gen *g, Draw *d, const Idx *images, const Idx *labels, Object *objects) {
  int32_t region = scaled(g, 40.0f + 24.0f * draw_unit(d));
  int32_t rx = draw_int(d, 0, g->side - region), ry = draw_int(d, 0, g->side - region);
  Box area = {rx, ry, rx + region, ry + region};
  int label = labels->data[draw_item(d, labels, -1)];
  int members = draw_int(d, 3, 5);
  Box around = {0, 0, 0, 0};
  for (int m = 0; m < members; m++) {
    Box b;
    int32_t size = scaled(g, 14.0f + 8.0f * draw_unit(d));
    // Members may overlap each other: a crowd is one region.
    if (!place_item(g, d, images, draw_item(d, labels, label), size, area, NULL, 0, &b)) continue;
    around = around.x1 ? box_union(around, b) : b;
  }
  if (!around.x1) return 0;
  objects[0] = (Object){around, label, true};
  return 1;
}

static cJSON *number_array(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

// The box as COCO's uncompressed RLE: run lengths of the mask in column-major
// order, starting with a run of zeros.
static cJSON *box_rle(Box b, int32_t side) {
  cJSON *rle = cJSON_CreateObject(), *counts = cJSON_CreateArray();
  int64_t run = 0;
  int value = 0;
  for (int32_t x = 0; x < side; x++)
    for (int32_t y = 0; y < side; y++) {
      int inside = x >= b.x0 && x < b.x1 && y >= b.y0 && y < b.y1;
      if (inside != value) {
        cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)run));
        run = 0;
        value = inside;
      }
      run++;
    }
  cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)run));
  cJSON_AddItemToObject(rle, "counts", counts);
  double size[2] = {side, side};
  cJSON_AddItemToObject(rle, "size", number_array(size, 2));
  return rle;
}

static cJSON *annotation_json(const Object *o, int64_t id, int64_t image_id, int32_t side) {
  cJSON *a = cJSON_CreateObject();
  double w = o->box.x1 - o->box.x0, h = o->box.y1 - o->box.y0;
  double x0 = o->box.x0, y0 = o->box.y0, x1 = o->box.x1, y1 = o->box.y1;
  if (o->crowd) {
    cJSON_AddItemToObject(a, "segmentation", box_rle(o->box, side));
  } else {
    double polygon[8] = {x0, y0, x1, y0, x1, y1, x0, y1};
    cJSON *segmentation = cJSON_CreateArray();
    cJSON_AddItemToArray(segmentation, number_array(polygon, 8));
    cJSON_AddItemToObject(a, "segmentation", segmentation);
  }
  cJSON_AddNumberToObject(a, "area", w * h);
  cJSON_AddNumberToObject(a, "iscrowd", o->crowd);
  cJSON_AddNumberToObject(a, "image_id", (double)image_id);
  double bbox[4] = {x0, y0, w, h};
  cJSON_AddItemToObject(a, "bbox", number_array(bbox, 4));
  cJSON_AddNumberToObject(a, "category_id", kCategoryIds[o->label]);
  cJSON_AddNumberToObject(a, "id", (double)id);
  return a;
}

static cJSON *image_json(int64_t id, const char *file_name, int32_t side) {
  cJSON *im = cJSON_CreateObject();
  cJSON_AddNumberToObject(im, "license", 1);
  cJSON_AddStringToObject(im, "file_name", file_name);
  cJSON_AddStringToObject(im, "coco_url", "");
  cJSON_AddNumberToObject(im, "height", side);
  cJSON_AddNumberToObject(im, "width", side);
  cJSON_AddStringToObject(im, "date_captured", "2017-01-01 00:00:00");
  cJSON_AddStringToObject(im, "flickr_url", "");
  cJSON_AddNumberToObject(im, "id", (double)id);
  return im;
}

// The parts of the JSON every split shares: info, licenses, categories.
static cJSON *dataset_json(void) {
  cJSON *root = cJSON_CreateObject(), *info = cJSON_CreateObject();
  cJSON_AddStringToObject(info, "description",
                          "mlsuite coco_generate: Fashion-MNIST items on opencv-doc photos");
  cJSON_AddStringToObject(info, "url", "");
  cJSON_AddStringToObject(info, "version", "1.0");
  cJSON_AddNumberToObject(info, "year", 2017);
  cJSON_AddStringToObject(info, "contributor", "datasets/coco_generate.c");
  cJSON_AddStringToObject(info, "date_created", "2017/09/01");
  cJSON_AddItemToObject(root, "info", info);
  cJSON *licenses = cJSON_CreateArray(), *license = cJSON_CreateObject();
  cJSON_AddStringToObject(license, "url", "");
  cJSON_AddNumberToObject(license, "id", 1);
  cJSON_AddStringToObject(license, "name", "Fashion-MNIST (MIT) and opencv-doc sample data");
  cJSON_AddItemToArray(licenses, license);
  cJSON_AddItemToObject(root, "licenses", licenses);
  cJSON_AddItemToObject(root, "images", cJSON_CreateArray());
  cJSON_AddItemToObject(root, "annotations", cJSON_CreateArray());
  cJSON *categories = cJSON_CreateArray();
  for (int c = 0; c < 10; c++) {
    cJSON *cat = cJSON_CreateObject();
    cJSON_AddStringToObject(cat, "supercategory", kSupercategory[c]);
    cJSON_AddNumberToObject(cat, "id", kCategoryIds[c]);
    cJSON_AddStringToObject(cat, "name", fmnist_class_name(c));
    cJSON_AddItemToArray(categories, cat);
  }
  cJSON_AddItemToObject(root, "categories", categories);
  return root;
}

typedef struct SplitStats {
  int64_t images, empty, objects, crowds;
} SplitStats;

// The objects of image i: its background and items drawn into g->canvas.
static int draw_image(Gen *g, Draw *d, int64_t i, const Idx *images, const Idx *labels, Object *objects) {
  draw_background(g, d);
  if (i % EMPTY_EVERY == EMPTY_AT) return 0;
  int n = i % CROWD_EVERY == CROWD_AT ? add_crowd(g, d, images, labels, objects) : 0;
  int items = draw_int(d, 1, 4);
  for (int k = 0; k < items; k++) {
    int64_t index = draw_item(d, labels, -1);
    int32_t size = scaled(g, 24.0f + 56.0f * draw_unit(d));
    Box b;
    if (place_item(g, d, images, index, size, (Box){0, 0, g->side, g->side}, objects, n, &b))
      objects[n++] = (Object){b, labels->data[index], false};
  }
  return n;
}

static SplitStats write_split(Gen *g, const char *out, const char *split, int split_no, int64_t count,
                              const Idx *images, const Idx *labels) {
  char dir[1200], path[1400], name[32];
  snprintf(dir, sizeof dir, "%s/%s2017", out, split);
  file_make_dirs(dir);
  cJSON *root = dataset_json();
  cJSON *images_json = cJSON_GetObjectItem(root, "images"), *anns = cJSON_GetObjectItem(root, "annotations");
  SplitStats s = {.images = count};
  int64_t ann_id = 1 + (int64_t)split_no * 100000000;
  Progress p;
  char label[32];
  snprintf(label, sizeof label, "coco %s", split);
  progress_start(&p, label, count);
  for (int64_t i = 0; i < count; i++) {
    Draw d = {g->seed, ((uint64_t)split_no << 32) | (uint64_t)i, 0};
    Object objects[MAX_OBJECTS];
    int n = draw_image(g, &d, i, images, labels, objects);
    int64_t image_id = 3 * i + 1 + split_no;
    snprintf(name, sizeof name, "%012lld.jpg", (long long)image_id);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t bytes;
    uint8_t *jpeg = image_encode_jpeg(g->canvas, g->side, g->side, 3, g->quality, &bytes);
    file_write(path, jpeg, bytes);
    free(jpeg);
    cJSON_AddItemToArray(images_json, image_json(image_id, name, g->side));
    for (int o = 0; o < n; o++) {
      cJSON_AddItemToArray(anns, annotation_json(&objects[o], ann_id++, image_id, g->side));
      s.crowds += objects[o].crowd;
      s.objects += !objects[o].crowd;
    }
    s.empty += n == 0;
    progress_update(&p, i + 1, i + 1, -1);
  }
  snprintf(path, sizeof path, "%s/annotations/instances_%s2017.json", out, split);
  file_make_parent_dirs(path);
  char *text = cJSON_PrintUnformatted(root);
  CHECK_TRUE(text, "out of memory printing the JSON");
  file_write_atomic(path, text, strlen(text));
  free(text);
  cJSON_Delete(root);
  return s;
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "coco_generate");
  const char *out = config_string(&cfg, "out"), *fmnist = config_string(&cfg, "fmnist");
  int64_t counts[2] = {config_int(&cfg, "train_count"), config_int(&cfg, "val_count")};
  Gen g = {.side = (int32_t)config_int(&cfg, "side"), .quality = (int)config_int(&cfg, "quality"),
           .seed = (uint64_t)config_int(&cfg, "seed")};
  if (!*out) die_input("--out", "missing: the output root");
  static const char *const kOutputs[] = {"train2017", "val2017", "annotations", NULL};
  check_outputs_free(out, kOutputs);
  double start = time_now_s();
  Idx images[2], labels[2];
  fmnist_read_split(fmnist, "train", 60000, "--fmnist", &images[0], &labels[0]);
  fmnist_read_split(fmnist, "t10k", 10000, "--fmnist", &images[1], &labels[1]);
  g.photos = load_photos(config_string(&cfg, "photos"), g.side);
  g.canvas = xmalloc((size_t)g.side * g.side * 3);
  g.item = xmalloc((size_t)g.side * g.side * 3);
  static const char *const kSplits[2] = {"train", "val"};
  SplitStats s[2];
  for (int k = 0; k < 2; k++) s[k] = write_split(&g, out, kSplits[k], k, counts[k], &images[k], &labels[k]);
  for (int k = 0; k < 2; k++)
    printf("coco_generate: %s: %lld images (%lld without objects), %lld objects, %lld crowd regions\n",
           kSplits[k], (long long)s[k].images, (long long)s[k].empty, (long long)s[k].objects,
           (long long)s[k].crowds);
  printf("coco_generate: %dx%d JPEGs (quality %d) on %d photos, seed %llu, in %s, %.1f s\n", g.side, g.side,
         g.quality, g.photos.count, (unsigned long long)g.seed, out, time_now_s() - start);
  for (int i = 0; i < g.photos.count; i++) image_free(&g.photos.images[i]);
  free(g.photos.images);
  free(g.canvas);
  free(g.item);
  for (int k = 0; k < 2; k++) {
    free(images[k].data);
    free(labels[k].data);
  }
  config_free(&cfg);
  return 0;
}
