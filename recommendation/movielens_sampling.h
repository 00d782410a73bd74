// movielens_sampling.h: the sampling and ranking rules of the NCF data, shared
// by the converter, the generator, the trainer's CPU path and its CUDA kernels
// (every function is host and device code), so that test negatives, training
// negatives and the hit-rate rule are one definition everywhere.
#pragma once
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define ML_FN static __host__ __device__ __forceinline__
#else
#define ML_FN static inline
#endif

// Random streams of the counter-based RNG (rng.h), one per use.
enum {
  ML_STREAM_TEST_NEG = 101,   // converter: test negative j of user u
  ML_STREAM_TRAIN_NEG = 102,  // trainer: training negatives of an epoch
  ML_STREAM_SHUFFLE = 103,    // trainer: the epoch's sample order
};

// A 32-bit random number mapped onto [0, n) by a multiply-shift. Its bias
// (at most n / 2^32, below 1e-5 for MovieLens's 26,744 items) is far under
// the sampling noise, and it costs no loop, so the GPU stays branch-free.
ML_FN uint32_t ml_draw_below(uint32_t u, uint32_t n) {
  return (uint32_t)(((uint64_t)u * n) >> 32);
}

// The r-th item (counting from 0) of [0, n_items) that is not in rated, where
// rated (n_rated) is ascending without repeats. Before rated[k] lie
// rated[k] - k unrated items, so a binary search over k finds the first
// rated item past the r-th unrated one: the answer is r + k. Needs
// r < n_items - n_rated.
ML_FN int32_t ml_unrated_item(const int32_t *rated, int64_t n_rated, uint32_t r) {
  int64_t lo = 0, hi = n_rated;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if ((int64_t)rated[mid] - mid > (int64_t)r)
      hi = mid;
    else
      lo = mid + 1;
  }
  return (int32_t)((int64_t)r + lo);
}

// Whether item is in rated (ascending, n_rated): a binary search.
ML_FN int ml_is_rated(const int32_t *rated, int64_t n_rated, int32_t item) {
  int64_t lo = 0, hi = n_rated;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (rated[mid] < item)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n_rated && rated[lo] == item;
}

// What the eval ranks of a model's logit: its fp32 sigmoid, computed the way
// PyTorch computes an fp32 sigmoid (1 / (1 + exp(-x)), each step rounded to
// fp32), because the MLPerf reference ranks the model's sigmoid outputs.
// Those saturate: every logit above ~16.6 gives exactly 1.0f, and above ~9
// neighbouring logits round to one value - ties, which count against the
// positive (below). Ranking the logits themselves would break those ties and
// score hits the reference does not.
ML_FN float ml_sigmoid(float logit) { return 1.0f / (1.0f + expf(-logit)); }

// What a rank compares: scores as given (the generator's true model, whose
// scores are not a trained model's logits) or their ml_sigmoid (a model's
// logits, as the reference ranks them).
typedef enum { ML_RANK_SCORES, ML_RANK_SIGMOID } MlRankOn;

ML_FN float ml_rank_value(float score, MlRankOn on) {
  return on == ML_RANK_SIGMOID ? ml_sigmoid(score) : score;
}

// The rank (0 = first) of a user's held-out positive among its test
// negatives, the rule of the MLPerf NCF reference: there the candidates are a
// dict {item: score} with the positive inserted last, ranked by a stable
// descending sort (heapq.nlargest), so
//   - a negative drawn twice counts once (the dict keeps one key), and
//   - a negative whose score equals the positive's ranks above it (it came
//     first in the stable order): ties go against the positive.
// neg_items (n_neg) is ascending, so repeats are neighbours; neg_scores are
// their scores, each compared as ml_rank_value(score, on). HR@K counts
// rank < K; NDCG@K adds 1 / log2(rank + 2).
// "Not below" rather than ">=" makes a NaN score rank above the positive, and
// a NaN positive rank last: a diverged model scores 0, never a hit.
// ml_positive_rank_part counts the negatives first, first + stride, ... only
// (the rank is their sum over first = 0..stride-1: a GPU warp splits a user).
ML_FN int64_t ml_positive_rank_part(MlRankOn on, float pos_score, const float *neg_scores,
                                    const int32_t *neg_items, int64_t n_neg, int64_t first,
                                    int64_t stride) {
  float pos = ml_rank_value(pos_score, on);
  int64_t rank = 0;
  for (int64_t j = first; j < n_neg; j += stride) {
    int repeat = j > 0 && neg_items[j] == neg_items[j - 1];
    rank += !repeat && !(ml_rank_value(neg_scores[j], on) < pos);
  }
  return rank;
}

ML_FN int64_t ml_positive_rank(MlRankOn on, float pos_score, const float *neg_scores,
                               const int32_t *neg_items, int64_t n_neg) {
  return ml_positive_rank_part(on, pos_score, neg_scores, neg_items, n_neg, 0, 1);
}
