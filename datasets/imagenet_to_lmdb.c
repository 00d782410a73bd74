// imagenet_to_lmdb: an ImageNet folder tree into the LMDB data sets the
// image-classification trainer reads (image+label records, record.h):
//   <root>/train/<wnid>/<name>.JPEG                  -> <out>/train
//   <root>/val/<wnid>/<name>.JPEG, or flat
//   <root>/val/<name>.JPEG + LOC_val_solution.csv   -> <out>/val
//   class index = position of the wnid among train/'s sorted folder names,
//   written to <out>/classes.txt ("index wnid" per line).
// Records are written class by class in sorted file order (the trainer
// shuffles per epoch). Each file is stored as found with its format (JPEG or
// PNG) taken from its bytes, not its name: ImageNet's CMYK JPEGs stay JPEG
// (the decoder converts them) and its PNG named .JPEG is stored as PNG.
// Every image is decoded once here (at 1/8 scale) so that a bad file stops
// the conversion, not a training run: an empty, non-image or undecodable
// file is an error naming it; so is corrupt JPEG data that libjpeg decodes
// with a warning (a truncated file), unless --accept_warnings, which keeps
// such files with a warning line each.
//   imagenet_to_lmdb --root=/data/imagenet --out=data/imagenet/lmdb
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "file.h"
#include "config.h"
#include "image.h"
#include "lmdb_store.h"
#include "record.h"
#include "timer.h"

static const ConfigKey KEYS[] = {
    {"root", CFG_STRING, "", "ImageNet root holding train/ and val/", NULL},
    {"out", CFG_STRING, "", "output folder: train/ and val/ LMDBs and classes.txt", NULL},
    {"splits", CFG_STRING, "train,val", "which splits to convert: train, val or train,val", NULL},
    {"val_csv", CFG_STRING, "", "labels of a flat val/ (default <root>/LOC_val_solution.csv)", NULL},
    {"accept_warnings", CFG_BOOL, "false", "keep JPEGs libjpeg decodes with a warning", NULL},
};

typedef struct Names {
  char **items;  // sorted
  int64_t count, capacity;
} Names;

static void names_add(Names *n, const char *s) {
  if (n->count == n->capacity) {
    n->capacity = n->capacity ? 2 * n->capacity : 64;
    char **grown = xmalloc((size_t)n->capacity * sizeof *grown);
    if (n->count) memcpy(grown, n->items, (size_t)n->count * sizeof *grown);
    free(n->items);
    n->items = grown;
  }
  n->items[n->count++] = strdup(s);
}

