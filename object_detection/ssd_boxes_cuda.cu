// ssd_boxes_cuda.cu: the SSD loss on the GPU, with the same results as
// ssd_loss_cpu (ssd_boxes.c). Four kernels on dev->stream, nothing waits:
//   1. one thread per box: the cross-entropy and p - onehot, computed as
//      ops/loss.c's xent_row (double sums over the classes in the same
//      order, rounded once), so the losses the mining ranks are the CPU's;
//   2. one block per image: the positives P, the hard negative mining, the
//      smooth L1 and dloc, each box's factor for dlogits and the image's
//      loss / P. The mining is a selection by threshold: the k-th largest
//      ranking key T (k = min(3P, n)) found bit by bit (the largest T with
//      at least k keys >= T, 32 counting passes), every box above T mined
//      and, of the boxes equal to T, the k - count(> T) of lowest index -
//      the CPU's order (descending loss, ties to the lower index);
//   3. dlogits *= its box's factor;
//   4. one thread: the mean over the batch, in double as the CPU.
#include <math.h>

#include "ops/cuda.cuh"
#include "ssd_boxes.h"

#define SSD_XENT_THREADS 128
#define SSD_MINE_THREADS 256

// One thread per row (box): con = lse - x[label] and d = p - onehot, unscaled.
static __global__ void ssd_xent_kernel(const float *logits, const int32_t *glabel, int64_t rows,
                                       int64_t classes, float *con, float *dlogits) {
  int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float *x = logits + row * classes;  // (C)
  float *d = dlogits + row * classes;       // (C)
  float max = -INFINITY;
  for (int64_t c = 0; c < classes; c++) max = fmaxf(max, x[c]);
  double sum = 0;
  for (int64_t c = 0; c < classes; c++) sum += exp((double)x[c] - max);
  double lse = max + log(sum);
  int32_t label = glabel[row];
  for (int64_t c = 0; c < classes; c++)
    d[c] = (float)exp(x[c] - lse) - (c == label ? 1.0f : 0.0f);
  con[row] = (float)(lse - x[label]);
}

// Sum of v over the block (blockDim.x a multiple of 32); every thread gets
// it. shared: 32 values.
template <typename T>
static __device__ T ssd_block_sum(T v, T *shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : (T)0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The ranking key of a box as an unsigned whose order is the float order of
// its loss (0 for a positive); -0 ties +0, as the CPU's comparison.
static __device__ __forceinline__ unsigned ssd_rank_key(float con, int32_t label) {
  float v = label > 0 || con == 0.0f ? 0.0f : con;
  unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Smooth L1 with beta 1 of d and its derivative (ssd_boxes.c's smooth_l1).
static __device__ __forceinline__ float ssd_smooth_l1(float d, float *grad) {
  float a = fabsf(d);
  *grad = a < 1.0f ? d : (d > 0 ? 1.0f : -1.0f);
  return a < 1.0f ? 0.5f * d * d : a - 0.5f;
}

// One block per image. con: (B, n) the losses in, each box's dlogits factor
// (weight * norm) out; image_loss: (B) loss / P (0 without positives).
static __global__ void ssd_mine_kernel(int64_t batch, int64_t n, const float *ploc,
                                       const float *gloc, const int32_t *glabel,
                                       float grad_scale, float *con, float *dloc,
                                       double *image_loss) {
  __shared__ long long counts[32];
  __shared__ double sums[32];
  __shared__ long long tie_base[SSD_MINE_THREADS];
  int64_t b = blockIdx.x, first = b * n;
  const int32_t *label = glabel + first;  // (n)
  float *c = con + first;                 // (n)
  long long positives = 0;
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x) positives += label[a] > 0;
  positives = ssd_block_sum(positives, counts);
  long long k = 3 * positives < n ? 3 * positives : n;
  // The k-th largest key: the largest t with count(key >= t) >= k.
  unsigned t = 0;
  for (int bit = 31; positives > 0 && bit >= 0; bit--) {
    unsigned cand = t | (1u << bit);
    long long ge = 0;
    for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
      ge += ssd_rank_key(c[a], label[a]) >= cand;
    if (ssd_block_sum(ge, counts) >= k) t = cand;
  }
  // Thread i owns boxes [lo, hi): the ties to t it holds, then their
  // exclusive prefix over the threads (in box order).
  int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  int64_t lo = threadIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  long long above = 0, ties = 0;
  for (int64_t a = lo; a < hi; a++) {
    unsigned key = ssd_rank_key(c[a], label[a]);
    above += key > t;
    ties += key == t;
  }
  above = ssd_block_sum(above, counts);
  tie_base[threadIdx.x] = ties;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long run = 0;
    for (unsigned i = 0; i < blockDim.x; i++) {
      long long v = tie_base[i];
      tie_base[i] = run;
      run += v;
    }
  }
  __syncthreads();
  long long tie_rank = tie_base[threadIdx.x], ties_kept = k - above;
  // d image / d input: 1 / P, over the batch's mean: 1 / B.
  float norm = positives ? grad_scale / ((float)batch * (float)positives) : 0.0f;
  double image = 0;
  for (int64_t a = lo; a < hi; a++) {
    int64_t row = first + a;
    bool positive = label[a] > 0, mined = false;
    if (positives) {
      unsigned key = ssd_rank_key(c[a], label[a]);
      mined = key > t || (key == t && tie_rank++ < ties_kept);
    }
    float w = positives ? (positive ? 1.0f : 0.0f) + (mined ? 1.0f : 0.0f) : 0.0f;
    image += (double)w * c[a];
    for (int q = 0; q < 4; q++) {
      float grad = 0;
      if (positive) image += ssd_smooth_l1(ploc[4 * row + q] - gloc[4 * row + q], &grad);
      dloc[4 * row + q] = grad * norm;
    }
    c[a] = w * norm;
  }
  image = ssd_block_sum(image, sums);
  if (threadIdx.x == 0) image_loss[b] = positives ? image / (double)positives : 0.0;
}

// dlogits (rows, C) *= factor[row].
static __global__ void ssd_scale_rows_kernel(float *dlogits, const float *factor, int64_t rows,
                                             int64_t classes) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * classes;
       i += (int64_t)gridDim.x * blockDim.x)
    dlogits[i] *= factor[i / classes];
}

