// imagenet_to_lmdb: an ImageNet folder tree into the LMDB data sets the
// image-classification trainer reads (image+label records, record.h):
//   <root>/train/<wnid>/<name>.JPEG                  -> <out>/train
//   <root>/val/<wnid>/<name>.JPEG, or flat
//   <root>/val/<name>.JPEG + LOC_val_solution.csv   -> <out>/val
//   class index = position of the wnid among train/'s sorted folder names,
//   written to <out>/classes.txt ("index wnid" per line) once the splits
//   are converted, so that a run that fails leaves none.
// The whole tree is listed and checked before anything is written: every
// class folder holds files and no folders, a flat val/ and its CSV match one
// to one, and <out> holds none of the splits asked for yet.
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

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "datasets/convert_util.h"

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
  n->items = grow(n->items, n->count, &n->capacity, sizeof *n->items);
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

// The entries of dir, files and folders apart, each sorted. Anything else (a
// link to nothing, a pipe, a device) is an error naming it.
static void list_dir(const char *dir, Names *files, Names *folders) {
  DIR *d = opendir(dir);
  if (!d) die_input(dir, "cannot open the folder: %s", strerror(errno));
  struct dirent *e;
  char path[4096];
  struct stat st;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0) die_input(path, "cannot read: %s", strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) die_input(path, "neither a file nor a folder");
    names_add(S_ISDIR(st.st_mode) ? folders : files, e->d_name);
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
  it->items = grow(it->items, it->count, &it->capacity, sizeof *it->items);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  it->items[it->count++] = (Item){strdup(path), label};
}

static void items_free(Items *it) {
  for (int64_t i = 0; i < it->count; i++) free(it->items[i].path);
  free(it->items);
}

// The images of class folders <dir>/<wnid>/; a wnid must be a known class and
// its folder must hold images (an empty class means a broken copy).
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
    if (!files.count) die_input(class_dir, "an empty class folder: a class without images (a broken copy?)");
    for (int64_t i = 0; i < files.count; i++) items_add(out, class_dir, files.items[i], (int32_t)label);
    names_free(&files);
    names_free(&folders);
  }
}

// A class name goes into classes.txt and LOC_val_solution.csv, which separate
// names by spaces; and every folder of train/ is a class, so a hidden one (a
// tool's cache, say) would add a class and shift the indices after it.
static void check_class_name(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (name[0] == '.') die_input(path, "a hidden folder among the class folders (every folder of train/ is a class)");
  for (const char *p = name; *p; p++)
    if ((unsigned char)*p <= ' ' || *p == 0x7f)
      die_input(path, "a class name with a space or control character (classes.txt and the val CSV "
                      "separate names by spaces)");
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
  for (int64_t c = 0; c < classes->count; c++) check_class_name(dir, classes->items[c]);
  add_class_folders(dir, classes, classes, train);
  names_free(&files);
}

// A row of LOC_val_solution.csv and the image found for it.
typedef struct ValRow {
  char *id;
  int32_t label;
  int64_t line;
  const char *image;  // its file in val/, NULL until found
} ValRow;

typedef struct ValCsv {
  const char *path;
  ValRow *rows;  // sorted by ImageId, then line
  int64_t count, capacity;
} ValCsv;

static int compare_ids(const void *a, const void *b) {
  return strcmp(((const ValRow *)a)->id, ((const ValRow *)b)->id);
}

static int compare_rows(const void *a, const void *b) {
  int64_t line_a = ((const ValRow *)a)->line, line_b = ((const ValRow *)b)->line;
  int by_id = compare_ids(a, b);
  return by_id ? by_id : (line_a > line_b) - (line_a < line_b);
}

