// fuzz_imagenet_val_csv: the ImageNet converter's reader of
// LOC_val_solution.csv (read_val_csv in datasets/imagenet_to_lmdb.c) on any
// file, against the classes of fuzz_inputs.h. The reader is static in the
// converter, so the converter is compiled into this harness with its main
// renamed. Every label it returns must be one of the classes, and when every
// ImageId could be a file name, a flat val/ holding exactly <ImageId>.JPEG
// for each row must be matched up by the converter (add_flat_val, which only
// compares names) without complaint.
#define main imagenet_to_lmdb_main
#include "../../datasets/imagenet_to_lmdb.c"
#undef main

#include "fuzz_inputs.h"
#include "fuzz_util.h"

typedef struct Case {
  const Names *classes;
  ValCsv csv;
} Case;

static void read_csv(void *ctx) {
  Case *c = ctx;
  read_val_csv(&c->csv, c->classes);
}

// Whether name + ".JPEG" is a possible file name.
static bool file_name_ok(const char *name) {
  return strlen(name) + 5 <= 255 && !strchr(name, '/') && strcmp(name, ".") != 0 &&
         strcmp(name, "..") != 0;
}

static void match_images(void *ctx) {
  Case *c = ctx;
  Names files = {0};
  char name[300];
  for (int64_t i = 0; i < c->csv.count; i++) {
    snprintf(name, sizeof name, "%s.JPEG", c->csv.rows[i].id);
    names_add(&files, name);
  }
  names_sort(&files);
  Items val = {0};
  add_flat_val("val", &files, &c->csv, &val);
  for (int64_t i = 0; i < val.count; i++)
    if (val.items[i].label < 0 || val.items[i].label >= c->classes->count)
      fuzz_fail("image %s got label %d of %lld classes", val.items[i].path, val.items[i].label,
                (long long)c->classes->count);
  items_free(&val);
  names_free(&files);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Names classes;
  if (!classes.count) {
    for (int i = 0; i < FUZZ_N_WNIDS; i++) names_add(&classes, kFuzzWnids[i]);
    names_sort(&classes);
  }
  const char *path = fuzz_temp_path("LOC_val_solution.csv");
  fuzz_write_file(path, data, size);
  Case c = {&classes, {.path = path}};
  if (fuzz_call(read_csv, &c, FUZZ_RELEASE_LEFTOVERS) != 0) return 0;
  bool names_ok = true;
  for (int64_t i = 0; i < c.csv.count; i++) names_ok &= file_name_ok(c.csv.rows[i].id);
  if (names_ok && fuzz_call(match_images, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
    fuzz_fail("the rows of this CSV do not match a val/ of one image per row: %s",
              fuzz_last_error());
  val_csv_free(&c.csv);
  return 0;
}
