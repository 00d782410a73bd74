// wmt_generate: a small translation data set in the raw layout of WMT (the
// files the MLPerf Transformer's data preparation starts from), from the
// real German-English text of Debian's trans-de-en dictionary, so that the
// scaled Transformer benchmarks go through the same converter (wmt_to_lmdb)
// as WMT itself:
//   <out>/train.en, <out>/train.de                 parallel, one sentence a line
//   <out>/newstest2014.en, <out>/newstest2014.de   the eval set, likewise
// The direction is English -> German, as MLPerf's.
//
// The dictionary (/usr/share/trans/de-en, 206,237 lines after a few `#`
// comment lines) holds lines `de1 | de2 | .. :: en1 | en2 | ..`: the k-th
// ` | `-segment of one side translates the k-th of the other (a headword,
// its plural or forms, then phrases and example sentences). A line whose
// sides have different segment counts is dropped whole ("misaligned").
// Each segment is cleaned by these rules, in this order:
//   1. annotations go, with what they hold: {f} {pl} {vt} (grammar),
//      [ugs.] [Br.] [fig.] (register, region, field), <Abk.> <> <delt>
//      (abbreviations, pronunciations, separable-verb marks), (..) (an
//      explanation or optional words; the other side rarely has them, so
//      both sides lose them alike), /NPT/ (an abbreviation between slashes)
//      and ~word (a cross-reference). Brackets nest; an unbalanced one
//      drops the segment ("markup").
//   2. `;` separates synonyms ("Akte; Akt", "Damit ist alles gesagt.;
//      Damit ist alles abgehakt."): the first one is kept.
//   3. Runs of white space become one space, none is kept at either end
//      or before , . ! ? : ;
//   4. Dropped: a side left empty ("empty"); one still holding a slash
//      (alternatives such as "already/now", "zum Besten/Narren"), an
//      ellipsis or any of {}[]<>()~ ("markup"); one holding a dictionary
//      placeholder (sb. sth. sb's jdn. jdm. jds. jd. etw.) ("placeholder").
// A kept pair is a sentence pair when both sides have 4 or more words
// (split on spaces) and end in . ! or ?; else a phrase pair, which needs 2
// or more words a side: a pair with a one-word side is a headword and its
// gloss (280,000 of them: a glossary, not text) ("one-word"). Pairs with a
// side of more than --max_words words are dropped ("long"), sentence pairs
// from both splits. A pair seen before (the same English and German) is
// dropped ("duplicate").
//
// The eval set is --eval_pairs sentence pairs drawn at random (one per
// English sentence); every pair whose English is one of theirs, sentence or
// phrase, is then left out of training, so no eval source is ever trained
// on. Training is the other sentence pairs and, with --phrases=1, the
// phrase pairs, in a random order; --train_pairs > 0 keeps its first so
// many. Everything follows from --seed; each file is written whole (to a
// temporary name, then renamed) or not at all.
//   wmt_generate --out=data/transformer/small/raw
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/rng.h"
#include "datasets/convert_util.h"

static const ConfigKey KEYS[] = {
    {"out", CFG_STRING, "", "output folder (created; must not hold train.en/.de or newstest2014.en/.de)", NULL},
    {"dict", CFG_STRING, "/usr/share/trans/de-en", "the trans-de-en dictionary (Debian trans-de-en)", NULL},
    {"seed", CFG_INT, "1", "random seed: the same seed gives the same files", "[0, inf)"},
    {"eval_pairs", CFG_INT, "500", "held-out sentence pairs (newstest2014.*)", "[1, 100000]"},
    {"max_words", CFG_INT, "8", "most words a side of a kept pair may have", "[4, 1000]"},
    {"phrases", CFG_BOOL, "true", "add the phrase pairs to training", NULL},
    {"train_pairs", CFG_INT, "0", "most training pairs (0: all)", "[0, inf)"},
};

static const char *const kOutputs[] = {"train.en", "train.de", "newstest2014.en", "newstest2014.de", NULL};
static const char *const kPlaceholders[] = {"sb.", "sth.", "sb's", "sb.'s", "sb.’s", "jdn.",
                                            "jdm.", "jds.", "jd.", "etw.", NULL};

