// The NCF eval metric (recommendation/ncf_metric.c): HR@K and NDCG@K on
// hand-made logit arrays, the reference's rules for ties, repeated negatives
// and NaN, slices adding up to the whole (the multi-rank reduction), and
// agreement with a direct emulation of the MLPerf reference's ranking - of
// fp32 sigmoids, whose saturation at large logits makes ties.
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../recommendation/ncf_metric.h"
#include "core/rng.h"
#include "recommendation/movielens_sampling.h"
#include "tests/harness/test.h"

static const Device CPU = {.kind = DEVICE_CPU};

static void hand_made_ranks(void) {
  // Three users, five negatives each (distinct items), K = 2.
  const float scores[3][6] = {
      {0.9f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f},   // positive first: rank 0
      {0.3f, 0.1f, 0.5f, 0.2f, 0.6f, 0.0f},   // two above: rank 2, a miss at K = 2
      {0.5f, 0.7f, 0.1f, 0.2f, 0.3f, 0.4f},   // one above: rank 1
  };
  const int32_t items[3][5] = {{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}};
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, &scores[0][0], &items[0][0], 3, 5, 2, NULL, &s);
  CHECK_NEAR(s.users, 3, 0);
  CHECK_NEAR(s.hits, 2, 0);
  CHECK_NEAR(ncf_metric_hr(&s), 2.0 / 3, 1e-12);
  CHECK_NEAR(ncf_metric_ndcg(&s), (1.0 + 1.0 / log2(3.0)) / 3, 1e-12);
  // K = 3 takes the second user in at rank 2: NDCG term 1 / log2(4) = 0.5.
  NcfMetricSums s3 = {0};
  ncf_metric_add_cpu(&CPU, &scores[0][0], &items[0][0], 3, 5, 3, NULL, &s3);
  CHECK_NEAR(ncf_metric_hr(&s3), 1.0, 1e-12);
  CHECK_NEAR(ncf_metric_ndcg(&s3), (1.0 + 0.5 + 1.0 / log2(3.0)) / 3, 1e-12);
}

static void ties_go_against_the_positive(void) {
  // The positive ties with two negatives: both rank above it (rank 2).
  const float scores[4] = {0.5f, 0.5f, 0.5f, 0.1f};
  const int32_t items[3] = {3, 8, 9};
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, scores, items, 1, 3, 2, NULL, &s);
  CHECK_NEAR(s.hits, 0, 0);
  ncf_metric_add_cpu(&CPU, scores, items, 1, 3, 3, NULL, &s);
  CHECK_NEAR(s.hits, 1, 0);
  CHECK_NEAR(s.ndcg, 0.5, 1e-12);
  // Constant scores (an untrained model's degenerate case) never hit.
  const float flat[6] = {0, 0, 0, 0, 0, 0};
  const int32_t many[5] = {1, 2, 3, 4, 5};
  NcfMetricSums f = {0};
  ncf_metric_add_cpu(&CPU, flat, many, 1, 5, 5, NULL, &f);
  CHECK_NEAR(f.hits, 0, 0);
}

static void repeated_negatives_count_once(void) {
  // Item 4 drawn three times above the positive: one candidate, rank 1.
  const float scores[6] = {0.5f, 0.9f, 0.9f, 0.9f, 0.1f, 0.2f};
  const int32_t items[5] = {4, 4, 4, 6, 7};
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, scores, items, 1, 5, 2, NULL, &s);
  CHECK_NEAR(s.hits, 1, 0);
  CHECK_NEAR(s.ndcg, 1.0 / log2(3.0), 1e-12);
}

static void nan_never_hits(void) {
  const float nan_pos[4] = {NAN, 0.1f, 0.2f, 0.3f};
  const float nan_neg[4] = {0.5f, NAN, 0.2f, 0.3f};
  const int32_t items[3] = {1, 2, 3};
  NcfMetricSums a = {0}, b = {0};
  ncf_metric_add_cpu(&CPU, nan_pos, items, 1, 3, 3, NULL, &a);
  CHECK_NEAR(a.hits, 0, 0);  // a NaN positive ranks last
  ncf_metric_add_cpu(&CPU, nan_neg, items, 1, 3, 1, NULL, &b);
  CHECK_NEAR(b.hits, 0, 0);  // a NaN negative ranks above the positive
}

