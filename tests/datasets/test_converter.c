// The converters, run as programs: an ImageNet-layout tree (RGB, grey and
// CMYK JPEGs, a PNG named .JPEG; val/ flat with LOC_val_solution.csv and per
// class) and Fashion-MNIST through fmnist_to_imagenet, into LMDB and back
// through the reader: every image with its label. Then each kind of bad input
// stops the converters with a one-line message naming the file, flag or CSV
// line, exit status 2, and no classes.txt left behind.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/augment.h"
#include "data/image.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "tests/harness/test.h"

static char g_bin[1100];  // <build>/bin, next to this program's <build>/tests

static void find_bin(void) {
  char self[1000];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = 0;
  *strrchr(self, '/') = 0;  // <build>/tests
  *strrchr(self, '/') = 0;  // <build>
  snprintf(g_bin, sizeof g_bin, "%s/bin", self);
}

// Runs a program of <build>/bin; its stderr goes to err. Returns the exit
// status, 124 when it hangs (a minute; a named pipe once made it wait forever).
static int run_tool(const char *args, char *err, size_t err_bytes) {
  char cmd[8192], err_path[600];
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", test_tmpdir());
  snprintf(cmd, sizeof cmd, "timeout 60 %s/%s >/dev/null 2>%s", g_bin, args, err_path);
  int st = system(cmd);
  err[0] = 0;
  FILE *f = fopen(err_path, "r");
  if (f) {
    size_t n = fread(err, 1, err_bytes - 1, f);
    err[n] = 0;
    fclose(f);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void make_dirs(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  make_dirs(dir);
  FILE *f = fopen(path, "wb");
  if (n) fwrite(bytes, 1, n, f);
  fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n ? *n : 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

enum { kW = 40, kH = 30 };

// Image kinds of the generated tree.
typedef enum { RGB_JPEG, GREY_JPEG, CMYK_JPEG, PNG_FILE } Kind;

static uint8_t *make_image(Kind kind, int seed, size_t *n) {
  int channels = kind == GREY_JPEG ? 1 : kind == CMYK_JPEG ? 4 : 3;
  uint8_t *px = malloc(kW * kH * 4);
  for (int i = 0; i < kW * kH * channels; i++) px[i] = (uint8_t)(i * 7 + seed * 31);
  uint8_t *bytes = kind == PNG_FILE ? image_encode_png(px, kW, kH, 3, n)
                                    : image_encode_jpeg(px, kW, kH, channels, 90, n);
  free(px);
  return bytes;
}

// root/<rel> gets an image of `kind`.
static void put_image(const char *root, const char *rel, Kind kind, int seed) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  size_t n;
  uint8_t *b = make_image(kind, seed, &n);
  write_bytes(path, b, n);
  free(b);
}

static void put_text(const char *root, const char *rel, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  write_bytes(path, text, strlen(text));
}

// The good tree: classes n03 (created first), n01, n02 -> labels 2, 0, 1.
typedef struct Expect {
  const char *rel;
  int32_t label;
  ImageFormat format;
} Expect;

static const Expect kTrain[] = {
    {"train/n01/a.JPEG", 0, IMAGE_FORMAT_JPEG}, {"train/n01/b_cmyk.JPEG", 0, IMAGE_FORMAT_JPEG},
    {"train/n02/a_png.JPEG", 1, IMAGE_FORMAT_PNG}, {"train/n02/c_grey.JPEG", 1, IMAGE_FORMAT_JPEG},
    {"train/n03/z.JPEG", 2, IMAGE_FORMAT_JPEG}};
static const Expect kVal[] = {{"val/v1.JPEG", 2, IMAGE_FORMAT_JPEG},
                              {"val/v2.JPEG", 0, IMAGE_FORMAT_JPEG},
                              {"val/v3.JPEG", 1, IMAGE_FORMAT_PNG}};

static Kind kind_of(const char *rel) {
  return strstr(rel, "cmyk") ? CMYK_JPEG : strstr(rel, "grey") ? GREY_JPEG
         : strstr(rel, "png") || strstr(rel, "v3") ? PNG_FILE : RGB_JPEG;
}

static void make_good_tree(const char *root) {
  put_image(root, "train/n03/z.JPEG", RGB_JPEG, 1);
  for (size_t i = 0; i < sizeof kTrain / sizeof *kTrain; i++)
    put_image(root, kTrain[i].rel, kind_of(kTrain[i].rel), (int)i);
  for (size_t i = 0; i < sizeof kVal / sizeof *kVal; i++)
    put_image(root, kVal[i].rel, kind_of(kVal[i].rel), 10 + (int)i);
  put_text(root, "LOC_val_solution.csv",
           "ImageId,PredictionString\n"
           "v2,n01 1 2 30 20 n01 5 5 9 9 \n"
           "v1,n03 0 0 39 29 \n"
           "v3,n02 3 3 10 10 \n");
}

// Every record of out/<split> is the expected file, byte for byte, with its
// label and format tag, and decodes to an RGB image of the right size.
static void check_lmdb(const char *root, const char *out, const char *split, const Expect *want,
                       int64_t count) {
  char dir[1100], path[1100], msg[512];
  snprintf(dir, sizeof dir, "%s/%s", out, split);
  LmdbReader *r = lmdb_reader_open(dir);
  CHECK_EQ_INT(lmdb_reader_count(r), count);
  LmdbTxn *t = lmdb_txn_begin(r);
  ImageDecoder *d = image_decoder_create();
  Image img = {0};
  for (int64_t i = 0; i < count && i < lmdb_reader_count(r); i++) {
    size_t bytes, file_bytes;
    const void *value = lmdb_txn_get(t, i, &bytes);
    Record rec;
    REQUIRE(record_decode(value, bytes, &rec, msg, sizeof msg));
    snprintf(path, sizeof path, "%s/%s", root, want[i].rel);
    uint8_t *file = read_bytes(path, &file_bytes);
    CHECK_MSG(rec.label == want[i].label, "%s: label %d, want %d", want[i].rel, rec.label, want[i].label);
    CHECK_MSG(rec.image_format == want[i].format, "%s: format %d", want[i].rel, rec.image_format);
    CHECK_MSG(rec.image_bytes == file_bytes && memcmp(rec.image, file, file_bytes) == 0,
              "%s: stored bytes differ from the file", want[i].rel);
    CHECK(image_decode(d, rec.image, rec.image_bytes, 0, 0, &img, msg, sizeof msg) == IMAGE_OK);
    CHECK(img.width == kW && img.height == kH);
    free(file);
  }
  image_free(&img);
  image_decoder_free(d);
  lmdb_txn_end(t);
  lmdb_reader_close(r);
}

static void imagenet_tree_round_trip(void) {
  char root[512], out[512], args[4096], err[4096], classes[256] = "";
  snprintf(root, sizeof root, "%s/good", test_tmpdir());
  snprintf(out, sizeof out, "%s/good_lmdb", test_tmpdir());
  make_good_tree(root);
  snprintf(args, sizeof args, "imagenet_to_lmdb --root=%s --out=%s", root, out);
  int st = run_tool(args, err, sizeof err);
  REQUIRE(st == 0 || (test_fail(__FILE__, __LINE__, "exit %d: %s", st, err), false));
  check_lmdb(root, out, "train", kTrain, 5);
  check_lmdb(root, out, "val", kVal, 3);
  snprintf(args, sizeof args, "%s/classes.txt", out);
  size_t n;
  uint8_t *text = read_bytes(args, &n);
  REQUIRE(text && n < sizeof classes);
  memcpy(classes, text, n);
  CHECK_STR(classes, "0 n01\n1 n02\n2 n03\n");
  free(text);
}

static void imagenet_val_per_class(void) {
  char root[512], out[512], args[4096], err[4096];
  snprintf(root, sizeof root, "%s/per_class", test_tmpdir());
  snprintf(out, sizeof out, "%s/per_class_lmdb", test_tmpdir());
  put_image(root, "train/n01/a.JPEG", RGB_JPEG, 1);
  put_image(root, "train/n02/a.JPEG", RGB_JPEG, 2);
  static const Expect val[] = {{"val/n01/x.JPEG", 0, IMAGE_FORMAT_JPEG},
                               {"val/n02/w.JPEG", 1, IMAGE_FORMAT_JPEG},
                               {"val/n02/y.JPEG", 1, IMAGE_FORMAT_JPEG}};
  for (int i = 0; i < 3; i++) put_image(root, val[i].rel, RGB_JPEG, 20 + i);
  snprintf(args, sizeof args, "imagenet_to_lmdb --root=%s --out=%s --splits=val", root, out);
  REQUIRE(run_tool(args, err, sizeof err) == 0);
  check_lmdb(root, out, "val", val, 3);
  snprintf(args, sizeof args, "%s/train", out);
  CHECK(access(args, F_OK) != 0);  // not asked for
}

// Converts root into root/lmdb with extra flags: the exit status; stderr in err.
static int convert_tree(const char *root, const char *extra_args, char *err, size_t err_bytes) {
  char args[4096];
  snprintf(args, sizeof args, "imagenet_to_lmdb --root=%s --out=%s/lmdb %s", root, root, extra_args);
  return run_tool(args, err, err_bytes);
}

// A fresh copy of a one-class tree, spoiled by `spoil`, converted: the
// converter must fail and its message contain `needle`.
typedef void (*Spoil)(const char *root);

static void expect_failure(const char *name, Spoil spoil, const char *extra_args, const char *needle) {
  char root[512], args[4096], err[4096];
  snprintf(root, sizeof root, "%s/bad_%s", test_tmpdir(), name);
  put_image(root, "train/n01/ok.JPEG", RGB_JPEG, 1);
  put_image(root, "val/ok.JPEG", RGB_JPEG, 2);
  put_text(root, "LOC_val_solution.csv", "ImageId,PredictionString\nok,n01 0 0 1 1\n");
  spoil(root);
  int st = convert_tree(root, extra_args, err, sizeof err);
  CHECK_MSG(st == 2, "%s: exit status %d, want 2", name, st);
  CHECK_MSG(strncmp(err, "error: ", 7) == 0 && strstr(err, needle) != NULL,
            "%s: stderr \"%s\" is not \"error: ...\" with \"%s\"", name, err, needle);
  CHECK_MSG(strchr(err, '\n') == err + strlen(err) - 1, "%s: not one line: \"%s\"", name, err);
  snprintf(args, sizeof args, "%s/lmdb/classes.txt", root);
  CHECK_MSG(access(args, F_OK) != 0, "%s: a failed run left %s", name, args);
}

static void truncated(const char *root) {
  size_t n;
  uint8_t *b = make_image(RGB_JPEG, 3, &n);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/train/n01/cut.JPEG", root);
  write_bytes(path, b, n * 2 / 3);
  free(b);
}
static void zero_bytes(const char *root) { put_text(root, "train/n01/empty.JPEG", ""); }
static void not_image(const char *root) { put_text(root, "train/n01/notes.JPEG", "<html>hello</html>"); }
static void no_class(const char *root) { put_image(root, "train/stray.JPEG", RGB_JPEG, 4); }
static void unknown_wnid(const char *root) {
  put_text(root, "LOC_val_solution.csv", "ImageId,PredictionString\nok,n01 0 0 1 1\nx,n99 0 0 1 1\n");
}
static void not_in_csv(const char *root) { put_image(root, "val/orphan.JPEG", RGB_JPEG, 5); }
static void no_train(const char *root) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/train'", root);
  if (system(cmd) != 0) test_fail(__FILE__, __LINE__, "rm failed");
}
static void mixed_val(const char *root) { put_image(root, "val/n01/x.JPEG", RGB_JPEG, 6); }
static void repeated_id(const char *root) {
  put_text(root, "LOC_val_solution.csv", "ImageId,PredictionString\nok,n01 0 0 1 1\nok,n01 2 2 3 3\n");
}
static void row_without_image(const char *root) {
  put_text(root, "LOC_val_solution.csv", "ImageId,PredictionString\nok,n01 0 0 1 1\ngone,n01 0 0 1 1\n");
}
static void second_image(const char *root) { put_image(root, "val/ok.png", PNG_FILE, 7); }
static void empty_class(const char *root) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/train/n02", root);
  make_dirs(dir);
}
static void empty_val(const char *root) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/val/ok.JPEG", root);
  unlink(path);
}
static void hidden_class(const char *root) { put_image(root, "train/.cache/x.JPEG", RGB_JPEG, 8); }
static void spaced_class(const char *root) { put_image(root, "train/n0 2/x.JPEG", RGB_JPEG, 9); }
static void dangling_link(const char *root) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/train/n01/gone.JPEG", root);
  if (symlink("/nonexistent/x.JPEG", path) != 0) test_fail(__FILE__, __LINE__, "symlink failed");
}
static void named_pipe(const char *root) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/train/n01/pipe.JPEG", root);
  if (mkfifo(path, 0644) != 0) test_fail(__FILE__, __LINE__, "mkfifo failed");
}
static void unspoilt(const char *root) { (void)root; }

