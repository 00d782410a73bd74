// movielens.c: the MovieLens ratings.csv reader, the MLPerf split and the
// ncf.bin writer and checked reader (movielens.h).
#include "movielens.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/file.h"
#include "core/rng.h"

// ---------------------------------------------------------------- ratings.csv
void ml_ratings_free(MlRatings *r) {
  free(r->user);
  free(r->item);
  free(r->timestamp);
  memset(r, 0, sizeof *r);
}

// A non-negative decimal integer at *p; advances *p. 0 when there is none or
// it exceeds max.
static int ml_parse_uint(const char **p, const char *end, int64_t max, int64_t *out) {
  const char *s = *p;
  int64_t v = 0;
  while (s < end && *s >= '0' && *s <= '9') {
    v = v * 10 + (*s - '0');
    if (v > max) return 0;
    s++;
  }
  if (s == *p) return 0;
  *p = s;
  *out = v;
  return 1;
}

// A rating: 0.5 to 5.0 in steps of 0.5 ("4", "3.5", "4.0").
static int ml_parse_rating(const char **p, const char *end) {
  int64_t whole, frac = 0, frac_digits = 0;
  if (!ml_parse_uint(p, end, 9, &whole)) return 0;
  if (*p < end && **p == '.') {
    const char *f = ++*p;
    if (!ml_parse_uint(p, end, 999999999, &frac)) return 0;
    frac_digits = *p - f;
  }
  double v = (double)whole + (double)frac / pow(10.0, (double)frac_digits);
  double twice = v * 2;
  return twice >= 1 && twice <= 10 && twice == floor(twice);
}

// [p, end) for a message, quoted: at most 60 bytes, each byte outside
// printable ASCII as \xNN, so that the message stays one line and shows what
// is really there (a stray byte-order mark or control character included).
typedef struct MlQuote {
  char text[256];
} MlQuote;


static MlQuote ml_quote(const char *p, const char *end) {
  MlQuote q;
  size_t len = 0;
  q.text[len++] = '"';
  for (const char *s = p; s < end && s < p + 60; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f)
      q.text[len++] = (char)c;
    else
      len += (size_t)snprintf(q.text + len, sizeof q.text - len, "\\x%02x", c);
  }
  if (end - p > 60) len += (size_t)snprintf(q.text + len, sizeof q.text - len, "...");
  snprintf(q.text + len, sizeof q.text - len, "\"");
  return q;
}

// One data line [p, end) (no newline) into record i; dies naming file:line.
static void ml_parse_line(const char *p, const char *end, const char *where,
                                 MlRatings *r, int64_t i) {
  int64_t user, item, ts;
  const char *s = p;
  if (!ml_parse_uint(&s, end, ML_MAX_ID, &user) || s == end || *s++ != ',')
    die_input(where, "bad userId (want an integer in [0, %d] then ','): %s", ML_MAX_ID,
              ml_quote(p, end).text);
  if (!ml_parse_uint(&s, end, ML_MAX_ID, &item) || s == end || *s++ != ',')
    die_input(where, "bad movieId (want an integer in [0, %d] then ','): %s", ML_MAX_ID,
              ml_quote(p, end).text);
  if (!ml_parse_rating(&s, end) || s == end || *s++ != ',')
    die_input(where, "bad rating (want 0.5 to 5.0 in steps of 0.5, then ','): %s",
              ml_quote(p, end).text);
  if (!ml_parse_uint(&s, end, INT64_MAX / 16, &ts) || s != end)
    die_input(where, "bad timestamp (want unix seconds ending the line): %s",
              ml_quote(p, end).text);
  r->user[i] = (int32_t)user;
  r->item[i] = (int32_t)item;
  r->timestamp[i] = ts;
}

// Whether [p, end) is blank: nothing but spaces, tabs, CRs and LFs.
static int ml_blank(const char *p, const char *end) {
  for (; p < end; p++)
    if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') return 0;
  return 1;
}

// Where the text of a ratings.csv starts: after a UTF-8 byte-order mark
// (spreadsheet exports write one); UTF-16 text is an error naming it.
static const char *ml_text_start(const char *text, size_t bytes, const char *path) {
  if (bytes >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) return text + 3;
  uint8_t b0 = bytes >= 2 ? (uint8_t)text[0] : 0, b1 = bytes >= 2 ? (uint8_t)text[1] : 0;
  if ((b0 == 0xFF && b1 == 0xFE) || (b0 == 0xFE && b1 == 0xFF))
    die_input(path, "UTF-16 text (it starts with the byte-order mark %s); save it as UTF-8",
              ml_quote(text, text + 2).text);
  return text;
}

