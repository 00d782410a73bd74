// The WordPiece tokeniser (language/wordpiece.c) on a hand-made vocabulary
// whose ids and offsets are worked out by hand from the rules of
// wordpiece.h: accents (composed and decomposed), case, CJK, Hangul, emoji,
// control characters, whitespace, punctuation runs, words of 100 and 101
// characters, invalid UTF-8, canonical order; offsets that map back to the
// original text; and each kind of bad vocabulary file stopping with its
// one-line message. The comparison with Hugging Face tokenizers on real text
// is test_wordpiece_reference.py.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/file.h"
#include "language/wordpiece.h"
#include "tests/harness/test.h"

// Ids are line numbers from 0.
#define HAND_VOCAB                                                  \
  "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"          /* 0..4 */          \
  "cafe\nna\n##ive\n##i\n##ve\n"                  /* 5..9 */          \
  ",\n.\n!\n?\n\xe6\x97\xa5\n\xe6\x9c\xac\n"      /* 10..15: 日 本 */ \
  "a\n##a\nun\n##aff\n##able\nstra\xc3\x9f" "e\n" /* 16..21 */        \
  "\xe1\x84\x92\n##\xe1\x85\xa1\n##\xe1\x86\xab\n" /* 22..24: ᄒ ##ᅡ ##ᆫ */ \
  "x\xf0\x9d\x85\xa5\xf0\x9d\x85\xad\n"           /* 25: x, U+1D165, U+1D16D */

enum { PAD = 0, UNK = 1, CLS = 2, SEP = 3, CAFE = 5, NA = 6, IVE = 7, COMMA = 10, DOT = 11,
       BANG = 12, QUESTION = 13, RI = 14, BEN = 15, A = 16, CONT_A = 17, UN = 18, AFF = 19,
       ABLE = 20, STRASSE = 21, HIEUH = 22, CONT_A_JAMO = 23, CONT_NIEUN = 24, X_STEM_FLAG = 25,
       HAND_SIZE = 26 };

static const char *write_vocab(const char *name, const char *text, size_t n) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  file_write(path, text, n);
  return path;
}

static WpVocab *hand_vocab(void) {
  return wp_vocab_load(write_vocab("vocab.txt", HAND_VOCAB, strlen(HAND_VOCAB)));
}

typedef struct Expect {
  const char *text;
  size_t n_bytes;  // 0: strlen(text)
  int n;
  WpToken tokens[8];
} Expect;

