// ncf_metric_cuda.cu: the NCF eval metric on the GPU. One warp per user: the
// lanes take every 32nd negative (coalesced reads of the logit row) and count
// them by the shared rule (ml_positive_rank_part on the fp32 sigmoids), a
// warp sum gives the rank; then each block adds its hits and NDCG terms to
// two device doubles. Hits are whole numbers, exact in a double whatever the
// order of the additions; the NDCG sum may differ from the CPU's in the last
// bits only. CUDA's expf may differ from the C library's by an ulp, which
// can move a sigmoid across a rounding boundary of 1 + exp(-x): a rare
// tie more or less than on the CPU (the reference itself ranked on either).
#include <math.h>

#include "core/check_cuda.h"
#include "movielens_sampling.h"
#include "ncf_metric.h"

#define NCF_METRIC_THREADS 256
#define NCF_METRIC_WARPS (NCF_METRIC_THREADS / 32)

static __global__ void ncf_metric_kernel(const float *scores, const int32_t *neg_items,
                                         int64_t n_users, int64_t n_neg, int k,
                                         double *out /* (2) hits, ndcg */) {
  __shared__ double hits[NCF_METRIC_WARPS], ndcg[NCF_METRIC_WARPS];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t u = (int64_t)blockIdx.x * NCF_METRIC_WARPS + warp;
  long long rank = 0;
  if (u < n_users) {
    const float *row = scores + u * (1 + n_neg);
    rank = ml_positive_rank_part(ML_RANK_SIGMOID, row[0], row + 1, neg_items + u * n_neg, n_neg, lane, 32);
  }
  for (int s = 16; s > 0; s >>= 1) rank += __shfl_down_sync(0xffffffffu, rank, s);
  if (lane == 0) {
    bool hit = u < n_users && rank < k;
    hits[warp] = hit ? 1.0 : 0.0;
    ndcg[warp] = hit ? 1.0 / log2((double)rank + 2) : 0.0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double h = 0, g = 0;
    for (int w = 0; w < NCF_METRIC_WARPS; w++) {
      h += hits[w];
      g += ndcg[w];
    }
    atomicAdd(&out[0], h);
    atomicAdd(&out[1], g);
  }
}

void ncf_metric_add_cuda(const Device *dev, const float *scores, const int32_t *neg_items,
                         int64_t n_users, int64_t n_neg, int k, double *acc,
                         NcfMetricSums *sums) {
  if (n_users == 0) return;
  CHECK_CUDA(cudaMemsetAsync(acc, 0, 2 * sizeof(double), dev->stream));
  unsigned blocks = (unsigned)((n_users + NCF_METRIC_WARPS - 1) / NCF_METRIC_WARPS);
  ncf_metric_kernel<<<blocks, NCF_METRIC_THREADS, 0, dev->stream>>>(scores, neg_items, n_users,
                                                                   n_neg, k, acc);
  CHECK_LAUNCH();
  double host[2];
  CHECK_CUDA(cudaMemcpyAsync(host, acc, sizeof host, cudaMemcpyDeviceToHost, dev->stream));
  CHECK_CUDA(cudaStreamSynchronize(dev->stream));
  sums->hits += host[0];
  sums->ndcg += host[1];
  sums->users += (double)n_users;
}
