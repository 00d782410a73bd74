// squad_data.c: the fine-tune's windows in memory and their batches
// (squad_data.h).
#include "squad_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/rng.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "wordpiece.h"

SquadCounts squad_data_check(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    die_input(dir, "missing: --data_dir holds no converted data set (language/prepare_data.sh, or "
              "datasets/squad_to_lmdb --out=DATA_DIR/lmdb, writes it)");
  SquadCounts c = {.train_windows = lmdb_split_count(dir, "train"),
                   .dev_windows = lmdb_split_count(dir, "dev")};
  const char *files[] = {"dev.json", "vocab.txt"};
  for (int i = 0; i < 2; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
      die_input(path, "missing (language/prepare_data.sh, or datasets/squad_to_lmdb, writes it)");
  }
  return c;
}

void squad_data_check_vocab(const char *dir, int64_t vocab_size, const char *model) {
  char path[4200];
  snprintf(path, sizeof path, "%s/vocab.txt", dir);
  WpVocab *v = wp_vocab_load(path);
  int64_t n = wp_vocab_size(v);
  wp_vocab_free(v);
  if (n > vocab_size)
    die_input(path, "%lld tokens, but the model (%s) has vocab_size %lld: the data set was converted with "
              "another model's vocabulary", (long long)n, model, (long long)vocab_size);
}

// One record back into a window, its layout checked.
static void read_window(const Record *r, const char *name, SquadFeature *f) {
  if (r->kind != RECORD_TOKENS || r->seq_count != 5)
    die_input(name, "%s record of %d sequences; want tokens (ids, meta, span begins, span ends, "
              "max context)", record_kind_name(r->kind), r->seq_count);
  int n = r->seq_len[0];
  if (n < 3 || r->seq_len[1] != 4 || r->seq_len[2] != n || r->seq_len[3] != n || r->seq_len[4] != n)
    die_input(name, "sequence lengths %d, %d, %d, %d, %d; want n, 4, n, n, n (n >= 3)", n,
              r->seq_len[1], r->seq_len[2], r->seq_len[3], r->seq_len[4]);
  int32_t meta[4], *flags = xmalloc((size_t)n * sizeof(int32_t));
  f->n = n;
  f->ids = xmalloc((size_t)n * sizeof(int32_t));
  f->span_begin = xmalloc((size_t)n * sizeof(int32_t));
  f->span_end = xmalloc((size_t)n * sizeof(int32_t));
  f->max_context = xmalloc((size_t)n);
  record_tokens(r, 0, f->ids);
  record_tokens(r, 1, meta);
  record_tokens(r, 2, f->span_begin);
  record_tokens(r, 3, f->span_end);
  record_tokens(r, 4, flags);
  for (int t = 0; t < n; t++) f->max_context[t] = flags[t] != 0;
  free(flags);
  f->example = meta[0], f->start = meta[1], f->end = meta[2], f->query_tokens = meta[3];
  if (f->example < 0 || f->start < 0 || f->end < f->start || f->end >= n || f->query_tokens < 0 ||
      f->query_tokens + 3 > n)
    die_input(name, "question %lld, answer %d..%d, %d question tokens: not a window of %d tokens",
              (long long)f->example, f->start, f->end, f->query_tokens, n);
}

void squad_split_read(SquadSplit *s, const char *dir, const char *split) {
  memset(s, 0, sizeof *s);
  char path[4200], name[4300];
  snprintf(path, sizeof path, "%s/%s", dir, split);
  LmdbReader *reader = lmdb_reader_open(path);
  LmdbTxn *t = lmdb_txn_begin(reader);
  s->n = lmdb_reader_count(reader);
  s->windows = xcalloc((size_t)s->n, sizeof *s->windows);
  for (int64_t i = 0; i < s->n; i++) {
    lmdb_record_name(path, i, name, sizeof name);
    size_t bytes;
    const void *value = lmdb_txn_get(t, i, &bytes);
    Record r;
    record_parse(value, bytes, name, &r);
    read_window(&r, name, &s->windows[i]);
    if (s->windows[i].n > s->max_tokens) s->max_tokens = s->windows[i].n;
  }
  lmdb_txn_end(t);
  lmdb_reader_close(reader);
}

void squad_split_free(SquadSplit *s) {
  for (int64_t i = 0; i < s->n; i++) {
    SquadFeature *f = &s->windows[i];
    free(f->ids), free(f->span_begin), free(f->span_end), free(f->max_context);
  }
  free(s->windows);
  memset(s, 0, sizeof *s);
}

