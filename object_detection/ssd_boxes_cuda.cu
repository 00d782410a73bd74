// ssd_boxes_cuda.cu: the SSD loss and the eval's decode on the GPU, with
// the same results as ssd_loss_cpu and ssd_detect_cpu (ssd_boxes.c).
//
// The loss: four kernels on dev->stream, nothing waits:
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
//
// The decode (ssd_detect_batch_cuda): three kernels, then one copy to the
// host:
//   1. one thread per box: its softmax row as the CPU's softmax_row, each
//      class's score stored by (image, class) column;
//   2. one block per (image, class): the candidates (score > threshold) as
//      64-bit keys (score bits, then the complement of the box) whose
//      descending order is the CPU's; when more than max_per_class, the
//      max_per_class-th highest key found bit by bit (as the mining) and the
//      keys at or above it kept; those sorted in shared memory (bitonic),
//      decoded, and NMS'd one kept box at a time (a barrier each);
//   3. one block per image: the same selection and sort over the kept
//      boxes of every class, keyed by (score, class-major position).
// Floats go through the _rn intrinsics where nvcc would otherwise fuse a
// multiply and an add, so that the boxes and IoUs round as the CPU's.
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

// ---------------------------------------------------------------- detection
#define SSD_SCORE_THREADS 128
#define SSD_DETECT_THREADS 256

// A candidate as one key whose descending order is ssd_boxes.c's
// by_score_desc: the score's bits (a probability, >= 0, orders as its
// float), then the complement of its position (the lower first). 0: none.
typedef unsigned long long SsdKey;

static __device__ __forceinline__ SsdKey ssd_key(float score, int64_t at) {
  return ((SsdKey)__float_as_uint(score) << 32) | (SsdKey)(0xffffffffu - (uint32_t)at);
}
static __device__ __forceinline__ float ssd_key_score(SsdKey k) {
  return __uint_as_float((unsigned)(k >> 32));
}
static __device__ __forceinline__ int64_t ssd_key_at(SsdKey k) {
  return (int64_t)(0xffffffffu - (uint32_t)k);
}

// One thread per (image, box): its softmax row as softmax_row (ssd_boxes.c),
// the classes but background written to scores (B, C - 1, n).
static __global__ void ssd_scores_kernel(const float *logits, int64_t batch, int64_t n,
                                         int64_t classes, float *scores) {
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < batch * n;
       row += (int64_t)gridDim.x * blockDim.x) {
    const float *x = logits + row * classes;  // (C)
    float max = -INFINITY;
    for (int64_t c = 0; c < classes; c++) max = fmaxf(max, x[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; c++) sum += exp((double)x[c] - max);
    double lse = max + log(sum);
    int64_t b = row / n, a = row % n;
    float *s = scores + b * (classes - 1) * n + a;  // (C - 1) strided by n
    for (int64_t c = 1; c < classes; c++) s[(c - 1) * n] = (float)exp(x[c] - lse);
  }
}

// A class's candidates: box a's key when its score passes the threshold.
struct SsdCandidateKey {
  const float *score;  // (n)
  float threshold;
  __device__ SsdKey operator()(int64_t a) const {
    return score[a] > threshold ? ssd_key(score[a], a) : 0;
  }
};

// An image's kept boxes, (C - 1, per_class) slots, kept[l] of list l used.
struct SsdKeptKey {
  const SsdDetection *det;  // (C - 1, per_class)
  const int32_t *kept;      // (C - 1)
  int per_class;
  __device__ SsdKey operator()(int64_t i) const {
    return i % per_class < kept[i / per_class] ? ssd_key(det[i].score, i) : 0;
  }
};

// The k-th highest of the keys key(0..n) (k at least 1 and at most the
// nonzero keys, which are distinct): the largest t with k keys >= t, bit by
// bit. Every thread gets it. shared: 32 values.
template <typename KeyFn>
static __device__ SsdKey ssd_kth_key(KeyFn key, int64_t n, long long k, long long *shared) {
  SsdKey t = 0;
  for (int bit = 63; bit >= 0; bit--) {
    SsdKey cand = t | (1ull << bit);
    long long ge = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ge += key(i) >= cand;
    if (ssd_block_sum(ge, shared) >= k) t = cand;
  }
  return t;
}