#define WANT_SPLITS ": want train, val or train,val\n"

// Each spoilt tree or bad flag, and what its message must contain.
static const struct {
  const char *name;
  Spoil spoil;
  const char *extra_args, *needle;
} kBadInputs[] = {
    {"truncated", truncated, "", "cut.JPEG: JPEG decode: Premature end of JPEG file"},
    {"zero", zero_bytes, "", "empty.JPEG: empty (0 bytes), not an image"},
    {"text", not_image, "", "notes.JPEG: not a JPEG or PNG image"},
    {"stray", no_class, "", "train/stray.JPEG: an image in no class folder"},
    {"wnid", unknown_wnid, "", "LOC_val_solution.csv: line 3: wnid 'n99'"},
    {"orphan", not_in_csv, "", "/val/orphan.JPEG: a val image with no row in"},
    {"no_train", no_train, "", "/train: cannot open the folder"},
    {"mixed", mixed_val, "", "/val: mixes class folders"},
    {"repeated_id", repeated_id, "", "/LOC_val_solution.csv: line 3: ImageId 'ok' again (first on line 2)\n"},
    {"row_without_image", row_without_image, "", "/LOC_val_solution.csv: line 3: ImageId 'gone' has no image in "},
    {"second_image", second_image, "", "/val/ok.png: a second image of ImageId 'ok' (line 2 of "},
    {"empty_class", empty_class, "", "/train/n02: an empty class folder"},
    {"empty_val", empty_val, "", "/val: holds no images"},
    {"hidden_class", hidden_class, "", "/train/.cache: a hidden folder among the class folders"},
    {"spaced_class", spaced_class, "", "/train/n0 2: a class name with a space"},
    {"dangling_link", dangling_link, "", "/n01/gone.JPEG: cannot read: No such file or directory"},
    {"named_pipe", named_pipe, "", "/n01/pipe.JPEG: neither a file nor a folder"},
    // --splits is a list of train and val, each once; flags are named as written.
    {"splits_substring", unspoilt, "--splits=trainval_extra",
     "error: --splits: 'trainval_extra' is not a split" WANT_SPLITS},
    {"splits_twice", unspoilt, "--splits=train,train", "error: --splits: 'train,train' names train twice" WANT_SPLITS},
    {"splits_empty_item", unspoilt, "--splits=val,", "error: --splits: '' in 'val,' is not a split" WANT_SPLITS},
    {"root_missing", unspoilt, "--root=/nonexistent/imagenet",
     "error: --root: '/nonexistent/imagenet': No such file or directory\n"},
    {"val_csv_unused", unspoilt, "--splits=train --val_csv=x.csv",
     "error: --val_csv: given, but --splits=train converts no val\n"},
};