void ml_ratings_read(const char *path, MlRatings *r) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die_input(path, "cannot open: %s", strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fd, &st) == 0, path);
  if (!S_ISREG(st.st_mode)) die_input(path, "not a file (a directory?)");
  size_t bytes = (size_t)st.st_size;
  if (bytes == 0) die_input(path, "empty file (want a header line %s)", ML_CSV_HEADER);
  const char *text = (const char *)mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK_FILE(text != MAP_FAILED, path);
  close(fd);
  madvise((void *)text, bytes, MADV_SEQUENTIAL);
  const char *end = text + bytes;

  int64_t lines = 0;
  for (const char *q = text; q < end && (q = (const char *)memchr(q, '\n', (size_t)(end - q)));
       q++)
    lines++;
  memset(r, 0, sizeof *r);
  r->source = path;
  r->user = (int32_t *)xmalloc((size_t)(lines + 1) * sizeof(int32_t));
  r->item = (int32_t *)xmalloc((size_t)(lines + 1) * sizeof(int32_t));
  r->timestamp = (int64_t *)xmalloc((size_t)(lines + 1) * sizeof(int64_t));

  char where[1100];
  const char *p = ml_text_start(text, bytes, path);
  for (int64_t line = 1; p < end; line++) {
    const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    const char *content_end = stop > p && stop[-1] == '\r' ? stop - 1 : stop;
    snprintf(where, sizeof where, "%s:%lld", path, (long long)line);
    if (line == 1) {
      size_t n = (size_t)(content_end - p);
      if (n != strlen(ML_CSV_HEADER) || memcmp(p, ML_CSV_HEADER, n) != 0)
        die_input(where, "want the header line \"%s\", got %s", ML_CSV_HEADER,
                  ml_quote(p, content_end).text);
    } else if (ml_blank(p, content_end)) {
      if (ml_blank(stop, end)) break;
      die_input(where, "blank line before more ratings (blank lines may only end the file)");
    } else {
      ml_parse_line(p, content_end, where, r, r->count++);
    }
    p = stop + 1;
  }
  munmap((void *)text, bytes);
  if (r->count == 0) die_input(path, "no ratings after the header line");
}

// ---------------------------------------------------------------- the split
void ml_data_free(MlData *d) {
  if (d->map) {
    munmap(d->map, d->map_bytes);
  } else {
    free(d->train_offsets);
    free(d->train_items);
    free(d->test_items);
    free(d->test_negs);
    free(d->user_ids);
    free(d->item_ids);
  }
  memset(d, 0, sizeof *d);
}

static int ml_cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int ml_cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Dense ids: out[id] = rank of id among the ids with keep[id], or -1.
static int64_t ml_dense_ids(const uint8_t *keep, int64_t n_ids, int32_t *out) {
  int64_t next = 0;
  for (int64_t id = 0; id < n_ids; id++) out[id] = keep[id] ? (int32_t)next++ : -1;
  return next;
}

int64_t ml_max_id(const int32_t *ids, int64_t n) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) m = ids[i] > m ? ids[i] : m;
  return m;
}

// One user's ratings (the record indices rec[0..n)) into keys
// (dense item << 32 | record), sorted by item; dies on a repeated item.
// Returns the position of the latest rating in keys.
static int64_t ml_user_keys(const MlRatings *r, const int32_t *item_dense,
                                   const int64_t *rec, int64_t n, int64_t *keys) {
  for (int64_t k = 0; k < n; k++)
    keys[k] = ((int64_t)item_dense[r->item[rec[k]]] << 32) | rec[k];
  qsort(keys, (size_t)n, sizeof(int64_t), ml_cmp_i64);
  int64_t latest = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = keys[k] & 0xffffffff, best = keys[latest] & 0xffffffff;
    if (k > 0 && (keys[k] >> 32) == (keys[k - 1] >> 32)) {
      char where[1100];
      snprintf(where, sizeof where, "%s:%lld", r->source, (long long)(i + 2));
      die_input(where, "user %d rated movie %d again (first on line %lld)", r->user[i],
                r->item[i], (long long)((keys[k - 1] & 0xffffffff) + 2));
    }
    if (r->timestamp[i] > r->timestamp[best] ||
        (r->timestamp[i] == r->timestamp[best] && i > best))
      latest = k;
  }
  return latest;
}

