// bleu.c: uncased corpus BLEU as the MLPerf Transformer reference computes
// it (bleu.h says what and where it differs). A sentence goes UTF-8 ->
// code points -> Python's lower() -> the reference's three regex passes ->
// tokens; tokens are interned to ids so that n-grams of up to 4 tokens are
// fixed-size keys that sort and compare as integers.
#include "translation/bleu.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"

#define BLEU_REPLACEMENT_CHAR 0xFFFD
#define BLEU_CAPITAL_SIGMA 0x03A3
#define BLEU_FINAL_SIGMA 0x03C2
// SpecialCasing.txt's one unconditional lowercase mapping longer than one
// code point (the one Python's lower() applies and utf8proc_tolower, a
// simple mapping, does not): İ -> i + combining dot above.
#define BLEU_CAPITAL_I_WITH_DOT 0x0130
#define BLEU_COMBINING_DOT_ABOVE 0x0307

// A run of code points; tokens are spans of one.
typedef struct BleuText {
  int32_t *cp;
  size_t n;
} BleuText;

typedef struct BleuSpan {
  size_t start, len;
} BleuSpan;

// An n-gram as token ids, unused places 0 (ids start at 1), so that one sort
// keeps the orders apart.
typedef struct BleuNgram {
  int32_t id[BLEU_MAX_ORDER];
} BleuNgram;

// ---------------------------------------------------------------- characters

static bool bleu_is_punct(int32_t c) {
  // The reference's class lacks the backslash (bleu.h).
  return c != '\\' && utf8proc_category_string(c)[0] == 'P';
}

static bool bleu_is_symbol(int32_t c) { return utf8proc_category_string(c)[0] == 'S'; }

static bool bleu_is_decimal(int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_ND; }

