// squad_eval.h: the BERT fine-tune's quality metric and its answer search.
//
// 1. EM and F1 as the official SQuAD v1.1 evaluation defines them. An answer
//    is normalised in four steps, in this order:
//      lowercase   Python's str.lower(): Unicode's full lowercase mapping
//                  (utf8proc's simple mapping plus the one unconditional
//                  special case, İ -> i + U+0307) and Σ -> ς where it ends
//                  a word (Final_Sigma, with Unicode's Cased and
//                  Case_Ignorable: letters, case-mapped symbols, ª º;
//                  marks, modifiers, apostrophes, full stops, colons);
//      punctuation every char of Python's string.punctuation is removed:
//                  the 32 ASCII chars !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ and
//                  nothing else ("«", "“", "—" stay);
//      articles    a word "a", "an" or "the" becomes a space, a word being a
//                  maximal run of what Python's regex calls \w: letters
//                  (L*), numbers (N*) and "_" ("thé" and "the_" are not
//                  articles, "«the»" holds one);
//      whitespace  split at Python's whitespace (str.split(): category Zs,
//                  bidi class WS, B or S) and joined with single spaces.
//    EM is 1 when the normalised prediction equals a normalised gold answer.
//    F1 takes the space-separated tokens of both: common = the size of the
//    multiset intersection; 0 when common is 0 (two empty answers included,
//    which still have EM 1), else 2PR / (P + R) with P = common / predicted
//    tokens and R = common / gold tokens. A question scores the max of each
//    over its gold answers; the totals are 100 x the mean over questions.
//    Bytes that are not valid UTF-8 read as U+FFFD (the official script
//    refuses such a file); Unicode properties are utf8proc's (its Unicode
//    version), the official script's those of the Python that runs it.
//    Checked: every code point Python 3.11 (Unicode 14) assigns normalises
//    as Python does, in contexts that exercise each step
//    (tests/language/test_squad_eval_reference.py).
// 2. The span search of the well-known SQuAD fine-tuning recipes: a
//    question's context is cut into windows (features) of tokens; for each
//    window take the n_best (20) positions of largest start logit and of
//    largest end logit, over all of the window's tokens, question and
//    padding included; a pair (s, e) of them is a candidate when both tokens
//    lie in the context, e >= s, e - s + 1 <= max_answer_tokens (30) and the
//    window is the max-context window of token s; its score is
//    start_logit[s] + end_logit[e]. The answer is the best candidate over all
//    windows; its text is the context from the first byte of token s to the
//    end of token e. Ties go to the earlier window, then the start ranked
//    first, then the end ranked first (of equal logits the lower position
//    ranks first).
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SQUAD_N_BEST 20
#define SQUAD_MAX_ANSWER_TOKENS 30

// Sums over questions, in double so that ranks add them with one f64
// all-reduce (dist_sum_f64); the stats of two halves add up to the whole's.
typedef struct SquadStats {
  double exact;      // sum of per-question EM, each 0 or 1
  double f1;         // sum of per-question F1, each in [0, 1]
  double questions;  // how many questions were added
} SquadStats;

// The normalised form of text (UTF-8, NUL-terminated); malloc'd, the
// caller frees it.
char *squad_normalize(const char *text);
// EM (0 or 1) and F1 (0..1) of one prediction against one gold answer.
double squad_exact_one(const char *prediction, const char *gold);
double squad_f1_one(const char *prediction, const char *gold);
// Adds one question: its prediction and its n_golds >= 1 gold answers (the
// official script fails on a question without one; here it is an error).
void squad_stats_add(SquadStats *st, const char *prediction, const char *const *golds,
                     int n_golds);
// A question that got no prediction: it counts, with EM and F1 0.
void squad_stats_add_unanswered(SquadStats *st);
// 100 x the mean over questions (0 when there is none).
double squad_exact_match(const SquadStats *st);
double squad_f1(const SquadStats *st);

// One window of a question's context, as the model saw it. Arrays of
// n_tokens, position t the window's t-th token ([CLS], question, [SEP],
// context, [SEP], padding).
typedef struct SquadWindow {
  const float *start_logits;  // (n_tokens,)
  const float *end_logits;    // (n_tokens,)
  // Token t covers bytes [span_begin[t], span_end[t]) of the original
  // context; both -1 for a token outside the context (question, special,
  // padding).
  const int64_t *span_begin;  // (n_tokens,)
  const int64_t *span_end;    // (n_tokens,)
  // Whether this window is the one where token t has the most context
  // (the most tokens on its shorter side) of all windows that hold it.
  const bool *max_context;    // (n_tokens,)
  int n_tokens;
} SquadWindow;

typedef struct SquadAnswer {
  bool found;            // false: no window had a candidate; the text is ""
  int window;            // which window, its start and end token
  int start_token, end_token;
  double score;          // start_logit + end_logit
  int64_t byte_begin;    // the answer is context bytes [byte_begin, byte_end)
  int64_t byte_end;
} SquadAnswer;

// The best span over the n_windows windows of one question (see above);
// n_best and max_answer_tokens >= 1 (SQUAD_N_BEST, SQUAD_MAX_ANSWER_TOKENS).
SquadAnswer squad_best_span(const SquadWindow *windows, int n_windows, int n_best,
                            int max_answer_tokens);
// The answer's text in context (NUL-terminated, malloc'd; "" when none was
// found).
char *squad_answer_text(const char *context, const SquadAnswer *a);

#ifdef __cplusplus
}
#endif