// The test negatives of dense user u: n_neg draws from the items outside
// rated (ascending, n_rated), sorted.
static void ml_draw_test_negs(int64_t u, const int32_t *rated, int64_t n_rated,
                                     int64_t n_items, int64_t n_neg, uint64_t seed,
                                     int32_t *out) {
  uint32_t n_unrated = (uint32_t)(n_items - n_rated);
  for (int64_t j = 0; j < n_neg; j++) {
    uint32_t u32 = rng_u32(seed, ML_STREAM_TEST_NEG, (uint64_t)(u * n_neg + j));
    out[j] = ml_unrated_item(rated, n_rated, ml_draw_below(u32, n_unrated));
  }
  qsort(out, (size_t)n_neg, sizeof(int32_t), ml_cmp_i32);
}

// Users' record lists grouped by dense user (CSR over the kept ratings).
static int64_t *ml_group_by_user(const MlRatings *r, const int32_t *user_dense,
                                        int64_t n_users, int64_t **offsets_out) {
  int64_t *offsets = (int64_t *)xcalloc((size_t)n_users + 1, sizeof(int64_t));
  for (int64_t i = 0; i < r->count; i++)
    if (user_dense[r->user[i]] >= 0) offsets[user_dense[r->user[i]] + 1]++;
  for (int64_t u = 0; u < n_users; u++) offsets[u + 1] += offsets[u];
  int64_t *fill = (int64_t *)xmalloc((size_t)n_users * sizeof(int64_t));
  memcpy(fill, offsets, (size_t)n_users * sizeof(int64_t));
  int64_t *rec = (int64_t *)xmalloc((size_t)offsets[n_users] * sizeof(int64_t) + 1);
  for (int64_t i = 0; i < r->count; i++)
    if (user_dense[r->user[i]] >= 0) rec[fill[user_dense[r->user[i]]]++] = i;
  free(fill);
  *offsets_out = offsets;
  return rec;
}

void ml_split(const MlRatings *r, int64_t min_ratings, int64_t n_neg,
                            uint64_t seed, MlData *d) {
  if (r->count >= ML_MAX_RATINGS) die_input(r->source, "2^32 or more ratings");
  memset(d, 0, sizeof *d);
  int64_t n_uid = ml_max_id(r->user, r->count) + 1, n_iid = ml_max_id(r->item, r->count) + 1;
  int64_t *per_user = (int64_t *)xcalloc((size_t)n_uid, sizeof(int64_t));
  for (int64_t i = 0; i < r->count; i++) per_user[r->user[i]]++;
  uint8_t *keep = (uint8_t *)xcalloc((size_t)(n_uid > n_iid ? n_uid : n_iid), 1);
  for (int64_t id = 0; id < n_uid; id++) keep[id] = per_user[id] >= min_ratings;
  int32_t *user_dense = (int32_t *)xmalloc((size_t)n_uid * sizeof(int32_t));
  d->n_users = ml_dense_ids(keep, n_uid, user_dense);
  if (d->n_users == 0)
    die_input(r->source, "no user has %lld or more ratings", (long long)min_ratings);
  memset(keep, 0, (size_t)n_iid);
  for (int64_t i = 0; i < r->count; i++)
    if (user_dense[r->user[i]] >= 0) keep[r->item[i]] = 1;
  int32_t *item_dense = (int32_t *)xmalloc((size_t)n_iid * sizeof(int32_t));
  d->n_items = ml_dense_ids(keep, n_iid, item_dense);

  d->user_ids = (int32_t *)xmalloc((size_t)d->n_users * sizeof(int32_t));
  d->item_ids = (int32_t *)xmalloc((size_t)d->n_items * sizeof(int32_t));
  for (int64_t id = 0; id < n_uid; id++)
    if (user_dense[id] >= 0) d->user_ids[user_dense[id]] = (int32_t)id;
  for (int64_t id = 0; id < n_iid; id++)
    if (item_dense[id] >= 0) d->item_ids[item_dense[id]] = (int32_t)id;

  int64_t *offsets;
  int64_t *rec = ml_group_by_user(r, user_dense, d->n_users, &offsets);
  int64_t n_kept = offsets[d->n_users], max_n = 0;
  for (int64_t u = 0; u < d->n_users; u++)
    max_n = offsets[u + 1] - offsets[u] > max_n ? offsets[u + 1] - offsets[u] : max_n;
  d->n_train = n_kept - d->n_users;
  d->n_neg = n_neg;
  d->neg_seed = seed;
  d->min_ratings = min_ratings;
  d->train_offsets = (int64_t *)xmalloc((size_t)(d->n_users + 1) * sizeof(int64_t));
  d->train_items = (int32_t *)xmalloc((size_t)d->n_train * sizeof(int32_t) + 1);
  d->test_items = (int32_t *)xmalloc((size_t)d->n_users * sizeof(int32_t));
  d->test_negs = (int32_t *)xmalloc((size_t)(d->n_users * n_neg) * sizeof(int32_t));
  int64_t *keys = (int64_t *)xmalloc((size_t)max_n * sizeof(int64_t));
  int32_t *rated = (int32_t *)xmalloc((size_t)max_n * sizeof(int32_t));
  d->train_offsets[0] = 0;
  for (int64_t u = 0; u < d->n_users; u++) {
    int64_t n = offsets[u + 1] - offsets[u];
    int64_t latest = ml_user_keys(r, item_dense, rec + offsets[u], n, keys);
    if (n >= d->n_items)
      die_input(r->source, "user %d rated every one of the %lld items: no test negatives",
                d->user_ids[u], (long long)d->n_items);
    int32_t *train = d->train_items + d->train_offsets[u];
    for (int64_t k = 0, t = 0; k < n; k++) {
      rated[k] = (int32_t)(keys[k] >> 32);
      if (k != latest) train[t++] = rated[k];
    }
    d->test_items[u] = rated[latest];
    d->train_offsets[u + 1] = d->train_offsets[u] + n - 1;
    ml_draw_test_negs(u, rated, n, d->n_items, n_neg, seed, d->test_negs + u * n_neg);
  }
  free(keys);
  free(rated);
  free(rec);
  free(offsets);
  free(item_dense);
  free(user_dense);
  free(keep);
  free(per_user);
}