static void bad_inputs_named(void) {
  for (size_t i = 0; i < sizeof kBadInputs / sizeof *kBadInputs; i++)
    expect_failure(kBadInputs[i].name, kBadInputs[i].spoil, kBadInputs[i].extra_args, kBadInputs[i].needle);
}

// A one-class tree with val/ in class folders, under the test's folder.
static const Expect kOneTrain[] = {{"train/n01/a.JPEG", 0, IMAGE_FORMAT_JPEG}};
static const Expect kOneVal[] = {{"val/n01/b.JPEG", 0, IMAGE_FORMAT_JPEG}};

static void make_one_class_tree(const char *name, char *root, size_t root_bytes) {
  snprintf(root, root_bytes, "%s/%s", test_tmpdir(), name);
  put_image(root, kOneTrain[0].rel, RGB_JPEG, 1);
  put_image(root, kOneVal[0].rel, RGB_JPEG, 2);
}

// The splits in either order convert both.
static void splits_any_order(void) {
  char root[512], err[4096];
  make_one_class_tree("order", root, sizeof root);
  REQUIRE(convert_tree(root, "--splits=val,train", err, sizeof err) == 0);
  check_lmdb(root, root, "lmdb/train", kOneTrain, 1);
  check_lmdb(root, root, "lmdb/val", kOneVal, 1);
}

