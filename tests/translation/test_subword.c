// The subword tokeniser (translation/subword.c) on a hand-made vocabulary
// whose ids are worked out by hand: longest match first, the escapes of "_",
// "\" and of a character outside the alphabet, the single space between
// words dropped and other spaces and punctuation kept, decoding as the
// inverse; a small built vocabulary; and each kind of bad vocabulary file
// stopping with its one-line message. The comparison with a reference
// encoder on real text is test_subword_reference.py.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "tests/harness/test.h"
#include "translation/subword.h"

// Ids 0..35. The reserved entries' characters (< p d > E O S) and the
// escapes' (\ u ; 0-9) belong to every alphabet, so each has its entry.
#define HAND_VOCAB                                                            \
  "'<pad>'\n'<EOS>'\n'the_'\n'th'\n'e'\n't'\n'h'\n'_'\n'\\'\n'u'\n';'\n" /* 0..10 */  \
  "'0'\n'1'\n'2'\n'3'\n'4'\n'5'\n'6'\n'7'\n'8'\n'9'\n"                 /* 11..20 */ \
  "'a'\n'b'\n','\n' '\n'<'\n'p'\n'd'\n'>'\n'E'\n'O'\n'S'\n"            /* 21..31 */ \
  "'a_'\n'b_'\n',_'\n' _'\n"                                        /* 32..35 */

static const char *write_vocab(const char *name, const char *text) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  file_write(path, text, strlen(text));
  return path;
}

static Subword *hand_vocab(void) { return subword_load(write_vocab("hand.vocab", HAND_VOCAB)); }

typedef struct Expect {
  const char *text;
  int n;
  int32_t ids[12];
} Expect;

static const Expect HAND_CASES[] = {
    {"the", 1, {2}},                        // "the_" whole, not t h e _
    {"then", 8, {3, 4, 8, 12, 12, 11, 10, 7}},  // n is outside: "th" "e" "\110;" "_"
    {"a b", 2, {32, 33}},                   // the single space between words goes
    {"a  b", 4, {32, 24, 35, 33}},          // two spaces stay: " " " _"
    {"a, b", 4, {32, 23, 35, 33}},          // punctuation and its space stay
    {"a_b", 5, {32, 8, 9, 7, 33}},          // "_" -> "\u_"
    {"\\", 3, {8, 8, 7}},                   // "\" -> "\\_"
    {" a", 2, {35, 32}},                    // a space starting the text stays
    {"a ", 2, {32, 35}},                    // and one ending it
    {"", 0, {0}},
};

static void hand_made_ids(void) {
  Subword *sw = hand_vocab();
  CHECK_EQ_INT(subword_size(sw), 36);
  CHECK_STR(subword_entry(sw, 35), " _");
  for (size_t c = 0; c < sizeof HAND_CASES / sizeof HAND_CASES[0]; c++) {
    const Expect *e = &HAND_CASES[c];
    int32_t ids[32];
    int64_t n = subword_encode(sw, e->text, strlen(e->text), ids, 32);
    bool same = n == e->n && memcmp(ids, e->ids, (size_t)n * sizeof *ids) == 0;
    CHECK_MSG(same, "'%s': %lld ids, first %d (want %d, first %d)", e->text, (long long)n,
              n ? ids[0] : -1, e->n, e->ids[0]);
  }
  subword_free(sw);
}

static void decode_inverts_encode(void) {
  Subword *sw = hand_vocab();
  for (size_t c = 0; c < sizeof HAND_CASES / sizeof HAND_CASES[0]; c++) {
    const Expect *e = &HAND_CASES[c];
    char text[64];
    size_t n = subword_decode(sw, e->ids, e->n, text, sizeof text);
    CHECK_EQ_INT(n, strlen(e->text));
    CHECK_STR(text, e->text);
  }
  subword_free(sw);
}

static void decode_edges(void) {
  Subword *sw = hand_vocab();
  char text[64];
  const int32_t padded[] = {0, 2, 1, 0};  // pad and EOS are skipped
  subword_decode(sw, padded, 4, text, sizeof text);
  CHECK_STR(text, "the");
  // "\9999999;" names no character: U+3013, as the reference decodes it.
  const int32_t big[] = {8, 20, 20, 20, 20, 20, 20, 20, 10, 7};
  subword_decode(sw, big, 10, text, sizeof text);
  CHECK_STR(text, "\xe3\x80\x93");
  // A backslash that starts no escape stands for itself.
  const int32_t lone[] = {8, 21, 7};
  subword_decode(sw, lone, 3, text, sizeof text);
  CHECK_STR(text, "\\a");
  // Too small a buffer: cut whole characters, NUL-terminated, full length returned.
  const int32_t the_the[] = {2, 2};
  CHECK_EQ_INT(subword_decode(sw, the_the, 2, text, 5), 7);
  CHECK_STR(text, "the ");
  subword_free(sw);
}

