// fuzz_subword: the subword vocabulary reader (subword_load, subword.c: the
// Transformer's vocab.ende.32768 or wmt_to_lmdb's vocab.subwords) on any
// file, then encoding (subword_encode) and decoding (subword_decode) with
// it of a few fixed texts and of the file's own bytes when they are UTF-8.
// Checks: every id lies in the vocabulary; decoding the ids gives the text
// back (what the BLEU of a translation relies on); the vocabulary saved
// (subword_save) loads again with the same entries.
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "translation/subword.h"

static const char *const kTexts[] = {
    "The cat sat on the mat.",
    "Die Katze saß auf der Matte, 1990 (naïve) \"Zürich\"!",
    "  two  spaces_and\\backslash \\123; not_an_escape\n",
    "中国的首都是北京 and 東京 \xe2\x80\x8b zwsp",
    "",
};

static void round_trip(const Subword *sw, const char *text, size_t n_bytes) {
  if (subword_invalid_utf8(text, n_bytes) >= 0) return;  // callers check their text first
  int64_t n = subword_encode(sw, text, n_bytes, NULL, 0);
  int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
  subword_encode(sw, text, n_bytes, ids, n);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] <= SUBWORD_EOS || ids[i] >= subword_size(sw))
      fuzz_fail("id %d of a vocabulary of %d", ids[i], subword_size(sw));
  size_t need = subword_decode(sw, ids, n, NULL, 0);
  char *back = malloc(need + 1);
  subword_decode(sw, ids, n, back, need + 1);
  if (need != n_bytes || memcmp(back, text, n_bytes) != 0)
    fuzz_fail("'%.*s' decodes as '%s'", (int)n_bytes, text, back);
  free(back);
  free(ids);
}

typedef struct Case {
  const char *path, *saved;
  const uint8_t *data;
  size_t size;
} Case;

static void load_and_encode(void *ctx) {
  const Case *c = ctx;
  Subword *sw = subword_load(c->path);
  for (size_t i = 0; i < sizeof kTexts / sizeof kTexts[0]; i++) round_trip(sw, kTexts[i], strlen(kTexts[i]));
  round_trip(sw, (const char *)c->data, c->size);
  subword_save(sw, c->saved);
  Subword *again = subword_load(c->saved);
  if (subword_size(again) != subword_size(sw)) fuzz_fail("%d entries saved, %d loaded", subword_size(sw),
                                                         subword_size(again));
  for (int32_t id = 0; id < subword_size(sw); id++)
    if (strcmp(subword_entry(sw, id), subword_entry(again, id)) != 0)
      fuzz_fail("entry %d '%s' saved loads as '%s'", id, subword_entry(sw, id), subword_entry(again, id));
  subword_free(again);
  subword_free(sw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Case c = {fuzz_temp_path("vocab.subwords"), fuzz_temp_path("saved.subwords"), data, size};
  fuzz_write_file(c.path, data, size);
  fuzz_call(load_and_encode, &c, FUZZ_RELEASE_LEFTOVERS);
  return 0;
}