// Puts the min(limit, nonzero) highest keys of key(0..n) in keys[0..size),
// sorted descending, zeros after them (size a power of 2 >= limit); returns
// their count. shared: 32 values; *n_taken: a shared counter, left at the
// keys gathered.
template <typename KeyFn>
static __device__ int ssd_top_keys(KeyFn key, int64_t n, int limit, SsdKey *keys, int size,
                                   long long *shared, int *n_taken) {
  long long nonzero = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) nonzero += key(i) != 0;
  nonzero = ssd_block_sum(nonzero, shared);
  SsdKey cut = nonzero > limit ? ssd_kth_key(key, n, limit, shared) : 1;
  for (int i = threadIdx.x; i < size; i += blockDim.x) keys[i] = 0;
  if (threadIdx.x == 0) *n_taken = 0;
  __syncthreads();
  // In any order: the keys are distinct, the sort below fixes it.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    SsdKey k = key(i);
    if (k >= cut) keys[atomicAdd(n_taken, 1)] = k;
  }
  // Bitonic: each pass, the thread of the lower index of a pair orders it.
  for (int span = 2; span <= size; span <<= 1)
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        int j = i ^ stride;
        if (j < i) continue;
        SsdKey x = keys[i], y = keys[j];
        if ((x < y) == ((i & span) == 0)) keys[i] = y, keys[j] = x;
      }
    }
  __syncthreads();
  return *n_taken < limit ? *n_taken : limit;
}

// ssd_decode and ssd_iou (ssd_boxes.c), rounding after each operation.
static __device__ void ssd_decode_dev(const float *d, const float *off, float *ltrb) {
  float x = __fadd_rn(__fmul_rn(__fmul_rn(SSD_VAR_XY, off[0]), d[2]), d[0]);
  float y = __fadd_rn(__fmul_rn(__fmul_rn(SSD_VAR_XY, off[1]), d[3]), d[1]);
  float w = __fmul_rn((float)exp((double)__fmul_rn(SSD_VAR_WH, off[2])), d[2]);
  float h = __fmul_rn((float)exp((double)__fmul_rn(SSD_VAR_WH, off[3])), d[3]);
  ltrb[0] = __fadd_rn(x, -__fmul_rn(0.5f, w));
  ltrb[1] = __fadd_rn(y, -__fmul_rn(0.5f, h));
  ltrb[2] = __fadd_rn(x, __fmul_rn(0.5f, w));
  ltrb[3] = __fadd_rn(y, __fmul_rn(0.5f, h));
}

static __device__ float ssd_iou_dev(const float *a, const float *b) {
  float w = fmaxf(__fadd_rn(fminf(a[2], b[2]), -fmaxf(a[0], b[0])), 0.0f);
  float h = fmaxf(__fadd_rn(fminf(a[3], b[3]), -fmaxf(a[1], b[1])), 0.0f);
  float inter = __fmul_rn(w, h);
  float area_a = __fmul_rn(__fadd_rn(a[2], -a[0]), __fadd_rn(a[3], -a[1]));
  float area_b = __fmul_rn(__fadd_rn(b[2], -b[0]), __fadd_rn(b[3], -b[1]));
  return __fdiv_rn(inter, __fadd_rn(__fadd_rn(area_a, area_b), -inter));
}

// The smallest power of 2 >= n (n >= 1).
static int ssd_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Block (class c - 1, image b): the class's candidates, decoded, NMS'd;
// the kept ones to kept (B, C - 1, max_per_class) by descending score, their
// count to n_kept (B, C - 1). Dynamic shared: sort_size keys, then
// max_per_class boxes (4 floats) and alive flags.
static __global__ void ssd_class_nms_kernel(const float *scores, const float *loc,
                                            const float *db_xywh, int64_t n, int64_t classes,
                                            SsdNmsParams p, int sort_size, SsdDetection *kept,
                                            int32_t *n_kept) {
  extern __shared__ SsdKey ssd_nms_shared[];
  __shared__ long long sums[32];
  __shared__ int n_taken;
  int64_t b = blockIdx.y, list = b * (classes - 1) + blockIdx.x;
  SsdKey *keys = ssd_nms_shared;                                 // (sort_size)
  float *box = (float *)(keys + sort_size);                      // (max_per_class, 4)
  unsigned char *alive = (unsigned char *)(box + 4 * p.max_per_class);  // (max_per_class)
  SsdCandidateKey key = {scores + list * n, p.score_threshold};
  int k = ssd_top_keys(key, n, p.max_per_class, keys, sort_size, sums, &n_taken);
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    int64_t a = ssd_key_at(keys[i]);
    ssd_decode_dev(db_xywh + 4 * a, loc + (b * n + a) * 4, box + 4 * i);
    alive[i] = 1;
  }
  __syncthreads();
  // Greedy NMS as nms_class: the first alive is kept and drops the later
  // ones of IoU >= threshold (a NaN IoU drops too).
  for (int i = 0; i < k; i++) {
    if (alive[i])
      for (int j = i + 1 + threadIdx.x; j < k; j += blockDim.x)
        if (alive[j] && !(ssd_iou_dev(box + 4 * j, box + 4 * i) < p.iou_threshold)) alive[j] = 0;
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  SsdDetection *out = kept + list * p.max_per_class;  // (max_per_class)
  int r = 0;
  for (int i = 0; i < k; i++) {
    if (!alive[i]) continue;
    SsdDetection *d = &out[r++];
    for (int q = 0; q < 4; q++) d->ltrb[q] = box[4 * i + q];
    d->score = ssd_key_score(keys[i]);
    d->label = (int32_t)blockIdx.x + 1;
    d->box = (int32_t)ssd_key_at(keys[i]);
  }
  n_kept[list] = r;
}