static void encode_reports_what_it_needs(void) {
  Subword *sw = hand_vocab();
  int32_t ids[2];
  CHECK_EQ_INT(subword_encode(sw, "then", 4, ids, 2), 8);
  CHECK_EQ_INT(ids[0], 3);
  CHECK_EQ_INT(ids[1], 4);
  subword_free(sw);
}

static void save_then_load(void) {
  Subword *sw = hand_vocab();
  char path[4200];
  snprintf(path, sizeof path, "%s/saved.vocab", test_tmpdir());
  subword_save(sw, path);
  size_t n;
  char *bytes = (char *)file_read(path, &n);
  CHECK(n == strlen(HAND_VOCAB) && memcmp(bytes, HAND_VOCAB, n) == 0);
  free(bytes);
  subword_free(sw);
}

static void built_vocab_needs_no_escapes(void) {
  static const char *const lines[] = {
      "the cat sat on the mat", "the dog sat on the log, and the cat ran",
      "Über die Straße gehen 42 Katzen.", "naïve café — déjà vu!", "日本語のテキスト",
  };
  SubwordCounts *c = subword_counts_new();
  for (int i = 0; i < 5; i++) subword_counts_add(c, lines[i], strlen(lines[i]));
  Subword *sw = subword_build(c, 60);
  CHECK_STR(subword_entry(sw, SUBWORD_PAD), "<pad>");
  CHECK_STR(subword_entry(sw, SUBWORD_EOS), "<EOS>");
  for (int i = 0; i < 5; i++) {
    int32_t ids[256];
    char text[256];
    int64_t n = subword_encode(sw, lines[i], strlen(lines[i]), ids, 256);
    REQUIRE(n <= 256);
    for (int64_t k = 0; k < n; k++)  // every character seen has its entry: no "\<n>;"
      CHECK_MSG(!strchr(subword_entry(sw, ids[k]), '\\'), "'%s': escaped", lines[i]);
    subword_decode(sw, ids, n, text, sizeof text);
    CHECK_STR(text, lines[i]);
  }
  subword_free(sw);
  subword_counts_free(c);
}

// ------------------------------------------------------------ bad files

typedef struct BadVocab {
  const char *text;  // NULL: no such file
  const char *message;
} BadVocab;

static void load_bad(void *ctx) {
  const BadVocab *b = ctx;
  subword_load(b->text ? write_vocab("bad.vocab", b->text) : "/nonexistent/vocab.ende");
}

static void bad_vocab_files(void) {
  static const BadVocab bad[] = {
      {NULL, "/nonexistent/vocab.ende"},
      {"'<pad>'\n'<EOS>'\nthe_\n", "bad.vocab:3: expected an entry in single quotes"},
      {"'<pad>'\n'<EOS>'\n'\xff'\n", "bad.vocab:3: invalid UTF-8"},
      {"'<pad>'\n'<EOS>'\n''\n", "bad.vocab:3: empty entry"},
      {HAND_VOCAB "'e'\n", "bad.vocab:37: entry 'e' repeats line 5"},
      {"'<pad>'\n", "bad.vocab: 1 entries"},
      {"", "bad.vocab: 0 entries"},
      {"'<EOS>'\n'<pad>'\n", "bad.vocab:1: '<EOS>' where '<pad>' must be"},
      {HAND_VOCAB "'ab_'\n'x_'\n", "bad.vocab:38: character 'x' (U+0078) has no entry of its own"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_DIES_WITH(load_bad, (void *)&bad[i], bad[i].message);
}

int main(void) {
  TEST_RUN(hand_made_ids);
  TEST_RUN(decode_inverts_encode);
  TEST_RUN(decode_edges);
  TEST_RUN(encode_reports_what_it_needs);
  TEST_RUN(save_then_load);
  TEST_RUN(built_vocab_needs_no_escapes);
  TEST_RUN(bad_vocab_files);
  return test_finish();
}
