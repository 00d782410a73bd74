// safetensors.c: the safetensors reader (safetensors.h).
#include "train/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "device/tensor.h"

// The header may not claim more than this (the format's writers cap it at
// 100 MB); a larger length is a corrupt or foreign file.
#define ST_MAX_HEADER (100u << 20)

static size_t dtype_bytes(const char *name) {
  static const struct {
    const char *name;
    size_t bytes;
  } kSizes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
                {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4},
                {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof kSizes / sizeof kSizes[0]; i++)
    if (!strcmp(name, kSizes[i].name)) return kSizes[i].bytes;
  return 0;
}

// A JSON number that is a whole number in [0, 2^53] (where doubles are
// still exact), as a shape's dimensions and data offsets must be; else -1.
static int64_t whole_number(const cJSON *x) {
  if (!cJSON_IsNumber(x)) return -1;
  double v = x->valuedouble;
  return v >= 0 && v <= 9007199254740992.0 && v == floor(v) ? (int64_t)v : -1;
}

// Whether the elements of t's shape are at most max, without overflow.
static bool numel_at_most(const StTensor *t, uint64_t max) {
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] == 0) return true;
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (n > max / (uint64_t)t->shape[d]) return false;
    n *= (uint64_t)t->shape[d];
  }
  return true;
}

