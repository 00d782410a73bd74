// squad_to_lmdb: SQuAD v1.1 JSON (train-v1.1.json, dev-v1.1.json, or
// squad_generate's) into the data set the BERT fine-tune reads:
//   --train -> <out>/train   LMDB of TOKENS records, one a window (feature)
//   --dev   -> <out>/dev     likewise
//   --dev as given -> <out>/dev.json   the questions, contexts and gold
//                                      answers the evaluation scores against
//   --vocab as given -> <out>/vocab.txt
// Windows as language/squad_features.h builds them (--max_seq_length,
// --doc_stride, --max_query_length: 384, 128, 64 as the reference recipes).
// A record holds five sequences of int32 (common/data/record.h):
//   0  the token ids, [CLS] question [SEP] context window [SEP] (no padding)
//   1  [question index in file order, answer start, answer end, question tokens]
//   2  each token's first byte in the context (-1 outside it)
//   3  each token's end byte in the context (-1 outside it)
//   4  1 where this window gives the token its most context, else 0
// A bad file stops the conversion before anything is written, with one line
// naming the file and the item (squad_features.h lists the checks).
//   squad_to_lmdb --train=raw/train-v1.1.json --dev=raw/dev-v1.1.json
//     --vocab=raw/vocab.txt --out=data/bert/full/lmdb
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "datasets/convert_util.h"
#include "language/squad_features.h"

static const ConfigKey KEYS[] = {
    {"train", CFG_STRING, "", "training questions, SQuAD v1.1 JSON (train-v1.1.json)", NULL},
    {"dev", CFG_STRING, "", "evaluation questions, SQuAD v1.1 JSON (dev-v1.1.json)", NULL},
    {"vocab", CFG_STRING, "", "the checkpoint's WordPiece vocabulary (vocab.txt)", NULL},
    {"out", CFG_STRING, "", "output folder: train/, dev/, dev.json, vocab.txt", NULL},
    {"max_seq_length", CFG_INT, "384", "tokens of a window, [CLS] and [SEP]s included", "[8, 4096]"},
    {"doc_stride", CFG_INT, "128", "context tokens from one window's start to the next", "[1, 4096]"},
    {"max_query_length", CFG_INT, "64", "question tokens kept", "[1, 4096]"},
};

static const char *const kOutputs[] = {"train", "dev", "dev.json", "vocab.txt", NULL};

static void write_split(const SquadSet *s, const char *out, const char *name) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/%s", out, name);
  LmdbWriter *w = lmdb_writer_open(dir);
  Progress p;
  progress_start(&p, name, s->n_features);
  uint8_t *value = NULL;
  size_t value_bytes = 0;
  for (int64_t i = 0; i < s->n_features; i++) {
    const SquadFeature *f = &s->features[i];
    int32_t meta[4] = {(int32_t)f->example, f->start, f->end, f->query_tokens};
    int32_t *flags = xmalloc((size_t)f->n * sizeof(int32_t));
    for (int t = 0; t < f->n; t++) flags[t] = f->max_context[t];
    Record r = {.kind = RECORD_TOKENS, .seq_count = 5,
                .seq_len = {f->n, 4, f->n, f->n, f->n},
                .seqs = {f->ids, meta, f->span_begin, f->span_end, flags}};
    put_record(w, &r, &value, &value_bytes);
    free(flags);
    progress_update(&p, i + 1, i + 1, -1);
  }
  lmdb_writer_close(w);
  free(value);
}

// Questions whose first answer no window holds whole (too long for one):
// each of their windows targets [CLS], as the reference recipes train them.
static int64_t answers_in_no_window(const SquadSet *s) {
  int64_t n = 0;
  for (int64_t i = 0, j; i < s->n_features; i = j) {
    bool held = false;
    for (j = i; j < s->n_features && s->features[j].example == s->features[i].example; j++)
      held |= s->features[j].end > 0;
    n += !held;
  }
  return n;
}

static void copy_file(const char *from, const char *out, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", out, name);
  size_t n;
  uint8_t *bytes = file_read(from, &n);
  file_write_atomic(path, bytes, n);
  free(bytes);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "squad_to_lmdb");
  const char *train = config_string(&cfg, "train"), *dev = config_string(&cfg, "dev");
  const char *vocab_path = config_string(&cfg, "vocab"), *out = config_string(&cfg, "out");
  if (!*train) die_missing("--train", "SQuAD v1.1 training JSON");
  if (!*dev) die_missing("--dev", "SQuAD v1.1 evaluation JSON");
  if (!*vocab_path) die_missing("--vocab", "a WordPiece vocab.txt");
  if (!*out) die_missing("--out", "the output folder");
  require_file("--train", train);
  require_file("--dev", dev);
  require_file("--vocab", vocab_path);
  check_outputs_free(out, kOutputs);
  SquadFeatureConfig fc = {.max_seq_length = (int)config_int(&cfg, "max_seq_length"),
                           .doc_stride = (int)config_int(&cfg, "doc_stride"),
                           .max_query_length = (int)config_int(&cfg, "max_query_length")};
  WpVocab *vocab = wp_vocab_load(vocab_path);
  // Both files are read and checked before anything is written.
  SquadSet tr, dv;
  squad_set_build(&tr, train, vocab, &fc);
  squad_set_build(&dv, dev, vocab, &fc);
  if (!tr.n_examples) die_input(train, "no questions (every paragraph's \"qas\" is empty)");
  if (!dv.n_examples) die_input(dev, "no questions (every paragraph's \"qas\" is empty)");
  file_make_dirs(out);
  write_split(&dv, out, "dev");
  write_split(&tr, out, "train");
  copy_file(dev, out, "dev.json");
  copy_file(vocab_path, out, "vocab.txt");  // last: a run that fails leaves no vocab.txt
  char unheld[128] = "";
  int64_t n_unheld = answers_in_no_window(&tr);
  if (n_unheld)
    snprintf(unheld, sizeof unheld, " (%lld whose answer no window holds whole: trained toward [CLS])",
             (long long)n_unheld);
  printf("squad_to_lmdb: train: %lld questions%s, %lld windows; dev: %lld questions, %lld windows; "
         "max_seq_length %d, doc_stride %d, max_query_length %d\n",
         (long long)tr.n_examples, unheld, (long long)tr.n_features, (long long)dv.n_examples,
         (long long)dv.n_features, fc.max_seq_length, fc.doc_stride, fc.max_query_length);
  squad_set_free(&tr);
  squad_set_free(&dv);
  wp_vocab_free(vocab);
  config_free(&cfg);
  return 0;
}
