// squad_features.c: SQuAD questions into windows of token ids
// (squad_features.h).
#include "squad_features.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"

// ---------------------------------------------------------------- the JSON

const cJSON *squad_json_field(const cJSON *obj, const char *key, cJSON_bool (*is)(const cJSON *const),
                              const char *kind, const char *path, const char *where) {
  const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!v || !is(v)) die_input(path, "%s: \"%s\" missing or not %s", where, key, kind);
  return v;
}

void squad_json_walk(const cJSON *root, const char *path, const SquadWalk *walk) {
  const cJSON *data = squad_json_field(root, "data", cJSON_IsArray, "an array", path, "the top level");
  char where[128];
  int ai = 0;
  for (const cJSON *article = data->child; article; article = article->next, ai++) {
    snprintf(where, sizeof where, "data[%d]", ai);
    const cJSON *paragraphs = squad_json_field(article, "paragraphs", cJSON_IsArray, "an array", path, where);
    int pi = 0;
    for (const cJSON *par = paragraphs->child; par; par = par->next, pi++) {
      snprintf(where, sizeof where, "data[%d].paragraphs[%d]", ai, pi);
      const cJSON *qas = squad_json_field(par, "qas", cJSON_IsArray, "an array", path, where);
      if (walk->paragraph) walk->paragraph(walk->ctx, par, where);
      int qi = 0;
      for (const cJSON *qa = qas->child; qa; qa = qa->next, qi++) {
        snprintf(where, sizeof where, "data[%d].paragraphs[%d].qas[%d]", ai, pi, qi);
        walk->question(walk->ctx, qa, where);
      }
    }
  }
}

// ---------------------------------------------------------------- features

typedef struct Builder {
  const char *path;
  const WpVocab *vocab;
  WpSpecialIds special;
  SquadFeatureConfig cfg;
  SquadSet *set;
  int64_t cap_examples, cap_features, cap_where;
  char **where;            // each question's item, for the check that ids are unique
  // The paragraph being read: its context (characters, and tokens with a vocabulary).
  const char *context;
  int64_t context_chars;
  WpToken *ctx;
  int n_ctx;
} Builder;

static const cJSON *field(const Builder *b, const cJSON *obj, const char *name, const char *where,
                          cJSON_bool (*is)(const cJSON *const), const char *kind) {
  return squad_json_field(obj, name, is, kind, b->path, where);
}

// The characters of text, or dies naming where and what the text is.
static int64_t utf8_chars(const Builder *b, const char *text, const char *where, const char *what) {
  int64_t bad = -1, chars = wp_utf8_chars(text, strlen(text), &bad);
  if (chars < 0)
    die_input(b->path, "%s: %s is not UTF-8 (invalid byte at offset %lld)", where, what, (long long)bad);
  return chars;
}

// The byte offset of character (code point) index chars in text, or -1 when
// the text is shorter.
static int64_t byte_of_char(const char *text, int64_t chars) {
  int64_t seen = 0, i = 0;
  for (; text[i]; i++)
    if (((unsigned char)text[i] & 0xC0) != 0x80) {
      if (seen == chars) return i;
      seen++;
    }
  return seen == chars ? i : -1;
}

// The byte where an answer of text at character answer_start begins in the
// paragraph's context, or dies naming where (the answer).
static int64_t answer_begin(const Builder *b, const char *text, double at, const char *where) {
  if (!(at >= 0) || at != floor(at))
    die_input(b->path, "%s: answer_start %.15g is not a character index (a whole number from 0)", where, at);
  if (at > (double)b->context_chars)
    die_input(b->path, "%s: answer_start %.15g is past the end of the context (%lld characters)", where, at,
              (long long)b->context_chars);
  int64_t begin = byte_of_char(b->context, (int64_t)at);
  const char *there = b->context + begin;
  if (strncmp(there, text, strlen(text))) {
    int64_t shown = byte_of_char(there, utf8_chars(b, text, where, "the answer text"));
    die_input(b->path, "%s: answer_start %.15g does not point at the answer \"%s\" (the context there reads "
              "\"%.*s\")", where, at, text, (int)(shown < 0 ? (int64_t)strlen(there) : shown), there);
  }
  return begin;
}

static void *grow(void *p, int64_t *cap, int64_t need, size_t size) {
  if (need <= *cap) return p;
  *cap = need > 2 * *cap ? need : 2 * *cap;
  return xrealloc(p, (size_t)*cap * size);
}

