// movielens.h: MovieLens ratings for NCF - the ratings.csv reader, the MLPerf
// split and the binary file the trainer maps. Header-only (static inline) so
// the converter, the generator (which must draw the converter's very test
// negatives to score its true model) and the trainer's loader share one
// definition.
//
// The split (MLPerf NCF reference, convert.py):
//   - users with fewer than 20 ratings are dropped;
//   - users and items get dense ids 0.. in ascending order of their original
//     userId / movieId (items: those rated by a kept user);
//   - each user's latest rating (largest timestamp) is the test positive; of
//     ratings with the same timestamp the one on the later line of
//     ratings.csv is the latest (ml-20m is sorted by userId then movieId, so
//     that is the larger movieId). The rest are training positives;
//   - 999 test negatives per user, drawn with replacement (as the reference's
//     np.random.choice) uniformly from the items the user never rated (train
//     or test), number j of user u from Philox (seed, ML_STREAM_TEST_NEG,
//     u * 999 + j); stored ascending, so repeats are neighbours. The
//     reference drew from all items minus the training items, which let the
//     test positive itself be drawn as a negative; here it cannot be.
//
// The file <dir>/ncf.bin, little-endian, version 1:
//   MlFileHeader (136 bytes; magic "NCFMLBIN")
//   then sections at the byte offsets the header gives, each 64-byte aligned:
//     train_offsets  int64 (n_users + 1)   CSR row starts into train_items
//     train_items    int32 (n_train)       each user's training items, ascending
//     test_items     int32 (n_users)       each user's held-out latest item
//     test_negs      int32 (n_users, n_neg) ascending per user, may repeat
//     user_ids       int32 (n_users)       original userId of each dense user
//     item_ids       int32 (n_items)       original movieId of each dense item
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "movielens_sampling.h"
#include "rng.h"

#define ML_MIN_RATINGS 20
#define ML_TEST_NEGATIVES 999
#define ML_MAX_ID ((1 << 26) - 1)  // ids index direct tables of this length
#define ML_VERSION 1u
#define ML_MAGIC "NCFMLBIN"
#define ML_FILE_NAME "ncf.bin"
#define ML_CSV_HEADER "userId,movieId,rating,timestamp"
#define ML_ALIGN_BYTES 64

typedef struct MlFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  int64_t n_users, n_items, n_train, n_neg;
  uint64_t neg_seed;      // seed of the test negatives
  int64_t min_ratings;
  uint64_t off_train_offsets, off_train_items, off_test_items, off_test_negs;
  uint64_t off_user_ids, off_item_ids;
  uint64_t file_bytes;
  uint64_t reserved[2];
} MlFileHeader;

// Parsed ratings.csv: record i is on line i + 2 (after the header line).
typedef struct MlRatings {
  int64_t count;
  int32_t *user;       // (count) original userId
  int32_t *item;       // (count) original movieId
  int64_t *timestamp;  // (count) unix seconds
  const char *source;  // the file, for messages
} MlRatings;

// The split, in memory or mapped from ncf.bin (same arrays either way).
typedef struct MlData {
  int64_t n_users, n_items, n_train, n_neg;
  uint64_t neg_seed;
  int64_t min_ratings;
  int64_t *train_offsets;  // (n_users + 1)
  int32_t *train_items;    // (n_train)
  int32_t *test_items;     // (n_users)
  int32_t *test_negs;      // (n_users, n_neg)
  int32_t *user_ids;       // (n_users)
  int32_t *item_ids;       // (n_items)
  void *map;               // the mapping, or NULL when the arrays are owned
  size_t map_bytes;
} MlData;

// ---------------------------------------------------------------- ratings.csv
static inline void ml_ratings_free(MlRatings *r) {
  free(r->user);
  free(r->item);
  free(r->timestamp);
  memset(r, 0, sizeof *r);
}