// A CSV saved with a UTF-8 byte-order mark and CRLF line ends (a spreadsheet's
// export) reads like the plain one.
static void csv_byte_order_mark(void) {
  char root[512], err[4096];
  snprintf(root, sizeof root, "%s/bom", test_tmpdir());
  put_image(root, "train/n01/a.JPEG", RGB_JPEG, 1);
  put_image(root, "train/n02/a.JPEG", RGB_JPEG, 2);
  static const Expect val[] = {{"val/v1.JPEG", 1, IMAGE_FORMAT_JPEG}, {"val/v2.JPEG", 0, IMAGE_FORMAT_JPEG}};
  for (int i = 0; i < 2; i++) put_image(root, val[i].rel, RGB_JPEG, 3 + i);
  put_text(root, "LOC_val_solution.csv",
           "\xEF\xBB\xBFImageId,PredictionString\r\nv1,n02 0 0 1 1\r\nv2,n01 0 0 1 1\r\n");
  int st = convert_tree(root, "--splits=val", err, sizeof err);
  REQUIRE(st == 0 || (test_fail(__FILE__, __LINE__, "exit %d: %s", st, err), false));
  check_lmdb(root, root, "lmdb/val", val, 2);
}

// A split already in --out is refused before any split is converted (hours
// of ImageNet), and the split there is left as it was.
static void existing_split_refused_first(void) {
  char root[512], path[600], err[4096];
  make_one_class_tree("again", root, sizeof root);
  REQUIRE(convert_tree(root, "--splits=val", err, sizeof err) == 0);
  CHECK_EQ_INT(convert_tree(root, "", err, sizeof err), 2);
  CHECK_CONTAINS(err, "/lmdb/val: already exists; remove it first (or leave val out of --splits)");
  snprintf(path, sizeof path, "%s/lmdb/train", root);
  CHECK_MSG(access(path, F_OK) != 0, "train was converted before the refusal");
  check_lmdb(root, root, "lmdb/val", kOneVal, 1);
}