void squad_batch_buf_init(SquadBatchBuf *buf, int64_t max_b, int64_t max_t) {
  buf->max_b = max_b, buf->max_t = max_t;
  buf->ids = xmalloc((size_t)(max_b * max_t) * sizeof(int32_t));
  buf->types = xmalloc((size_t)(max_b * max_t) * sizeof(int32_t));
  buf->len = xmalloc((size_t)max_b * sizeof(int32_t));
  buf->start = xmalloc((size_t)max_b * sizeof(int32_t));
  buf->end = xmalloc((size_t)max_b * sizeof(int32_t));
}

void squad_batch_buf_free(SquadBatchBuf *buf) {
  free(buf->ids), free(buf->types), free(buf->len), free(buf->start), free(buf->end);
  memset(buf, 0, sizeof *buf);
}

BertBatch squad_batch_fill(const SquadSplit *s, const int64_t *idx, int64_t n, SquadBatchBuf *buf) {
  int64_t t = 0;
  for (int64_t i = 0; i < n; i++)
    if (s->windows[idx[i]].n > t) t = s->windows[idx[i]].n;
  if (n > buf->max_b || t > buf->max_t)
    DIE("squad: a batch of %lld windows of %lld tokens exceeds the buffers (%lld x %lld)",
        (long long)n, (long long)t, (long long)buf->max_b, (long long)buf->max_t);
  for (int64_t i = 0; i < n; i++) {
    const SquadFeature *f = &s->windows[idx[i]];
    int32_t *ids = buf->ids + i * t, *types = buf->types + i * t;
    for (int64_t k = 0; k < t; k++) {
      ids[k] = k < f->n ? f->ids[k] : 0;
      types[k] = k < f->n && k >= f->query_tokens + 2 ? 1 : 0;  // after the first [SEP]
    }
    buf->len[i] = f->n, buf->start[i] = f->start, buf->end[i] = f->end;
  }
  return (BertBatch){.b = n, .t = t, .ids = buf->ids, .types = buf->types, .len = buf->len,
                     .start = buf->start, .end = buf->end};
}

// A window of a run being sorted: its length, its place in the shuffled order.
typedef struct SquadPlace {
  int64_t tokens, place, window;
} SquadPlace;

static int longest_first(const void *a, const void *b) {
  const SquadPlace *x = a, *y = b;
  if (x->tokens != y->tokens) return x->tokens > y->tokens ? -1 : 1;
  return (x->place > y->place) - (x->place < y->place);
}

int64_t *squad_epoch_order(const SquadSplit *s, uint64_t seed, int64_t epoch, int64_t batch,
                           int64_t group) {
  uint32_t *perm = xmalloc((size_t)s->n * sizeof(uint32_t));
  for (int64_t i = 0; i < s->n; i++) perm[i] = (uint32_t)i;
  Rng rng = rng_make(seed, 1000 + (uint64_t)epoch);
  rng_shuffle_u32(&rng, perm, (size_t)s->n);
  int64_t *order = xmalloc((size_t)s->n * sizeof(int64_t));
  for (int64_t i = 0; i < s->n; i++) order[i] = perm[i];
  free(perm);
  int64_t whole = batch > 0 ? s->n / batch : 0;
  if (group <= 0 || whole < 2) return order;
  // Each run of group batches sorted by length.
  int64_t run = group * batch;
  SquadPlace *places = xmalloc((size_t)run * sizeof *places);
  for (int64_t first = 0; first < whole * batch; first += run) {
    int64_t count = whole * batch - first < run ? whole * batch - first : run;
    for (int64_t i = 0; i < count; i++)
      places[i] = (SquadPlace){s->windows[order[first + i]].n, i, order[first + i]};
    qsort(places, (size_t)count, sizeof *places, longest_first);
    for (int64_t i = 0; i < count; i++) order[first + i] = places[i].window;
  }
  free(places);
  // The whole batches in a shuffled order (a stream of its own).
  uint32_t *batches = xmalloc((size_t)whole * sizeof(uint32_t));
  for (int64_t i = 0; i < whole; i++) batches[i] = (uint32_t)i;
  Rng batch_rng = rng_make(seed, 2000 + (uint64_t)epoch);
  rng_shuffle_u32(&batch_rng, batches, (size_t)whole);
  int64_t *grouped = xmalloc((size_t)s->n * sizeof(int64_t));
  for (int64_t i = 0; i < whole; i++)
    memcpy(grouped + i * batch, order + (int64_t)batches[i] * batch, (size_t)batch * sizeof(int64_t));
  memcpy(grouped + whole * batch, order + whole * batch, (size_t)(s->n - whole * batch) * sizeof(int64_t));
  free(batches);
  free(order);
  return grouped;
}
