// The SQuAD v1.1 metric and span search (language/squad_eval.c) on
// hand-computed cases: each normalisation step and its order, Python's
// lowercase and whitespace, F1's multiset overlap, the max over gold
// answers, statistics that add up over slices (the multi-rank reduction),
// the span search's rules (max context, answer length, the n-best cut,
// the best over windows, ties) and bad input.
// tests/language/test_squad_eval_reference.py checks squad_score against
// an independent Python implementation of the official evaluation.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "language/squad_eval.h"
#include "tests/harness/test.h"

static void check_normal(const char *text, const char *want) {
  char *got = squad_normalize(text);
  CHECK_MSG(strcmp(got, want) == 0, "normalize(\"%s\") = \"%s\", want \"%s\"", text, got, want);
  free(got);
}

static void normalize_lowercases_and_drops_ascii_punctuation(void) {
  check_normal("The Cat!", "cat");
  check_normal("A.B.C., (d) [e] {f} <g> 'h' \"i\" `j` ~k@l#m$n%o^p&q*r+s=t|u\\v/w:x;y?z",
               "abc d e f g h i j klmnopqrstuvwxyz");
  check_normal("state-of-the-art", "stateoftheart");  // joined first, so no article
  check_normal("3 a.m.", "3 am");
  // Only ASCII punctuation: guillemets, curly quotes and dashes stay.
  check_normal("“Quoted” — «Text»", "“quoted” — «text»");
}

static void normalize_removes_whole_word_articles(void) {
  check_normal("a an the", "");
  check_normal("An apple, the pear and a plum", "apple pear and plum");
  check_normal("Theatre then thesis atheist ant", "theatre then thesis atheist ant");
  check_normal("A1 the2 an_", "a1 the2");  // "_" is punctuation, removed first
  check_normal("the_end", "theend");
  // A word is a run of letters, numbers and "_": "«the»" holds one, "thé"
  // is none, and a combining accent (Mn) is no word char.
  check_normal("«The» cat", "« » cat");
  check_normal("thé", "thé");
  check_normal("the\xcc\x81", "\xcc\x81");
  check_normal("THE end", "end");  // lowercased first
}

static void normalize_is_pythons_lower_and_split(void) {
  check_normal("ÄPFEL Straße ÉCOLE", "äpfel straße école");
  check_normal("İstanbul", "i\xcc\x87stanbul");  // full mapping: i + U+0307
  check_normal("ΟΔΟΣ Σ ΣΑ", "οδος σ σα");          // final sigma only after a letter
  // Unicode's Cased and Case_Ignorable, which the final sigma looks at,
  // hold more than letters: an apostrophe is skipped, a Roman numeral and
  // ª are cased.
  check_normal("A'Σ", "aς");
  check_normal("xΣⅠ ªΣ", "xσⅰ ªς");
  // Tab, newline, no-break space, ideographic space and U+001F split; a
  // zero-width space (Cf) does not.
  check_normal(" x\ty\nz\xc2\xa0u\xe3\x80\x80v\x1fw ", "x y z u v w");
  check_normal("p\xe2\x80\x8bq", "p\xe2\x80\x8bq");
  check_normal("", "");
  check_normal(" \t ", "");
  // Bytes that are not UTF-8 read as U+FFFD.
  check_normal("ab\xff", "ab\xef\xbf\xbd");
}

static void em_and_f1_by_hand(void) {
  CHECK_NEAR(squad_exact_one("The cat.", "cat"), 1, 0);
  CHECK_NEAR(squad_exact_one("cat", "cats"), 0, 0);
  // cat, sat against cat, sat, on, mat: P 1, R 1/2.
  CHECK_NEAR(squad_f1_one("the cat sat", "cat sat on the mat"), 2.0 / 3, 1e-15);
  // Multisets: y three times against twice, common = 2; P 2/4, R 2/3.
  CHECK_NEAR(squad_f1_one("x y y y", "y y z"), 4.0 / 7, 1e-15);
  CHECK_NEAR(squad_f1_one("a dog", "the cat"), 0, 0);
  CHECK_NEAR(squad_f1_one("Straße", "STRASSE"), 0, 0);  // lower(), not casefold
  CHECK_NEAR(squad_f1_one("ÄPFEL und Birnen", "äpfel"), 0.5, 1e-15);  // P 1/3, R 1
}

static void empty_answers(void) {
  // Empty after normalising on both sides: EM 1, but F1 0 (no common token).
  CHECK_NEAR(squad_exact_one("", ""), 1, 0);
  CHECK_NEAR(squad_f1_one("", ""), 0, 0);
  CHECK_NEAR(squad_exact_one("The.", "a"), 1, 0);
  CHECK_NEAR(squad_f1_one("The.", "a"), 0, 0);
  CHECK_NEAR(squad_exact_one("", "cat"), 0, 0);
  CHECK_NEAR(squad_f1_one("", "cat"), 0, 0);
}

