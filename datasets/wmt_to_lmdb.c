// wmt_to_lmdb: parallel text files (WMT's raw layout, or wmt_generate's)
// into the data set the Transformer trainer reads (translation/wmt_data.h):
//   --train_src + --train_tgt -> <out>/train   LMDB of TOKENS records
//   --eval_src + --eval_tgt   -> <out>/eval    likewise
//   --eval_tgt as given       -> <out>/eval.ref the BLEU reference, a line a pair
//   the vocabulary            -> <out>/vocab.subwords
// A record (common/data/record.h) holds two sequences: the source line's
// subword ids, then the target line's, each ending with SUBWORD_EOS, in the
// files' line order. The vocabulary is --vocab (a tensor2tensor-format file
// such as the MLPerf reference's vocab.ende.32768, copied byte for byte) or,
// with --vocab_size=N, one of about N entries built from the training text
// of both languages (translation/subword.h).
//
// The input is plain UTF-8 text, one sentence a line, the k-th line of the
// source file translating the k-th of the target. A CR before a line's LF
// (a file written on Windows) is dropped, as is a UTF-8 byte-order mark at
// the start of a file. A training pair with an empty or white-space-only
// side is skipped and counted on the summary line (WMT17's training files
// hold a few); an eval line must not be empty, since the BLEU reference
// needs every one. Each of these stops the conversion before anything is
// written, with one line naming the file (and line): a missing file, files
// of a pair with different line counts, invalid UTF-8 (with its byte
// offset in the file), a NUL byte, a line longer than MAX_LINE_BYTES. --out
// must not hold any of the outputs. vocab.subwords is written last (to a
// temporary name, then renamed), so a run that fails leaves a folder that
// wmt_data_check refuses.
//   wmt_to_lmdb --train_src=raw/train.en --train_tgt=raw/train.de
//     --eval_src=raw/newstest2014.en --eval_tgt=raw/newstest2014.de
//     --vocab=raw/vocab.ende.32768 --out=data/transformer/full/lmdb
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <utf8proc.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "datasets/convert_util.h"
#include "translation/subword.h"

static const ConfigKey KEYS[] = {
    {"train_src", CFG_STRING, "", "training source text (English), one sentence a line", NULL},
    {"train_tgt", CFG_STRING, "", "training target text (German), parallel to --train_src", NULL},
    {"eval_src", CFG_STRING, "", "eval source text (newstest2014.en)", NULL},
    {"eval_tgt", CFG_STRING, "", "eval target text (newstest2014.de), also the BLEU reference", NULL},
    {"out", CFG_STRING, "", "output folder: train/, eval/, eval.ref, vocab.subwords", NULL},
    {"vocab", CFG_STRING, "", "an existing vocabulary (tensor2tensor format, e.g. vocab.ende.32768)", NULL},
    {"vocab_size", CFG_INT, "0", "build a vocabulary of about this many subwords from the training text",
     "[0, 1000000]"},
};

// The longest line accepted. A sentence is far shorter (newstest2014's
// longest line is a few hundred bytes); a longer line is a file that is
// not one sentence a line (a binary, a file without line ends) and would
// make one record of a million tokens.
#define MAX_LINE_BYTES 65536

static const char *const kOutputs[] = {"train", "eval", "eval.ref", "vocab.subwords", NULL};

// A text file split into lines (CR and LF not included).
typedef struct Line {
  int64_t start, len;  // bytes
} Line;
typedef struct TextFile {
  const char *path;
  char *text;
  int64_t n_lines;
  Line *lines;  // (n_lines)
} TextFile;

// Checks one line's bytes: no NUL, valid UTF-8, not too long.
static void check_line(const TextFile *f, int64_t line, const char *s, int64_t n) {
  if (n > MAX_LINE_BYTES)
    die_input(f->path, "line %lld: %lld bytes, more than %d (not one sentence a line?)", (long long)line,
              (long long)n, MAX_LINE_BYTES);
  const char *nul = memchr(s, 0, (size_t)n);
  if (nul)
    die_input(f->path, "line %lld: a NUL byte at byte offset %lld: not text", (long long)line,
              (long long)(nul - f->text));
  for (int64_t i = 0; i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t step = utf8proc_iterate((const utf8proc_uint8_t *)s + i, n - i, &cp);
    if (step < 0)
      die_input(f->path, "line %lld: invalid UTF-8 at byte offset %lld", (long long)line,
                (long long)(s + i - f->text));
    i += step;
  }
}

