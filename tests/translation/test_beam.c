// beam_search against a plain reference of the rules in beam.h, written
// here from those rules: every hypothesis keeps its whole prefix, the
// logits of a prefix come from a pure function of it, and all candidates
// of a step are sorted at once. The model handed to beam_search instead
// keeps one prefix per hypothesis slot and moves it by `parent` in reorder,
// as a key/value cache does, so a wrong reorder feeds beam_search the
// logits of the wrong prefixes. Ids, lengths and the number of steps must
// match exactly.
//
// Ties: a candidate ranks by total log-probability, then lower hypothesis
// index, then lower token id; an equal finished score ranks after the ones
// already finished (beam.c's keep_best and finish keep the earlier).
// The search stops when the worst kept finished score is strictly greater
// than the best alive log-probability over lp(max_len), as the reference's
// tf.greater does (on equality it goes on).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../translation/beam.h"
#include "ops/reduce.h"
#include "tests/harness/test.h"

#define EOS 1
#define MAX_B 8
#define MAX_BEAM 5
#define MAX_VOCAB 16
#define MAX_WIDTH 16

// The synthetic model: logits of (sentence, prefix). kind RANDOM hashes the
// whole prefix; EOS grows likely past a per-sentence length, or never comes
// for sentence never_eos. kind TIED depends on the length only, with values
// from {0, 1, 2}, so tokens and hypotheses tie exactly; FLAT ties every
// token but the pad and EOS; EOS_TIES_BEST makes EOS and token 2 the best
// two, equal.
typedef enum { SYNTH_RANDOM, SYNTH_TIED, SYNTH_FLAT, SYNTH_EOS_TIES_BEST } SynthKind;

typedef struct Synth {
  SynthKind kind;
  uint64_t seed;
  int64_t vocab;
  int64_t eos_after[MAX_B];  // RANDOM: EOS favoured from this length on
  int never_eos;             // RANDOM: this sentence never ends (-1: none)
} Synth;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A float in [0, 1) with 24 random bits, exact.
static float unit(uint64_t x) { return (float)(mix(x) >> 40) / 16777216.0f; }

static void synth_logits(const Synth *sy, int64_t sent, const int32_t *tok, int64_t len,
                         float *row) {
  uint64_t h = mix(sy->seed * 1000003u + (uint64_t)sent);
  if (sy->kind == SYNTH_TIED) {
    for (int64_t v = 0; v < sy->vocab; v++)
      row[v] = (float)(mix(h + (uint64_t)len * 131u + (uint64_t)v) % 3);
    row[EOS] = len >= 3 + sent ? 2.0f : 0.0f;
    return;
  }
  if (sy->kind == SYNTH_FLAT) {
    for (int64_t v = 0; v < sy->vocab; v++) row[v] = v > EOS ? 0.0f : -50.0f;
    return;
  }
  if (sy->kind == SYNTH_EOS_TIES_BEST) {  // EOS and token 2 tie as the best
    for (int64_t v = 0; v < sy->vocab; v++) row[v] = 4.0f * unit(h + (uint64_t)v) - 2.0f;
    row[EOS] = row[2] = 5.0f;
    return;
  }
  for (int64_t i = 0; i < len; i++) h = mix(h ^ ((uint64_t)tok[i] + 1) * 0x100000001b3ull);
  for (int64_t v = 0; v < sy->vocab; v++) row[v] = 4.0f * unit(h + (uint64_t)v * 7919u);
  if (sent == sy->never_eos)
    row[EOS] = -1000.0f;
  else
    row[EOS] += 1.5f * (float)(len - sy->eos_after[sent]);
}

// ---- the reference ----

typedef struct Hyp {
  int32_t tok[MAX_WIDTH + 1];
  int64_t len;
  double score;  // alive: log-probability; finished: over lp(len)
  int64_t order; // finished: when it finished, for ties
} Hyp;