// ---------------------------------------------------------------- ncf.bin
static uint64_t ml_align(uint64_t x) {
  return (x + ML_ALIGN_BYTES - 1) / ML_ALIGN_BYTES * ML_ALIGN_BYTES;
}

void ml_data_path(const char *dir, char *path, size_t bytes) {
  if ((size_t)snprintf(path, bytes, "%s/%s", dir, ML_FILE_NAME) >= bytes)
    die_input(dir, "directory name too long (%zu bytes)", strlen(dir));
}

// The header of d with its section layout.
static MlFileHeader ml_header_of(const MlData *d) {
  MlFileHeader h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, ML_MAGIC, 8);
  h.version = ML_VERSION;
  h.header_bytes = sizeof(MlFileHeader);
  h.n_users = d->n_users;
  h.n_items = d->n_items;
  h.n_train = d->n_train;
  h.n_neg = d->n_neg;
  h.neg_seed = d->neg_seed;
  h.min_ratings = d->min_ratings;
  uint64_t at = ml_align(sizeof h);
  h.off_train_offsets = at;
  at = ml_align(at + (uint64_t)(d->n_users + 1) * 8);
  h.off_train_items = at;
  at = ml_align(at + (uint64_t)d->n_train * 4);
  h.off_test_items = at;
  at = ml_align(at + (uint64_t)d->n_users * 4);
  h.off_test_negs = at;
  at = ml_align(at + (uint64_t)(d->n_users * d->n_neg) * 4);
  h.off_user_ids = at;
  at = ml_align(at + (uint64_t)d->n_users * 4);
  h.off_item_ids = at;
  h.file_bytes = at + (uint64_t)d->n_items * 4;
  return h;
}

void ml_data_remove(const char *dir) {
  char path[1024];
  ml_data_path(dir, path, sizeof path);
  if (unlink(path) != 0 && errno != ENOENT)
    die_input(path, "cannot remove the earlier output: %s", strerror(errno));
}