static void truncated_accepted_with_flag(void) {
  char root[512], args[4096], err[4096];
  snprintf(root, sizeof root, "%s/accept", test_tmpdir());
  put_image(root, "train/n01/ok.JPEG", RGB_JPEG, 1);
  truncated(root);
  snprintf(args, sizeof args,
           "imagenet_to_lmdb --root=%s --out=%s/lmdb --splits=train --accept_warnings", root, root);
  CHECK_EQ_INT(run_tool(args, err, sizeof err), 0);
  CHECK_CONTAINS(err, "warning: ");
  CHECK_CONTAINS(err, "cut.JPEG: JPEG decode: Premature end of JPEG file (kept)");
  snprintf(args, sizeof args, "%s/lmdb/train", root);
  LmdbReader *r = lmdb_reader_open(args);
  CHECK_EQ_INT(lmdb_reader_count(r), 2);
  lmdb_reader_close(r);
}

// ---------------------------------------------------------------- Fashion-MNIST

static const char *kFmnist = "/usr/share/datasets/fashion-mnist";

// The first `count` labels and 28x28 images of an IDX pair.
static uint8_t *read_idx(const char *name, size_t header, size_t count_bytes) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "gzip -dc %s/%s", kFmnist, name);
  FILE *f = popen(cmd, "r");
  uint8_t *b = malloc(header + count_bytes);
  size_t got = fread(b, 1, header + count_bytes, f);
  pclose(f);
  if (got != header + count_bytes) {
    free(b);
    return NULL;
  }
  memmove(b, b + header, count_bytes);
  return b;
}