typedef struct RefResult {
  int32_t out[MAX_WIDTH];
  int64_t len;
  int64_t steps;
  int finished;            // hypotheses that finished
  int64_t best_found_step; // the step that finished the returned one (-1: alive)
  int64_t max_len;
} RefResult;

static double lpen(double alpha, int64_t len) { return pow((5.0 + (double)len) / 6.0, alpha); }

static int by_score(const void *a, const void *b) {
  const Hyp *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

typedef struct Cand {
  double lp;
  int parent;
  int32_t token;
} Cand;

static int by_lp(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  if (x->lp != y->lp) return x->lp > y->lp ? -1 : 1;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  return x->token < y->token ? -1 : x->token > y->token;
}

static void ref_sentence(const Synth *sy, const BeamConfig *cfg, int64_t sent, int64_t max_len,
                         RefResult *r) {
  static Hyp alive[MAX_BEAM], next[MAX_BEAM], fin[MAX_BEAM * 2 * MAX_WIDTH];
  static Cand cand[MAX_BEAM * MAX_VOCAB];
  int n_alive = 1, n_fin = 0, beam = cfg->beam;
  int64_t found_at[MAX_BEAM * 2 * MAX_WIDTH];
  alive[0] = (Hyp){.len = 0, .score = 0.0};
  int64_t t = 0;
  for (;; t++) {
    int nc = 0;
    for (int k = 0; k < n_alive; k++) {
      float row[MAX_VOCAB];
      double lse = 0, mx = -INFINITY;
      synth_logits(sy, sent, alive[k].tok, alive[k].len, row);
      for (int64_t v = 0; v < sy->vocab; v++) mx = fmax(mx, row[v]);
      for (int64_t v = 0; v < sy->vocab; v++) lse += exp(row[v] - mx);
      lse = (float)(mx + log(lse));  // the model's norm is fp32 (op_logsumexp, beam.h)
      for (int64_t v = 0; v < sy->vocab; v++)
        cand[nc++] = (Cand){alive[k].score + (row[v] - lse), k, (int32_t)v};
    }
    qsort(cand, (size_t)nc, sizeof *cand, by_lp);
    int n_next = 0;
    for (int i = 0; i < 2 * beam && i < nc; i++) {
      Hyp h = alive[cand[i].parent];
      h.tok[h.len++] = cand[i].token;
      h.score = cand[i].lp;
      if (cand[i].token == EOS) {
        h.score /= lpen(cfg->alpha, h.len);
        h.order = n_fin;
        found_at[n_fin] = t;
        fin[n_fin++] = h;
      } else if (n_next < beam) {
        next[n_next++] = h;
      }
    }
    memcpy(alive, next, sizeof next);
    n_alive = n_next;
    qsort(fin, (size_t)n_fin, sizeof *fin, by_score);
    if (t + 1 >= max_len) break;
    int kept = n_fin < beam ? n_fin : beam;
    if (kept > 0 && fin[kept - 1].score > alive[0].score / lpen(cfg->alpha, max_len)) break;
  }
  const Hyp *best = n_fin > 0 ? &fin[0] : &alive[0];
  r->len = n_fin > 0 ? best->len - 1 : best->len;
  memcpy(r->out, best->tok, (size_t)r->len * sizeof(int32_t));
  r->steps = t + 1;
  r->finished = n_fin;
  r->best_found_step = n_fin > 0 ? found_at[best->order] : -1;
  r->max_len = max_len;
}

// ---- the model beam_search sees: one prefix per slot, moved by reorder ----

typedef struct SlotModel {
  const Synth *sy;
  int64_t n, beam, steps, reorders;
  int32_t prefix[MAX_B * MAX_BEAM][MAX_WIDTH + 1];  // [0] is the start token
  int bad;  // a call broke the BeamModel contract
} SlotModel;

// Each slot's logits, then its k best and its norm by the CPU ops, as the
// trainer picks them on its device.
static void slot_step(void *ctx, const int32_t *ids, int64_t n, int64_t t, int k, float *top,
                      int32_t *top_ids, float *norm) {
  SlotModel *m = ctx;
  if (n != m->n || t != m->steps || t != m->reorders || t >= MAX_WIDTH || k != 2 * m->beam) {
    m->bad = 1;
    return;
  }
  static float logits[MAX_B * MAX_BEAM * MAX_VOCAB];
  for (int64_t i = 0; i < n; i++) {
    m->prefix[i][t] = ids[i];
    if (t == 0 && ids[i] != 0) m->bad = 1;  // the pad id starts every hypothesis
    synth_logits(m->sy, i / m->beam, m->prefix[i] + 1, t, logits + i * m->sy->vocab);
  }
  const Device cpu = {.kind = DEVICE_CPU};
  Tensor tl = TENSOR(logits, DT_F32, DEVICE_CPU, n, m->sy->vocab);
  Tensor tt = TENSOR(top, DT_F32, DEVICE_CPU, n, k), ti = TENSOR(top_ids, DT_I32, DEVICE_CPU, n, k);
  Tensor tn = TENSOR(norm, DT_F32, DEVICE_CPU, n);
  op_topk(&cpu, &tl, k, &tt, &ti);
  op_logsumexp(&cpu, &tl, &tn);
  m->steps++;
}

static void slot_reorder(void *ctx, const int32_t *parent, int64_t n, int64_t t) {
  SlotModel *m = ctx;
  static int32_t old[MAX_B * MAX_BEAM][MAX_WIDTH + 1];
  if (n != m->n || t + 1 != m->steps) m->bad = 1;
  memcpy(old, m->prefix, sizeof old);
  for (int64_t i = 0; i < n && !m->bad; i++) {
    if (parent[i] < 0 || parent[i] >= n || parent[i] / m->beam != i / m->beam) m->bad = 1;
    else memcpy(m->prefix[i], old[parent[i]], sizeof old[0]);
  }
  m->reorders++;
}

// beam_search over the slot model; returns the model, to count its calls.
static const SlotModel *decode(const Synth *sy, const BeamConfig *cfg, int64_t b,
                               const int32_t *src_len, int32_t *out, int64_t *out_len) {
  static SlotModel m;
  memset(&m, 0, sizeof m);
  m.sy = sy;
  m.n = b * cfg->beam;
  m.beam = cfg->beam;
  BeamModel bm = {.ctx = &m, .vocab = sy->vocab, .step = slot_step, .reorder = slot_reorder};
  beam_search(&bm, cfg, b, src_len, out, out_len);
  return &m;
}

// What the reference saw over a sweep, to show the sweep reaches each rule.
typedef struct Coverage {
  int early_best;   // the returned hypothesis finished before the search stopped
  int never_ended;  // returned alive at the length limit
  int bound_stop;   // stopped by the bound before the length limit
  int capped;       // max_len from cfg->max_len, not the source
  int spread;       // batches whose sentences stopped at different steps
} Coverage;

// "[2 7 3]" into buf (128 bytes), for messages.
static const char *ids_text(const int32_t *ids, int64_t n, char *buf) {
  int at = snprintf(buf, 128, "[");
  for (int64_t i = 0; i < n && i < MAX_WIDTH && at < 120; i++)
    at += snprintf(buf + at, (size_t)(128 - at), i ? " %d" : "%d", ids[i]);
  snprintf(buf + at, (size_t)(128 - at), "]");
  return buf;
}

// Runs both on b sentences; CHECKs ids, lengths and steps equal.
static void compare(const Synth *sy, const BeamConfig *cfg, int64_t b, const int32_t *src_len,
                    Coverage *cov) {
  int32_t out[MAX_B * MAX_WIDTH];
  int64_t out_len[MAX_B];
  const SlotModel *m = decode(sy, cfg, b, src_len, out, out_len);
  CHECK_MSG(!m->bad, "beam %d alpha %.1f seed %llu: a step or reorder broke the contract",
            cfg->beam, cfg->alpha, (unsigned long long)sy->seed);
  int64_t steps = 0, first_stop = MAX_WIDTH;
  for (int64_t i = 0; i < b; i++) {
    RefResult r;
    int64_t want = src_len[i] + cfg->extra_len;
    ref_sentence(sy, cfg, i, want < cfg->max_len ? want : cfg->max_len, &r);
    steps = r.steps > steps ? r.steps : steps;
    first_stop = r.steps < first_stop ? r.steps : first_stop;
    bool same = out_len[i] == r.len &&
                !memcmp(out + i * cfg->max_len, r.out, (size_t)r.len * sizeof(int32_t));
    char got[128], wanted[128];
    CHECK_MSG(same, "beam %d alpha %.1f seed %llu sentence %lld: %s, want %s", cfg->beam,
              cfg->alpha, (unsigned long long)sy->seed, (long long)i,
              ids_text(out + i * cfg->max_len, out_len[i], got),
              ids_text(r.out, r.len, wanted));
    if (cov) {
      cov->early_best += r.best_found_step >= 0 && r.best_found_step + 1 < r.steps;
      cov->never_ended += r.finished == 0;
      cov->bound_stop += r.steps < r.max_len;
      cov->capped += want > cfg->max_len;
    }
  }
  if (cov) cov->spread += first_stop < steps;
  CHECK_MSG(m->steps == steps && m->reorders == steps,
            "beam %d alpha %.1f seed %llu: %lld steps and %lld reorders, want %lld", cfg->beam,
            cfg->alpha, (unsigned long long)sy->seed, (long long)m->steps, (long long)m->reorders,
            (long long)steps);
}

// Six sentences of source lengths 1 to 11 (max_len 10 caps the longest),
// sentence 2 never ending, over 3 alphas and 8 seeds.
static void sweep(int beam, int64_t vocab, Coverage *cov) {
  static const int32_t src_len[6] = {4, 1, 6, 11, 3, 8};
  static const float alphas[3] = {0.0f, 0.6f, 1.0f};
  for (int a = 0; a < 3; a++)
    for (uint64_t seed = 1; seed <= 8; seed++) {
      Synth sy = {.kind = SYNTH_RANDOM, .seed = seed, .vocab = vocab, .never_eos = 2};
      for (int i = 0; i < 6; i++) sy.eos_after[i] = 1 + (int64_t)(mix(seed * 31 + (uint64_t)i) % 7);
      BeamConfig cfg = {.beam = beam, .alpha = alphas[a], .extra_len = 3, .max_len = 10,
                        .eos = EOS};
      compare(&sy, &cfg, 6, src_len, cov);
    }
}

static void greedy_matches_reference(void) { sweep(1, 11, NULL); }
static void beam_2_matches_reference(void) { sweep(2, 11, NULL); }
static void beam_4_matches_reference(void) { sweep(4, 11, NULL); }
static void beam_5_matches_reference(void) {
  sweep(5, 13, NULL);
  sweep(5, 10, NULL);  // vocab exactly 2 beam: EOS is a candidate at the first step
}

// The sweeps reach every rule: a best hypothesis found steps before the
// search stops, a sentence with no EOS returning its best alive one, stops
// by the bound and by the length limit, max_len capping a long source, and
// sentences of one batch stopping at different steps.
static void sweeps_reach_every_rule(void) {
  for (int beam = 1; beam <= MAX_BEAM; beam++) {
    Coverage cov = {0};
    sweep(beam, 11, &cov);
    printf("  beam %d: early best %d, never ended %d, bound stops %d, capped %d, spread %d\n",
           beam, cov.early_best, cov.never_ended, cov.bound_stop, cov.capped, cov.spread);
    CHECK(cov.early_best > 0);
    CHECK(cov.never_ended >= 24);  // sentence 2 of every batch
    CHECK(cov.bound_stop > 0);
    CHECK(cov.capped >= 48);       // sentences 3 and 5 of every batch
    CHECK(cov.spread > 0);
  }
}

// Logits from {0, 1, 2} repeat within a row and, depending on the length
// only, across hypotheses: the order is lower hypothesis, then lower token.
static void ties_rank_lower_hypothesis_then_lower_token(void) {
  static const int32_t src_len[4] = {5, 2, 7, 4};
  for (int beam = 1; beam <= MAX_BEAM; beam++)
    for (uint64_t seed = 1; seed <= 4; seed++)
      for (int a = 0; a < 2; a++) {
        Synth sy = {.kind = SYNTH_TIED, .seed = seed, .vocab = 12, .never_eos = -1};
        BeamConfig cfg = {.beam = beam, .alpha = a ? 0.6f : 0.0f, .extra_len = 2,
                          .max_len = 9, .eos = EOS};
        compare(&sy, &cfg, 4, src_len, NULL);
      }
  // By hand: every token but the pad and EOS ties at every step, so each
  // step keeps token 2 of hypothesis 0.
  static const int32_t four[1] = {4};
  for (int beam = 1; beam <= 3; beam++) {
    Synth sy = {.kind = SYNTH_FLAT, .vocab = 8, .never_eos = -1};
    BeamConfig cfg = {.beam = beam, .alpha = 0.6f, .extra_len = 0, .max_len = 9, .eos = EOS};
    int32_t out[9];
    int64_t out_len[1];
    decode(&sy, &cfg, 1, four, out, out_len);
    CHECK_EQ_INT(out_len[0], 4);
    for (int64_t i = 0; i < out_len[0] && i < 4; i++) CHECK_EQ_INT(out[i], 2);
  }
}

// alpha 0 and EOS tied with the best token at every step: at the first
// the finished score equals the best alive one, which is no reason to stop
// (strictly greater is). By hand for beam 1: the next step's alive one
// falls below it, and the search stops after 2 steps, not 1.
static void an_equal_score_does_not_stop_the_search(void) {
  static const int32_t src_len[2] = {6, 6};
  Synth sy = {.kind = SYNTH_EOS_TIES_BEST, .seed = 3, .vocab = 9, .never_eos = -1};
  for (int beam = 1; beam <= 4; beam++) {
    BeamConfig cfg = {.beam = beam, .alpha = 0.0f, .extra_len = 2, .max_len = 10, .eos = EOS};
    compare(&sy, &cfg, 2, src_len, NULL);
  }
  BeamConfig cfg = {.beam = 1, .alpha = 0.0f, .extra_len = 2, .max_len = 10, .eos = EOS};
  int32_t out[10];
  int64_t out_len[1];
  CHECK_EQ_INT(decode(&sy, &cfg, 1, src_len, out, out_len)->steps, 2);
  CHECK_EQ_INT(out_len[0], 0);
}

static void search_two_beams_over_three_tokens(void *ctx) {
  (void)ctx;
  Synth sy = {.kind = SYNTH_RANDOM, .seed = 1, .vocab = 3, .never_eos = -1};
  BeamConfig cfg = {.beam = 2, .alpha = 0.6f, .extra_len = 2, .max_len = 4, .eos = EOS};
  int32_t src_len[1] = {2}, out[4];
  int64_t out_len[1];
  decode(&sy, &cfg, 1, src_len, out, out_len);
}

static void refuses_vocab_below_two_beams(void) {
  CHECK_DIES_WITH(search_two_beams_over_three_tokens, NULL, "beam 2 over 3 tokens");
}

int main(void) {
  TEST_RUN(greedy_matches_reference);
  TEST_RUN(beam_2_matches_reference);
  TEST_RUN(beam_4_matches_reference);
  TEST_RUN(beam_5_matches_reference);
  TEST_RUN(sweeps_reach_every_rule);
  TEST_RUN(ties_rank_lower_hypothesis_then_lower_token);
  TEST_RUN(an_equal_score_does_not_stop_the_search);
  TEST_RUN(refuses_vocab_below_two_beams);
  return test_finish();
}