void ml_data_write(const MlData *d, const char *dir) {
  char path[1024];
  ml_data_path(dir, path, sizeof path);
  AtomicFile out;
  atomic_file_begin(&out, path);
  MlFileHeader h = ml_header_of(d);
  atomic_file_write_at(&out, 0, &h, sizeof h);
  atomic_file_write_at(&out, h.off_train_offsets, d->train_offsets,
                       (size_t)(d->n_users + 1) * sizeof(int64_t));
  atomic_file_write_at(&out, h.off_train_items, d->train_items, (size_t)d->n_train * sizeof(int32_t));
  atomic_file_write_at(&out, h.off_test_items, d->test_items, (size_t)d->n_users * sizeof(int32_t));
  atomic_file_write_at(&out, h.off_test_negs, d->test_negs,
                       (size_t)(d->n_users * d->n_neg) * sizeof(int32_t));
  atomic_file_write_at(&out, h.off_user_ids, d->user_ids, (size_t)d->n_users * sizeof(int32_t));
  atomic_file_write_at(&out, h.off_item_ids, d->item_ids, (size_t)d->n_items * sizeof(int32_t));
  atomic_file_commit(&out);
}

// "3000 users, 3000 items, ...": the counts of a header, for messages.
typedef struct MlCounts {
  char text[200];
} MlCounts;


static MlCounts ml_counts(const MlFileHeader *h) {
  MlCounts c;
#define ML_PLURAL(n) ((n) == 1 ? "" : "s")
  snprintf(c.text, sizeof c.text,
           "%lld user%s, %lld item%s, %lld training item%s, %lld test negative%s per user",
           (long long)h->n_users, ML_PLURAL(h->n_users), (long long)h->n_items,
           ML_PLURAL(h->n_items), (long long)h->n_train, ML_PLURAL(h->n_train),
           (long long)h->n_neg, ML_PLURAL(h->n_neg));
#undef ML_PLURAL
  return c;
}

static void ml_check_field(const char *path, const char *field, int64_t value, int64_t lo,
                                  int64_t hi) {
  if (value < lo || value > hi)
    die_input(path, "header field %s is %lld, outside [%lld, %lld]", field, (long long)value,
              (long long)lo, (long long)hi);
}

// The header on its own and against the file's size (bytes).
static void ml_check_header(const MlFileHeader *h, const char *path, uint64_t bytes) {
  if (memcmp(h->magic, ML_MAGIC, 8) != 0)
    die_input(path, "not an NCF data file (it does not start with %s)", ML_MAGIC);
  if (h->version != ML_VERSION)
    die_input(path, "format version %u; this build reads version %u (convert ratings.csv again)",
              h->version, ML_VERSION);
  if (h->header_bytes != sizeof *h)
    die_input(path, "header field header_bytes is %u; a version %u header has %zu bytes",
              h->header_bytes, ML_VERSION, sizeof *h);
  ml_check_field(path, "n_users", h->n_users, 1, ML_MAX_ID + 1);
  ml_check_field(path, "n_items", h->n_items, 1, ML_MAX_ID + 1);
  ml_check_field(path, "n_train", h->n_train, 1, ML_MAX_RATINGS - 1);
  ml_check_field(path, "n_neg", h->n_neg, 1, ML_MAX_NEGATIVES);
  ml_check_field(path, "min_ratings", h->min_ratings, 2, ML_MAX_RATINGS);
  if (h->reserved[0] != 0 || h->reserved[1] != 0)
    die_input(path, "header field reserved is not zero (a newer format, or a damaged file)");
  if (bytes < h->file_bytes)
    die_input(path, "truncated: %llu bytes, header field file_bytes says %llu",
              (unsigned long long)bytes, (unsigned long long)h->file_bytes);
  if (bytes > h->file_bytes)
    die_input(path, "%llu bytes, more than the %llu header field file_bytes says",
              (unsigned long long)bytes, (unsigned long long)h->file_bytes);
  MlData counts = {.n_users = h->n_users, .n_items = h->n_items, .n_train = h->n_train,
                   .n_neg = h->n_neg};
  MlFileHeader want = ml_header_of(&counts);
  const char *const names[6] = {"off_train_offsets", "off_train_items", "off_test_items",
                                "off_test_negs",     "off_user_ids",    "off_item_ids"};
  const uint64_t have[6] = {h->off_train_offsets, h->off_train_items, h->off_test_items,
                            h->off_test_negs,     h->off_user_ids,    h->off_item_ids};
  const uint64_t need[6] = {want.off_train_offsets, want.off_train_items, want.off_test_items,
                            want.off_test_negs,     want.off_user_ids,    want.off_item_ids};
  for (int s = 0; s < 6; s++)
    if (have[s] != need[s])
      die_input(path, "header field %s is %llu; the counts (%s) put that section at byte %llu",
                names[s], (unsigned long long)have[s], ml_counts(h).text,
                (unsigned long long)need[s]);
  if (want.file_bytes > bytes)
    die_input(path, "the counts (%s) need %llu bytes; the file has %llu", ml_counts(h).text,
              (unsigned long long)want.file_bytes, (unsigned long long)bytes);
}

