// squad_eval.c: SQuAD v1.1 EM/F1 and the n-best span search (squad_eval.h
// says what each computes). An answer goes UTF-8 -> code points -> Python's
// lower() -> ASCII punctuation out -> articles out -> whitespace-separated
// tokens, kept as one UTF-8 string with single spaces between tokens.
#include "language/squad_eval.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"

#define SQUAD_REPLACEMENT_CHAR 0xFFFD
#define SQUAD_CAPITAL_SIGMA 0x03A3
#define SQUAD_FINAL_SIGMA 0x03C2
// SpecialCasing.txt's only unconditional lowercase mapping longer than one
// code point, which Python's lower() applies and utf8proc_tolower (a simple
// mapping) does not: İ -> i + combining dot above.
#define SQUAD_CAPITAL_I_WITH_DOT 0x0130
#define SQUAD_COMBINING_DOT_ABOVE 0x0307

// Python's string.punctuation.
static const char kPunctuation[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

typedef struct SquadText {
  int32_t *cp;
  size_t n;
} SquadText;

// ---------------------------------------------------------------- characters

// Unicode's Cased: Lu, Ll, Lt and the Other_Lowercase/Other_Uppercase
// chars. Of those, the ones with a case mapping (Roman numerals, circled
// letters) are found by it, the modifier letters are case-ignorable anyway
// (which the Final_Sigma rule tries first), and the rest are listed.
static bool squad_is_cased(int32_t c) {
  static const int32_t kOtherCased[][2] = {
      {0xAA, 0xAA}, {0xBA, 0xBA}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}};
  utf8proc_category_t k = utf8proc_category(c);
  if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
      utf8proc_tolower(c) != c || utf8proc_toupper(c) != c)
    return true;
  for (size_t i = 0; i < sizeof kOtherCased / sizeof kOtherCased[0]; i++)
    if (c >= kOtherCased[i][0] && c <= kOtherCased[i][1]) return true;
  return false;
}

// Unicode's Case_Ignorable: Mn, Me, Cf, Lm, Sk and the chars of Word_Break
// MidLetter, MidNumLet and Single_Quote (apostrophes, full stops, colons).
static bool squad_is_case_ignorable(int32_t c) {
  static const int32_t kWordBreakMid[] = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,
                                          0x5F4,  0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
                                          0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
  utf8proc_category_t k = utf8proc_category(c);
  if (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
      k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK)
    return true;
  for (size_t i = 0; i < sizeof kWordBreakMid / sizeof kWordBreakMid[0]; i++)
    if (c == kWordBreakMid[i]) return true;
  return false;
}

