// squad_features.c: SQuAD questions into windows of token ids
// (squad_features.h).
#include "squad_features.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"

typedef struct Builder {
  const char *path;
  const WpVocab *vocab;
  WpSpecialIds special;
  SquadFeatureConfig cfg;
  SquadSet *set;
  int64_t cap_examples, cap_features;
} Builder;

static const cJSON *field(const Builder *b, const cJSON *obj, const char *name, const char *where,
                          bool (*is)(const cJSON *)) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!f || !is(f)) die_input(b->path, "%s: no \"%s\" of the right type", where, name);
  return f;
}

static bool is_array(const cJSON *x) { return cJSON_IsArray(x); }
static bool is_string(const cJSON *x) { return cJSON_IsString(x); }
static bool is_number(const cJSON *x) { return cJSON_IsNumber(x); }

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

// One question of the paragraph whose context tokens are ctx (n_ctx).
static void add_question(Builder *b, const cJSON *qa, const char *context, const WpToken *ctx,
                         int n_ctx, WpToken *scratch, int64_t scratch_cap) {
  SquadSet *s = b->set;
  int64_t e = s->n_examples;
  char where[160];
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(qa, "id");
  snprintf(where, sizeof where, "question %s", cJSON_IsString(id) ? id->valuestring : "(no id)");
  field(b, qa, "id", where, is_string);
  const char *question = field(b, qa, "question", where, is_string)->valuestring;
  const cJSON *answers = field(b, qa, "answers", where, is_array);
  int n_ans = cJSON_GetArraySize(answers);
  if (n_ans < 1) die_input(b->path, "%s: no answers", where);
  s->examples = grow(s->examples, &b->cap_examples, e + 1, sizeof *s->examples);
  SquadExample *ex = &s->examples[s->n_examples++];
  ex->id = xstrdup(id->valuestring), ex->question = xstrdup(question);
  ex->context = xstrdup(context);
  ex->n_answers = n_ans;
  ex->answers = xcalloc((size_t)n_ans, sizeof *ex->answers);
  int ans_start = -1, ans_end = -1;  // the first answer's context tokens
  for (int a = 0; a < n_ans; a++) {
    const cJSON *ans = cJSON_GetArrayItem(answers, a);
    const char *text = field(b, ans, "text", where, is_string)->valuestring;
    double at = field(b, ans, "answer_start", where, is_number)->valuedouble;
    int64_t begin = at >= 0 ? byte_of_char(context, (int64_t)at) : -1;
    size_t len = strlen(text);
    if (begin < 0 || strncmp(context + begin, text, len))
      die_input(b->path, "%s: answer_start %.0f does not point at the answer \"%s\"", where, at, text);
    ex->answers[a] = xstrdup(text);
    if (a || !b->vocab) continue;
    for (int t = 0; t < n_ctx; t++) {
      if (ans_start < 0 && ctx[t].end > begin) ans_start = t;
      if (ctx[t].start < begin + (int64_t)len) ans_end = t;
    }
    if (ans_start < 0 || ans_end < ans_start)
      die_input(b->path, "%s: no token covers the answer \"%s\"", where, text);
  }
  if (!b->vocab) return;  // the questions alone
  int64_t nq = wp_tokenize(b->vocab, question, strlen(question), scratch, scratch_cap);
  if (nq > b->cfg.max_query_length) nq = b->cfg.max_query_length;
  int max_ctx = b->cfg.max_seq_length - (int)nq - 3;
  if (max_ctx < 1) die_input(b->path, "%s: no room for the context in %d tokens", where, b->cfg.max_seq_length);
  // The windows: each starts doc_stride after the last, until one ends the context.
  // Each window starts at most min(doc_stride, max_ctx) tokens after the last.
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
    add_feature(b, e, scratch, (int)nq, ctx, win_start[w], win_len[w], win_start, win_len, n_win,
                ans_start, ans_end);
  free(win_start);
  free(win_len);
}

void squad_set_build(SquadSet *s, const char *path, const WpVocab *vocab,
                     const SquadFeatureConfig *cfg) {
  memset(s, 0, sizeof *s);
  if (vocab && (cfg->max_seq_length < 8 || cfg->doc_stride < 1 || cfg->max_query_length < 1))
    die_input("squad features", "max_seq_length %d, doc_stride %d, max_query_length %d: too small",
              cfg->max_seq_length, cfg->doc_stride, cfg->max_query_length);
  Builder b = {.path = path, .vocab = vocab, .set = s};
  if (vocab) b.special = wp_vocab_special(vocab), b.cfg = *cfg;
  cJSON *root = json_read_file(path);
  if (!cJSON_IsObject(root)) die_input(path, "not a JSON object (SQuAD's {\"data\": [...]})");
  const cJSON *data = field(&b, root, "data", "the file", is_array);
  const cJSON *article, *para, *qa;
  cJSON_ArrayForEach(article, data) {
    const cJSON *paras = field(&b, article, "paragraphs", "an article", is_array);
    cJSON_ArrayForEach(para, paras) {
      const char *context = field(&b, para, "context", "a paragraph", is_string)->valuestring;
      const cJSON *qas = field(&b, para, "qas", "a paragraph", is_array);
      size_t clen = strlen(context);
      WpToken *ctx = xmalloc((clen + 1) * sizeof(WpToken));
      int64_t n_ctx = vocab ? wp_tokenize(vocab, context, clen, ctx, (int64_t)clen + 1) : 0;
      if (n_ctx > INT32_MAX / 2) die_input(path, "a context of %lld tokens", (long long)n_ctx);
      WpToken *scratch = NULL;
      cJSON_ArrayForEach(qa, qas) {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(qa, "question");
        size_t qlen = cJSON_IsString(q) ? strlen(q->valuestring) : 0;
        scratch = xrealloc(scratch, (qlen + 1) * sizeof(WpToken));
        add_question(&b, qa, context, ctx, (int)n_ctx, scratch, (int64_t)qlen + 1);
      }
      free(scratch);
      free(ctx);
    }
  }
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