typedef enum {
  DROP_MISALIGNED, DROP_EMPTY, DROP_MARKUP, DROP_PLACEHOLDER, DROP_ONE_WORD, DROP_LONG, DROP_DUPLICATE, DROP_N
} Drop;
static const char *const kDropNames[DROP_N] = {"misaligned", "empty",  "markup",   "placeholder",
                                               "one-word",   "long",   "duplicate"};

typedef struct Pair {
  char *en, *de;
  bool sentence;
} Pair;

// A set of strings (open addressing, FNV-1a): the pairs seen, the eval sources.
typedef struct StringSet {
  char **slots;
  int64_t capacity, count;
} StringSet;

static uint64_t hash_string(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

// Adds s (not copied); returns false when it was there already.
static bool set_add(StringSet *set, char *s) {
  if (2 * (set->count + 1) > set->capacity) {
    StringSet bigger = {.capacity = set->capacity ? 2 * set->capacity : 1024};
    bigger.slots = xcalloc((size_t)bigger.capacity, sizeof(char *));
    for (int64_t i = 0; i < set->capacity; i++)
      if (set->slots[i]) set_add(&bigger, set->slots[i]);
    free(set->slots);
    *set = bigger;
  }
  uint64_t i = hash_string(s) & (uint64_t)(set->capacity - 1);
  for (; set->slots[i]; i = (i + 1) & (uint64_t)(set->capacity - 1))
    if (strcmp(set->slots[i], s) == 0) return false;
  set->slots[i] = s;
  set->count++;
  return true;
}

static bool set_has(const StringSet *set, const char *s) {
  if (!set->capacity) return false;
  uint64_t i = hash_string(s) & (uint64_t)(set->capacity - 1);
  for (; set->slots[i]; i = (i + 1) & (uint64_t)(set->capacity - 1))
    if (strcmp(set->slots[i], s) == 0) return true;
  return false;
}

static const char *closer_of(char c) {
  switch (c) {
    case '{': return "}";
    case '[': return "]";
    case '<': return ">";
    case '(': return ")";
    default: return NULL;
  }
}

// An abbreviation between slashes starting at s[0] == '/': "/NPT/" with no
// space inside, followed by the end, a space or punctuation. Returns its
// length, or 0.
static size_t slash_abbreviation(const char *s, size_t n) {
  size_t j = 1;
  while (j < n && s[j] != '/' && s[j] != ' ') j++;
  if (j == 1 || j >= n || s[j] != '/') return 0;
  j++;
  return j == n || strchr(" ,.;!?", s[j]) ? j : 0;
}

// Rule 1: the segment s[0..n) without its annotations into out; false on
// an unbalanced bracket.
static bool strip_annotations(const char *s, size_t n, char *out) {
  char stack[64];
  int depth = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (closer_of(c)) {
      if (depth == (int)sizeof stack) return false;
      stack[depth++] = *closer_of(c);
    } else if (strchr("}]>)", c)) {
      if (!depth || stack[depth - 1] != c) return false;
      depth--;
    } else if (depth) {
      continue;
    } else if (c == '~') {
      while (i + 1 < n && s[i + 1] != ' ' && s[i + 1] != ';') i++;
    } else if (c == '/' && (i == 0 || s[i - 1] == ' ') && slash_abbreviation(s + i, n - i)) {
      i += slash_abbreviation(s + i, n - i) - 1;
    } else {
      out[o++] = c;
    }
  }
  out[o] = 0;
  return depth == 0;
}

// Rules 2 and 3, in place.
static void first_synonym_tidied(char *s) {
  char *semicolon = strchr(s, ';');
  if (semicolon) *semicolon = 0;
  size_t o = 0;
  for (const char *p = s; *p; p++) {
    bool space = *p == ' ' || *p == '\t';
    if (space && (o == 0 || s[o - 1] == ' ')) continue;
    if (strchr(",.!?:;", *p) && o > 0 && s[o - 1] == ' ') o--;
    s[o++] = space ? ' ' : *p;
  }
  if (o > 0 && s[o - 1] == ' ') o--;
  s[o] = 0;
}

static int64_t count_words(const char *s) {
  int64_t words = 0;
  for (const char *p = s; *p; p++)
    if (*p != ' ' && (p == s || p[-1] == ' ')) words++;
  return words;
}

