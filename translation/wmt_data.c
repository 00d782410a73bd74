// wmt_data.c: the converted WMT data set (wmt_data.h): checks, reading the
// pairs, the length-bucketed token batches of the MLPerf reference.
#include "translation/wmt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "translation/subword.h"

// The reference's bucket boundaries (tensor2tensor's defaults).
enum { WMT_MIN_BOUNDARY = 8 };
static const double kBoundaryScale = 1.1;

// Epoch shuffle streams: top bits 11, apart from the sampler's (10) and the
// per-sample augmentation streams (00).
static const uint64_t kPlanStream = 3ull << 62;

static void wmt_path(char *buf, size_t buf_bytes, const char *dir, const char *name) {
  snprintf(buf, buf_bytes, "%s/%s", dir, name);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Lines of a text file (a last line without its newline counts).
static int64_t count_lines(const uint8_t *text, size_t n_bytes) {
  int64_t lines = 0;
  for (size_t i = 0; i < n_bytes; i++) lines += text[i] == '\n';
  return lines + (n_bytes > 0 && text[n_bytes - 1] != '\n');
}

static bool line_is(const uint8_t *text, size_t n_bytes, size_t *pos, const char *want) {
  size_t len = strlen(want);
  bool same = *pos + len <= n_bytes && memcmp(text + *pos, want, len) == 0 &&
              (*pos + len == n_bytes || text[*pos + len] == '\n');
  *pos += len + 1;
  return same;
}

// The vocabulary's entry count. Only its first two entries are checked here
// (ids 0 and 1 must be pad and EOS, as every record assumes); the tokeniser
// reads the rest.
static int32_t vocab_count(const char *dir) {
  char path[4096];
  wmt_path(path, sizeof path, dir, "vocab.subwords");
  size_t n_bytes;
  uint8_t *text = file_read(path, &n_bytes);
  int64_t lines = count_lines(text, n_bytes);
  size_t pos = 0;
  bool pad_eos = line_is(text, n_bytes, &pos, "'<pad>'") && line_is(text, n_bytes, &pos, "'<EOS>'");
  free(text);
  if (!pad_eos) die_input(path, "the first two entries must be '<pad>' and '<EOS>' (ids 0 and 1)");
  if (lines > INT32_MAX) die_input(path, "%lld entries, more than ids can hold", (long long)lines);
  return (int32_t)lines;
}

WmtCounts wmt_data_check(const char *dir) {
  WmtCounts c;
  c.train_pairs = lmdb_split_count(dir, "train");
  c.eval_pairs = lmdb_split_count(dir, "eval");
  c.vocab_size = vocab_count(dir);
  char path[4096];
  wmt_path(path, sizeof path, dir, "eval.ref");
  size_t n_bytes;
  uint8_t *text = file_read(path, &n_bytes);
  int64_t lines = count_lines(text, n_bytes);
  free(text);
  if (lines != c.eval_pairs)
    die_input(path, "%lld lines, but %s/eval has %lld pairs", (long long)lines, dir,
              (long long)c.eval_pairs);
  return c;
}

// ---------------------------------------------------------------- reading

static const char *const kSide[2] = {"source", "target"};

// Record index's pair, its kind and sequence count checked.
static void read_pair(LmdbTxn *t, const char *path, int64_t index, Record *r, char *name,
                      size_t name_bytes) {
  lmdb_record_name(path, index, name, name_bytes);
  size_t value_bytes;
  const void *value = lmdb_txn_get(t, index, &value_bytes);
  record_parse(value, value_bytes, name, r);
  if (r->kind != RECORD_TOKENS)
    die_input(name, "%s record; want tokens (source, target)", record_kind_name(r->kind));
  if (r->seq_count != 2)
    die_input(name, "%d token sequences; want 2 (source, target)", r->seq_count);
  for (int side = 0; side < 2; side++)
    if (r->seq_len[side] < 1) die_input(name, "empty %s (it must end with EOS)", kSide[side]);
}

// Copies one side into out, checking its ids, then cuts it to max_len.
static int64_t copy_side(const Record *r, int side, int32_t vocab, int64_t max_len,
                         const char *name, int32_t *out) {
  int64_t n = r->seq_len[side];
  record_tokens(r, side, out);
  for (int64_t k = 0; k < n; k++)
    if (out[k] <= SUBWORD_PAD || out[k] >= vocab)
      die_input(name, "%s id %d at position %lld is outside 1..%d (0 is pad)", kSide[side],
                out[k], (long long)k, vocab - 1);
  if (out[n - 1] != SUBWORD_EOS) die_input(name, "%s does not end with EOS", kSide[side]);
  if (max_len > 0 && n > max_len) {
    n = max_len;
    out[n - 1] = SUBWORD_EOS;
  }
  return n;
}

void wmt_split_read(WmtSplit *s, const char *dir, const char *split, int64_t max_len,
                    WmtLengthMethod method) {
  if (max_len == 1 || max_len < 0) DIE("wmt_split_read: max_len %lld", (long long)max_len);
  memset(s, 0, sizeof *s);
  int32_t vocab = vocab_count(dir);
  char path[4096], name[4200];
  wmt_path(path, sizeof path, dir, split);
  LmdbReader *reader = lmdb_reader_open(path);
  LmdbTxn *t = lmdb_txn_begin(reader);
  int64_t count = lmdb_reader_count(reader);
  // Pass 1: which pairs stay and their lengths, to size the token arrays.
  bool *keep = xmalloc((size_t)max64(count, 1) * sizeof *keep);  // (count,)
  s->src_off = xmalloc((size_t)(count + 1) * sizeof *s->src_off);
  s->tgt_off = xmalloc((size_t)(count + 1) * sizeof *s->tgt_off);
  s->src_off[0] = s->tgt_off[0] = 0;
  int64_t longest = 0;
  for (int64_t i = 0; i < count; i++) {
    Record r;
    read_pair(t, path, i, &r, name, sizeof name);
    int64_t ls = r.seq_len[0], lt = r.seq_len[1];
    bool too_long = max_len > 0 && (ls > max_len || lt > max_len);
    keep[i] = !(too_long && method == WMT_DISCARD);
    if (!keep[i]) {
      s->dropped++;
      continue;
    }
    if (too_long) ls = ls < max_len ? ls : max_len, lt = lt < max_len ? lt : max_len;
    longest = max64(longest, max64(ls, lt));
    s->src_off[s->n_pairs + 1] = s->src_off[s->n_pairs] + ls;
    s->tgt_off[s->n_pairs + 1] = s->tgt_off[s->n_pairs] + lt;
    s->n_pairs++;
  }
  if (s->n_pairs == 0) die_input(path, "no pair of at most %lld tokens", (long long)max_len);
  // Pass 2: the ids. A side may be longer on disk than kept, so each is read
  // into a buffer of its full length first.
  s->src = xmalloc((size_t)s->src_off[s->n_pairs] * sizeof *s->src);
  s->tgt = xmalloc((size_t)s->tgt_off[s->n_pairs] * sizeof *s->tgt);
  int32_t *ids = NULL;
  int64_t ids_cap = 0;
  for (int64_t i = 0, p = 0; i < count; i++) {
    if (!keep[i]) continue;
    Record r;
    read_pair(t, path, i, &r, name, sizeof name);
    int32_t *dst[2] = {s->src + s->src_off[p], s->tgt + s->tgt_off[p]};
    for (int side = 0; side < 2; side++) {
      if (r.seq_len[side] > ids_cap) {
        free(ids);
        ids_cap = 2 * r.seq_len[side];
        ids = xmalloc((size_t)ids_cap * sizeof *ids);
      }
      int64_t n = copy_side(&r, side, vocab, max_len, name, ids);
      memcpy(dst[side], ids, (size_t)n * sizeof *ids);
    }
    p++;
  }
  free(ids);
  free(keep);
  lmdb_txn_end(t);
  lmdb_reader_close(reader);
  s->max_len = max_len > 0 ? max_len : longest;
}

void wmt_split_free(WmtSplit *s) {
  free(s->src_off);
  free(s->tgt_off);
  free(s->src);
  free(s->tgt);
  memset(s, 0, sizeof *s);
}

static int64_t src_len(const WmtSplit *s, int64_t p) { return s->src_off[p + 1] - s->src_off[p]; }
static int64_t tgt_len(const WmtSplit *s, int64_t p) { return s->tgt_off[p + 1] - s->tgt_off[p]; }
static int64_t pair_len(const WmtSplit *s, int64_t p) { return max64(src_len(s, p), tgt_len(s, p)); }

int64_t wmt_eval_read(WmtSplit *s, const char *dir, int64_t max_positions, int64_t extra_len,
                      bool whole) {
  wmt_split_read(s, dir, "eval", whole ? 0 : max_positions, WMT_TRUNCATE);
  int64_t longest = 0, at = 0;
  for (int64_t p = 0; p < s->n_pairs; p++)
    if (src_len(s, p) > longest) longest = src_len(s, p), at = p;
  if (whole && longest + extra_len > max_positions) {
    char path[4096], name[4200];
    wmt_path(path, sizeof path, dir, "eval");
    lmdb_record_name(path, at, name, sizeof name);
    die_input("--max_positions", "%lld positions do not hold %s's source whole (%lld tokens) and "
              "the %lld decoded past it (--extra_decode_length): want at least %lld",
              (long long)max_positions, name, (long long)longest, (long long)extra_len,
              (long long)(longest + extra_len));
  }
  return longest;
}

// ---------------------------------------------------------------- batches

int64_t wmt_bucket_bounds(int64_t max_len, int64_t *upper) {
  int64_t n = 0;
  for (int64_t x = WMT_MIN_BOUNDARY; x < max_len; x = max64(x + 1, (int64_t)((double)x * kBoundaryScale)), n++)
    if (upper) upper[n] = x;
  if (upper) upper[n] = max_len + 1;
  return n + 1;
}

// Allocates the plan's arrays for n_batches batches over n_order pairs.
static void plan_alloc(WmtBatches *bs, int64_t n_batches, int64_t n_order) {
  memset(bs, 0, sizeof *bs);
  bs->n_batches = n_batches;
  bs->first = xmalloc((size_t)max64(n_batches, 1) * sizeof *bs->first);
  bs->count = xmalloc((size_t)max64(n_batches, 1) * sizeof *bs->count);
  bs->order = xmalloc((size_t)max64(n_order, 1) * sizeof *bs->order);
}

// The largest batch's pairs and padded length, once order, first and count
// are set.
static void plan_sizes(WmtBatches *bs, const WmtSplit *s) {
  for (int64_t i = 0; i < bs->n_batches; i++) {
    bs->max_pairs = max64(bs->max_pairs, bs->count[i]);
    for (int64_t j = 0; j < bs->count[i]; j++)
      bs->max_len = max64(bs->max_len, pair_len(s, bs->order[bs->first[i] + j]));
  }
}

void wmt_batches_plan(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, uint64_t seed,
                      int64_t epoch, int rank, int size) {
  if (size <= 0 || rank < 0 || rank >= size) DIE("wmt_batches_plan: rank %d of %d", rank, size);
  if (s->n_pairs > (int64_t)UINT32_MAX) DIE("wmt_batches_plan: %lld pairs", (long long)s->n_pairs);
  if (max_tokens < s->max_len + 1)
    die_input("max_tokens", "%lld is less than the longest pair allowed + 1 (%lld): the longest "
              "bucket would hold no pair", (long long)max_tokens, (long long)s->max_len + 1);
  int64_t n_buckets = wmt_bucket_bounds(s->max_len, NULL);
  int64_t *upper = xmalloc((size_t)n_buckets * sizeof *upper);  // (n_buckets)
  wmt_bucket_bounds(s->max_len, upper);
  // Pairs by bucket (a counting sort, stable), each bucket then shuffled.
  int64_t *start = xcalloc((size_t)n_buckets + 1, sizeof *start);  // (n_buckets + 1)
  int64_t *bucket = xmalloc((size_t)s->n_pairs * sizeof *bucket);  // (n_pairs)
  for (int64_t p = 0; p < s->n_pairs; p++) {
    int64_t b = 0;
    while (pair_len(s, p) >= upper[b]) b++;
    bucket[p] = b;
    start[b + 1]++;
  }
  for (int64_t b = 0; b < n_buckets; b++) start[b + 1] += start[b];
  uint32_t *pairs = xmalloc((size_t)s->n_pairs * sizeof *pairs);  // (n_pairs) by bucket
  int64_t *fill = xmalloc((size_t)n_buckets * sizeof *fill);
  memcpy(fill, start, (size_t)n_buckets * sizeof *fill);
  for (int64_t p = 0; p < s->n_pairs; p++) pairs[fill[bucket[p]]++] = (uint32_t)p;
  Rng rng = rng_make(seed, kPlanStream | (uint64_t)epoch);
  // Every bucket cut into batches of max_tokens // upper pairs, the last one
  // of each bucket possibly short.
  int64_t n_global = 0;
  for (int64_t b = 0; b < n_buckets; b++) {
    int64_t per = max_tokens / upper[b], n = start[b + 1] - start[b];
    rng_shuffle_u32(&rng, pairs + start[b], (size_t)n);
    n_global += (n + per - 1) / per;
  }
  int64_t *g_first = xmalloc((size_t)n_global * sizeof *g_first);
  int64_t *g_count = xmalloc((size_t)n_global * sizeof *g_count);
  for (int64_t b = 0, g = 0; b < n_buckets; b++) {
    int64_t per = max_tokens / upper[b];
    for (int64_t at = start[b]; at < start[b + 1]; at += per, g++) {
      g_first[g] = at;
      g_count[g] = start[b + 1] - at < per ? start[b + 1] - at : per;
    }
  }
  uint32_t *batch_order = xmalloc((size_t)n_global * sizeof *batch_order);
  for (int64_t g = 0; g < n_global; g++) batch_order[g] = (uint32_t)g;
  rng_shuffle_u32(&rng, batch_order, (size_t)n_global);
  // Rank r takes global batches r, r + size, ...: n_global / size each.
  int64_t n_mine = n_global / size, n_order = 0;
  for (int64_t k = 0; k < n_mine; k++) n_order += g_count[batch_order[rank + k * size]];
  plan_alloc(bs, n_mine, n_order);
  for (int64_t k = 0, at = 0; k < n_mine; k++) {
    int64_t g = batch_order[rank + k * size];
    bs->first[k] = at;
    bs->count[k] = g_count[g];
    for (int64_t j = 0; j < g_count[g]; j++) bs->order[at++] = pairs[g_first[g] + j];
  }
  plan_sizes(bs, s);
  free(batch_order);
  free(g_count);
  free(g_first);
  free(fill);
  free(pairs);
  free(bucket);
  free(start);
  free(upper);
}

typedef struct LenIndex {
  int64_t len, index;
} LenIndex;

static int len_index_cmp(const void *a, const void *b) {
  const LenIndex *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

void wmt_batches_plan_eval(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, int rank,
                           int size) {
  if (size <= 0 || rank < 0 || rank >= size) DIE("wmt_batches_plan_eval: rank %d of %d", rank, size);
  int64_t lo = s->n_pairs * rank / size, hi = s->n_pairs * (rank + 1) / size, n = hi - lo;
  LenIndex *sorted = xmalloc((size_t)max64(n, 1) * sizeof *sorted);  // (n)
  for (int64_t i = 0; i < n; i++) sorted[i] = (LenIndex){src_len(s, lo + i), lo + i};
  qsort(sorted, (size_t)n, sizeof *sorted, len_index_cmp);
  // Ascending lengths: the pair being added is the batch's longest source.
  plan_alloc(bs, n, n);  // at most n batches
  int64_t k = -1;        // the batch being filled
  for (int64_t i = 0; i < n; i++) {
    if (k < 0 || (bs->count[k] + 1) * sorted[i].len > max_tokens) {
      k++;
      bs->first[k] = i;
      bs->count[k] = 0;
    }
    bs->count[k]++;
    bs->order[i] = sorted[i].index;
  }
  bs->n_batches = k + 1;
  plan_sizes(bs, s);
  free(sorted);
}

void wmt_batches_free(WmtBatches *bs) {
  free(bs->first);
  free(bs->count);
  free(bs->order);
  memset(bs, 0, sizeof *bs);
}

void wmt_batch_fill(const WmtBatches *bs, const WmtSplit *s, int64_t i, WmtBatch *out) {
  if (i < 0 || i >= bs->n_batches) DIE("wmt_batch_fill: batch %lld of %lld", (long long)i, (long long)bs->n_batches);
  const int64_t *pairs = bs->order + bs->first[i];
  int64_t b = bs->count[i], S = 0, T = 0;
  for (int64_t j = 0; j < b; j++) {
    S = max64(S, src_len(s, pairs[j]));
    T = max64(T, tgt_len(s, pairs[j]));
  }
  out->b = b, out->s = S, out->t = T, out->n_tokens = 0;
  for (int64_t j = 0; j < b; j++) {
    const int32_t *src = s->src + s->src_off[pairs[j]], *tgt = s->tgt + s->tgt_off[pairs[j]];
    int64_t ls = src_len(s, pairs[j]), lt = tgt_len(s, pairs[j]);
    for (int64_t k = 0; k < S; k++) out->src[j * S + k] = k < ls ? src[k] : SUBWORD_PAD;
    for (int64_t k = 0; k < T; k++) {
      out->tgt_out[j * T + k] = k < lt ? tgt[k] : SUBWORD_PAD;
      out->tgt_in[j * T + k] = k >= 1 && k - 1 < lt ? tgt[k - 1] : SUBWORD_PAD;
    }
    out->src_len[j] = (int32_t)ls;
    out->n_tokens += lt;
  }
}