// Fashion-MNIST's first images, through both programs and the reader: each
// record has its image's label, and its pixels are that image upscaled.
static void fmnist_through_converter(void) {
  if (access(kFmnist, R_OK) != 0) test_skip("%s missing (Debian dataset-fashion-mnist)", kFmnist);
  enum { kTrainN = 1200, kValN = 300, kSide = 32 };
  char raw[512], out[512], args[4096], err[4096];
  snprintf(raw, sizeof raw, "%s/fmnist/raw", test_tmpdir());
  snprintf(out, sizeof out, "%s/fmnist/lmdb", test_tmpdir());
  make_dirs(out);
  snprintf(args, sizeof args, "fmnist_to_imagenet --out=%s --side=%d --train_count=%d --val_count=%d",
           raw, kSide, kTrainN, kValN);
  REQUIRE(run_tool(args, err, sizeof err) == 0);
  snprintf(args, sizeof args, "imagenet_to_lmdb --root=%s --out=%s", raw, out);
  REQUIRE(run_tool(args, err, sizeof err) == 0);
  uint8_t *labels = read_idx("train-labels-idx1-ubyte.gz", 8, kTrainN);
  uint8_t *images = read_idx("train-images-idx3-ubyte.gz", 16, (size_t)kTrainN * 784);
  uint8_t *val_labels = read_idx("t10k-labels-idx1-ubyte.gz", 8, kValN);
  REQUIRE(labels && images && val_labels);
  // Train records come class by class, in file-name (= image index) order.
  int64_t expect_index[kTrainN], k = 0;
  for (int c = 0; c < 10; c++)
    for (int64_t i = 0; i < kTrainN; i++)
      if (labels[i] == c) expect_index[k++] = i;
  snprintf(args, sizeof args, "%s/train", out);
  LmdbReader *r = lmdb_reader_open(args);
  REQUIRE(lmdb_reader_count(r) == kTrainN);
  LmdbTxn *t = lmdb_txn_begin(r);
  ImageDecoder *d = image_decoder_create();
  Image img = {0};
  uint8_t grey_rgb[784 * 3], expect[kSide * kSide * 3];
  int wrong_label = 0, wrong_pixels = 0;
  char msg[512];
  for (int64_t i = 0; i < kTrainN; i++) {
    size_t bytes;
    const void *value = lmdb_txn_get(t, i, &bytes);
    Record rec;
    REQUIRE(record_decode(value, bytes, &rec, msg, sizeof msg));
    int64_t src = expect_index[i];
    wrong_label += rec.label != labels[src];
    REQUIRE(image_decode(d, rec.image, rec.image_bytes, 0, 0, &img, msg, sizeof msg) == IMAGE_OK);
    REQUIRE(img.width == kSide && img.height == kSide);
    for (int p = 0; p < 784; p++) memset(grey_rgb + 3 * p, images[src * 784 + p], 3);
    augment_crop_resize(grey_rgb, 28, 28, 0, 0, 28, 28, false, expect, kSide, kSide);
    double e = 0;
    for (int p = 0; p < kSide * kSide * 3; p++) e += fabs((double)img.pixels[p] - expect[p]);
    // Quality-90 grey JPEG of an upscaled glyph: a few levels on average.
    wrong_pixels += e / (kSide * kSide * 3) > 4.0;
  }
  CHECK_EQ_INT(wrong_label, 0);
  CHECK_EQ_INT(wrong_pixels, 0);
  lmdb_txn_end(t);
  lmdb_reader_close(r);
  // Val records come in file order with the CSV's labels.
  snprintf(args, sizeof args, "%s/val", out);
  r = lmdb_reader_open(args);
  REQUIRE(lmdb_reader_count(r) == kValN);
  t = lmdb_txn_begin(r);
  wrong_label = 0;
  for (int64_t i = 0; i < kValN; i++) {
    size_t bytes;
    Record rec;
    const void *value = lmdb_txn_get(t, i, &bytes);
    record_parse(value, bytes, "val", &rec);
    wrong_label += rec.label != val_labels[i];
  }
  CHECK_EQ_INT(wrong_label, 0);
  lmdb_txn_end(t);
  lmdb_reader_close(r);
  image_free(&img);
  image_decoder_free(d);
  free(labels);
  free(images);
  free(val_labels);
}

