// beam.c: the beam search of beam.h.
#include "beam.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

// One sentence's search: alive and finished hypotheses, `beam` each, with
// their tokens (beam, max_len).
typedef struct BeamSentence {
  int32_t *alive, *fin;  // (beam, max_len) each
  double *alive_lp, *fin_score;
  int64_t *fin_len;
  int fin_count;
  int64_t max_len;  // this sentence's limit
  bool done;
} BeamSentence;

typedef struct Cand {
  double lp;
  int parent;
  int32_t token;
} Cand;

static double length_penalty(const BeamConfig *c, int64_t len) {
  return pow((5.0 + (double)len) / 6.0, (double)c->alpha);
}

// Inserts c into the k best so far (best first; ties keep the earlier).
static void keep_best(Cand *best, int *count, int k, Cand c) {
  if (*count == k && !(c.lp > best[k - 1].lp)) return;
  int i = *count < k ? (*count)++ : k - 1;
  while (i > 0 && c.lp > best[i - 1].lp) {
    best[i] = best[i - 1];
    i--;
  }
  best[i] = c;
}

// The 2 beam best one-token extensions of s's alive hypotheses, from each
// one's 2 beam best tokens (top, top_ids, norm: the sentence's rows of the
// step's). The k best of all extensions are among them: an extension
// outside its hypothesis's own k best ranks below k of its siblings. In
// the order the tokens come (a hypothesis's best first, ties the smaller
// id first) keep_best ranks ties as over the whole vocabulary.
static int extend(const BeamSentence *s, const BeamConfig *c, const float *top,
                  const int32_t *top_ids, const float *norm, Cand *best) {
  int count = 0, k2 = 2 * c->beam;
  for (int k = 0; k < c->beam; k++) {
    if (isinf(s->alive_lp[k])) continue;  // the first step has one hypothesis
    for (int j = 0; j < k2; j++)
      keep_best(best, &count, k2,
                (Cand){.lp = s->alive_lp[k] + ((double)top[k * k2 + j] - (double)norm[k]),
                       .parent = k, .token = top_ids[k * k2 + j]});
  }
  return count;
}

// Adds a hypothesis ending in EOS at length len (EOS included) to the
// finished ones, keeping the beam best.
static void finish(BeamSentence *s, const BeamConfig *c, const int32_t *tokens, int64_t len,
                   double score) {
  int n = s->fin_count, i = n < c->beam ? n : c->beam - 1;
  if (n == c->beam && !(score > s->fin_score[c->beam - 1])) return;
  while (i > 0 && score > s->fin_score[i - 1]) {
    s->fin_score[i] = s->fin_score[i - 1];
    s->fin_len[i] = s->fin_len[i - 1];
    memcpy(s->fin + (size_t)i * s->max_len, s->fin + (size_t)(i - 1) * s->max_len,
           (size_t)s->max_len * sizeof(int32_t));
    i--;
  }
  s->fin_score[i] = score;
  s->fin_len[i] = len;
  memcpy(s->fin + (size_t)i * s->max_len, tokens, (size_t)len * sizeof(int32_t));
  if (n < c->beam) s->fin_count++;
}

// Step t of sentence s: the best extensions become its alive and finished
// hypotheses; parent (beam) and next (beam) say what each alive slot
// continues and feeds next.
static void advance(BeamSentence *s, const BeamConfig *c, const Cand *best, int count,
                    int64_t t, int32_t *parent, int32_t *next, int32_t *scratch) {
  int32_t *old = scratch;  // (beam, max_len) the alive tokens before this step
  memcpy(old, s->alive, (size_t)c->beam * (size_t)s->max_len * sizeof(int32_t));
  int alive = 0;
  for (int i = 0; i < count; i++) {
    const Cand *cd = &best[i];
    const int32_t *prefix = old + (size_t)cd->parent * s->max_len;
    if (cd->token == c->eos) {
      int32_t *tok = old + (size_t)c->beam * s->max_len;  // room after the copies
      memcpy(tok, prefix, (size_t)t * sizeof(int32_t));
      tok[t] = cd->token;
      finish(s, c, tok, t + 1, cd->lp / length_penalty(c, t + 1));
    } else if (alive < c->beam) {
      int32_t *dst = s->alive + (size_t)alive * s->max_len;
      memcpy(dst, prefix, (size_t)t * sizeof(int32_t));
      dst[t] = cd->token;
      s->alive_lp[alive] = cd->lp;
      parent[alive] = cd->parent;
      next[alive] = cd->token;
      alive++;
    }
  }
  if (alive < c->beam) DIE("beam_search: %d alive hypotheses of %d", alive, c->beam);
  // Stop at the length limit, or when no alive hypothesis can catch up.
  if (t + 1 >= s->max_len) s->done = true;
  double best_possible = s->alive_lp[0] / length_penalty(c, s->max_len);
  if (s->fin_count > 0 && s->fin_score[s->fin_count - 1] > best_possible) s->done = true;
}

