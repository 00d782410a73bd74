// The Transformer's BLEU (translation/bleu.c) on hand-computed cases: the
// reference's tokenisation (its quirks included), its smoothing and brevity
// penalty, clipping, empty and broken hypotheses, and statistics that add up
// over slices of a corpus (the multi-rank reduction).
// tests/translation/test_bleu_sacrebleu.py checks it against sacrebleu.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/test.h"
#include "translation/bleu.h"

// Checks that text tokenises (lowercased) to want.
static void check_tokens(const char *text, const char *want) {
  char *got = bleu_tokenize(text);
  CHECK_MSG(strcmp(got, want) == 0, "tokens of \"%s\": \"%s\", want \"%s\"", text, got, want);
  free(got);
}

static BleuStats stats_of(const char *hyp, const char *ref) {
  BleuStats st = {0};
  bleu_add(&st, hyp, ref);
  return st;
}

static void punctuation_splits_next_to_non_digits(void) {
  check_tokens("Hello, world!", "hello , world !");
  check_tokens("x.,y", "x . , y");  // a match consumes both of its chars
  check_tokens("\"Quoted\" (text)", "\" quoted \" ( text )");
  // mteval's quirk the reference keeps: a number's full stop at the end of
  // a line stays on the number.
  check_tokens("In 1999.", "in 1999.");
  // The reference's "non-digit" is not Nd: a superscript two is one.
  check_tokens("²,a", "² , a");
}

static void digits_keep_their_separators(void) {
  check_tokens("1,000.5", "1,000.5");
  check_tokens("Es kostet 3.000,50 Euro.", "es kostet 3.000,50 euro .");
  check_tokens("٣,٤", "٣,٤");  // Arabic-Indic digits are Nd too
}

static void symbols_split_everywhere(void) {
  check_tokens("costs $5 or 3€", "costs $ 5 or 3 €");
  check_tokens("a+b=c", "a + b = c");
  check_tokens("I ❤ it 😀!", "i ❤ it 😀 !");
  check_tokens("1<2", "1 < 2");
}

static void backslash_is_not_punctuation(void) {
  // The reference pastes every P char into a regex [...], where "\" escapes
  // the "]" after it and so drops out of the class (sacrebleu splits it).
  check_tokens("a\\b", "a\\b");
  check_tokens("a]b", "a ] b");
}

static void lowercase_is_pythons(void) {
  check_tokens("ÄÖÜ Straße", "äöü straße");  // lower(), not casefold: ß stays
  check_tokens("ÉCOLE Ñ", "école ñ");
  check_tokens("İstanbul", "i\xcc\x87stanbul");  // full mapping: i + U+0307
  // Final sigma: at the end of a word ς, elsewhere σ.
  check_tokens("ΟΔΟΣ ΣΑ", "οδος σα");
  check_tokens("ΟΔΟΣ.", "οδος .");
}

static void whitespace_is_pythons(void) {
  // Tab, no-break space, ideographic space and U+001F (bidi S) separate;
  // a zero-width space (Cf, bidi BN) does not.
  check_tokens(" a\tb\xc2\xa0" "c\xe3\x80\x80" "d\x1f" "e ", "a b c d e");
  check_tokens("a\xe2\x80\x8b" "b", "a\xe2\x80\x8b" "b");
  check_tokens("", "");
  check_tokens("  \t ", "");
}

static void perfect_match_is_100(void) {
  BleuStats st = stats_of("The cat sat on the mat.", "the cat sat on the MAT.");
  for (int i = 0; i < BLEU_MAX_ORDER; i++) CHECK_NEAR(st.matches[i], st.possible[i], 0);
  CHECK_NEAR(st.possible[0], 7, 0);
  CHECK_NEAR(st.possible[3], 4, 0);
  CHECK_NEAR(bleu_score(&st), 100, 1e-12);
}

static void brevity_penalty_by_hand(void) {
  // 3 of 6 tokens, all n-grams matched; no 4-gram at all, so that order is
  // left out of the sum of logs: BLEU = 100 exp(1 - 6/3).
  BleuStats st = stats_of("the cat sat", "the cat sat on the mat");
  CHECK_NEAR(st.possible[3], 0, 0);
  CHECK_NEAR(bleu_score(&st), 100 * exp(-1.0), 1e-12);
  // Longer than the reference: no penalty.
  BleuStats longer = stats_of("the cat sat on the mat today", "the cat sat on the mat");
  CHECK_NEAR(bleu_score(&longer), 100 * pow(6.0 / 7 * 5.0 / 6 * 4.0 / 5 * 3.0 / 4, 0.25), 1e-12);
}