// The CSR rows of the training items span [0, n_train) in order.
static void ml_check_rows(const MlData *d, const char *path) {
  const int64_t *off = d->train_offsets;
  if (off[0] != 0)
    die_input(path, "user 0's training items start at %lld, not 0", (long long)off[0]);
  for (int64_t u = 0; u < d->n_users; u++)
    if (off[u + 1] < off[u] || off[u + 1] > d->n_train)
      die_input(path, "user %lld's training items end at %lld, outside [%lld, %lld] (n_train)",
                (long long)u, (long long)off[u + 1], (long long)off[u], (long long)d->n_train);
  if (off[d->n_users] != d->n_train)
    die_input(path, "the users' training items end at %lld; header field n_train is %lld",
              (long long)off[d->n_users], (long long)d->n_train);
}

// role: "training item", "test item" or "test negative".
static void ml_check_item(const char *path, const char *role, int32_t item, int64_t u,
                                 int64_t n_items) {
  if (item < 0 || item >= n_items)
    die_input(path, "%s %d of user %lld is outside the %lld items the header declares", role,
              item, (long long)u, (long long)n_items);
}

// User u as the split made it: at least min_ratings ratings; training items
// strictly ascending; the test item not among them; the test negatives
// ascending (repeats are neighbours: the metric relies on it) and unrated.
static void ml_check_user(const MlData *d, const char *path, int64_t u) {
  const int32_t *train = d->train_items + d->train_offsets[u];
  int64_t n = d->train_offsets[u + 1] - d->train_offsets[u];
  if (n + 1 < d->min_ratings)
    die_input(path, "user %lld has %lld ratings (training and test), fewer than header field "
              "min_ratings %lld", (long long)u, (long long)n + 1, (long long)d->min_ratings);
  for (int64_t k = 0; k < n; k++) {
    ml_check_item(path, "training item", train[k], u, d->n_items);
    if (k > 0 && train[k] <= train[k - 1])
      die_input(path, "user %lld's training items are not strictly ascending (%d after %d)",
                (long long)u, train[k], train[k - 1]);
  }
  int32_t test = d->test_items[u];
  ml_check_item(path, "test item", test, u, d->n_items);
  if (ml_is_rated(train, n, test))
    die_input(path, "test item %d of user %lld is also one of its training items", test,
              (long long)u);
  const int32_t *neg = d->test_negs + u * d->n_neg;
  for (int64_t j = 0, k = 0; j < d->n_neg; j++) {
    ml_check_item(path, "test negative", neg[j], u, d->n_items);
    if (j > 0 && neg[j] < neg[j - 1])
      die_input(path, "user %lld's test negatives are not ascending (%d after %d)", (long long)u,
                neg[j], neg[j - 1]);
    while (k < n && train[k] < neg[j]) k++;
    if (neg[j] == test || (k < n && train[k] == neg[j]))
      die_input(path, "test negative %d of user %lld is an item the user rated", neg[j],
                (long long)u);
  }
}

// The original ids (n) of the dense users or items: strictly ascending, in
// [0, ML_MAX_ID]. what: "userId of user", "movieId of item".
static void ml_check_ids(const char *path, const int32_t *ids, int64_t n,
                                const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] > ML_MAX_ID || (i > 0 && ids[i] <= ids[i - 1]))
      die_input(path, "original %s %lld is %d: want ascending ids in [0, %d]", what,
                (long long)i, ids[i], ML_MAX_ID);
}

// User u's test negatives drawn again from the split's training items, test
// item and neg_seed into out (n_neg); rated: scratch of the user's training
// items + 1.
static void ml_redraw_user(const MlData *d, int64_t u, int32_t *rated, int32_t *out) {
  const int32_t *train = d->train_items + d->train_offsets[u];
  int64_t n = d->train_offsets[u + 1] - d->train_offsets[u], below = 0;
  while (below < n && train[below] < d->test_items[u]) below++;
  memcpy(rated, train, (size_t)below * sizeof(int32_t));
  rated[below] = d->test_items[u];
  memcpy(rated + below + 1, train + below, (size_t)(n - below) * sizeof(int32_t));
  ml_draw_test_negs(u, rated, n + 1, d->n_items, d->n_neg, d->neg_seed, out);
}