// The window of context tokens [start, start + len) of the question: one feature.
static void add_feature(Builder *b, int64_t example, const WpToken *q, int nq, const WpToken *ctx,
                        int start, int len, const int *win_start, const int *win_len, int n_win,
                        int ans_start, int ans_end) {
  SquadSet *s = b->set;
  s->features = grow(s->features, &b->cap_features, s->n_features + 1, sizeof *s->features);
  SquadFeature *f = &s->features[s->n_features++];
  int n = nq + len + 3;
  f->example = example, f->n = n, f->query_tokens = nq;
  f->ids = xmalloc((size_t)n * sizeof(int32_t));
  f->span_begin = xmalloc((size_t)n * sizeof(int32_t));
  f->span_end = xmalloc((size_t)n * sizeof(int32_t));
  f->max_context = xcalloc((size_t)n, 1);
  for (int t = 0; t < n; t++) f->span_begin[t] = f->span_end[t] = -1;
  f->ids[0] = b->special.cls;
  for (int t = 0; t < nq; t++) f->ids[1 + t] = q[t].id;
  f->ids[1 + nq] = b->special.sep;
  int first = 2 + nq;  // the window's first context token
  for (int t = 0; t < len; t++) {
    int i = start + t;  // the context token
    f->ids[first + t] = ctx[i].id;
    f->span_begin[first + t] = ctx[i].start;
    f->span_end[first + t] = ctx[i].end;
    // Max context: the window where min(left, right) + 0.01 length is largest.
    int best = -1;
    double best_score = -1;
    for (int w = 0; w < n_win; w++) {
      if (i < win_start[w] || i >= win_start[w] + win_len[w]) continue;
      int left = i - win_start[w], right = win_start[w] + win_len[w] - 1 - i;
      double score = (left < right ? left : right) + 0.01 * win_len[w];
      if (score > best_score) best_score = score, best = w;
    }
    f->max_context[first + t] = win_start[best] == start;
  }
  f->ids[n - 1] = b->special.sep;
  bool inside = ans_start >= start && ans_end < start + len;
  f->start = inside ? first + ans_start - start : 0;
  f->end = inside ? first + ans_end - start : 0;
}

// The windows of the paragraph's context tokens for a question of nq tokens
// (q): each starts doc_stride after the last (at most a window after it),
// until one reaches the context's end.
static void add_windows(Builder *b, int64_t e, const WpToken *q, int nq, int ans_start, int ans_end) {
  int n_ctx = b->n_ctx, max_ctx = b->cfg.max_seq_length - nq - 3;  // >= 1: squad_set_build's check
  int step = b->cfg.doc_stride < max_ctx ? b->cfg.doc_stride : max_ctx;
  int n_win = 0, cap = n_ctx / step + 2;
  int *win_start = xmalloc((size_t)cap * sizeof(int)), *win_len = xmalloc((size_t)cap * sizeof(int));
  for (int start = 0;;) {
    int len = n_ctx - start < max_ctx ? n_ctx - start : max_ctx;
    win_start[n_win] = start, win_len[n_win] = len, n_win++;
    if (start + len >= n_ctx) break;
    start += len < b->cfg.doc_stride ? len : b->cfg.doc_stride;
  }
  for (int w = 0; w < n_win; w++)
    add_feature(b, e, q, nq, b->ctx, win_start[w], win_len[w], win_start, win_len, n_win, ans_start, ans_end);
  free(win_start);
  free(win_len);
}

// A paragraph (squad_json_walk): its context, checked, and its tokens.
static void read_paragraph(void *ctx, const cJSON *par, const char *where) {
  Builder *b = ctx;
  const char *context = field(b, par, "context", where, cJSON_IsString, "a string")->valuestring;
  b->context = context;
  b->context_chars = utf8_chars(b, context, where, "the context");
  int n_qas = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(par, "qas"));
  if (!*context && n_qas) die_input(b->path, "%s: an empty context, but %d questions", where, n_qas);
  if (!b->vocab) return;
  size_t n = strlen(context);
  b->ctx = xrealloc(b->ctx, (n + 1) * sizeof(WpToken));
  int64_t n_ctx = wp_tokenize(b->vocab, context, n, b->ctx, (int64_t)n + 1);
  if (n_ctx > INT32_MAX / 2) die_input(b->path, "%s: a context of %lld tokens", where, (long long)n_ctx);
  b->n_ctx = (int)n_ctx;
}