static bool has_placeholder(const char *s) {
  for (const char *p = s; *p; p++) {
    if (p != s && p[-1] != ' ') continue;
    for (const char *const *w = kPlaceholders; *w; w++) {
      size_t n = strlen(*w);
      if (strncmp(p, *w, n) == 0 && (p[n] == 0 || p[n] == ' ' || strchr(",;:!?", p[n]))) return true;
    }
  }
  return false;
}

// Rule 4: why side s is dropped, or DROP_N when it is kept.
static Drop side_verdict(const char *s) {
  if (!*s) return DROP_EMPTY;
  if (strpbrk(s, "/{}[]<>()~") || strstr(s, "...") || strstr(s, "…")) return DROP_MARKUP;
  if (has_placeholder(s)) return DROP_PLACEHOLDER;
  return DROP_N;
}

static bool is_sentence(const char *s) {
  size_t n = strlen(s);
  return count_words(s) >= 4 && n && strchr(".!?", s[n - 1]);
}

typedef struct Pairs {
  Pair *items;
  int64_t count, capacity;
  int64_t dropped[DROP_N];
  StringSet seen;  // "en\tde" of every kept pair
} Pairs;

// Cleans the segment pair and keeps it when it passes.
static void consider(Pairs *ps, const char *de, size_t de_n, const char *en, size_t en_n, int64_t max_words) {
  char *d = xmalloc(de_n + 1), *e = xmalloc(en_n + 1);
  Drop why = DROP_N;
  if (!strip_annotations(de, de_n, d) || !strip_annotations(en, en_n, e)) {
    why = DROP_MARKUP;
  } else {
    first_synonym_tidied(d);
    first_synonym_tidied(e);
    why = side_verdict(e);
    if (why == DROP_N) why = side_verdict(d);
    if (why == DROP_N && !(is_sentence(e) && is_sentence(d)) && (count_words(e) < 2 || count_words(d) < 2))
      why = DROP_ONE_WORD;
    if (why == DROP_N && (count_words(e) > max_words || count_words(d) > max_words)) why = DROP_LONG;
  }
  if (why == DROP_N) {
    size_t e_n = strlen(e), d_n = strlen(d);
    char *key = xmalloc(e_n + d_n + 2);
    memcpy(key, e, e_n);
    key[e_n] = '\t';
    memcpy(key + e_n + 1, d, d_n + 1);
    if (!set_add(&ps->seen, key)) {
      free(key);
      why = DROP_DUPLICATE;
    }
  }
  if (why != DROP_N) {
    ps->dropped[why]++;
    free(d);
    free(e);
    return;
  }
  ps->items = grow(ps->items, ps->count, &ps->capacity, sizeof(Pair));
  ps->items[ps->count++] = (Pair){.en = e, .de = d, .sentence = is_sentence(e) && is_sentence(d)};
}

// Splits s[0..n) at every " | " into at most max segments; returns how many.
static int split_segments(const char *s, size_t n, const char **starts, size_t *lens, int max) {
  int k = 0;
  const char *end = s + n;
  while (k < max) {
    const char *bar = s;
    while (bar + 3 <= end && memcmp(bar, " | ", 3) != 0) bar++;
    if (bar + 3 > end) bar = end;
    starts[k] = s;
    lens[k++] = (size_t)(bar - s);
    if (bar == end) return k;
    s = bar + 3;
  }
  return max + 1;  // more than max: treated as misaligned
}

static void read_dictionary(Pairs *ps, const char *path, int64_t max_words) {
  size_t n;
  char *text = (char *)file_read(path, &n);
  enum { MAX_SEGMENTS = 256 };
  const char *de_s[MAX_SEGMENTS], *en_s[MAX_SEGMENTS];
  size_t de_n[MAX_SEGMENTS], en_n[MAX_SEGMENTS];
  int64_t lines = 0;
  for (char *line = text; line < text + n;) {
    char *nl = memchr(line, '\n', (size_t)(text + n - line));
    char *end = nl ? nl : text + n;
    if (end > line && end[-1] == '\r') end--;
    *end = 0;
    char *sep = strstr(line, " :: ");
    if (line[0] != '#' && end > line) {
      lines++;
      int kd = sep ? split_segments(line, (size_t)(sep - line), de_s, de_n, MAX_SEGMENTS) : 0;
      int ke = sep ? split_segments(sep + 4, (size_t)(end - sep - 4), en_s, en_n, MAX_SEGMENTS) : -1;
      if (kd != ke || kd > MAX_SEGMENTS) ps->dropped[DROP_MISALIGNED]++;
      else
        for (int k = 0; k < kd; k++) consider(ps, de_s[k], de_n[k], en_s[k], en_n[k], max_words);
    }
    line = nl ? nl + 1 : text + n;
  }
  free(text);
  if (!lines) die_input(path, "no dictionary lines (want `de | .. :: en | ..`; Debian's trans-de-en has them)");
}