// One command line of fmnist_to_imagenet that must fail with status 2, a
// one-line message containing needle, and nothing written to out.
static void expect_fmnist_failure(const char *args, const char *out, const char *needle) {
  char cmd[4096], err[4096];
  snprintf(cmd, sizeof cmd, "fmnist_to_imagenet --out=%s %s", out, args);
  int st = run_tool(cmd, err, sizeof err);
  CHECK_MSG(st == 2, "%s: exit status %d, want 2", args, st);
  CHECK_MSG(strncmp(err, "error: ", 7) == 0 && strstr(err, needle) && strchr(err, '\n') == err + strlen(err) - 1,
            "%s: stderr \"%s\" is not one line \"error: ...\" with \"%s\"", args, err, needle);
  CHECK_MSG(access(out, F_OK) != 0, "%s: %s was written", args, out);
}

// fmnist_to_imagenet reads a source folder whose name holds a quote (once cut
// a shell command short); a source file cut short, too few training images
// for every class and the output of an earlier run are refused before
// anything is written.
static void fmnist_bad_inputs(void) {
  if (access(kFmnist, R_OK) != 0) test_skip("%s missing (Debian dataset-fashion-mnist)", kFmnist);
  static const char *const kFiles[] = {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                                       "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz"};
  char src[600], from[1200], to[1200], out[600], args[4096], err[4096];
  snprintf(src, sizeof src, "%s/fm'src", test_tmpdir());
  make_dirs(src);
  for (int i = 0; i < 4; i++) {
    snprintf(from, sizeof from, "%s/%s", kFmnist, kFiles[i]);
    snprintf(to, sizeof to, "%s/%s", src, kFiles[i]);
    REQUIRE(symlink(from, to) == 0);
  }
  snprintf(out, sizeof out, "%s/fm_out", test_tmpdir());
  snprintf(args, sizeof args, "fmnist_to_imagenet --src=\"%s\" --out=%s --train_count=100 --val_count=10", src, out);
  int st = run_tool(args, err, sizeof err);
  CHECK_MSG(st == 0, "a source folder named with a quote: exit %d: %s", st, err);
  snprintf(args, sizeof args, "fmnist_to_imagenet --out=%s --train_count=100 --val_count=10", out);
  CHECK_EQ_INT(run_tool(args, err, sizeof err), 2);
  CHECK_CONTAINS(err, "/fm_out/train: already exists; remove it first");
  // An interrupted download: the first 3,000 bytes of the training images.
  size_t n;
  uint8_t *bytes = read_bytes(to, &n);
  REQUIRE(bytes && n > 3000);
  REQUIRE(unlink(to) == 0);
  write_bytes(to, bytes, 3000);
  free(bytes);
  snprintf(out, sizeof out, "%s/fm_cut", test_tmpdir());
  snprintf(args, sizeof args, "--src=\"%s\" --train_count=100", src);
  expect_fmnist_failure(args, out, "fm'src/train-images-idx3-ubyte.gz: truncated: ");
  snprintf(out, sizeof out, "%s/fm_few", test_tmpdir());
  expect_fmnist_failure("--train_count=5", out, "error: --train_count: the first 5 training images hold no ");
}

int main(void) {
  find_bin();
  TEST_RUN(imagenet_tree_round_trip);
  TEST_RUN(imagenet_val_per_class);
  TEST_RUN(bad_inputs_named);
  TEST_RUN(splits_any_order);
  TEST_RUN(csv_byte_order_mark);
  TEST_RUN(existing_split_refused_first);
  TEST_RUN(truncated_accepted_with_flag);
  TEST_RUN(fmnist_through_converter);
  TEST_RUN(fmnist_bad_inputs);
  return test_finish();
}