// A question of the paragraph read last (squad_json_walk): the example, its
// answers checked, and with a vocabulary its windows.
static void read_question(void *ctx, const cJSON *qa, const char *where) {
  Builder *b = ctx;
  SquadSet *s = b->set;
  const char *id = field(b, qa, "id", where, cJSON_IsString, "a string")->valuestring;
  const char *question = field(b, qa, "question", where, cJSON_IsString, "a string")->valuestring;
  const cJSON *answers = field(b, qa, "answers", where, cJSON_IsArray, "an array");
  char named[512];
  snprintf(named, sizeof named, "%s (id %s)", where, id);
  utf8_chars(b, question, named, "the question");
  int n_ans = cJSON_GetArraySize(answers);
  if (n_ans < 1) die_input(b->path, "%s: no answers", named);
  int64_t e = s->n_examples;
  s->examples = grow(s->examples, &b->cap_examples, e + 1, sizeof *s->examples);
  b->where = grow(b->where, &b->cap_where, e + 1, sizeof *b->where);
  b->where[e] = xstrdup(where);
  SquadExample *ex = &s->examples[s->n_examples++];
  ex->id = xstrdup(id), ex->question = xstrdup(question);
  ex->context = xstrdup(b->context);
  ex->n_answers = n_ans;
  ex->answers = xcalloc((size_t)n_ans, sizeof *ex->answers);
  int ans_start = -1, ans_end = -1;  // the first answer's context tokens
  for (int a = 0; a < n_ans; a++) {
    const cJSON *ans = cJSON_GetArrayItem(answers, a);
    char at[160], at_named[700];
    snprintf(at, sizeof at, "%s.answers[%d]", where, a);
    snprintf(at_named, sizeof at_named, "%s (id %s)", at, id);
    const char *text = field(b, ans, "text", at, cJSON_IsString, "a string")->valuestring;
    double start = field(b, ans, "answer_start", at, cJSON_IsNumber, "a number")->valuedouble;
    utf8_chars(b, text, at_named, "the answer text");
    int64_t begin = answer_begin(b, text, start, at_named);
    ex->answers[a] = xstrdup(text);
    if (a || !b->vocab) continue;
    int64_t len = (int64_t)strlen(text);
    for (int t = 0; t < b->n_ctx; t++) {
      if (ans_start < 0 && b->ctx[t].end > begin) ans_start = t;
      if (b->ctx[t].start < begin + len) ans_end = t;
    }
    if (ans_start < 0 || ans_end < ans_start)
      die_input(b->path, "%s: no token covers the answer \"%s\" (empty, or only characters the tokeniser "
                "drops)", at_named, text);
  }
  if (!b->vocab) return;  // the questions alone
  size_t qlen = strlen(question);
  WpToken *q = xmalloc((qlen + 1) * sizeof(WpToken));
  int64_t nq = wp_tokenize(b->vocab, question, qlen, q, (int64_t)qlen + 1);
  if (nq == 0)
    fprintf(stderr, "warning: %s: %s: the question has no tokens; kept, as the reference recipes keep it "
            "([CLS] [SEP] context [SEP])\n", b->path, named);
  if (nq > b->cfg.max_query_length) nq = b->cfg.max_query_length;
  add_windows(b, e, q, (int)nq, ans_start, ans_end);
  free(q);
}

// Question ids key the predictions (squad_score, --predictions_out): two
// questions of one id is an error naming both.
typedef struct IdAt {
  const char *id;
  int64_t index;
} IdAt;

static int id_at_cmp(const void *x, const void *y) {
  const IdAt *a = x, *b = y;
  int c = strcmp(a->id, b->id);
  return c ? c : (a->index > b->index) - (a->index < b->index);
}

static void check_ids_unique(const Builder *b) {
  const SquadSet *s = b->set;
  IdAt *ids = xmalloc((size_t)(s->n_examples + 1) * sizeof *ids);
  for (int64_t i = 0; i < s->n_examples; i++) ids[i] = (IdAt){s->examples[i].id, i};
  qsort(ids, (size_t)s->n_examples, sizeof *ids, id_at_cmp);
  for (int64_t i = 1; i < s->n_examples; i++)
    if (!strcmp(ids[i].id, ids[i - 1].id))
      die_input(b->path, "%s: id %s repeats %s (each question needs its own id: predictions are keyed by it)",
                b->where[ids[i].index], ids[i].id, b->where[ids[i - 1].index]);
  free(ids);
}

void squad_set_build(SquadSet *s, const char *path, const WpVocab *vocab,
                     const SquadFeatureConfig *cfg) {
  memset(s, 0, sizeof *s);
  if (vocab && (cfg->doc_stride < 1 || cfg->max_query_length < 1))
    die_input("squad features", "doc_stride %d, max_query_length %d: each must be at least 1",
              cfg->doc_stride, cfg->max_query_length);
  // As the reference's run_squad.py requires: room for a context token
  // after [CLS], the longest question kept and two [SEP].
  if (vocab && cfg->max_seq_length < cfg->max_query_length + 4)
    die_input("--max_query_length", "%d leaves no room for the context in windows of --max_seq_length=%d "
              "tokens (it may be at most max_seq_length - 4)", cfg->max_query_length, cfg->max_seq_length);
  Builder b = {.path = path, .vocab = vocab, .set = s};
  if (vocab) b.special = wp_vocab_special(vocab), b.cfg = *cfg;
  cJSON *root = json_read_file(path);
  squad_json_walk(root, path, &(SquadWalk){read_paragraph, read_question, &b});
  check_ids_unique(&b);
  for (int64_t i = 0; i < s->n_examples; i++) free(b.where[i]);
  free(b.where);
  free(b.ctx);
  cJSON_Delete(root);
}

void squad_set_free(SquadSet *s) {
  for (int64_t i = 0; i < s->n_examples; i++) {
    SquadExample *e = &s->examples[i];
    for (int a = 0; a < e->n_answers; a++) free(e->answers[a]);
    free(e->answers), free(e->id), free(e->question), free(e->context);
  }
  for (int64_t i = 0; i < s->n_features; i++) {
    SquadFeature *f = &s->features[i];
    free(f->ids), free(f->span_begin), free(f->span_end), free(f->max_context);
  }
  free(s->examples), free(s->features);
  memset(s, 0, sizeof *s);
}