static void max_over_gold_answers(void) {
  SquadStats st = {0};
  const char *golds[] = {"the big dog", "a cat", "big red dog"};
  squad_stats_add(&st, "Cat", golds, 3);  // EM 1 by the second gold
  CHECK_NEAR(st.exact, 1, 0);
  CHECK_NEAR(st.f1, 1, 0);
  SquadStats st2 = {0};
  squad_stats_add(&st2, "red dog", golds, 3);
  // gold 1: common dog: P 1/2 R 1/2 -> 1/2; gold 3: red, dog: P 1 R 2/3 -> 4/5.
  CHECK_NEAR(st2.exact, 0, 0);
  CHECK_NEAR(st2.f1, 0.8, 1e-15);
  CHECK_NEAR(st2.questions, 1, 0);
}

static void totals_are_percentages_that_add_up(void) {
  static const char *const preds[] = {"cat", "", "the red dog", "x y y y", "Ω"};
  static const char *const golds[] = {"cat", "dog", "a dog", "y y z", "ω"};
  SquadStats whole = {0}, half[2];
  memset(half, 0, sizeof half);
  for (int i = 0; i < 5; i++) {
    squad_stats_add(&whole, preds[i], &golds[i], 1);
    squad_stats_add(&half[i < 2], preds[i], &golds[i], 1);
  }
  squad_stats_add_unanswered(&whole);
  squad_stats_add_unanswered(&half[0]);
  SquadStats sum = {half[0].exact + half[1].exact, half[0].f1 + half[1].f1,
                    half[0].questions + half[1].questions};
  CHECK(memcmp(&sum, &whole, sizeof sum) == 0);
  // EM: cat, ω -> 2 of 6; F1: 1 + 0 + (red, dog vs dog: 2/3) + 4/7 + 1.
  CHECK_NEAR(squad_exact_match(&whole), 100.0 * 2 / 6, 1e-12);
  CHECK_NEAR(squad_f1(&whole), 100.0 * (2 + 2.0 / 3 + 4.0 / 7) / 6, 1e-12);
  SquadStats none = {0};
  CHECK_NEAR(squad_f1(&none), 0, 0);
}

// ---------------------------------------------------------------- span search

// A window of n tokens over a context: tokens [first, n) are context tokens
// k = t - first covering bytes [4k, 4k + 3) (words of 3 letters and a
// space); the others (question, specials) map to -1. Max context everywhere.
typedef struct TestWindow {
  float start[64], end[64];
  int64_t begin[64], stop[64];
  bool max_context[64];
  SquadWindow w;
} TestWindow;

static void window_init(TestWindow *tw, int n, int first, int64_t byte_offset) {
  for (int t = 0; t < n; t++) {
    tw->start[t] = tw->end[t] = 0;
    bool ctx = t >= first;
    tw->begin[t] = ctx ? byte_offset + 4 * (t - first) : -1;
    tw->stop[t] = ctx ? byte_offset + 4 * (t - first) + 3 : -1;
    tw->max_context[t] = true;
  }
  tw->w = (SquadWindow){tw->start, tw->end, tw->begin, tw->stop, tw->max_context, n};
}

static void span_search_best_pair(void) {
  TestWindow tw;
  window_init(&tw, 12, 3, 0);
  tw.start[0] = tw.end[0] = 50;  // [CLS]: outside the context, never an answer
  tw.start[5] = 3, tw.start[6] = 2;
  tw.end[7] = 4, tw.end[4] = 5;  // end 4 is before start 5: not a pair with it
  SquadAnswer a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  REQUIRE(a.found);
  CHECK_EQ_INT(a.window, 0);
  CHECK_EQ_INT(a.start_token, 5);
  CHECK_EQ_INT(a.end_token, 7);
  CHECK_NEAR(a.score, 7, 0);
  const char *context = "one two six ten red sun";  // context tokens 0..5
  char *text = squad_answer_text(context, &a);
  CHECK_STR(text, "six ten red");  // tokens 2..4: bytes 8..19
  free(text);
}

static void span_search_needs_max_context_start(void) {
  TestWindow tw;
  window_init(&tw, 10, 2, 0);
  tw.start[4] = 9, tw.end[5] = 9;
  tw.start[3] = 1;
  tw.max_context[4] = false;  // token 4 has more context in another window
  SquadAnswer a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  REQUIRE(a.found);
  CHECK_EQ_INT(a.start_token, 3);
  CHECK_EQ_INT(a.end_token, 5);
  // The rule is on the start only: an end without max context is fine.
  tw.max_context[4] = true;
  tw.max_context[5] = false;
  a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  CHECK_EQ_INT(a.start_token, 4);
  CHECK_EQ_INT(a.end_token, 5);
}