static TextFile text_read(const char *flag, const char *path) {
  require_file(flag, path);
  TextFile f = {.path = path};
  size_t n;
  f.text = (char *)file_read(path, &n);
  int64_t capacity = 0;
  size_t at = n >= 3 && memcmp(f.text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  while (at < n) {
    char *nl = memchr(f.text + at, '\n', n - at);
    size_t end = nl ? (size_t)(nl - f.text) : n, next = nl ? end + 1 : n;
    if (end > at && f.text[end - 1] == '\r') end--;
    f.lines = grow(f.lines, f.n_lines, &capacity, sizeof(Line));
    f.lines[f.n_lines++] = (Line){(int64_t)at, (int64_t)(end - at)};
    check_line(&f, f.n_lines, f.text + at, (int64_t)(end - at));
    at = next;
  }
  return f;
}

static void text_free(TextFile *f) {
  free(f->text);
  free(f->lines);
}

static bool blank(const TextFile *f, int64_t i) {
  for (int64_t k = 0; k < f->lines[i].len; k++)
    if (!strchr(" \t\v\f", f->text[f->lines[i].start + k])) return false;
  return true;
}

// A split: its two files, checked to be parallel; an eval split refuses
// empty lines.
typedef struct Split {
  const char *name;
  TextFile src, tgt;
  bool *skip;  // (n_lines) pairs with an empty side (training only)
  int64_t skipped;
  int64_t src_tokens, tgt_tokens;
} Split;

static void split_read(Split *s, const char *src_flag, const char *src, const char *tgt_flag, const char *tgt,
                       bool eval) {
  s->src = text_read(src_flag, src);
  s->tgt = text_read(tgt_flag, tgt);
  if (s->src.n_lines != s->tgt.n_lines)
    die_input(tgt, "%lld lines, but %s has %lld: the two files of a pair must be parallel",
              (long long)s->tgt.n_lines, src, (long long)s->src.n_lines);
  if (!s->src.n_lines) die_input(src, "no lines: an empty file");
  s->skip = xcalloc((size_t)s->src.n_lines, sizeof(bool));
  for (int64_t i = 0; i < s->src.n_lines; i++) {
    const TextFile *empty = blank(&s->src, i) ? &s->src : blank(&s->tgt, i) ? &s->tgt : NULL;
    if (empty && eval)
      die_input(empty->path, "line %lld: empty: every eval line is needed (the BLEU reference)", (long long)i + 1);
    s->skip[i] = empty != NULL;
    s->skipped += empty != NULL;
  }
  if (s->skipped == s->src.n_lines) die_input(src, "every pair has an empty side");
}

// The ids of one line and an EOS into *ids (grown as needed); returns the count.
static int32_t encode_line(const Subword *sw, const TextFile *f, int64_t i, int32_t **ids, int64_t *capacity) {
  const char *s = f->text + f->lines[i].start;
  size_t n = (size_t)f->lines[i].len;
  int64_t need = subword_encode(sw, s, n, *ids, *capacity - 1);
  if (need > *capacity - 1) {
    free(*ids);
    *capacity = 2 * (need + 1);
    *ids = xmalloc(sizeof(int32_t) * (size_t)*capacity);
    subword_encode(sw, s, n, *ids, *capacity - 1);
  }
  (*ids)[need] = SUBWORD_EOS;
  return (int32_t)(need + 1);
}

static void split_convert(Split *s, const Subword *sw, const char *out) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/%s", out, s->name);
  LmdbWriter *w = lmdb_writer_open(dir);
  Progress p;
  progress_start(&p, s->name, s->src.n_lines);
  int64_t src_cap = 256, tgt_cap = 256;
  int32_t *src = xmalloc(sizeof(int32_t) * (size_t)src_cap), *tgt = xmalloc(sizeof(int32_t) * (size_t)tgt_cap);
  uint8_t *value = NULL;
  size_t value_bytes = 0;
  for (int64_t i = 0; i < s->src.n_lines; i++) {
    progress_update(&p, i + 1, i + 1, -1);
    if (s->skip[i]) continue;
    Record r = {.kind = RECORD_TOKENS, .seq_count = 2};
    r.seq_len[0] = encode_line(sw, &s->src, i, &src, &src_cap);
    r.seq_len[1] = encode_line(sw, &s->tgt, i, &tgt, &tgt_cap);
    r.seqs[0] = src;
    r.seqs[1] = tgt;
    put_record(w, &r, &value, &value_bytes);
    s->src_tokens += r.seq_len[0];
    s->tgt_tokens += r.seq_len[1];
  }
  lmdb_writer_close(w);
  free(src);
  free(tgt);
  free(value);
}