// What the reference ranks of a logit: the model's output through PyTorch's
// fp32 sigmoid, 1 / (1 + exp(-x)) with every step in fp32.
static float reference_sigmoid(float logit) {
  float e = expf(-logit);
  float denominator = 1.0f + e;
  return 1.0f / denominator;
}

// The reference's ranking, emulated directly: the distinct candidates in
// insertion order (negatives as drawn, the positive last), a stable sort by
// descending score, the positive's position if it is within the first k.
// row: (1 + n_neg) the values ranked, the positive first.
static int64_t reference_position(const float *row, const int32_t *items, int64_t n_neg,
                                  int k) {
  int32_t *cand = malloc((size_t)(n_neg + 1) * sizeof(int32_t));
  float *score = malloc((size_t)(n_neg + 1) * sizeof(float));
  int64_t n = 0;
  for (int64_t j = 0; j < n_neg; j++) {
    int seen = 0;
    for (int64_t c = 0; c < n; c++) seen |= cand[c] == items[j];
    if (!seen) {
      cand[n] = items[j];
      score[n++] = row[1 + j];
    }
  }
  cand[n] = -1;  // the positive
  score[n++] = row[0];
  // Insertion sort, descending, stable: an element moves only past smaller ones.
  for (int64_t i = 1; i < n; i++) {
    float s = score[i];
    int32_t c = cand[i];
    int64_t j = i - 1;
    for (; j >= 0 && score[j] < s; j--) {
      score[j + 1] = score[j];
      cand[j + 1] = cand[j];
    }
    score[j + 1] = s;
    cand[j + 1] = c;
  }
  int64_t pos = -1;
  for (int64_t i = 0; i < n && i < k; i++)
    if (cand[i] == -1) pos = i;
  free(cand);
  free(score);
  return pos;
}

// The reference's position of each user's positive (U users of 1 + N
// logits) from its sigmoids, or (on_logits, the rule this suite used before)
// from the logits themselves; HR@k and the NDCG sum into hits, ndcg.
static void reference_sums(const float *logits, const int32_t *items, int64_t U, int64_t N, int k,
                           bool on_logits, double *hits, double *ndcg) {
  float *row = malloc((size_t)(1 + N) * sizeof(float));
  *hits = *ndcg = 0;
  for (int64_t u = 0; u < U; u++) {
    for (int64_t j = 0; j <= N; j++) {
      float x = logits[u * (1 + N) + j];
      row[j] = on_logits ? x : reference_sigmoid(x);
    }
    int64_t pos = reference_position(row, items + u * N, N, k);
    if (pos >= 0) {
      *hits += 1;
      *ndcg += 1 / log2((double)pos + 2);
    }
  }
  free(row);
}

static int cmp_i32(const void *a, const void *b) {
  return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

// Random users with coarse scores (many ties) and repeated negatives.
static void matches_reference_emulation(void) {
  enum { U = 400, N = 99, K = 10 };
  float *scores = malloc(sizeof(float) * U * (1 + N));
  int32_t *items = malloc(sizeof(int32_t) * U * N);
  Rng r = rng_make(5, 0);
  double hits, ndcg;
  for (int64_t u = 0; u < U; u++) {
    for (int64_t j = 0; j < N; j++) items[u * N + j] = (int32_t)rng_next_below(&r, 150);
    qsort(items + u * N, N, sizeof(int32_t), cmp_i32);
    // Scores of 8 levels, the same for the same item (a model is a function).
    float level_of_item[150];
    for (int i = 0; i < 150; i++) level_of_item[i] = (float)rng_next_below(&r, 8);
    scores[u * (1 + N)] = (float)rng_next_below(&r, 8) + 0.5f * (u % 2);
    for (int64_t j = 0; j < N; j++) scores[u * (1 + N) + 1 + j] = level_of_item[items[u * N + j]];
  }
  reference_sums(scores, items, U, N, K, false, &hits, &ndcg);
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, scores, items, U, N, K, NULL, &s);
  CHECK_NEAR(s.hits, hits, 0);
  CHECK_NEAR(s.ndcg, ndcg, 1e-9);
  REQUIRE(hits > 20 && hits < U - 20);  // the case exercises both outcomes

  // The GPU kernel's split of a user over a warp's 32 lanes adds up to its rank.
  for (int64_t u = 0; u < U; u++) {
    const float *row = scores + u * (1 + N);
    int64_t parts = 0;
    for (int lane = 0; lane < 32; lane++)
      parts += ml_positive_rank_part(ML_RANK_SIGMOID, row[0], row + 1, items + u * N, N, lane, 32);
    CHECK_EQ_INT(parts, ml_positive_rank(ML_RANK_SIGMOID, row[0], row + 1, items + u * N, N));
  }

  // Slices (one per rank) add up to the whole.
  NcfMetricSums parts = {0};
  ncf_metric_add_cpu(&CPU, scores, items, 137, N, K, NULL, &parts);
  ncf_metric_add_cpu(&CPU, scores + 137 * (1 + N), items + 137 * N, U - 137, N, K, NULL, &parts);
  CHECK_NEAR(parts.hits, s.hits, 0);
  CHECK_NEAR(parts.users, U, 0);
  CHECK_NEAR(parts.ndcg, s.ndcg, 1e-9);
  free(scores);
  free(items);
}