// LOC_val_solution.csv: ImageId,PredictionString "wnid x0 y0 x1 y1 [wnid ...]";
// the first wnid is the label. A header line and a UTF-8 byte-order mark are
// skipped; an ImageId on two rows is an error.
static void read_val_csv(ValCsv *csv, const Names *classes) {
  FILE *f = fopen(csv->path, "r");
  if (!f) die_input(csv->path, "cannot open the val labels: %s", strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  for (int64_t line_no = 1; getline(&line, &cap, f) >= 0; line_no++) {
    char *text = line;
    if (line_no == 1 && strncmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3;
    text[strcspn(text, "\r\n")] = 0;
    if (!text[0] || (line_no == 1 && strncmp(text, "ImageId,", 8) == 0)) continue;
    char *comma = strchr(text, ',');
    char wnid[128] = "";
    if (!comma || comma == text || sscanf(comma + 1, "%127s", wnid) != 1)
      die_input(csv->path, "line %lld: want ImageId,PredictionString, got '%.80s'", (long long)line_no, text);
    *comma = 0;
    int64_t label = names_find(classes, wnid);
    if (label < 0)
      die_input(csv->path, "line %lld: wnid '%s' of %s is not one of train/'s classes", (long long)line_no,
                wnid, text);
    csv->rows = grow(csv->rows, csv->count, &csv->capacity, sizeof *csv->rows);
    csv->rows[csv->count++] = (ValRow){strdup(text), (int32_t)label, line_no, NULL};
  }
  if (ferror(f)) die_input(csv->path, "cannot read: %s", strerror(errno));
  free(line);
  fclose(f);
  if (csv->count) qsort(csv->rows, (size_t)csv->count, sizeof *csv->rows, compare_rows);
  const ValRow *again = NULL;  // the first repeat in file order; the row before it is the first
  for (int64_t i = 1; i < csv->count; i++)
    if (compare_ids(&csv->rows[i], &csv->rows[i - 1]) == 0 && (!again || csv->rows[i].line < again->line))
      again = &csv->rows[i];
  if (again)
    die_input(csv->path, "line %lld: ImageId '%s' again (first on line %lld)", (long long)again->line,
              again->id, (long long)again[-1].line);
}

static void val_csv_free(ValCsv *csv) {
  for (int64_t i = 0; i < csv->count; i++) free(csv->rows[i].id);
  free(csv->rows);
}

// A flat val/: an image's ImageId is its name without the extension. Every
// image needs a row and every row exactly one image.
static void add_flat_val(const char *dir, const Names *files, ValCsv *csv, Items *val) {
  char id[4096], path[4200];
  for (int64_t i = 0; i < files->count; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files->items[i]);
    snprintf(id, sizeof id, "%s", files->items[i]);
    char *dot = strrchr(id, '.');
    if (dot) *dot = 0;
    ValRow *row = csv->count ? bsearch(&(ValRow){.id = id}, csv->rows, (size_t)csv->count,
                                       sizeof *csv->rows, compare_ids)
                             : NULL;
    if (!row) die_input(path, "a val image with no row in %s", csv->path);
    if (row->image)
      die_input(path, "a second image of ImageId '%s' (line %lld of %s), after %s", row->id,
                (long long)row->line, csv->path, row->image);
    row->image = files->items[i];
    items_add(val, dir, files->items[i], row->label);
  }
  const ValRow *missing = NULL;  // the first row without an image, in file order
  for (int64_t i = 0; i < csv->count; i++)
    if (!csv->rows[i].image && (!missing || csv->rows[i].line < missing->line)) missing = &csv->rows[i];
  if (missing)
    die_input(csv->path, "line %lld: ImageId '%s' has no image in %s", (long long)missing->line,
              missing->id, dir);
}

// val/ in class folders, or flat with the CSV (csv_given: --val_csv named it).
static void read_val(const char *root, const char *csv_path, bool csv_given, const Names *classes,
                     Items *val) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/val", root);
  Names files = {0}, folders = {0};
  list_dir(dir, &files, &folders);
  if (files.count && folders.count)
    die_input(dir, "mixes class folders ('%s') and images ('%s'); use one layout", folders.items[0],
              files.items[0]);
  if (!files.count && !folders.count) die_input(dir, "holds no images (--splits=train converts train alone)");
  if (folders.count && csv_given) die_input("--val_csv", "given, but %s is in class folders, which need no CSV", dir);
  add_class_folders(dir, &folders, classes, val);
  if (files.count) {
    ValCsv csv = {.path = csv_path};
    read_val_csv(&csv, classes);
    add_flat_val(dir, &files, &csv, val);
    val_csv_free(&csv);
  }
  names_free(&files);
  names_free(&folders);
}