// Block b: the max_output highest of image b's kept boxes, ties to the
// lower class (then the class's own order), to out (B, max_output); their
// count to count (B). Dynamic shared: sort_size keys.
static __global__ void ssd_merge_kernel(const SsdDetection *kept, const int32_t *n_kept,
                                        int64_t classes, int per_class, int max_output,
                                        int sort_size, SsdDetection *out, int32_t *count) {
  extern __shared__ SsdKey ssd_merge_shared[];
  __shared__ long long sums[32];
  __shared__ int n_taken;
  int64_t b = blockIdx.x, slots = (classes - 1) * per_class;
  const SsdDetection *det = kept + b * slots;  // (C - 1, per_class)
  SsdKeptKey key = {det, n_kept + b * (classes - 1), per_class};
  int k = ssd_top_keys(key, slots, max_output, ssd_merge_shared, sort_size, sums, &n_taken);
  for (int i = threadIdx.x; i < k; i += blockDim.x)
    out[b * max_output + i] = det[ssd_key_at(ssd_merge_shared[i])];
  if (threadIdx.x == 0) count[b] = k;
}

extern "C" void ssd_detect_batch_cuda(const Device *dev, const SsdDeviceBoxes *boxes,
                                      int64_t batch, const float *loc, const float *logits,
                                      int64_t n_classes, const SsdNmsParams *p, Arena *scratch,
                                      SsdDetection *out, int32_t *count) {
  const char *op = "ssd_detect_batch_cuda";
  OP_REQUIRE(op, boxes->device == DEVICE_CUDA && scratch->device == DEVICE_CUDA);
  OP_REQUIRE(op, batch > 0 && batch <= 65535 && boxes->n > 0 && boxes->n < 0xffffffffLL);
  OP_REQUIRE(op, n_classes > 1 && (n_classes - 1) * p->max_per_class < 0xffffffffLL);
  OP_REQUIRE(op, p->max_per_class >= 1 && p->max_per_class <= SSD_DETECT_MAX_SORT);
  OP_REQUIRE(op, p->max_output >= 1 && p->max_output <= SSD_DETECT_MAX_SORT);
  size_t mark = arena_mark(scratch);
  int64_t n = boxes->n, lists = batch * (n_classes - 1);
  float *scores =
      (float *)arena_alloc(scratch, (size_t)(lists * n) * sizeof(float));  // (B, C - 1, n)
  SsdDetection *kept = (SsdDetection *)arena_alloc(
      scratch, (size_t)(lists * p->max_per_class) * sizeof(SsdDetection));  // (B, C - 1, K)
  int32_t *n_kept = (int32_t *)arena_alloc(scratch, (size_t)lists * sizeof(int32_t));  // (B, C - 1)
  SsdDetection *d_out = (SsdDetection *)arena_alloc(
      scratch, (size_t)(batch * p->max_output) * sizeof(SsdDetection));  // (B, max_output)
  int32_t *d_count = (int32_t *)arena_alloc(scratch, (size_t)batch * sizeof(int32_t));  // (B)
  ssd_scores_kernel<<<ops_blocks(batch * n, SSD_SCORE_THREADS), SSD_SCORE_THREADS, 0,
                      dev->stream>>>(logits, batch, n, n_classes, scores);
  CHECK_LAUNCH();
  int class_sort = ssd_pow2(p->max_per_class), merge_sort = ssd_pow2(p->max_output);
  size_t nms_shared_bytes = (size_t)class_sort * sizeof(SsdKey) +
                            (size_t)p->max_per_class * (4 * sizeof(float) + 1);
  ssd_class_nms_kernel<<<dim3((unsigned)(n_classes - 1), (unsigned)batch), SSD_DETECT_THREADS,
                         nms_shared_bytes, dev->stream>>>(scores, loc, boxes->xywh, n,
                                                          n_classes, *p, class_sort, kept,
                                                          n_kept);
  CHECK_LAUNCH();
  ssd_merge_kernel<<<(unsigned)batch, SSD_DETECT_THREADS, (size_t)merge_sort * sizeof(SsdKey),
                     dev->stream>>>(kept, n_kept, n_classes, p->max_per_class, p->max_output,
                                    merge_sort, d_out, d_count);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpyAsync(out, d_out, (size_t)(batch * p->max_output) * sizeof(SsdDetection),
                             cudaMemcpyDeviceToHost, dev->stream));
  CHECK_CUDA(cudaMemcpyAsync(count, d_count, (size_t)batch * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, dev->stream));
  CHECK_CUDA(cudaStreamSynchronize(dev->stream));
  arena_release(scratch, mark);
}