static const Expect HAND_CASES[] = {
    // "na" then "##ive", not "##i" + "##ve": the longest entry first. "ï"
    // (2 bytes) lies inside "##ive"'s span, "é" ends "cafe"'s.
    {"Caf\xc3\xa9 na\xc3\xafve", 0, 3, {{CAFE, 0, 5}, {NA, 6, 8}, {IVE, 8, 12}}},
    // e + U+0301: the mark after the last kept character is outside the span.
    {"cafe\xcc\x81 x", 0, 2, {{CAFE, 0, 4}, {UNK, 7, 8}}},
    {"CAF\xc3\x89!", 0, 2, {{CAFE, 0, 5}, {BANG, 5, 6}}},
    {"?!.,", 0, 4, {{QUESTION, 0, 1}, {BANG, 1, 2}, {DOT, 2, 3}, {COMMA, 3, 4}}},
    {"a\xe6\x97\xa5\xe6\x9c\xac" "a", 0, 4, {{A, 0, 1}, {RI, 1, 4}, {BEN, 4, 7}, {A, 7, 8}}},
    // An emoji is no punctuation: "a😀" is one word, with no "##😀": [UNK].
    {"a\xf0\x9f\x98\x80 a", 0, 2, {{UNK, 0, 5}, {A, 6, 7}}},
    // Control and format characters go without splitting the word.
    {"a\x01" "a", 0, 2, {{A, 0, 1}, {CONT_A, 2, 3}}},
    {"a\xe2\x80\x8b" "a", 0, 2, {{A, 0, 1}, {CONT_A, 4, 5}}},  // U+200B
    {"a\0a", 3, 2, {{A, 0, 1}, {CONT_A, 2, 3}}},
    {"a\xef\xbf\xbd" "a\x7f", 0, 2, {{A, 0, 1}, {CONT_A, 4, 5}}},  // U+FFFD, DEL
    {"a\xff" "a", 0, 2, {{A, 0, 1}, {CONT_A, 2, 3}}},  // invalid UTF-8 reads as U+FFFD
    // Tab, newline, carriage return, no-break space and U+3000 split words.
    {"a\ta\nun\ra\xc2\xa0" "a\xe3\x80\x80" "a", 0, 6,
     {{A, 0, 1}, {A, 2, 3}, {UN, 4, 6}, {A, 7, 8}, {A, 10, 11}, {A, 14, 15}}},
    {"unaffable", 0, 3, {{UN, 0, 2}, {AFF, 2, 5}, {ABLE, 5, 9}}},
    {"Stra\xc3\x9f" "e", 0, 1, {{STRASSE, 0, 7}}},  // ß neither decomposes nor changes case
    {"nax", 0, 1, {{UNK, 0, 3}}},  // "na" fits, "##x" does not: the whole word
    // 한 decomposes to three jamo; each piece spans the whole syllable.
    {"\xed\x95\x9c", 0, 3, {{HIEUH, 0, 3}, {CONT_A_JAMO, 0, 3}, {CONT_NIEUN, 0, 3}}},
    // "[CLS]" in the text is text: "[", "cls", "]".
    {"[CLS]", 0, 3, {{UNK, 0, 1}, {UNK, 1, 4}, {UNK, 4, 5}}},
    // NFD orders U+1D16D (class 226) after U+1D165 (class 216) ...
    {"x\xf0\x9d\x85\xad\xf0\x9d\x85\xa5", 0, 1, {{X_STEM_FLAG, 0, 9}}},
    // ... across a dropped mark of a class > 0 (U+0301), not across one of
    // class 0 (U+0941), which ends the run of combining characters.
    {"x\xf0\x9d\x85\xad\xcc\x81\xf0\x9d\x85\xa5", 0, 1, {{X_STEM_FLAG, 0, 11}}},
    {"x\xf0\x9d\x85\xad\xe0\xa5\x81\xf0\x9d\x85\xa5", 0, 1, {{UNK, 0, 12}}},
    {"", 0, 0, {{0}}},
    {" \t\n\r\xc2\xa0\xe3\x80\x80\xe2\x80\xa8", 0, 0, {{0}}},
    {"\x01\x02\xe2\x80\x8b", 0, 0, {{0}}},
};

static size_t text_bytes(const Expect *e) { return e->n_bytes ? e->n_bytes : strlen(e->text); }

static void hand_made_tokens(void) {
  WpVocab *v = hand_vocab();
  for (size_t c = 0; c < sizeof HAND_CASES / sizeof HAND_CASES[0]; c++) {
    const Expect *e = &HAND_CASES[c];
    WpToken got[32];
    int64_t n = wp_tokenize(v, e->text, text_bytes(e), got, 32);
    CHECK_MSG(n == e->n, "case %zu: %lld tokens, want %d", c, (long long)n, e->n);
    for (int64_t i = 0; i < n && i < e->n; i++) {
      const WpToken *g = &got[i], *w = &e->tokens[i];
      CHECK_MSG(g->id == w->id && g->start == w->start && g->end == w->end,
                "case %zu token %lld: %d [%d, %d), want %d [%d, %d)", c, (long long)i, g->id,
                g->start, g->end, w->id, w->start, w->end);
    }
  }
  wp_vocab_free(v);
}