static void convert_split(ImageCheck *c, const char *split, const Items *items, const char *out) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", out, split);
  LmdbWriter *w = lmdb_writer_open(dir);
  Progress p;
  progress_start(&p, split, items->count);
  int64_t png = 0, total_bytes = 0;
  uint8_t *value = NULL;  // one encoded record
  size_t value_bytes = 0;
  for (int64_t i = 0; i < items->count; i++) {
    size_t n;
    uint8_t *bytes = file_read(items->items[i].path, &n);
    Record r = {.kind = RECORD_IMAGE_LABEL, .image = bytes, .image_bytes = n,
                .label = items->items[i].label,
                .image_format = image_check(c, items->items[i].path, bytes, n)};
    png += r.image_format == IMAGE_FORMAT_PNG;
    put_record(w, &r, &value, &value_bytes);
    total_bytes += (int64_t)n;
    free(bytes);
    progress_update(&p, i + 1, i + 1, -1);
  }
  lmdb_writer_close(w);
  free(value);
  printf("imagenet_to_lmdb: %s: %lld images (%lld JPEG, %lld PNG), %.1f MB -> %s\n", split,
         (long long)items->count, (long long)(items->count - png), (long long)png,
         total_bytes / 1e6, dir);
}

// classes.txt is written last, through atomic_file, so that a run that
// fails leaves none behind.
static void write_classes(const char *out, const Names *classes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/classes.txt", out);
  AtomicFile f;
  atomic_file_begin(&f, path);
  for (int64_t i = 0; i < classes->count; i++)
    atomic_file_printf(&f, "%lld %s\n", (long long)i, classes->items[i]);
  atomic_file_commit(&f);
}

// --splits: a comma-separated list of train and val, each at most once.
static void parse_splits(const char *splits, bool *do_train, bool *do_val) {
  static const char want[] = "want train, val or train,val";
  *do_train = *do_val = false;
  for (const char *p = splits;; p++) {
    int n = (int)strcspn(p, ",");
    bool *seen = n == 5 && strncmp(p, "train", 5) == 0 ? do_train
                 : n == 3 && strncmp(p, "val", 3) == 0 ? do_val : NULL;
    if (!seen && (size_t)n == strlen(splits)) die_input("--splits", "'%s' is not a split: %s", splits, want);
    if (!seen) die_input("--splits", "'%.*s' in '%s' is not a split: %s", n, p, splits, want);
    if (*seen) die_input("--splits", "'%s' names %.*s twice: %s", splits, n, p, want);
    *seen = true;
    p += n;
    if (!*p) break;
  }
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "imagenet_to_lmdb");
  const char *root = config_string(&cfg, "root"), *out = config_string(&cfg, "out");
  const char *splits = config_string(&cfg, "splits"), *val_csv = config_string(&cfg, "val_csv");
  if (!*root) die_input("--root", "missing: the ImageNet root (with train/ and val/)");
  if (!*out) die_input("--out", "missing: the output folder");
  bool do_train, do_val;
  parse_splits(splits, &do_train, &do_val);
  if (*val_csv && !do_val) die_input("--val_csv", "given, but --splits=%s converts no val", splits);
  require_folder("--root", root);
  char csv[4096];
  snprintf(csv, sizeof csv, "%s", val_csv);
  if (!csv[0]) snprintf(csv, sizeof csv, "%s/LOC_val_solution.csv", root);

  double start = time_now_s();
  Names classes = {0};
  Items train = {0}, val = {0};
  read_classes(root, &classes, &train);
  if (do_val) read_val(root, csv, *val_csv != 0, &classes, &val);
  check_splits_free(out, do_train, do_val, "--splits");
  printf("imagenet_to_lmdb: %lld classes; %lld train and %lld val images listed\n",
         (long long)classes.count, (long long)train.count, (long long)val.count);
  file_make_dirs(out);
  ImageCheck c = {.decoder = image_decoder_create(), .accept_warnings = config_bool(&cfg, "accept_warnings")};
  if (do_train) convert_split(&c, "train", &train, out);
  if (do_val) convert_split(&c, "val", &val, out);
  write_classes(out, &classes);
  printf("imagenet_to_lmdb: done in %.1f s\n", time_now_s() - start);
  image_free(&c.scratch);
  image_decoder_free(c.decoder);
  items_free(&train);
  items_free(&val);
  names_free(&classes);
  config_free(&cfg);
  return 0;
}