// Python's str.isspace(), which str.split() splits at.
static bool bleu_is_space(int32_t c) {
  const utf8proc_property_t *p = utf8proc_get_property(c);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

static bool bleu_is_cased(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static bool bleu_is_case_ignorable(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK;
}

// ---------------------------------------------------------------- text passes

// Code points of NUL-terminated UTF-8; a byte that starts no valid sequence
// reads as U+FFFD, so that a broken hypothesis scores instead of crashing.
static BleuText bleu_decode(const char *utf8) {
  size_t bytes = strlen(utf8);
  BleuText t = {xmalloc((bytes + 1) * sizeof(int32_t)), 0};
  const uint8_t *s = (const uint8_t *)utf8;
  for (size_t at = 0; at < bytes;) {
    utf8proc_int32_t c;
    utf8proc_ssize_t used = utf8proc_iterate(s + at, (utf8proc_ssize_t)(bytes - at), &c);
    if (used <= 0) c = BLEU_REPLACEMENT_CHAR, used = 1;
    t.cp[t.n++] = c;
    at += (size_t)used;
  }
  return t;
}

// Whether the Σ at i ends a word by Unicode's Final_Sigma condition.
static bool bleu_sigma_is_final(const BleuText *t, size_t i) {
  size_t j = i;
  while (j > 0 && bleu_is_case_ignorable(t->cp[j - 1])) j--;
  if (j == 0 || !bleu_is_cased(t->cp[j - 1])) return false;
  for (j = i + 1; j < t->n && bleu_is_case_ignorable(t->cp[j]); j++) {
  }
  return j == t->n || !bleu_is_cased(t->cp[j]);
}

// Python's str.lower(): the full mapping (İ grows to two code points) and
// the final sigma, which the reference applies to both sides before
// tokenising.
static BleuText bleu_lowercase(const BleuText *t) {
  BleuText out = {xmalloc((2 * t->n + 1) * sizeof(int32_t)), 0};
  for (size_t i = 0; i < t->n; i++) {
    int32_t c = t->cp[i];
    if (c == BLEU_CAPITAL_I_WITH_DOT) {
      out.cp[out.n++] = 'i';
      out.cp[out.n++] = BLEU_COMBINING_DOT_ABOVE;
    } else if (c == BLEU_CAPITAL_SIGMA && bleu_sigma_is_final(t, i)) {
      out.cp[out.n++] = BLEU_FINAL_SIGMA;
    } else {
      out.cp[out.n++] = utf8proc_tolower(c);
    }
  }
  return out;
}

static void bleu_put(BleuText *out, int32_t a, int32_t b, int32_t c) {
  out->cp[out->n++] = a;
  out->cp[out->n++] = b;
  out->cp[out->n++] = c;
}

// The reference's three substitutions, each a left-to-right scan in which
// a match consumes what it matched (so "a.," splits only the "."). At most
// 3 code points come out per one in.
static BleuText bleu_split_pass(const BleuText *t, int pass) {
  BleuText out = {xmalloc((3 * t->n + 1) * sizeof(int32_t)), 0};
  for (size_t i = 0; i < t->n; i++) {
    int32_t c = t->cp[i], next = i + 1 < t->n ? t->cp[i + 1] : -1;
    if (pass == 0 && next >= 0 && !bleu_is_decimal(c) && bleu_is_punct(next)) {
      out.cp[out.n++] = c;
      bleu_put(&out, ' ', next, ' ');
      i++;
    } else if (pass == 1 && next >= 0 && bleu_is_punct(c) && !bleu_is_decimal(next)) {
      bleu_put(&out, ' ', c, ' ');
      out.cp[out.n++] = next;
      i++;
    } else if (pass == 2 && bleu_is_symbol(c)) {
      bleu_put(&out, ' ', c, ' ');
    } else {
      out.cp[out.n++] = c;
    }
  }
  return out;
}

// The lowercased, split code points of text and its tokens (spans, count
// returned in *n_tokens).
static BleuText bleu_tokens(const char *text, BleuSpan **spans, size_t *n_tokens) {
  BleuText t = bleu_decode(text);
  BleuText lower = bleu_lowercase(&t);
  free(t.cp);
  for (int pass = 0; pass < 3; pass++) {
    BleuText next = bleu_split_pass(&lower, pass);
    free(lower.cp);
    lower = next;
  }
  *spans = xmalloc((lower.n / 2 + 1) * sizeof(BleuSpan));
  *n_tokens = 0;
  for (size_t i = 0; i < lower.n;) {
    while (i < lower.n && bleu_is_space(lower.cp[i])) i++;
    size_t start = i;
    while (i < lower.n && !bleu_is_space(lower.cp[i])) i++;
    if (i > start) (*spans)[(*n_tokens)++] = (BleuSpan){start, i - start};
  }
  return lower;
}

char *bleu_tokenize(const char *text) {
  BleuSpan *spans;
  size_t n_tokens;
  BleuText t = bleu_tokens(text, &spans, &n_tokens);
  char *out = xmalloc(4 * t.n + 1), *w = out;
  for (size_t k = 0; k < n_tokens; k++) {
    if (k > 0) *w++ = ' ';
    for (size_t i = spans[k].start; i < spans[k].start + spans[k].len; i++)
      w += utf8proc_encode_char(t.cp[i], (utf8proc_uint8_t *)w);
  }
  *w = '\0';
  free(spans);
  free(t.cp);
  return out;
}

// ---------------------------------------------------------------- n-grams

// One token of either side while interning.
typedef struct BleuTokenRef {
  const int32_t *cp;
  size_t len;
  int32_t *id;  // where its id goes
} BleuTokenRef;

// Any total order on token text will do: it only has to put equal tokens
// next to each other.
static int bleu_token_cmp(const void *a, const void *b) {
  const BleuTokenRef *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return memcmp(x->cp, y->cp, x->len * sizeof(int32_t));
}

// Gives equal tokens of the two sides equal ids (from 1), written to ids[0]
// (hypothesis) and ids[1] (reference).
static void bleu_intern(const BleuText t[2], BleuSpan *const spans[2], const size_t n[2],
                        int32_t *ids[2]) {
  BleuTokenRef *refs = xmalloc((n[0] + n[1] + 1) * sizeof(BleuTokenRef));
  size_t count = 0;
  for (int side = 0; side < 2; side++)
    for (size_t k = 0; k < n[side]; k++)
      refs[count++] = (BleuTokenRef){t[side].cp + spans[side][k].start, spans[side][k].len,
                                     &ids[side][k]};
  qsort(refs, count, sizeof *refs, bleu_token_cmp);
  int32_t id = 0;
  for (size_t k = 0; k < count; k++) {
    if (k == 0 || bleu_token_cmp(&refs[k - 1], &refs[k]) != 0) id++;
    *refs[k].id = id;
  }
  free(refs);
}

static int bleu_ngram_cmp(const void *a, const void *b) {
  const BleuNgram *x = a, *y = b;
  for (int k = 0; k < BLEU_MAX_ORDER; k++)
    if (x->id[k] != y->id[k]) return x->id[k] < y->id[k] ? -1 : 1;
  return 0;
}

// Every n-gram of ids, n = 1..4, sorted; returns how many.
static size_t bleu_ngrams(const int32_t *ids, size_t n_tokens, BleuNgram **out) {
  BleuNgram *g = xmalloc((BLEU_MAX_ORDER * n_tokens + 1) * sizeof(BleuNgram));
  size_t count = 0;
  for (size_t order = 1; order <= BLEU_MAX_ORDER; order++)
    for (size_t i = 0; i + order <= n_tokens; i++) {
      BleuNgram ng = {{0}};
      memcpy(ng.id, ids + i, order * sizeof(int32_t));
      g[count++] = ng;
    }
  qsort(g, count, sizeof *g, bleu_ngram_cmp);
  *out = g;
  return count;
}

static int bleu_ngram_order(const BleuNgram *g) {
  int order = 0;
  while (order < BLEU_MAX_ORDER && g->id[order] != 0) order++;
  return order;
}

// How many of g[*at..] equal g[*at]; moves *at past them.
static size_t bleu_run(const BleuNgram *g, size_t n, size_t *at) {
  size_t start = (*at)++;
  while (*at < n && bleu_ngram_cmp(&g[start], &g[*at]) == 0) (*at)++;
  return *at - start;
}

// Adds to st->matches each hypothesis n-gram's count clipped by the
// reference's: a merge of the two sorted lists.
static void bleu_add_matches(BleuStats *st, const BleuNgram *h, size_t nh, const BleuNgram *r,
                             size_t nr) {
  size_t i = 0, j = 0;
  while (i < nh && j < nr) {
    int cmp = bleu_ngram_cmp(&h[i], &r[j]);
    if (cmp < 0) {
      i++;
    } else if (cmp > 0) {
      j++;
    } else {
      int order = bleu_ngram_order(&h[i]);
      size_t ch = bleu_run(h, nh, &i), cr = bleu_run(r, nr, &j);
      st->matches[order - 1] += (double)(ch < cr ? ch : cr);
    }
  }
}

// ---------------------------------------------------------------- corpus

void bleu_add(BleuStats *st, const char *hyp, const char *ref) {
  BleuText t[2];
  BleuSpan *spans[2];
  size_t n[2];
  int32_t *ids[2];
  BleuNgram *grams[2];
  size_t n_grams[2];
  const char *text[2] = {hyp, ref};
  for (int side = 0; side < 2; side++) {
    t[side] = bleu_tokens(text[side], &spans[side], &n[side]);
    ids[side] = xmalloc((n[side] + 1) * sizeof(int32_t));
  }
  bleu_intern(t, spans, n, ids);
  for (int side = 0; side < 2; side++) n_grams[side] = bleu_ngrams(ids[side], n[side], &grams[side]);
  bleu_add_matches(st, grams[0], n_grams[0], grams[1], n_grams[1]);
  for (size_t order = 1; order <= BLEU_MAX_ORDER; order++)
    if (n[0] >= order) st->possible[order - 1] += (double)(n[0] - order + 1);
  st->hyp_len += (double)n[0];
  st->ref_len += (double)n[1];
  for (int side = 0; side < 2; side++) {
    free(t[side].cp);
    free(spans[side]);
    free(ids[side]);
    free(grams[side]);
  }
}

double bleu_score(const BleuStats *st) {
  double smooth = 1.0, log_sum = 0.0;
  bool any = false;
  for (int i = 0; i < BLEU_MAX_ORDER; i++) {
    if (st->possible[i] <= 0) continue;  // precision 0: left out of the sum
    double p = st->matches[i] / st->possible[i];
    if (st->matches[i] <= 0) {
      smooth *= 2;
      p = 1.0 / (smooth * st->possible[i]);
    }
    log_sum += log(p);
    any = true;
  }
  if (!any) return 0.0;  // no hypothesis token (the reference divides by 0)
  double geo_mean = exp(log_sum / BLEU_MAX_ORDER);
  double bp = 1.0;
  if (st->hyp_len < st->ref_len) bp = exp(1.0 - 1.0 / (st->hyp_len / st->ref_len));
  return 100.0 * geo_mean * bp;
}
