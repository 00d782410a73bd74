// ncf_metric.c: the CPU reference of the NCF eval metric.
#include "ncf_metric.h"

#include <math.h>

#include "movielens_sampling.h"

void ncf_metric_add_cpu(const Device *dev, const float *scores, const int32_t *neg_items,
                        int64_t n_users, int64_t n_neg, int k, double *acc, NcfMetricSums *sums) {
  (void)dev;
  (void)acc;
  for (int64_t u = 0; u < n_users; u++) {
    const float *row = scores + u * (1 + n_neg);
    int64_t rank = ml_positive_rank(ML_RANK_SIGMOID, row[0], row + 1, neg_items + u * n_neg, n_neg);
    if (rank < k) {
      sums->hits += 1;
      sums->ndcg += 1.0 / log2((double)rank + 2);
    }
  }
  sums->users += (double)n_users;
}

double ncf_metric_hr(const NcfMetricSums *sums) {
  return sums->users > 0 ? sums->hits / sums->users : 0.0;
}

double ncf_metric_ndcg(const NcfMetricSums *sums) {
  return sums->users > 0 ? sums->ndcg / sums->users : 0.0;
}