// A non-negative decimal integer at *p; advances *p. 0 when there is none or
// it exceeds max.
static inline int ml_parse_uint(const char **p, const char *end, int64_t max, int64_t *out) {
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
static inline int ml_parse_rating(const char **p, const char *end) {
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

// One data line [p, end) (no newline) into record i; dies naming file:line.
static inline void ml_parse_line(const char *p, const char *end, const char *where,
                                 MlRatings *r, int64_t i) {
  int64_t user, item, ts;
  const char *s = p;
  if (!ml_parse_uint(&s, end, ML_MAX_ID, &user) || s == end || *s++ != ',')
    die_input(where, "bad userId (want an integer in [0, %d] then ','): \"%.*s\"", ML_MAX_ID,
              (int)(end - p > 60 ? 60 : end - p), p);
  if (!ml_parse_uint(&s, end, ML_MAX_ID, &item) || s == end || *s++ != ',')
    die_input(where, "bad movieId (want an integer in [0, %d] then ','): \"%.*s\"", ML_MAX_ID,
              (int)(end - p > 60 ? 60 : end - p), p);
  if (!ml_parse_rating(&s, end) || s == end || *s++ != ',')
    die_input(where, "bad rating (want 0.5 to 5.0 in steps of 0.5, then ','): \"%.*s\"",
              (int)(end - p > 60 ? 60 : end - p), p);
  if (!ml_parse_uint(&s, end, INT64_MAX / 16, &ts) || s != end)
    die_input(where, "bad timestamp (want unix seconds ending the line): \"%.*s\"",
              (int)(end - p > 60 ? 60 : end - p), p);
  r->user[i] = (int32_t)user;
  r->item[i] = (int32_t)item;
  r->timestamp[i] = ts;
}

// Reads a MovieLens ratings.csv (header userId,movieId,rating,timestamp).
static inline void ml_ratings_read(const char *path, MlRatings *r) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die_input(path, "cannot open: %s", strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fd, &st) == 0, path);
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
  const char *p = text;
  for (int64_t line = 1; p < end; line++) {
    const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    const char *content_end = stop > p && stop[-1] == '\r' ? stop - 1 : stop;
    snprintf(where, sizeof where, "%s:%lld", path, (long long)line);
    if (line == 1) {
      size_t n = (size_t)(content_end - p);
      if (n != strlen(ML_CSV_HEADER) || memcmp(p, ML_CSV_HEADER, n) != 0)
        die_input(where, "want the header line \"%s\", got \"%.*s\"", ML_CSV_HEADER,
                  (int)(n > 60 ? 60 : n), p);
    } else if (content_end == p) {
      if (nl && nl + 1 < end) die_input(where, "empty line inside the data");
    } else {
      ml_parse_line(p, content_end, where, r, r->count++);
    }
    p = stop + 1;
  }
  munmap((void *)text, bytes);
  if (r->count == 0) die_input(path, "no ratings after the header line");
}

// ---------------------------------------------------------------- the split
static inline void ml_data_free(MlData *d) {
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

static inline int ml_cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static inline int ml_cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Dense ids: out[id] = rank of id among the ids with keep[id], or -1.
static inline int64_t ml_dense_ids(const uint8_t *keep, int64_t n_ids, int32_t *out) {
  int64_t next = 0;
  for (int64_t id = 0; id < n_ids; id++) out[id] = keep[id] ? (int32_t)next++ : -1;
  return next;
}

static inline int64_t ml_max_id(const int32_t *ids, int64_t n) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) m = ids[i] > m ? ids[i] : m;
  return m;
}