static void write_lines(const char *out, const char *name, Pair *const *pairs, int64_t count, bool english) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", out, name);
  AtomicFile f;
  atomic_file_begin(&f, path);
  for (int64_t i = 0; i < count; i++) atomic_file_printf(&f, "%s\n", english ? pairs[i]->en : pairs[i]->de);
  atomic_file_commit(&f);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "wmt_generate");
  const char *out = config_string(&cfg, "out");
  if (!*out) die_input("--out", "missing: the output folder");
  check_outputs_free(out, kOutputs);
  int64_t max_words = config_int(&cfg, "max_words"), eval_want = config_int(&cfg, "eval_pairs");
  int64_t train_limit = config_int(&cfg, "train_pairs");
  bool phrases = config_bool(&cfg, "phrases");

  Pairs ps = {0};
  read_dictionary(&ps, config_string(&cfg, "dict"), max_words);
  if (ps.count > UINT32_MAX) DIE("%lld pairs do not fit the shuffle's indices", (long long)ps.count);
  uint32_t *order = xmalloc(sizeof(uint32_t) * ((size_t)ps.count + 1));
  for (int64_t i = 0; i < ps.count; i++) order[i] = (uint32_t)i;
  Rng rng = rng_make((uint64_t)config_int(&cfg, "seed"), 0);
  rng_shuffle_u32(&rng, order, (size_t)ps.count);

  // Eval: the first sentence pairs of the shuffled order, one per source.
  StringSet eval_sources = {0};
  Pair **eval = xmalloc(sizeof(Pair *) * ((size_t)eval_want + 1));
  int64_t n_eval = 0, n_sentences = 0;
  for (int64_t i = 0; i < ps.count; i++) {
    Pair *p = &ps.items[order[i]];
    n_sentences += p->sentence;
    if (p->sentence && n_eval < eval_want && set_add(&eval_sources, p->en)) eval[n_eval++] = p;
  }
  if (n_eval < eval_want)
    die_input("--eval_pairs", "%lld, but only %lld sentence pairs of at most %lld words were found",
              (long long)eval_want, (long long)n_eval, (long long)max_words);

  Pair **train = xmalloc(sizeof(Pair *) * ((size_t)ps.count + 1));
  int64_t n_train = 0, held_out = 0, train_sentences = 0;
  for (int64_t i = 0; i < ps.count; i++) {
    Pair *p = &ps.items[order[i]];
    if (set_has(&eval_sources, p->en)) {
      held_out++;  // the eval pairs themselves included, subtracted below
      continue;
    }
    if (!p->sentence && !phrases) continue;
    if (train_limit && n_train == train_limit) break;
    train[n_train++] = p;
    train_sentences += p->sentence;
  }
  held_out -= n_eval;

  file_make_dirs(out);
  write_lines(out, "train.en", train, n_train, true);
  write_lines(out, "train.de", train, n_train, false);
  write_lines(out, "newstest2014.en", eval, n_eval, true);
  write_lines(out, "newstest2014.de", eval, n_eval, false);

  printf("wmt_generate: %lld pairs kept (%lld sentence, %lld phrase), dropped:", (long long)ps.count,
         (long long)n_sentences, (long long)(ps.count - n_sentences));
  for (int d = 0; d < DROP_N; d++) printf(" %lld %s%s", (long long)ps.dropped[d], kDropNames[d], d + 1 < DROP_N ? "," : ";");
  printf(" train %lld (%lld sentence, %lld phrase), eval %lld, %lld more pairs left out for an eval source -> %s\n",
         (long long)n_train, (long long)train_sentences, (long long)(n_train - train_sentences), (long long)n_eval,
         (long long)held_out, out);
  config_free(&cfg);
  return 0;
}