static void names_free(Names *n) {
  for (int64_t i = 0; i < n->count; i++) free(n->items[i]);
  free(n->items);
  memset(n, 0, sizeof *n);
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// An empty list has no array, which qsort and bsearch must not see.
static void names_sort(Names *n) {
  if (n->count) qsort(n->items, (size_t)n->count, sizeof *n->items, compare_names);
}

// Position of s in the sorted list, or -1.
static int64_t names_find(const Names *n, const char *s) {
  if (!n->count) return -1;
  char *const *hit = bsearch(&s, n->items, (size_t)n->count, sizeof *n->items, compare_names);
  return hit ? hit - n->items : -1;
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// The entries of dir, files and folders apart, each sorted.
static void list_dir(const char *dir, Names *files, Names *folders) {
  DIR *d = opendir(dir);
  if (!d) die_input(dir, "cannot open the folder: %s", strerror(errno));
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    names_add(is_dir(path) ? folders : files, e->d_name);
  }
  closedir(d);
  names_sort(files);
  names_sort(folders);
}

// One image to convert: its path and class.
typedef struct Item {
  char *path;
  int32_t label;
} Item;

typedef struct Items {
  Item *items;
  int64_t count, capacity;
} Items;

static void items_add(Items *it, const char *dir, const char *name, int32_t label) {
  if (it->count == it->capacity) {
    it->capacity = it->capacity ? 2 * it->capacity : 1024;
    Item *grown = xmalloc((size_t)it->capacity * sizeof *grown);
    if (it->count) memcpy(grown, it->items, (size_t)it->count * sizeof *grown);
    free(it->items);
    it->items = grown;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  it->items[it->count++] = (Item){strdup(path), label};
}

static void items_free(Items *it) {
  for (int64_t i = 0; i < it->count; i++) free(it->items[i].path);
  free(it->items);
}

// The images of class folders <dir>/<wnid>/; a wnid must be a known class.
static void add_class_folders(const char *dir, const Names *wnids, const Names *classes, Items *out) {
  char class_dir[4096];
  for (int64_t c = 0; c < wnids->count; c++) {
    snprintf(class_dir, sizeof class_dir, "%s/%s", dir, wnids->items[c]);
    int64_t label = names_find(classes, wnids->items[c]);
    if (label < 0) die_input(class_dir, "class folder '%s' is not one of train/'s classes", wnids->items[c]);
    Names files = {0}, folders = {0};
    list_dir(class_dir, &files, &folders);
    if (folders.count)
      die_input(class_dir, "holds a folder '%s'; a class folder holds only images", folders.items[0]);
    for (int64_t i = 0; i < files.count; i++) items_add(out, class_dir, files.items[i], (int32_t)label);
    names_free(&files);
    names_free(&folders);
  }
}

// The classes: train/'s folder names, sorted. train/ holds nothing else.
static void read_classes(const char *root, Names *classes, Items *train) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/train", root);
  Names files = {0};
  list_dir(dir, &files, classes);
  if (files.count) {
    char stray[4200];
    snprintf(stray, sizeof stray, "%s/%s", dir, files.items[0]);
    die_input(stray, "an image in no class folder (images belong in train/<wnid>/)");
  }
  if (classes->count == 0) die_input(dir, "has no class folders");
  add_class_folders(dir, classes, classes, train);
  names_free(&files);
}

// LOC_val_solution.csv: ImageId,PredictionString "wnid x0 y0 x1 y1 [wnid ...]";
// the first wnid is the label. ids gets the ImageIds sorted, labels (by id
// position) their classes.
static void read_val_csv(const char *path, const Names *classes, Names *ids, int32_t **labels) {
  FILE *f = fopen(path, "r");
  if (!f) die_input(path, "cannot open the val labels: %s", strerror(errno));
  char line[8192];
  Names rows = {0};  // "id\twnid_index" so that sorting keeps the pairs
  int64_t line_no = 0;
  while (fgets(line, sizeof line, f)) {
    line_no++;
    line[strcspn(line, "\r\n")] = 0;
    if (line_no == 1 && strncmp(line, "ImageId,", 8) == 0) continue;
    if (!line[0]) continue;
    char *comma = strchr(line, ',');
    char wnid[128] = "";
    if (!comma || sscanf(comma + 1, "%127s", wnid) != 1)
      die_input(path, "line %lld: want ImageId,PredictionString, got '%.80s'", (long long)line_no, line);
    *comma = 0;
    int64_t label = names_find(classes, wnid);
    if (label < 0)
      die_input(path, "line %lld: wnid '%s' of %s is not one of train/'s classes", (long long)line_no,
                wnid, line);
    char row[8300];
    snprintf(row, sizeof row, "%s\t%lld", line, (long long)label);
    names_add(&rows, row);
  }
  fclose(f);
  names_sort(&rows);
  *labels = xmalloc((size_t)(rows.count ? rows.count : 1) * sizeof **labels);
  for (int64_t i = 0; i < rows.count; i++) {
    char *tab = strchr(rows.items[i], '\t');
    *tab = 0;
    (*labels)[i] = (int32_t)atoi(tab + 1);
    names_add(ids, rows.items[i]);
  }
  names_free(&rows);
}

static void read_val(const char *root, const char *csv, const Names *classes, Items *val) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/val", root);
  Names files = {0}, folders = {0};
  list_dir(dir, &files, &folders);
  if (files.count && folders.count)
    die_input(dir, "mixes class folders ('%s') and images ('%s'); use one layout", folders.items[0],
              files.items[0]);
  add_class_folders(dir, &folders, classes, val);
  if (files.count) {
    Names ids = {0};
    int32_t *labels;
    read_val_csv(csv, classes, &ids, &labels);
    char id[4096];
    for (int64_t i = 0; i < files.count; i++) {
      snprintf(id, sizeof id, "%s", files.items[i]);
      char *dot = strrchr(id, '.');
      if (dot) *dot = 0;
      int64_t k = names_find(&ids, id);
      if (k < 0) die_input(files.items[i], "a val image with no row in %s", csv);
      items_add(val, dir, files.items[i], labels[k]);
    }
    free(labels);
    names_free(&ids);
  }
  names_free(&files);
  names_free(&folders);
}