// One user's ratings (the record indices rec[0..n)) into keys
// (dense item << 32 | record), sorted by item; dies on a repeated item.
// Returns the position of the latest rating in keys.
static inline int64_t ml_user_keys(const MlRatings *r, const int32_t *item_dense,
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
static inline void ml_draw_test_negs(int64_t u, const int32_t *rated, int64_t n_rated,
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
static inline int64_t *ml_group_by_user(const MlRatings *r, const int32_t *user_dense,
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

// The MLPerf split of r (see the top of this file) into d (owned arrays).
static inline void ml_split(const MlRatings *r, int64_t min_ratings, int64_t n_neg,
                            uint64_t seed, MlData *d) {
  if (r->count >= (int64_t)1 << 32) die_input(r->source, "more than 2^32 ratings");
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
static inline uint64_t ml_align(uint64_t x) {
  return (x + ML_ALIGN_BYTES - 1) / ML_ALIGN_BYTES * ML_ALIGN_BYTES;
}

// The header of d with its section layout.
static inline MlFileHeader ml_header_of(const MlData *d) {
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

static inline void ml_write_at(FILE *f, const char *path, uint64_t offset, const void *data,
                               size_t bytes) {
  CHECK_FILE(fseeko(f, (off_t)offset, SEEK_SET) == 0, path);
  CHECK_FILE(fwrite(data, 1, bytes, f) == bytes, path);
}

// Writes dir/ncf.bin (through a temporary name, renamed when complete).
static inline void ml_data_write(const MlData *d, const char *dir) {
  char path[1024], tmp[1040];
  snprintf(path, sizeof path, "%s/%s", dir, ML_FILE_NAME);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) die_input(dir, "cannot create %s: %s", tmp, strerror(errno));
  MlFileHeader h = ml_header_of(d);
  ml_write_at(f, tmp, 0, &h, sizeof h);
  ml_write_at(f, tmp, h.off_train_offsets, d->train_offsets,
              (size_t)(d->n_users + 1) * sizeof(int64_t));
  ml_write_at(f, tmp, h.off_train_items, d->train_items, (size_t)d->n_train * sizeof(int32_t));
  ml_write_at(f, tmp, h.off_test_items, d->test_items, (size_t)d->n_users * sizeof(int32_t));
  ml_write_at(f, tmp, h.off_test_negs, d->test_negs,
              (size_t)(d->n_users * d->n_neg) * sizeof(int32_t));
  ml_write_at(f, tmp, h.off_user_ids, d->user_ids, (size_t)d->n_users * sizeof(int32_t));
  ml_write_at(f, tmp, h.off_item_ids, d->item_ids, (size_t)d->n_items * sizeof(int32_t));
  CHECK_FILE(fclose(f) == 0, tmp);
  CHECK_FILE(rename(tmp, path) == 0, path);
}

// Whether every value of ids (n) lies in [0, limit).
static inline int ml_ids_in_range(const int32_t *ids, int64_t n, int64_t limit) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++) bad |= ids[i] < 0 || ids[i] >= limit;
  return !bad;
}

// Checks the header and the contents the trainer relies on (ids in range,
// CSR rows ascending), so that no later lookup can go out of bounds.
static inline void ml_data_validate(const MlData *d, const char *path) {
  const int64_t *off = d->train_offsets;
  if (off[0] != 0 || off[d->n_users] != d->n_train)
    die_input(path, "corrupt: training offsets do not span the %lld training items",
              (long long)d->n_train);
  for (int64_t u = 0; u < d->n_users; u++) {
    if (off[u + 1] < off[u] || off[u + 1] > d->n_train)
      die_input(path, "corrupt: training offsets of user %lld out of order", (long long)u);
    for (int64_t k = off[u] + 1; k < off[u + 1]; k++)
      if (d->train_items[k] <= d->train_items[k - 1])
        die_input(path, "corrupt: training items of user %lld not ascending", (long long)u);
  }
  if (!ml_ids_in_range(d->train_items, d->n_train, d->n_items) ||
      !ml_ids_in_range(d->test_items, d->n_users, d->n_items) ||
      !ml_ids_in_range(d->test_negs, d->n_users * d->n_neg, d->n_items))
    die_input(path, "corrupt: an item id outside [0, %lld)", (long long)d->n_items);
}

// Maps path (an ncf.bin) read-only into d and validates it.
static inline void ml_data_map(const char *path, MlData *d) {
  memset(d, 0, sizeof *d);
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    die_input(path, "cannot open: %s (convert ratings.csv with movielens_convert)",
              strerror(errno));
  struct stat st;
  CHECK_FILE(fstat(fd, &st) == 0, path);
  MlFileHeader h;
  if ((size_t)st.st_size < sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
    die_input(path, "too short for a header (%lld bytes)", (long long)st.st_size);
  if (memcmp(h.magic, ML_MAGIC, 8) != 0)
    die_input(path, "not an NCF data file (magic is not %s)", ML_MAGIC);
  if (h.version != ML_VERSION || h.header_bytes != sizeof h)
    die_input(path, "version %u (header %u bytes); this build reads version %u (%zu bytes)",
              h.version, h.header_bytes, ML_VERSION, sizeof h);
  if (h.n_users <= 0 || h.n_items <= 0 || h.n_train < 0 || h.n_neg <= 0 ||
      h.n_items > ML_MAX_ID + 1 || h.n_users > ML_MAX_ID + 1 || h.n_neg > 1000000)
    die_input(path, "corrupt: counts users %lld items %lld train %lld negatives %lld",
              (long long)h.n_users, (long long)h.n_items, (long long)h.n_train,
              (long long)h.n_neg);
  MlData sizes = {.n_users = h.n_users, .n_items = h.n_items, .n_train = h.n_train,
                  .n_neg = h.n_neg};
  MlFileHeader want = ml_header_of(&sizes);
  if (memcmp(&want.off_train_offsets, &h.off_train_offsets, 7 * sizeof(uint64_t)) != 0 ||
      h.file_bytes != (uint64_t)st.st_size)
    die_input(path, "corrupt or truncated: %lld bytes, the header describes %llu",
              (long long)st.st_size, (unsigned long long)h.file_bytes);
  uint8_t *base = (uint8_t *)mmap(NULL, h.file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK_FILE(base != MAP_FAILED, path);
  close(fd);
  *d = sizes;
  d->neg_seed = h.neg_seed;
  d->min_ratings = h.min_ratings;
  d->map = base;
  d->map_bytes = h.file_bytes;
  d->train_offsets = (int64_t *)(base + h.off_train_offsets);
  d->train_items = (int32_t *)(base + h.off_train_items);
  d->test_items = (int32_t *)(base + h.off_test_items);
  d->test_negs = (int32_t *)(base + h.off_test_negs);
  d->user_ids = (int32_t *)(base + h.off_user_ids);
  d->item_ids = (int32_t *)(base + h.off_item_ids);
  ml_data_validate(d, path);
}