void ml_draw_all_test_negs(const MlData *d, int32_t *out) {
  int64_t most = 0;
  for (int64_t u = 0; u < d->n_users; u++)
    if (d->train_offsets[u + 1] - d->train_offsets[u] > most)
      most = d->train_offsets[u + 1] - d->train_offsets[u];
#pragma omp parallel
  {
    int32_t *rated = (int32_t *)xmalloc((size_t)(most + 1) * sizeof(int32_t));  // (most + 1)
#pragma omp for schedule(dynamic, 256)
    for (int64_t u = 0; u < d->n_users; u++) ml_redraw_user(d, u, rated, out + u * d->n_neg);
    free(rated);
  }
}

// The header's neg_seed against the negatives: user 0's are drawn again.
static void ml_check_seed(const MlData *d, const char *path) {
  int32_t *rated = (int32_t *)xmalloc((size_t)(d->train_offsets[1] + 1) * sizeof(int32_t));
  int32_t *negs = (int32_t *)xmalloc((size_t)d->n_neg * sizeof(int32_t));  // (n_neg)
  ml_redraw_user(d, 0, rated, negs);
  int same = memcmp(negs, d->test_negs, (size_t)d->n_neg * sizeof(int32_t)) == 0;
  free(rated);
  free(negs);
  if (!same)
    die_input(path, "user 0's test negatives are not those header field neg_seed %llu draws",
              (unsigned long long)d->neg_seed);
}

void ml_data_validate(const MlData *d, const char *path) {
  ml_check_rows(d, path);
  for (int64_t u = 0; u < d->n_users; u++) ml_check_user(d, path, u);
  ml_check_ids(path, d->user_ids, d->n_users, "userId of user");
  ml_check_ids(path, d->item_ids, d->n_items, "movieId of item");
  ml_check_seed(d, path);
}

// Opens path (an ncf.bin) and checks its header against the file's size:
// the open descriptor, the header in *h and the size in *bytes.
static int ml_data_open(const char *path, MlFileHeader *h, uint64_t *bytes) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    die_input(path, "cannot open: %s (convert ratings.csv with movielens_convert)",
              strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fd, &st) == 0, path);
  if (!S_ISREG(st.st_mode)) die_input(path, "not a file (a directory?)");
  *bytes = (uint64_t)st.st_size;
  if (*bytes < sizeof *h || pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h)
    die_input(path, "%llu bytes, shorter than the %zu-byte header: not a complete ncf.bin",
              (unsigned long long)*bytes, sizeof *h);
  ml_check_header(h, path, *bytes);
  return fd;
}

MlFileHeader ml_data_header(const char *path) {
  MlFileHeader h;
  uint64_t bytes;
  close(ml_data_open(path, &h, &bytes));
  return h;
}

void ml_data_map(const char *path, MlData *d) {
  memset(d, 0, sizeof *d);
  MlFileHeader h;
  uint64_t bytes;
  int fd = ml_data_open(path, &h, &bytes);
  uint8_t *base = (uint8_t *)mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK_FILE(base != MAP_FAILED, path);
  close(fd);
  d->n_users = h.n_users;
  d->n_items = h.n_items;
  d->n_train = h.n_train;
  d->n_neg = h.n_neg;
  d->neg_seed = h.neg_seed;
  d->min_ratings = h.min_ratings;
  d->map = base;
  d->map_bytes = bytes;
  d->train_offsets = (int64_t *)(base + h.off_train_offsets);
  d->train_items = (int32_t *)(base + h.off_train_items);
  d->test_items = (int32_t *)(base + h.off_test_items);
  d->test_negs = (int32_t *)(base + h.off_test_negs);
  d->user_ids = (int32_t *)(base + h.off_user_ids);
  d->item_ids = (int32_t *)(base + h.off_item_ids);
  ml_data_validate(d, path);
  MlFileHeader want = ml_header_of(d);
  if (want.file_bytes != bytes)
    die_input(path, "the counts (%s) describe %llu bytes; the file has %llu", ml_counts(&h).text,
              (unsigned long long)want.file_bytes, (unsigned long long)bytes);
}