void beam_search(const BeamModel *model, const BeamConfig *cfg, int64_t b,
                 const int32_t *src_len, int32_t *out, int64_t *out_len) {
  int beam = cfg->beam;
  int64_t n = b * beam, vocab = model->vocab, width = cfg->max_len;
  if (beam < 1 || vocab < 2 * beam) DIE("beam_search: beam %d over %lld tokens", beam, (long long)vocab);
  BeamSentence *s = xcalloc((size_t)b, sizeof *s);
  int32_t *tokens = xcalloc((size_t)(2 * b * beam * width), sizeof(int32_t));  // alive, fin
  double *scores = xmalloc((size_t)(2 * n) * sizeof(double));
  int64_t *fin_len = xcalloc((size_t)n, sizeof(int64_t));
  int k2 = 2 * beam;  // each hypothesis's best tokens, (n, k2), and its norm (n)
  float *top = xmalloc((size_t)(n * k2) * sizeof(float)), *norm = xmalloc((size_t)n * sizeof(float));
  int32_t *top_ids = xmalloc((size_t)(n * k2) * sizeof(int32_t));
  int32_t *ids = xcalloc((size_t)n, sizeof(int32_t)), *parent = xmalloc((size_t)n * sizeof(int32_t));
  int32_t *scratch = xmalloc((size_t)(beam + 1) * (size_t)width * sizeof(int32_t));
  Cand *best = xmalloc((size_t)(2 * beam) * sizeof(Cand));
  for (int64_t i = 0; i < b; i++) {
    BeamSentence *si = &s[i];
    si->alive = tokens + (size_t)(2 * i * beam) * width;
    si->fin = si->alive + (size_t)beam * width;
    si->alive_lp = scores + 2 * i * beam;
    si->fin_score = si->alive_lp + beam;
    si->fin_len = fin_len + i * beam;
    si->max_len = src_len[i] + cfg->extra_len < width ? src_len[i] + cfg->extra_len : width;
    for (int k = 0; k < beam; k++) si->alive_lp[k] = k ? -INFINITY : 0.0;
  }
  // Every hypothesis starts from the pad id, the reference's start token.
  for (int64_t t = 0; t < width; t++) {
    bool any = false;
    for (int64_t i = 0; i < b; i++) any |= !s[i].done;
    if (!any) break;
    model->step(model->ctx, ids, n, t, k2, top, top_ids, norm);
    for (int64_t i = 0; i < b; i++) {
      int32_t *par = parent + i * beam, *next = ids + i * beam;
      if (s[i].done) continue;
      int64_t row = i * beam;
      int count = extend(&s[i], cfg, top + row * k2, top_ids + row * k2, norm + row, best);
      advance(&s[i], cfg, best, count, t, par, next, scratch);
      for (int k = 0; k < beam; k++) par[k] += (int32_t)(i * beam);
    }
    for (int64_t i = 0; i < b; i++)  // a finished sentence keeps its slots
      if (s[i].done)
        for (int k = 0; k < beam; k++) parent[i * beam + k] = (int32_t)(i * beam + k);
    model->reorder(model->ctx, parent, n, t);
  }
  for (int64_t i = 0; i < b; i++) {
    const BeamSentence *si = &s[i];
    bool fin = si->fin_count > 0;
    const int32_t *src = fin ? si->fin : si->alive;
    int64_t len = fin ? si->fin_len[0] : si->max_len;
    int64_t kept = 0;
    while (kept < len && src[kept] != cfg->eos) kept++;
    memcpy(out + i * width, src, (size_t)kept * sizeof(int32_t));
    out_len[i] = kept;
  }
  free(best);
  free(scratch);
  free(parent);
  free(ids);
  free(top_ids);
  free(norm);
  free(top);
  free(fin_len);
  free(scores);
  free(tokens);
  free(s);
}
