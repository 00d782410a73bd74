// fuzz_wordpiece: the WordPiece vocab.txt reader (wp_vocab_load,
// wordpiece.c: BERT's vocabulary as squad_to_lmdb and the trainer read it)
// on any file, then the tokeniser (wp_tokenize) with the loaded vocabulary
// on a few fixed texts (accents, CJK, punctuation, controls, a word too
// long) and on the file's own bytes as text. Every token of the vocabulary
// must be found again by its text (wp_vocab_id), and the tokenisation must
// keep wordpiece.h's promises: no more tokens than bytes, ids of the
// vocabulary, byte spans inside the text in order.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "language/wordpiece.h"

static const char *const kTexts[] = {
    "The cat sat on the mat.",
    "Café, naïve résumé: \"Zürich\" (1990)!",
    "中国的首都是北京 and 東京",
    "tab\tnew\nline\r\x01\x7f\xc2\xa0nbsp\xe2\x80\x8bzwsp",
    "supercalifragilisticexpialidocioussupercalifragilisticexpialidocioussupercalifragilisticexpialidocious!",
    "a\xcc\x81\xcc\xa3 combining \xe0\xa4\x95\xe0\xa4\xbf \xff\xfe bad bytes",
};

// Tokenises text and checks what wordpiece.h promises of the tokens.
static void tokenize_checked(const WpVocab *v, const char *text, size_t n_bytes) {
  WpToken *out = malloc((n_bytes + 1) * sizeof *out);
  int64_t n = wp_tokenize(v, text, n_bytes, out, (int64_t)n_bytes + 1);
  if (n > (int64_t)n_bytes) fuzz_fail("%lld tokens of %zu bytes", (long long)n, n_bytes);
  for (int64_t i = 0; i < n; i++) {
    const WpToken *t = &out[i];
    if (t->id < 0 || t->id >= wp_vocab_size(v))
      fuzz_fail("token %lld: id %d of %d", (long long)i, t->id, wp_vocab_size(v));
    if (t->start < 0 || t->start >= t->end || (size_t)t->end > n_bytes || (i && t->start < out[i - 1].start))
      fuzz_fail("token %lld: bytes %d..%d of %zu", (long long)i, t->start, t->end, n_bytes);
  }
  free(out);
}

typedef struct Case {
  const char *path;
  const uint8_t *data;
  size_t size;
} Case;

static void load_and_tokenize(void *ctx) {
  const Case *c = ctx;
  WpVocab *v = wp_vocab_load(c->path);
  for (int32_t id = 0; id < wp_vocab_size(v); id++) {
    const char *token = wp_vocab_token(v, id);
    if (wp_vocab_id(v, token, strlen(token)) != id) fuzz_fail("token %d '%s' is not found by its text", id, token);
  }
  for (size_t i = 0; i < sizeof kTexts / sizeof kTexts[0]; i++) tokenize_checked(v, kTexts[i], strlen(kTexts[i]));
  tokenize_checked(v, (const char *)c->data, c->size);
  wp_vocab_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Case c = {fuzz_temp_path("vocab.txt"), data, size};
  fuzz_write_file(c.path, data, size);
  fuzz_call(load_and_tokenize, &c, FUZZ_RELEASE_LEFTOVERS);
  return 0;
}