typedef struct Converter {
  ImageDecoder *decoder;
  Image scratch;
  bool accept_warnings;
  uint8_t *value;  // one encoded record
  size_t value_bytes;
} Converter;

// Checks that the file decodes and returns its format.
static ImageFormat validate_image(Converter *c, const char *path, const uint8_t *bytes, size_t n) {
  char msg[512];
  ImageStatus st = image_decode(c->decoder, bytes, n, 1, 1, &c->scratch, msg, sizeof msg);
  if (st == IMAGE_ERROR) die_input(path, "%s", msg);
  if (st == IMAGE_WARNING) {
    if (!c->accept_warnings)
      die_input(path, "%s (corrupt or truncated; --accept_warnings keeps such files)", msg);
    fprintf(stderr, "warning: %s: %s (kept)\n", path, msg);
  }
  return image_sniff(bytes, n);
}

static void convert_split(Converter *c, const char *split, const Items *items, const char *out) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", out, split);
  LmdbWriter *w = lmdb_writer_open(dir);
  Progress p;
  progress_start(&p, split, items->count);
  int64_t png = 0, total_bytes = 0;
  for (int64_t i = 0; i < items->count; i++) {
    size_t n;
    uint8_t *bytes = file_read(items->items[i].path, &n);
    Record r = {.kind = RECORD_IMAGE_LABEL, .image = bytes, .image_bytes = n,
                .label = items->items[i].label,
                .image_format = validate_image(c, items->items[i].path, bytes, n)};
    png += r.image_format == IMAGE_FORMAT_PNG;
    size_t need = record_encoded_bytes(&r);
    if (need > c->value_bytes) {
      free(c->value);
      c->value = xmalloc(need);
      c->value_bytes = need;
    }
    lmdb_writer_put(w, c->value, record_encode(&r, c->value, c->value_bytes));
    total_bytes += (int64_t)n;
    free(bytes);
    progress_update(&p, i + 1, i + 1, -1);
  }
  lmdb_writer_close(w);
  printf("imagenet_to_lmdb: %s: %lld images (%lld JPEG, %lld PNG), %.1f MB -> %s\n", split,
         (long long)items->count, (long long)(items->count - png), (long long)png,
         total_bytes / 1e6, dir);
}

static void write_classes(const char *out, const Names *classes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/classes.txt", out);
  FILE *f = fopen(path, "w");
  CHECK_FILE(f, path);
  for (int64_t i = 0; i < classes->count; i++) fprintf(f, "%lld %s\n", (long long)i, classes->items[i]);
  CHECK_FILE(fclose(f) == 0, path);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "imagenet_to_lmdb");
  const char *root = config_string(&cfg, "root"), *out = config_string(&cfg, "out");
  const char *splits = config_string(&cfg, "splits");
  if (!*root) die_input("--root", "missing: the ImageNet root (with train/ and val/)");
  if (!*out) die_input("--out", "missing: the output folder");
  bool do_train = strstr(splits, "train") != NULL, do_val = strstr(splits, "val") != NULL;
  if (!do_train && !do_val) die_input("--splits", "'%s' names neither train nor val", splits);
  char csv[4096];
  snprintf(csv, sizeof csv, "%s", config_string(&cfg, "val_csv"));
  if (!csv[0]) snprintf(csv, sizeof csv, "%s/LOC_val_solution.csv", root);

  double start = time_now_s();
  Names classes = {0};
  Items train = {0}, val = {0};
  read_classes(root, &classes, &train);
  if (do_val) read_val(root, csv, &classes, &val);
  printf("imagenet_to_lmdb: %lld classes; %lld train and %lld val images listed\n",
         (long long)classes.count, (long long)train.count, (long long)val.count);
  file_make_dirs(out);
  write_classes(out, &classes);
  Converter c = {.decoder = image_decoder_create(), .accept_warnings = config_bool(&cfg, "accept_warnings")};
  if (do_train) convert_split(&c, "train", &train, out);
  if (do_val) convert_split(&c, "val", &val, out);
  printf("imagenet_to_lmdb: done in %.1f s\n", time_now_s() - start);
  image_free(&c.scratch);
  image_decoder_free(c.decoder);
  free(c.value);
  items_free(&train);
  items_free(&val);
  names_free(&classes);
  config_free(&cfg);
  return 0;
}