static void zero_matches_are_smoothed(void) {
  // Unigrams 4/5, bigrams 2/4, trigrams none of 3 -> 1/(2*3), 4-grams none
  // of 2 -> 1/(4*2): BLEU = 100 (1/120)^(1/4).
  BleuStats st = stats_of("a b c d e", "a b x d e");
  CHECK_NEAR(st.matches[0], 4, 0);
  CHECK_NEAR(st.matches[1], 2, 0);
  CHECK_NEAR(st.matches[2], 0, 0);
  CHECK_NEAR(bleu_score(&st), 100 * pow(1.0 / 120, 0.25), 1e-12);
  // No match at all still scores (sacrebleu says 0 here): unigrams 1/(2*2),
  // bigrams 1/(4*1), BLEU = 100 (1/16)^(1/4) = 50.
  BleuStats none = stats_of("a b", "c d");
  CHECK_NEAR(bleu_score(&none), 50, 1e-12);
}

static void matches_are_clipped(void) {
  BleuStats st = stats_of("the the the the", "The cat the");
  CHECK_NEAR(st.matches[0], 2, 0);  // "the" twice in the reference
  CHECK_NEAR(st.possible[0], 4, 0);
  CHECK_NEAR(st.matches[1], 0, 0);
  CHECK_NEAR(st.possible[1], 3, 0);
}

static void empty_hypotheses(void) {
  BleuStats st = stats_of("", "a reference sentence");
  for (int i = 0; i < BLEU_MAX_ORDER; i++) CHECK_NEAR(st.possible[i], 0, 0);
  CHECK_NEAR(st.ref_len, 3, 0);
  CHECK_NEAR(bleu_score(&st), 0, 0);  // the reference divides by zero here
  BleuStats both = stats_of("", "");
  CHECK_NEAR(bleu_score(&both), 0, 0);
  // An empty line in a corpus only lengthens the reference side.
  bleu_add(&st, "the cat sat", "the cat sat");
  CHECK_NEAR(bleu_score(&st), 100 * exp(1.0 - 6.0 / 3), 1e-12);
}

static void broken_utf8_reads_as_replacement_chars(void) {
  // Each bad byte is a U+FFFD, a symbol: its own token. A truncated
  // sequence at the end gives one per byte.
  check_tokens("ab\xff\xfe" "c", "ab \xef\xbf\xbd \xef\xbf\xbd c");
  check_tokens("x\xe2\x82", "x \xef\xbf\xbd \xef\xbf\xbd");
  BleuStats st = stats_of("\xc3\x28 \xed\xa0\x80", "ok");
  CHECK(isfinite(bleu_score(&st)));
}

static void stats_add_up_over_slices(void) {
  static const char *const pairs[][2] = {
      {"Das ist ein Test.", "Das ist ein kleiner Test."},
      {"Er kostet 1.000,50 €!", "Er kostet 1.000,50 €."},
      {"", "Leer."},
      {"Größe ÄNDERN, bitte", "größe ändern bitte"},
      {"a b c d e f", "a b c d e f"},
      {"zwei Wörter", "drei Wörter hier"},
  };
  const int n = sizeof pairs / sizeof pairs[0];
  BleuStats whole = {0}, halves[2];
  memset(halves, 0, sizeof halves);
  for (int i = 0; i < n; i++) {
    bleu_add(&whole, pairs[i][0], pairs[i][1]);
    bleu_add(&halves[i < n / 2 ? 0 : 1], pairs[i][0], pairs[i][1]);
  }
  BleuStats sum = halves[0];
  for (int i = 0; i < BLEU_MAX_ORDER; i++) {
    sum.matches[i] += halves[1].matches[i];
    sum.possible[i] += halves[1].possible[i];
  }
  sum.hyp_len += halves[1].hyp_len;
  sum.ref_len += halves[1].ref_len;
  CHECK(memcmp(&sum, &whole, sizeof sum) == 0);
  CHECK_NEAR(bleu_score(&sum), bleu_score(&whole), 0);
  CHECK(bleu_score(&whole) > 0 && bleu_score(&whole) < 100);
}

int main(void) {
  TEST_RUN(punctuation_splits_next_to_non_digits);
  TEST_RUN(digits_keep_their_separators);
  TEST_RUN(symbols_split_everywhere);
  TEST_RUN(backslash_is_not_punctuation);
  TEST_RUN(lowercase_is_pythons);
  TEST_RUN(whitespace_is_pythons);
  TEST_RUN(perfect_match_is_100);
  TEST_RUN(brevity_penalty_by_hand);
  TEST_RUN(zero_matches_are_smoothed);
  TEST_RUN(matches_are_clipped);
  TEST_RUN(empty_hypotheses);
  TEST_RUN(broken_utf8_reads_as_replacement_chars);
  TEST_RUN(stats_add_up_over_slices);
  return test_finish();
}
