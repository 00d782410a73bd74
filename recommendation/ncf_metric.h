// ncf_metric.h: HR@K and NDCG@K of NCF's test split - each user's held-out
// positive ranked among its test negatives by the fp32 sigmoid of the
// model's logits, as the MLPerf reference ranks, with its rule for repeated
// negatives and ties (ml_positive_rank in recommendation/movielens_sampling.h: a
// repeated negative counts once, a negative whose sigmoid equals the
// positive's ranks above it - saturated sigmoids of large logits tie).
// A rank scores a slice of the users; the sums are added over ranks by the
// caller (ncf_metric_hr / _ndcg after the reduction), so HR is over all users.
#pragma once
#include <stdint.h>

#include "device/device.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// Sums over users: hits (rank < K), the NDCG terms 1 / log2(rank + 2) of the
// hits, and the user count. Doubles, so they add exactly across ranks.
typedef struct NcfMetricSums {
  double hits, ndcg, users;
} NcfMetricSums;

// Adds one slice of users to sums.
//   scores: (U, 1 + N) logits, column 0 the positive, columns 1.. the
//           negatives in the order of neg_items
//   neg_items: (U, N) each row ascending (so repeats are neighbours)
//   acc: on CUDA, (2) doubles of device scratch; NULL on CPU
// On CUDA scores and neg_items are device pointers; the call waits for the
// device (two numbers copied back) - once per eval chunk, never in a step.
void ncf_metric_add_cpu(const Device *dev, const float *scores, const int32_t *neg_items,
                        int64_t n_users, int64_t n_neg, int k, double *acc, NcfMetricSums *sums);
#if HAVE_CUDA
void ncf_metric_add_cuda(const Device *dev, const float *scores, const int32_t *neg_items,
                         int64_t n_users, int64_t n_neg, int k, double *acc, NcfMetricSums *sums);
#endif
// Picks the CPU or CUDA function by dev->kind (inline, so that a test
// linking only the CPU half never references the CUDA one).
static inline void ncf_metric_add(const Device *dev, const float *scores,
                                  const int32_t *neg_items, int64_t n_users, int64_t n_neg,
                                  int k, double *acc, NcfMetricSums *sums) {
  OP_DISPATCH(dev, ncf_metric_add, scores, neg_items, n_users, n_neg, k, acc, sums);
}

// HR@K and NDCG@K from the (reduced) sums.
double ncf_metric_hr(const NcfMetricSums *sums);
double ncf_metric_ndcg(const NcfMetricSums *sums);

#ifdef __cplusplus
}
#endif
