// fuzz_wmt_text: the WMT converter's reader of raw parallel text
// (split_read and text_read in datasets/wmt_to_lmdb.c: one sentence a line,
// UTF-8, CR LF and a byte-order mark allowed) on any pair of files: the
// input's bytes before its first NUL are the source file, those after it
// the target file. The reader is static in the converter, so the converter
// is compiled into this harness with its main renamed. The pair is read as
// a training split and as an eval split (which refuses empty lines); of a
// training split that is read, a vocabulary is built from its text
// (build_vocab, as --vocab_size does) and every pair encoded with it
// (encode_line) into the TOKENS record the converter writes. The ids of a
// line must decode back to the line (less the white space that the
// tokeniser may not keep), and the record must parse back to the same ids.
#define main wmt_to_lmdb_main
#include "../../datasets/wmt_to_lmdb.c"
#undef main

#include "fuzz_util.h"

// About as many subwords as a small vocabulary of wmt_to_lmdb's tests.
enum { kVocabSize = 64 };

typedef struct Case {
  const char *src, *tgt;
  bool eval;
  Split split;
} Case;

static void read_split(void *ctx) {
  Case *c = ctx;
  split_read(&c->split, "--train_src", c->src, "--train_tgt", c->tgt, c->eval);
}

// The record of pair i, encoded and parsed back: the same ids.
static void check_record(const Split *s, int64_t i, const int32_t *src, int32_t n_src, const int32_t *tgt,
                         int32_t n_tgt) {
  Record r = {.kind = RECORD_TOKENS, .seq_count = 2, .seq_len = {n_src, n_tgt}, .seqs = {src, tgt}};
  size_t bytes = record_encoded_bytes(&r);
  uint8_t *value = xmalloc(bytes);
  record_encode(&r, value, bytes);
  Record back;
  record_parse(value, bytes, s->src.path, &back);
  int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(n_src > n_tgt ? n_src : n_tgt));
  for (int k = 0; k < 2; k++) {
    record_tokens(&back, k, ids);
    if (back.seq_len[k] != r.seq_len[k] || memcmp(ids, r.seqs[k], sizeof(int32_t) * (size_t)r.seq_len[k]))
      fuzz_fail("pair %lld: side %d's ids do not parse back from its record", (long long)i, k);
  }
  free(ids);
  free(value);
}

static void check_decodes(const Subword *sw, const TextFile *f, int64_t i, const int32_t *ids, int32_t n) {
  const char *line = f->text + f->lines[i].start;
  size_t n_bytes = (size_t)f->lines[i].len, need = subword_decode(sw, ids, n, NULL, 0);
  char *back = xmalloc(need + 1);
  subword_decode(sw, ids, n, back, need + 1);
  if (need != n_bytes || memcmp(back, line, n_bytes) != 0)
    fuzz_fail("%s line %lld: '%.*s' decodes as '%s'", f->path, (long long)i + 1, (int)n_bytes, line, back);
  free(back);
}

static void convert(void *ctx) {
  Case *c = ctx;
  Split *s = &c->split;
  Subword *sw = build_vocab(s, kVocabSize);
  int64_t src_cap = 16, tgt_cap = 16;
  int32_t *src = xmalloc(sizeof(int32_t) * (size_t)src_cap), *tgt = xmalloc(sizeof(int32_t) * (size_t)tgt_cap);
  for (int64_t i = 0; i < s->src.n_lines; i++) {
    if (s->skip[i]) continue;
    int32_t n_src = encode_line(sw, &s->src, i, &src, &src_cap);
    int32_t n_tgt = encode_line(sw, &s->tgt, i, &tgt, &tgt_cap);
    check_decodes(sw, &s->src, i, src, n_src);
    check_decodes(sw, &s->tgt, i, tgt, n_tgt);
    check_record(s, i, src, n_src, tgt, n_tgt);
  }
  free(src);
  free(tgt);
  subword_free(sw);
}

static void split_free(Split *s) {
  text_free(&s->src);
  text_free(&s->tgt);
  free(s->skip);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *src = fuzz_temp_path("train.en"), *tgt = fuzz_temp_path("train.de");
  const uint8_t *second;
  size_t second_bytes, first_bytes = fuzz_split(data, size, &second, &second_bytes);
  fuzz_write_file(src, data, first_bytes);
  fuzz_write_file(tgt, second, second_bytes);
  for (int eval = 0; eval < 2; eval++) {
    Case c = {.src = src, .tgt = tgt, .eval = eval, .split = {.name = eval ? "eval" : "train"}};
    if (fuzz_call(read_split, &c, FUZZ_RELEASE_LEFTOVERS) != 0) continue;
    if (!eval && fuzz_call(convert, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
      fuzz_fail("a training split that was read cannot be converted: %s", fuzz_last_error());
    split_free(&c.split);
  }
  return 0;
}