// Python's str.isspace(), where str.split() splits.
static bool squad_is_space(int32_t c) {
  const utf8proc_property_t *p = utf8proc_get_property(c);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

// Python's regex \w on str: str.isalnum() (letters and numbers) or "_".
static bool squad_is_word_char(int32_t c) {
  const char *k = utf8proc_category_string(c);
  return c == '_' || k[0] == 'L' || k[0] == 'N';
}

static bool squad_is_punctuation(int32_t c) {
  return c > 0 && c < 128 && strchr(kPunctuation, (int)c) != NULL;
}

// ---------------------------------------------------------------- normalising

// Code points of NUL-terminated UTF-8, with room for 2 per byte (the
// lowercase may grow); a byte that starts no valid sequence reads as U+FFFD.
static SquadText squad_decode(const char *utf8) {
  size_t bytes = strlen(utf8);
  SquadText t = {xmalloc((2 * bytes + 1) * sizeof(int32_t)), 0};
  const uint8_t *s = (const uint8_t *)utf8;
  for (size_t at = 0; at < bytes;) {
    utf8proc_int32_t c;
    utf8proc_ssize_t used = utf8proc_iterate(s + at, (utf8proc_ssize_t)(bytes - at), &c);
    if (used <= 0) c = SQUAD_REPLACEMENT_CHAR, used = 1;
    t.cp[t.n++] = c;
    at += (size_t)used;
  }
  return t;
}

// Whether the Σ at i of t ends a word (Unicode's Final_Sigma condition).
static bool squad_sigma_is_final(const int32_t *cp, size_t n, size_t i) {
  size_t j = i;
  while (j > 0 && squad_is_case_ignorable(cp[j - 1])) j--;
  if (j == 0 || !squad_is_cased(cp[j - 1])) return false;
  for (j = i + 1; j < n && squad_is_case_ignorable(cp[j]); j++) {
  }
  return j == n || !squad_is_cased(cp[j]);
}

// Python's lower() and the punctuation step, from t into out (room for 2
// code points per one of t).
static void squad_lower_without_punctuation(const SquadText *t, SquadText *out) {
  for (size_t i = 0; i < t->n; i++) {
    int32_t c = t->cp[i];
    if (c == SQUAD_CAPITAL_I_WITH_DOT) {
      out->cp[out->n++] = 'i';
      out->cp[out->n++] = SQUAD_COMBINING_DOT_ABOVE;
      continue;
    }
    c = c == SQUAD_CAPITAL_SIGMA && squad_sigma_is_final(t->cp, t->n, i) ? SQUAD_FINAL_SIGMA
                                                                          : utf8proc_tolower(c);
    if (!squad_is_punctuation(c)) out->cp[out->n++] = c;
  }
}

static bool squad_is_article(const int32_t *w, size_t n) {
  static const char *const kArticles[] = {"a", "an", "the"};
  for (int k = 0; k < 3; k++) {
    size_t len = strlen(kArticles[k]), i = 0;
    while (i < len && i < n && w[i] == kArticles[k][i]) i++;
    if (i == len && n == len) return true;
  }
  return false;
}

// The articles step, in place: each whole-word article becomes one space.
static void squad_remove_articles(SquadText *t) {
  size_t o = 0;
  for (size_t i = 0; i < t->n;) {
    if (!squad_is_word_char(t->cp[i])) {
      t->cp[o++] = t->cp[i++];
      continue;
    }
    size_t start = i;
    while (i < t->n && squad_is_word_char(t->cp[i])) i++;
    if (squad_is_article(t->cp + start, i - start)) {
      t->cp[o++] = ' ';
    } else {
      memmove(t->cp + o, t->cp + start, (i - start) * sizeof(int32_t));
      o += i - start;
    }
  }
  t->n = o;
}

// The whitespace step: the tokens of t as UTF-8, one space between them.
static char *squad_join_tokens(const SquadText *t) {
  char *out = xmalloc(4 * t->n + 1), *w = out;
  for (size_t i = 0; i < t->n;) {
    while (i < t->n && squad_is_space(t->cp[i])) i++;
    if (i == t->n) break;
    if (w > out) *w++ = ' ';
    while (i < t->n && !squad_is_space(t->cp[i]))
      w += utf8proc_encode_char(t->cp[i++], (utf8proc_uint8_t *)w);
  }
  *w = '\0';
  return out;
}

char *squad_normalize(const char *text) {
  SquadText t = squad_decode(text);
  SquadText n = {xmalloc((2 * t.n + 1) * sizeof(int32_t)), 0};
  squad_lower_without_punctuation(&t, &n);
  squad_remove_articles(&n);
  char *out = squad_join_tokens(&n);
  free(t.cp);
  free(n.cp);
  return out;
}

// ---------------------------------------------------------------- EM and F1

double squad_exact_one(const char *prediction, const char *gold) {
  char *p = squad_normalize(prediction), *g = squad_normalize(gold);
  double em = strcmp(p, g) == 0;
  free(p);
  free(g);
  return em;
}

static int squad_str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// The tokens of a normalised answer (cut in place at its spaces), sorted;
// returns how many.
static size_t squad_sorted_tokens(char *normalized, char ***tokens) {
  size_t n = 0, cap = 1;
  for (char *s = normalized; *s; s++) cap += *s == ' ';
  *tokens = xmalloc(cap * sizeof(char *));
  for (char *s = normalized; *s;) {
    (*tokens)[n++] = s;
    char *space = strchr(s, ' ');
    if (!space) break;
    *space = '\0';
    s = space + 1;
  }
  qsort(*tokens, n, sizeof(char *), squad_str_cmp);
  return n;
}

double squad_f1_one(const char *prediction, const char *gold) {
  char *p = squad_normalize(prediction), *g = squad_normalize(gold);
  char **pt, **gt;
  size_t np = squad_sorted_tokens(p, &pt), ng = squad_sorted_tokens(g, &gt);
  size_t common = 0;
  for (size_t i = 0, j = 0; i < np && j < ng;) {
    int cmp = strcmp(pt[i], gt[j]);
    if (cmp == 0) common++;
    i += cmp <= 0;
    j += cmp >= 0;
  }
  double f1 = 0.0;
  if (common > 0) {
    double precision = (double)common / (double)np, recall = (double)common / (double)ng;
    f1 = 2.0 * precision * recall / (precision + recall);
  }
  free(pt);
  free(gt);
  free(p);
  free(g);
  return f1;
}

void squad_stats_add(SquadStats *st, const char *prediction, const char *const *golds,
                     int n_golds) {
  if (n_golds < 1) DIE("squad_stats_add: a question without a gold answer");
  double em = 0.0, f1 = 0.0;
  for (int k = 0; k < n_golds; k++) {
    double e = squad_exact_one(prediction, golds[k]), f = squad_f1_one(prediction, golds[k]);
    if (e > em) em = e;
    if (f > f1) f1 = f;
  }
  st->exact += em;
  st->f1 += f1;
  st->questions += 1.0;
}

void squad_stats_add_unanswered(SquadStats *st) { st->questions += 1.0; }

double squad_exact_match(const SquadStats *st) {
  return st->questions > 0 ? 100.0 * st->exact / st->questions : 0.0;
}

double squad_f1(const SquadStats *st) {
  return st->questions > 0 ? 100.0 * st->f1 / st->questions : 0.0;
}

// ---------------------------------------------------------------- span search

// The positions of the k largest of x[0..n) (k <= n), largest first, the
// lower position first among equals: an insertion into a short sorted list.
static int squad_top_k(const float *x, int n, int k, int *out) {
  int have = 0;
  for (int i = 0; i < n; i++) {
    if (have == k && !(x[i] > x[out[k - 1]])) continue;
    int at = have < k ? have++ : k - 1;
    while (at > 0 && x[i] > x[out[at - 1]]) {
      out[at] = out[at - 1];
      at--;
    }
    out[at] = i;
  }
  return have;
}

static bool squad_in_context(const SquadWindow *w, int t) {
  return w->span_begin[t] >= 0 && w->span_end[t] >= 0;
}

// The best candidate of window wi better than *best, into *best.
static void squad_window_best(const SquadWindow *w, int wi, int n_best, int max_answer_tokens,
                              int *starts, int *ends, SquadAnswer *best) {
  int k = n_best < w->n_tokens ? n_best : w->n_tokens;
  int ns = squad_top_k(w->start_logits, w->n_tokens, k, starts);
  int ne = squad_top_k(w->end_logits, w->n_tokens, k, ends);
  for (int a = 0; a < ns; a++) {
    int s = starts[a];
    if (!squad_in_context(w, s) || !w->max_context[s]) continue;
    for (int b = 0; b < ne; b++) {
      int e = ends[b];
      if (!squad_in_context(w, e) || e < s || e - s + 1 > max_answer_tokens) continue;
      double score = (double)w->start_logits[s] + (double)w->end_logits[e];
      if (best->found && !(score > best->score)) continue;
      *best = (SquadAnswer){true, wi, s, e, score, w->span_begin[s], w->span_end[e]};
    }
  }
}

SquadAnswer squad_best_span(const SquadWindow *windows, int n_windows, int n_best,
                            int max_answer_tokens) {
  if (n_best < 1 || max_answer_tokens < 1)
    DIE("squad_best_span: n_best %d and max_answer_tokens %d must be >= 1", n_best,
        max_answer_tokens);
  SquadAnswer best = {.found = false, .window = -1, .start_token = -1, .end_token = -1};
  int *starts = xmalloc((size_t)n_best * sizeof(int)), *ends = xmalloc((size_t)n_best * sizeof(int));
  for (int wi = 0; wi < n_windows; wi++)
    if (windows[wi].n_tokens > 0)
      squad_window_best(&windows[wi], wi, n_best, max_answer_tokens, starts, ends, &best);
  free(starts);
  free(ends);
  return best;
}

char *squad_answer_text(const char *context, const SquadAnswer *a) {
  size_t n = a->found && a->byte_end > a->byte_begin ? (size_t)(a->byte_end - a->byte_begin) : 0;
  char *out = xmalloc(n + 1);
  if (n) memcpy(out, context + a->byte_begin, n);
  out[n] = '\0';
  return out;
}