// Large logits, where fp32 sigmoids saturate: a positive of logit 20 above
// ten negatives of 17 to 19.25 is first by its logit, but every one of the
// eleven sigmoids is 1.0f, so the reference ranks it after all ten (ties go
// against the positive): a miss at K = 10.
static void saturated_sigmoids_tie(void) {
  enum { N = 10, K = 10 };
  float logits[1 + N] = {20.0f};
  int32_t items[N];
  for (int j = 0; j < N; j++) {
    logits[1 + j] = 17.0f + 0.25f * (float)j;
    items[j] = j;
  }
  for (int j = 0; j <= N; j++) REQUIRE(reference_sigmoid(logits[j]) == 1.0f);
  double hits, ndcg, logit_hits, logit_ndcg;
  reference_sums(logits, items, 1, N, K, false, &hits, &ndcg);
  reference_sums(logits, items, 1, N, K, true, &logit_hits, &logit_ndcg);
  REQUIRE(hits != logit_hits);  // the case tells the two rules apart
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, logits, items, 1, N, K, NULL, &s);
  CHECK_NEAR(s.hits, hits, 0);
  CHECK_NEAR(s.ndcg, ndcg, 1e-12);
}

// Random users with logits from 12 to 18, where fp32 sigmoids step by 2^-24
// or more and then stop at 1.0f: the metric matches the reference's ranking
// of the sigmoids, which scores fewer hits than ranking the logits would.
static void large_logits_match_reference(void) {
  enum { U = 400, N = 30, K = 10 };
  float *logits = malloc(sizeof(float) * U * (1 + N));
  int32_t *items = malloc(sizeof(int32_t) * U * N);
  Rng r = rng_make(11, 0);
  for (int64_t u = 0; u < U; u++) {
    for (int64_t j = 0; j < N; j++) items[u * N + j] = (int32_t)rng_next_below(&r, 100);
    qsort(items + u * N, N, sizeof(int32_t), cmp_i32);
    for (int64_t j = 0; j <= N; j++) logits[u * (1 + N) + j] = 12.0f + 6.0f * rng_next_uniform(&r);
    // A negative drawn twice has one score (a model is a function).
    for (int64_t j = 1; j < N; j++)
      if (items[u * N + j] == items[u * N + j - 1])
        logits[u * (1 + N) + 1 + j] = logits[u * (1 + N) + j];
  }
  double hits, ndcg, logit_hits, logit_ndcg;
  reference_sums(logits, items, U, N, K, false, &hits, &ndcg);
  reference_sums(logits, items, U, N, K, true, &logit_hits, &logit_ndcg);
  // The case exercises hits and misses, and tells the two rules apart.
  CHECK_MSG(hits > 20 && hits < U - 20 && hits + 10 < logit_hits,
            "reference hits: %.0f of sigmoids, %.0f of logits", hits, logit_hits);
  NcfMetricSums s = {0};
  ncf_metric_add_cpu(&CPU, logits, items, U, N, K, NULL, &s);
  CHECK_NEAR(s.hits, hits, 0);
  CHECK_NEAR(s.ndcg, ndcg, 1e-9);
  free(logits);
  free(items);
}

int main(void) {
  TEST_RUN(hand_made_ranks);
  TEST_RUN(ties_go_against_the_positive);
  TEST_RUN(repeated_negatives_count_once);
  TEST_RUN(nan_never_hits);
  TEST_RUN(matches_reference_emulation);
  TEST_RUN(saturated_sigmoids_tie);
  TEST_RUN(large_logits_match_reference);
  return test_finish();
}
