// fuzz_squad_json: the SQuAD v1.1 reader (squad_set_build,
// squad_features.c: what squad_to_lmdb converts and the trainer's eval
// reads) on any file, twice: for the questions alone (no vocabulary, as
// squad_score's gold answers) and into windows with the WordPiece
// vocabulary and the short windows of fuzz_inputs.h. Both must agree on the
// questions, and every window must be one the model can take: at most
// max_seq_length tokens, [CLS] first and [SEP] last, ids of the vocabulary,
// the answer's positions inside the window (or both 0), each context
// token's byte span inside its context.
#include <stdio.h>
#include <string.h>

#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "language/squad_features.h"

typedef struct Case {
  const char *path;
  const WpVocab *vocab;
  SquadSet questions, windows;
} Case;

static void read_questions(void *ctx) {
  Case *c = ctx;
  squad_set_build(&c->questions, c->path, NULL, NULL);
}

static void read_windows(void *ctx) {
  Case *c = ctx;
  squad_set_build(&c->windows, c->path, c->vocab, &kFuzzSquadConfig);
}

static void check_window(const Case *c, int64_t i) {
  const SquadFeature *f = &c->windows.features[i];
  WpSpecialIds special = wp_vocab_special(c->vocab);
  if (f->example < 0 || f->example >= c->windows.n_examples)
    fuzz_fail("window %lld: question %lld of %lld", (long long)i, (long long)f->example,
              (long long)c->windows.n_examples);
  if (f->n > kFuzzSquadConfig.max_seq_length || f->n < f->query_tokens + 3 ||
      f->query_tokens > kFuzzSquadConfig.max_query_length)
    fuzz_fail("window %lld: %d tokens, %d of the question", (long long)i, f->n, f->query_tokens);
  if (f->ids[0] != special.cls || f->ids[f->n - 1] != special.sep || f->ids[f->query_tokens + 1] != special.sep)
    fuzz_fail("window %lld: not [CLS] question [SEP] context [SEP]", (long long)i);
  if (!((f->start == 0 && f->end == 0) || (f->start > f->query_tokens + 1 && f->start <= f->end &&
                                           f->end < f->n - 1)))
    fuzz_fail("window %lld: the answer at positions %d..%d of %d", (long long)i, f->start, f->end, f->n);
  int32_t context_bytes = (int32_t)strlen(c->windows.examples[f->example].context);
  for (int t = 0; t < f->n; t++) {
    if (f->ids[t] < 0 || f->ids[t] >= wp_vocab_size(c->vocab))
      fuzz_fail("window %lld: token %d has id %d", (long long)i, t, f->ids[t]);
    bool in_context = t > f->query_tokens + 1 && t < f->n - 1;
    bool span_ok = in_context ? 0 <= f->span_begin[t] && f->span_begin[t] < f->span_end[t] &&
                                    f->span_end[t] <= context_bytes
                              : f->span_begin[t] == -1 && f->span_end[t] == -1 && !f->max_context[t];
    if (!span_ok)
      fuzz_fail("window %lld: token %d spans bytes %d..%d of a context of %d", (long long)i, t,
                f->span_begin[t], f->span_end[t], context_bytes);
  }
}

static void check(const Case *c) {
  const SquadSet *q = &c->questions, *w = &c->windows;
  if (q->n_examples != w->n_examples)
    fuzz_fail("%lld questions alone, %lld with windows", (long long)q->n_examples, (long long)w->n_examples);
  for (int64_t e = 0; e < q->n_examples; e++)
    if (strcmp(q->examples[e].id, w->examples[e].id) || q->examples[e].n_answers != w->examples[e].n_answers)
      fuzz_fail("question %lld differs between the two reads", (long long)e);
  for (int64_t i = 0; i < w->n_features; i++) check_window(c, i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static WpVocab *vocab;
  if (!vocab) {
    const char *vocab_path = fuzz_temp_path("vocab.txt");
    fuzz_write_lines(vocab_path, kFuzzWpTokens, FUZZ_WP_N_TOKENS);
    vocab = wp_vocab_load(vocab_path);
  }
  Case c = {.path = fuzz_temp_path("squad.json"), .vocab = vocab};
  fuzz_write_file(c.path, data, size);
  if (fuzz_call(read_questions, &c, FUZZ_RELEASE_LEFTOVERS) != 0) return 0;
  if (fuzz_call(read_windows, &c, FUZZ_RELEASE_LEFTOVERS) == 0) {
    check(&c);
    squad_set_free(&c.windows);
  } else if (strstr(fuzz_last_error(), "no token covers") == NULL) {
    fuzz_fail("the questions alone are accepted, their windows refused: %s", fuzz_last_error());
  }
  squad_set_free(&c.questions);
  return 0;
}