// The mean over the batch, in image order.
static __global__ void ssd_batch_mean_kernel(const double *image_loss, int64_t batch,
                                             float *loss) {
  double total = 0;
  for (int64_t b = 0; b < batch; b++) total += image_loss[b];
  *loss = (float)(total / (double)batch);
}

extern "C" void ssd_loss_cuda(const Device *dev, int64_t batch, int64_t n_boxes,
                              int64_t n_classes, const float *ploc, const float *logits,
                              const float *gloc, const int32_t *glabel, float grad_scale,
                              Arena *scratch, float *loss, float *dloc, float *dlogits) {
  OP_REQUIRE("ssd_loss_cuda", batch > 0 && n_boxes > 0 && n_classes > 0);
  OP_REQUIRE("ssd_loss_cuda", batch <= 65535 && scratch->device == DEVICE_CUDA);
  size_t mark = arena_mark(scratch);
  int64_t rows = batch * n_boxes;
  float *con = (float *)arena_alloc(scratch, (size_t)rows * sizeof(float));  // (B, n)
  double *image_loss = (double *)arena_alloc(scratch, (size_t)batch * sizeof(double));  // (B)
  ssd_xent_kernel<<<ops_blocks(rows, SSD_XENT_THREADS), SSD_XENT_THREADS, 0, dev->stream>>>(
      logits, glabel, rows, n_classes, con, dlogits);
  CHECK_LAUNCH();
  ssd_mine_kernel<<<(unsigned)batch, SSD_MINE_THREADS, 0, dev->stream>>>(
      batch, n_boxes, ploc, gloc, glabel, grad_scale, con, dloc, image_loss);
  CHECK_LAUNCH();
  ssd_scale_rows_kernel<<<ops_blocks(rows * n_classes, OPS_THREADS), OPS_THREADS, 0,
                          dev->stream>>>(dlogits, con, rows, n_classes);
  CHECK_LAUNCH();
  ssd_batch_mean_kernel<<<1, 1, 0, dev->stream>>>(image_loss, batch, loss);
  CHECK_LAUNCH();
  arena_release(scratch, mark);
}