int64_t safetensors_numel(const StTensor *t) {
  // A zero dimension first: the product of the others may overflow (the
  // header's check, numel_at_most, bounds it only when no dimension is 0).
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

static void shape_text(char *out, size_t cap, int ndim, const int64_t *shape) {
  size_t used = (size_t)snprintf(out, cap, "(");
  for (int d = 0; d < ndim && used < cap; d++)
    used += (size_t)snprintf(out + used, cap - used, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (used < cap) snprintf(out + used, cap - used, ")");
}

// One header entry into t; a malformed one dies naming it.
static void parse_entry(const SafeTensors *st, const cJSON *e, StTensor *t) {
  const char *name = e->string;
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsObject(e) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) ||
      !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
    die_input(st->path, "tensor %s: the header entry lacks dtype, shape or data_offsets", name);
  size_t elem = dtype_bytes(dtype->valuestring);
  if (!elem) die_input(st->path, "tensor %s: unknown dtype %s", name, dtype->valuestring);
  t->name = strdup(name);
  snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtype->valuestring);
  t->dtype = !strcmp(t->dtype_name, "F32")    ? ST_F32
             : !strcmp(t->dtype_name, "F16")  ? ST_F16
             : !strcmp(t->dtype_name, "BF16") ? ST_BF16
                                              : ST_OTHER;
  t->ndim = cJSON_GetArraySize(shape);
  if (t->ndim > ST_MAX_DIMS) die_input(st->path, "tensor %s: %d dimensions", name, t->ndim);
  for (int d = 0; d < t->ndim; d++) {
    t->shape[d] = whole_number(cJSON_GetArrayItem(shape, d));
    if (t->shape[d] < 0) die_input(st->path, "tensor %s: dimension %d is not a size", name, d);
  }
  int64_t begin = whole_number(cJSON_GetArrayItem(offs, 0)), end = whole_number(cJSON_GetArrayItem(offs, 1));
  if (begin < 0 || end < begin)
    die_input(st->path, "tensor %s: data_offsets are not a byte range", name);
  t->begin = (uint64_t)begin, t->end = (uint64_t)end;
  if (t->end > st->data_bytes)
    die_input(st->path, "tensor %s: its data (bytes %llu to %llu) runs past the file's %llu",
              name, (unsigned long long)t->begin, (unsigned long long)t->end,
              (unsigned long long)st->data_bytes);
  // Before the element count is computed: a product of dimensions that no
  // file can hold would overflow it.
  if (!numel_at_most(t, (uint64_t)INT64_MAX / elem)) {
    char dims[160];
    shape_text(dims, sizeof dims, t->ndim, t->shape);
    die_input(st->path, "tensor %s: shape %s has more elements than any file holds", name, dims);
  }
  if (t->end - t->begin != (uint64_t)safetensors_numel(t) * elem)
    die_input(st->path, "tensor %s: %llu bytes for %lld %s elements", name,
              (unsigned long long)(t->end - t->begin), (long long)safetensors_numel(t),
              t->dtype_name);
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A name twice in the header (JSON allows it) would leave which tensor is
// meant to the reader: refused.
static void check_names_unique(const SafeTensors *st) {
  const char **names = xmalloc((size_t)(st->count + 1) * sizeof *names);
  for (int i = 0; i < st->count; i++) names[i] = st->tensors[i].name;
  qsort(names, (size_t)st->count, sizeof *names, name_cmp);
  for (int i = 1; i < st->count; i++)
    if (!strcmp(names[i], names[i - 1])) die_input(st->path, "tensor %s is in the header twice", names[i]);
  free(names);
}

void safetensors_open(SafeTensors *st, const char *path) {
  memset(st, 0, sizeof *st);
  snprintf(st->path, sizeof st->path, "%s", path);
  st->f = fopen(path, "rb");
  if (!st->f) die_input(path, "cannot open the checkpoint: %s", strerror(errno));
  uint8_t len_bytes[8];
  if (fread(len_bytes, 1, 8, st->f) != 8) die_input(path, "too short for a safetensors file");
  uint64_t header = 0;
  for (int i = 7; i >= 0; i--) header = header << 8 | len_bytes[i];
  if (fseeko(st->f, 0, SEEK_END) != 0) die_input(path, "cannot seek: %s", strerror(errno));
  uint64_t size = (uint64_t)ftello(st->f);
  if (header > ST_MAX_HEADER || header > size - 8)
    die_input(path, "the header length %llu does not fit the file's %llu bytes",
              (unsigned long long)header, (unsigned long long)size);
  char *json = malloc(header + 1);
  if (!json) DIE("safetensors: out of memory for a %llu-byte header", (unsigned long long)header);
  if (fseeko(st->f, 8, SEEK_SET) != 0 || fread(json, 1, header, st->f) != header)
    die_input(path, "cannot read the header: %s", strerror(errno));
  json[header] = 0;
  st->data_start = 8 + header;
  st->data_bytes = size - st->data_start;
  cJSON *root = cJSON_ParseWithLength(json, header);
  free(json);
  if (!cJSON_IsObject(root)) die_input(path, "the header is not a JSON object");
  int n = 0;
  for (const cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
  st->tensors = calloc((size_t)(n ? n : 1), sizeof *st->tensors);
  for (const cJSON *e = root->child; e; e = e->next)
    if (strcmp(e->string, "__metadata__")) parse_entry(st, e, &st->tensors[st->count++]);
  cJSON_Delete(root);
  check_names_unique(st);
}

void safetensors_close(SafeTensors *st) {
  for (int i = 0; i < st->count; i++) free(st->tensors[i].name);
  free(st->tensors);
  if (st->f) fclose(st->f);
  memset(st, 0, sizeof *st);
}

const StTensor *safetensors_find(const SafeTensors *st, const char *name) {
  for (int i = 0; i < st->count; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}

void safetensors_read_f32(const SafeTensors *st, const char *name, int ndim,
                          const int64_t *shape, float *out) {
  const StTensor *t = safetensors_find(st, name);
  if (!t) die_input(st->path, "tensor %s is missing", name);
  bool same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (!same) {
    char want[160], got[160];
    shape_text(want, sizeof want, ndim, shape);
    shape_text(got, sizeof got, t->ndim, t->shape);
    die_input(st->path, "tensor %s has shape %s, the model needs %s", name, got, want);
  }
  if (t->dtype == ST_OTHER)
    die_input(st->path, "tensor %s is %s, not a float dtype (F32, F16, BF16)", name,
              t->dtype_name);
  int64_t n = safetensors_numel(t);
  size_t bytes = (size_t)(t->end - t->begin);
  void *raw = t->dtype == ST_F32 ? (void *)out : malloc(bytes ? bytes : 1);
  if (fseeko(st->f, (off_t)(st->data_start + t->begin), SEEK_SET) != 0 ||
      fread(raw, 1, bytes, st->f) != bytes)
    die_input(st->path, "tensor %s: cannot read its data", name);
  if (t->dtype == ST_F32) return;
  const uint16_t *h = raw;
  for (int64_t i = 0; i < n; i++) out[i] = t->dtype == ST_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
  free(raw);
}