// eval.ref: the eval target lines as given (less a CR), one per line.
static void write_reference(const TextFile *tgt, const char *out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/eval.ref", out);
  AtomicFile f;
  atomic_file_begin(&f, path);
  for (int64_t i = 0; i < tgt->n_lines; i++) {
    atomic_file_write(&f, tgt->text + tgt->lines[i].start, (size_t)tgt->lines[i].len);
    atomic_file_puts(&f, "\n");
  }
  atomic_file_commit(&f);
}

static Subword *build_vocab(const Split *train, int32_t target_size) {
  SubwordCounts *c = subword_counts_new();
  const TextFile *files[2] = {&train->src, &train->tgt};
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < files[k]->n_lines; i++)
      if (!train->skip[i])
        subword_counts_add(c, files[k]->text + files[k]->lines[i].start, (size_t)files[k]->lines[i].len);
  Subword *sw = subword_build(c, target_size);
  subword_counts_free(c);
  return sw;
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "wmt_to_lmdb");
  const char *flags[4] = {"train_src", "train_tgt", "eval_src", "eval_tgt"};
  const char *paths[4];
  char flag_names[4][16];
  for (int k = 0; k < 4; k++) {
    paths[k] = config_string(&cfg, flags[k]);
    snprintf(flag_names[k], sizeof flag_names[k], "--%s", flags[k]);
    if (!*paths[k]) die_missing(flag_names[k], "a text file, one sentence a line");
  }
  const char *out = config_string(&cfg, "out"), *vocab = config_string(&cfg, "vocab");
  int32_t vocab_size = (int32_t)config_int(&cfg, "vocab_size");
  if (!*out) die_missing("--out", "the output folder");
  if (!*vocab == !vocab_size)
    die_input(*vocab ? "--vocab" : "--vocab_size",
              "give one of --vocab (an existing vocabulary) and --vocab_size (build one)%s",
              *vocab ? ", not both" : "");
  if (*vocab) require_file("--vocab", vocab);
  check_outputs_free(out, kOutputs);
  file_make_dirs(out);  // an --out that cannot be made stops the run before hours of reading
  double start = time_now_s();

  Split train = {.name = "train"}, eval = {.name = "eval"};
  split_read(&train, flag_names[0], paths[0], flag_names[1], paths[1], false);
  split_read(&eval, flag_names[2], paths[2], flag_names[3], paths[3], true);
  Subword *sw = *vocab ? subword_load(vocab) : build_vocab(&train, vocab_size);

  split_convert(&eval, sw, out);
  write_reference(&eval.tgt, out);
  split_convert(&train, sw, out);
  char vocab_out[4200];
  snprintf(vocab_out, sizeof vocab_out, "%s/vocab.subwords", out);
  if (*vocab) {
    size_t n;
    uint8_t *bytes = file_read(vocab, &n);
    file_write_atomic(vocab_out, bytes, n);
    free(bytes);
  } else {
    subword_save(sw, vocab_out);
  }

  const Split *splits[2] = {&train, &eval};
  for (int k = 0; k < 2; k++)
    printf("wmt_to_lmdb: %s: %lld pairs, %lld source + %lld target tokens (EOS included), skipped %lld pairs "
           "with an empty side\n",
           splits[k]->name, (long long)(splits[k]->src.n_lines - splits[k]->skipped),
           (long long)splits[k]->src_tokens, (long long)splits[k]->tgt_tokens, (long long)splits[k]->skipped);
  printf("wmt_to_lmdb: vocabulary of %d subwords (%s), done in %.1f s -> %s\n", subword_size(sw),
         *vocab ? vocab : "built", time_now_s() - start, out);
  subword_free(sw);
  for (int k = 0; k < 2; k++) {
    Split *s = (Split *)splits[k];
    text_free(&s->src);
    text_free(&s->tgt);
    free(s->skip);
  }
  config_free(&cfg);
  return 0;
}