// 100 characters get pieces, 101 are one [UNK]; characters are counted
// after normalisation (101 "é" as e + U+0301 are 202 code points).
static void word_length_limit(void) {
  WpVocab *v = hand_vocab();
  static char text[1024];
  static WpToken got[1024];
  memset(text, 'a', 101);
  int64_t n = wp_tokenize(v, text, 100, got, 1024);
  REQUIRE(n == 100);
  CHECK(got[0].id == A && got[0].start == 0 && got[0].end == 1);
  for (int i = 1; i < 100; i++) CHECK(got[i].id == CONT_A && got[i].start == i && got[i].end == i + 1);
  n = wp_tokenize(v, text, 101, got, 1024);
  CHECK(n == 1 && got[0].id == UNK && got[0].start == 0 && got[0].end == 101);
  for (int i = 0; i < 101; i++) memcpy(text + 3 * i, "a\xcc\x81", 3);
  n = wp_tokenize(v, text, 300, got, 1024);
  CHECK(n == 100 && got[99].id == CONT_A && got[99].start == 297 && got[99].end == 298);
  n = wp_tokenize(v, text, 303, got, 1024);
  CHECK(n == 1 && got[0].id == UNK && got[0].start == 0 && got[0].end == 301);
  wp_vocab_free(v);
}

static void reports_what_it_needs(void) {
  WpVocab *v = hand_vocab();
  WpToken got[1] = {{-1, -1, -1}};
  const char *text = "Caf\xc3\xa9 na\xc3\xafve";
  CHECK_EQ_INT(wp_tokenize(v, text, strlen(text), got, 1), 3);
  CHECK(got[0].id == CAFE && got[0].start == 0 && got[0].end == 5);
  CHECK_EQ_INT(wp_tokenize(v, text, strlen(text), NULL, 0), 3);
  wp_vocab_free(v);
}

// The text at a token's span, normalised (marks dropped, lowercased) by
// utf8proc_map, equals the token without its "##".
static void offsets_map_back(void) {
  WpVocab *v = hand_vocab();
  const char *text = "  CAF\xc3\x89, na\xc3\xafve!\tUnaffable? STRA\xc3\x9f" "E a\xe6\x97\xa5" "cafe\xcc\x81";
  WpToken got[64];
  int64_t n = wp_tokenize(v, text, strlen(text), got, 64);
  REQUIRE(n == 13);
  for (int64_t i = 0; i < n; i++) {
    const WpToken *t = &got[i];
    REQUIRE(t->id != UNK && t->start >= 0 && t->start < t->end && t->end <= (int32_t)strlen(text));
    utf8proc_uint8_t *nfd = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)text + t->start, t->end - t->start,
                                        &nfd, UTF8PROC_DECOMPOSE | UTF8PROC_STRIPMARK);
    REQUIRE(len >= 0);
    char lower[64] = {0};
    size_t at = 0;
    for (utf8proc_ssize_t k = 0, step; k < len; k += step) {
      utf8proc_int32_t cp;
      step = utf8proc_iterate(nfd + k, len - k, &cp);
      at += (size_t)utf8proc_encode_char(utf8proc_tolower(cp), (utf8proc_uint8_t *)lower + at);
    }
    free(nfd);
    const char *token = wp_vocab_token(v, t->id);
    if (strncmp(token, "##", 2) == 0) token += 2;
    CHECK_MSG(strcmp(lower, token) == 0, "token %lld: '%s' at [%d, %d) reads '%s'", (long long)i,
              token, t->start, t->end, lower);
  }
  wp_vocab_free(v);
}

// A text never has more tokens than bytes (wordpiece.h), even where one
// character decomposes into several that each match a piece (한): a token
// holds at least one kept character, and no character of k bytes
// decomposes into more than k that are kept (not Mn), which this checks for
// every code point of utf8proc's tables.
static void no_more_tokens_than_bytes(void) {
  WpVocab *v = hand_vocab();
  for (size_t c = 0; c < sizeof HAND_CASES / sizeof HAND_CASES[0]; c++)
    CHECK((size_t)wp_tokenize(v, HAND_CASES[c].text, text_bytes(&HAND_CASES[c]), NULL, 0) <=
          text_bytes(&HAND_CASES[c]));
  wp_vocab_free(v);
  for (int32_t cp = 0; cp <= 0x10FFFF; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    utf8proc_int32_t nfd[16];
    utf8proc_uint8_t utf8[4];
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(cp, nfd, 16, UTF8PROC_DECOMPOSE, &boundclass), kept = 0;
    for (utf8proc_ssize_t i = 0; i < n; i++) kept += utf8proc_category(nfd[i]) != UTF8PROC_CATEGORY_MN;
    CHECK_MSG(kept <= utf8proc_encode_char(cp, utf8), "U+%04X: %zd kept characters", (unsigned)cp, kept);
  }
}

