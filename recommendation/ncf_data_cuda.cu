// ncf_data_cuda.cu: the batch builders on the GPU, one thread per sample (or
// per eval candidate), over the same rules as the CPU loops (ncf_batch.h):
// the same seed gives the same batches bit for bit.
#include "core/check_cuda.h"
#include "ncf_batch.h"

#define NCF_DATA_THREADS 256

static __global__ void ncf_train_batch_kernel(NcfTrainView v, int64_t epoch, int64_t s0,
                                              int64_t n, int32_t *users, int32_t *items,
                                              float *labels) {
  int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < n) ncf_train_sample(&v, epoch, s0 + b, &users[b], &items[b], &labels[b]);
}

static __global__ void ncf_eval_batch_kernel(const int32_t *test_items, const int32_t *test_negs,
                                             int64_t n_neg, int64_t u0, int64_t n,
                                             int32_t *users, int32_t *items) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * (1 + n_neg)) return;
  int64_t u = i / (1 + n_neg), j = i % (1 + n_neg);
  users[i] = (int32_t)(u0 + u);
  items[i] = j == 0 ? test_items[u0 + u] : test_negs[(u0 + u) * n_neg + j - 1];
}

static unsigned ncf_blocks(int64_t n) {
  return (unsigned)((n + NCF_DATA_THREADS - 1) / NCF_DATA_THREADS);
}

void ncf_train_batch_cuda(const Device *dev, const NcfTrainView *v, int64_t epoch, int64_t s0,
                          int64_t n, int32_t *users, int32_t *items, float *labels) {
  if (n == 0) return;
  ncf_train_batch_kernel<<<ncf_blocks(n), NCF_DATA_THREADS, 0, dev->stream>>>(
      *v, epoch, s0, n, users, items, labels);
  CHECK_LAUNCH();
}

void ncf_eval_batch_cuda(const Device *dev, const int32_t *test_items, const int32_t *test_negs,
                         int64_t n_neg, int64_t u0, int64_t n, int32_t *users, int32_t *items) {
  if (n == 0) return;
  ncf_eval_batch_kernel<<<ncf_blocks(n * (1 + n_neg)), NCF_DATA_THREADS, 0, dev->stream>>>(
      test_items, test_negs, n_neg, u0, n, users, items);
  CHECK_LAUNCH();
}