static void span_search_limits_answer_length(void) {
  TestWindow tw;
  window_init(&tw, 40, 1, 0);
  tw.start[2] = 10, tw.end[32] = 10;  // 31 tokens: too long
  tw.end[31] = 8;                     // 30 tokens: the longest allowed
  tw.end[20] = 7;
  SquadAnswer a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  CHECK_EQ_INT(a.end_token, 31);
  a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, 29);
  CHECK_EQ_INT(a.end_token, 20);
  a = squad_best_span(&tw.w, 1, SQUAD_N_BEST, 31);
  CHECK_EQ_INT(a.end_token, 32);
}

static void span_search_cuts_at_n_best(void) {
  // The 20 largest start logits are question tokens: with n_best 20 no
  // context token is among the starts, so there is no answer at all.
  TestWindow tw;
  window_init(&tw, 30, 20, 0);
  for (int t = 0; t < 20; t++) tw.start[t] = 100 - t;
  tw.start[22] = 50, tw.end[24] = 50;
  SquadAnswer a = squad_best_span(&tw.w, 1, 20, SQUAD_MAX_ANSWER_TOKENS);
  CHECK(!a.found);
  char *text = squad_answer_text("whatever", &a);
  CHECK_STR(text, "");
  free(text);
  a = squad_best_span(&tw.w, 1, 21, SQUAD_MAX_ANSWER_TOKENS);
  REQUIRE(a.found);
  CHECK_EQ_INT(a.start_token, 22);
  CHECK_EQ_INT(a.end_token, 24);
  // Likewise for ends: the only valid end ranks 4th ([CLS] and two ends
  // before the start rank above it); the other starts in the top 3 are
  // [CLS] and the last token.
  window_init(&tw, 8, 1, 0);
  tw.start[4] = 5, tw.start[0] = 4, tw.start[7] = 3;
  tw.end[0] = 9, tw.end[2] = 8, tw.end[3] = 7, tw.end[6] = 6;
  a = squad_best_span(&tw.w, 1, 3, SQUAD_MAX_ANSWER_TOKENS);
  CHECK(!a.found);
  a = squad_best_span(&tw.w, 1, 4, SQUAD_MAX_ANSWER_TOKENS);
  CHECK(a.found);
  CHECK_EQ_INT(a.end_token, 6);
}

static void span_search_best_over_windows(void) {
  // Two windows over one context, the second from byte 40 (context token
  // 10) on; its best pair scores higher.
  TestWindow w[2];
  window_init(&w[0], 16, 4, 0);
  window_init(&w[1], 16, 4, 40);
  w[0].start[6] = 3, w[0].end[7] = 3;
  w[1].start[5] = 4, w[1].end[8] = 2.5f;
  SquadWindow ws[2] = {w[0].w, w[1].w};
  SquadAnswer a = squad_best_span(ws, 2, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  REQUIRE(a.found);
  CHECK_EQ_INT(a.window, 1);
  CHECK_EQ_INT(a.start_token, 5);
  CHECK_EQ_INT(a.end_token, 8);
  CHECK_EQ_INT(a.byte_begin, 44);  // context token 11
  CHECK_EQ_INT(a.byte_end, 40 + 4 * 4 + 3);
  // A tie goes to the earlier window.
  w[1].end[8] = 2;
  ws[1] = w[1].w;
  a = squad_best_span(ws, 2, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  CHECK_EQ_INT(a.window, 0);
  // No window, or windows without tokens: nothing found.
  a = squad_best_span(ws, 0, SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS);
  CHECK(!a.found);
}

// ---------------------------------------------------------------- bad input

static void add_without_golds(void *ctx) {
  (void)ctx;
  SquadStats st = {0};
  squad_stats_add(&st, "x", NULL, 0);
}

static void search_with_zero_n_best(void *ctx) {
  (void)ctx;
  squad_best_span(NULL, 0, 0, SQUAD_MAX_ANSWER_TOKENS);
}

static void bad_calls_are_errors(void) {
  CHECK_DIES_WITH(add_without_golds, NULL, "a question without a gold answer");
  CHECK_DIES_WITH(search_with_zero_n_best, NULL, "must be >= 1");
}

int main(void) {
  TEST_RUN(normalize_lowercases_and_drops_ascii_punctuation);
  TEST_RUN(normalize_removes_whole_word_articles);
  TEST_RUN(normalize_is_pythons_lower_and_split);
  TEST_RUN(em_and_f1_by_hand);
  TEST_RUN(empty_answers);
  TEST_RUN(max_over_gold_answers);
  TEST_RUN(totals_are_percentages_that_add_up);
  TEST_RUN(span_search_best_pair);
  TEST_RUN(span_search_needs_max_context_start);
  TEST_RUN(span_search_limits_answer_length);
  TEST_RUN(span_search_cuts_at_n_best);
  TEST_RUN(span_search_best_over_windows);
  TEST_RUN(bad_calls_are_errors);
  return test_finish();
}