static void vocab_lookups(void) {
  WpVocab *v = hand_vocab();
  CHECK_EQ_INT(wp_vocab_size(v), HAND_SIZE);
  WpSpecialIds s = wp_vocab_special(v);
  CHECK(s.pad == PAD && s.unk == UNK && s.cls == CLS && s.sep == SEP);
  CHECK_EQ_INT(wp_vocab_id(v, "##ive", 5), IVE);
  CHECK_EQ_INT(wp_vocab_id(v, "##iv", 4), -1);
  CHECK_STR(wp_vocab_token(v, STRASSE), "stra\xc3\x9f" "e");
  wp_vocab_free(v);
  // CRLF lines and trailing spaces: not part of the tokens.
  const char crlf[] = "[UNK]\r\n[SEP] \r\n[CLS]\t\n[PAD]\r\nna\r\n";
  v = wp_vocab_load(write_vocab("crlf.txt", crlf, strlen(crlf)));
  s = wp_vocab_special(v);
  CHECK(s.unk == 0 && s.sep == 1 && s.cls == 2 && s.pad == 3);
  CHECK_EQ_INT(wp_vocab_id(v, "na", 2), 4);
  wp_vocab_free(v);
}

// ------------------------------------------------------------ bad files

// Each row: a vocabulary file's text, then what loading it must print.
static const char *const BAD_VOCABS[][2] = {
    {"", "bad.txt: empty file"},
    {HAND_VOCAB "na\n", "bad.txt:27: token 'na' repeats line 7"},
    {"[PAD]\n[UNK]\nna\xc3(ve\n", "bad.txt:3: invalid UTF-8 at byte 3 of the line"},
    {"[PAD]\n\n[UNK]\n", "bad.txt:2: empty line"},
    {"[PAD]\n[UNK]\n[SEP]\n", "bad.txt: no [CLS] token"},
    {"[UNK]\n[CLS]\n[SEP]\n", "bad.txt: no [PAD] token"},
};

static void load_text(void *row) {
  const char *text = ((const char *const *)row)[0];
  wp_vocab_load(write_vocab("bad.txt", text, strlen(text)));
}

static void load_missing(void *path) { wp_vocab_load(path); }

static void bad_vocab_files(void) {
  CHECK_DIES_WITH(load_missing, "/nonexistent/vocab.txt", "/nonexistent/vocab.txt: cannot open");
  for (size_t i = 0; i < sizeof BAD_VOCABS / sizeof BAD_VOCABS[0]; i++)
    CHECK_DIES_WITH(load_text, (void *)BAD_VOCABS[i], BAD_VOCABS[i][1]);
  // A NUL inside a token (found by tests/fuzz's wordpiece target): once
  // kept, its text read back cut short.
  static const char nul[] = "[PAD]\n[UNK]\nca\0fe\n";
  CHECK_DIES_WITH(load_missing, (void *)write_vocab("bad.txt", nul, sizeof nul - 1),
                  "bad.txt:3: a NUL byte at byte 3 of the line");
}

int main(void) {
  TEST_RUN(hand_made_tokens);
  TEST_RUN(word_length_limit);
  TEST_RUN(reports_what_it_needs);
  TEST_RUN(offsets_map_back);
  TEST_RUN(no_more_tokens_than_bytes);
  TEST_RUN(vocab_lookups);
  TEST_RUN(bad_vocab_files);
  return test_finish();
}
