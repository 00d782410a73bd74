// ncf_metric_cuda.cu: the NCF eval metric on the GPU - one thread per user
// ranks its positive (the shared rule, ml_positive_rank), then the block sums
// its hits and NDCG terms and adds them to three device doubles. Hits are
// whole numbers, exact in a double whatever the order of the additions; the
// NDCG sum may differ from the CPU's in the last bits only.
#include <math.h>

#include "../datasets/movielens_sampling.h"
#include "check_cuda.h"
#include "ncf_metric.h"

#define NCF_METRIC_THREADS 256

static __global__ void ncf_metric_kernel(const float *scores, const int32_t *neg_items,
                                         int64_t n_users, int64_t n_neg, int k,
                                         double *out /* (2) hits, ndcg */) {
  __shared__ double hits[NCF_METRIC_THREADS], ndcg[NCF_METRIC_THREADS];
  int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  double h = 0, g = 0;
  if (u < n_users) {
    const float *row = scores + u * (1 + n_neg);
    int64_t rank = ml_positive_rank(row[0], row + 1, neg_items + u * n_neg, n_neg);
    if (rank < k) {
      h = 1;
      g = 1.0 / log2((double)rank + 2);
    }
  }
  hits[threadIdx.x] = h;
  ndcg[threadIdx.x] = g;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      hits[threadIdx.x] += hits[threadIdx.x + s];
      ndcg[threadIdx.x] += ndcg[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&out[0], hits[0]);
    atomicAdd(&out[1], ndcg[0]);
  }
}

void ncf_metric_add_cuda(const Device *dev, const float *scores, const int32_t *neg_items,
                         int64_t n_users, int64_t n_neg, int k, double *acc, NcfMetricSums *sums) {
  if (n_users == 0) return;
  CHECK_CUDA(cudaMemsetAsync(acc, 0, 2 * sizeof(double), dev->stream));
  unsigned blocks = (unsigned)((n_users + NCF_METRIC_THREADS - 1) / NCF_METRIC_THREADS);
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
