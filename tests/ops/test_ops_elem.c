// Elementwise, data-movement, reduction, cast and top-k ops: hand-checked
// CPU cases, CUDA against CPU for every dtype (skipped without a GPU), and
// the preconditions' error messages.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/augment.h"
#include "ops/elem.h"
#include "ops_test_util.h"
#include "tests/harness/test.h"

static const Device kCpu = {.kind = DEVICE_CPU};

#define T1(p, a) TENSOR((p), DT_F32, DEVICE_CPU, (a))
// A pointer to a temporary Tensor, for arguments built in place.
#define TP(...) ((Tensor[1]){TENSOR(__VA_ARGS__)})

static void arithmetic_hand_checked(void) {
  float a[5] = {1, -2, 3.5f, 0, 10}, b[5] = {2, 2, -1, 7, 0.5f}, y[5];
  Tensor ta = T1(a, 5), tb = T1(b, 5), ty = T1(y, 5);
  op_add(&kCpu, &ta, &tb, &ty);
  CHECK(y[0] == 3 && y[1] == 0 && y[2] == 2.5f && y[3] == 7 && y[4] == 10.5f);
  op_mul(&kCpu, &ta, &tb, &ty);
  CHECK(y[0] == 2 && y[1] == -4 && y[2] == -3.5f && y[3] == 0 && y[4] == 5);
  op_scale(&kCpu, &ta, -2, &ty);
  CHECK(y[0] == -2 && y[1] == 4 && y[2] == -7 && y[3] == 0 && y[4] == -20);
  op_axpy(&kCpu, 0.5f, &ta, &tb);  // b += a / 2, in place
  CHECK(b[0] == 2.5f && b[1] == 1 && b[2] == 0.75f && b[3] == 7 && b[4] == 5.5f);
}

// x[i] = i everywhere: every output names the input it came from.
static float *iota(int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  return x;
}

static void concat_split_hand_checked(void) {
  // (2, 2, 3) and (2, 1, 3) along axis 1 -> (2, 3, 3).
  float *a = iota(12), *b = iota(6), y[18], a2[12], b2[6];
  for (int i = 0; i < 6; i++) b[i] += 100;
  Tensor parts[2] = {TENSOR(a, DT_F32, DEVICE_CPU, 2, 2, 3), TENSOR(b, DT_F32, DEVICE_CPU, 2, 1, 3)};
  Tensor ty = TENSOR(y, DT_F32, DEVICE_CPU, 2, 3, 3);
  op_concat(&kCpu, parts, 2, 1, &ty);
  float want[18] = {0, 1, 2, 3, 4, 5, 100, 101, 102, 6, 7, 8, 9, 10, 11, 103, 104, 105};
  for (int i = 0; i < 18; i++) CHECK_MSG(y[i] == want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
  Tensor back[2] = {TENSOR(a2, DT_F32, DEVICE_CPU, 2, 2, 3), TENSOR(b2, DT_F32, DEVICE_CPU, 2, 1, 3)};
  op_split(&kCpu, &ty, 1, back, 2);
  CHECK(memcmp(a, a2, sizeof a2) == 0 && memcmp(b, b2, sizeof b2) == 0);
  // Along the last axis of 16-bit data: whole rows interleave.
  uint16_t u[4] = {1, 2, 3, 4}, v[2] = {9, 8}, w[6];
  Tensor hp[2] = {TENSOR(u, DT_BF16, DEVICE_CPU, 2, 2), TENSOR(v, DT_BF16, DEVICE_CPU, 2, 1)};
  Tensor tw = TENSOR(w, DT_BF16, DEVICE_CPU, 2, 3);
  op_concat(&kCpu, hp, 2, 1, &tw);
  CHECK(w[0] == 1 && w[1] == 2 && w[2] == 9 && w[3] == 3 && w[4] == 4 && w[5] == 8);
  free(a), free(b);
}

static void permutes_move_every_element(void) {
  enum { N = 2, C = 3, H = 4, W = 5 };
  float *x = iota(N * C * H * W), y[N * C * H * W], z[N * C * H * W];
  Tensor nchw = TENSOR(x, DT_F32, DEVICE_CPU, N, C, H, W);
  Tensor nhwc = TENSOR(y, DT_F32, DEVICE_CPU, N, H, W, C);
  Tensor back = TENSOR(z, DT_F32, DEVICE_CPU, N, C, H, W);
  op_permute(&kCpu, &nchw, (int[]){0, 2, 3, 1}, &nhwc);
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++)
        for (int c = 0; c < C; c++)
          CHECK(y[((n * H + h) * W + w) * C + c] == x[((n * C + c) * H + h) * W + w]);
  op_permute(&kCpu, &nhwc, (int[]){0, 3, 1, 2}, &back);
  CHECK(memcmp(x, z, sizeof z) == 0);
  // (B, T, H, D) -> (B, H, T, D): attention heads.
  enum { B = 2, T = 3, NH = 4, D = 5 };
  Tensor bthd = TENSOR(x, DT_F32, DEVICE_CPU, B, T, NH, D);
  Tensor bhtd = TENSOR(y, DT_F32, DEVICE_CPU, B, NH, T, D);
  op_permute(&kCpu, &bthd, (int[]){0, 2, 1, 3}, &bhtd);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++)
          CHECK(y[((b * NH + h) * T + t) * D + d] == x[((b * T + t) * NH + h) * D + d]);
  free(x);
}

static void reductions_hand_checked(void) {
  float *x = iota(24), y[12];  // (2, 3, 4)
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 2, 3, 4);
  Tensor y12 = T1(y, 12), y4 = T1(y, 4), y1 = T1(y, 1);
  op_sum(&kCpu, &tx, 1, &y12);  // y[j] = j + (12 + j)
  for (int j = 0; j < 12; j++) CHECK(y[j] == 12 + 2 * j);
  op_mean(&kCpu, &tx, 2, &y4);  // mean over 6 rows of 4: (j + 4 r) averaged over r = 0..5
  for (int j = 0; j < 4; j++) CHECK_NEAR(y[j], j + 10, 1e-6);
  op_sum(&kCpu, &tx, 3, &y1);
  CHECK(y[0] == 276);
  op_mean(&kCpu, &tx, 3, &y1);
  CHECK(y[0] == 11.5f);
  free(x);
}

static void reduction_over_zero_axes_copies(void) {
  float x[3] = {1, 2, 3}, y[3];
  Tensor tx = T1(x, 3), ty = T1(y, 3);
  op_sum(&kCpu, &tx, 0, &ty);
  CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3);
}

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// Known encodings, the round-to-nearest-even ties included.
static void casts_hand_checked(void) {
  float x[] = {1.0f, -2.0f, 65504.0f, 65520.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
               0x1p-24f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, NAN, -INFINITY};
  uint16_t want_h[] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0x3c00, 0x3c02, 0x0001, 0x3c04, 0x3c0c, 0x7e00, 0xfc00};
  uint16_t want_b[] = {0x3f80, 0xc000, 0x4780, 0x4780, 0x3f80, 0x3f80, 0x3380, 0x3f80, 0x3f82, 0x7fc0, 0xff80};
  enum { N = sizeof x / sizeof x[0] };
  uint16_t h[N], b[N];
  float back[N];
  Tensor tx = T1(x, N), th = TENSOR(h, DT_F16, DEVICE_CPU, N), tb = TENSOR(b, DT_BF16, DEVICE_CPU, N);
  op_cast(&kCpu, &tx, &th);
  op_cast(&kCpu, &tx, &tb);
  for (int i = 0; i < N; i++) {
    CHECK_MSG(h[i] == want_h[i], "fp16 of %a: %04x, want %04x", x[i], h[i], want_h[i]);
    CHECK_MSG(b[i] == want_b[i], "bf16 of %a: %04x, want %04x", x[i], b[i], want_b[i]);
  }
  Tensor tback = T1(back, N);
  op_cast(&kCpu, &th, &tback);
  CHECK(back[0] == 1.0f && back[2] == 65504.0f && isinf(back[3]) && back[6] == 0x1p-24f && isnan(back[9]));
  // fp16 -> bf16 goes through fp32: 1 + 2^-10 (exact in fp16) rounds to 1 in bf16.
  uint16_t h1 = 0x3c01, b1;
  op_cast(&kCpu, TP(&h1, DT_F16, DEVICE_CPU, 1), TP(&b1, DT_BF16, DEVICE_CPU, 1));
  CHECK_EQ_INT(b1, 0x3f80);
  CHECK(bits(back[1]) == bits(-2.0f));
}

static void topk_hand_checked(void) {
  float x[] = {3, 1, 4, 1, 5, 9, 2, 6,          // row 0: plain
               2, 7, 7, 1, 7, -INFINITY, 0, 7,  // row 1: ties go smallest index first
               1, NAN, -1, 0, -0.0f, 2, 3, 8};  // row 2: NaN counts as largest
  float v[12];
  int32_t idx[12];
  Tensor tx = TENSOR(x, DT_F32, DEVICE_CPU, 3, 8), tv = TENSOR(v, DT_F32, DEVICE_CPU, 3, 4);
  Tensor ti = TENSOR(idx, DT_I32, DEVICE_CPU, 3, 4);
  op_topk(&kCpu, &tx, 4, &tv, &ti);
  int32_t want_i[12] = {5, 7, 4, 2, 1, 2, 4, 7, 1, 7, 6, 5};
  for (int i = 0; i < 12; i++) CHECK_MSG(idx[i] == want_i[i], "index %d: %d, want %d", i, idx[i], want_i[i]);
  CHECK(v[0] == 9 && v[1] == 6 && v[2] == 5 && v[3] == 4 && v[4] == 7 && isnan(v[8]) && v[9] == 8);
  // k = N sorts the row; the last of row 1 is -inf, after 0 and the +0/-0 pair of row 2.
  float all[8];
  int32_t all_i[8];
  op_topk(&kCpu, TP(x + 16, DT_F32, DEVICE_CPU, 8), 8, TP(all, DT_F32, DEVICE_CPU, 8),
          TP(all_i, DT_I32, DEVICE_CPU, 8));
  int32_t sorted_i[8] = {1, 7, 6, 5, 0, 3, 4, 2};  // NaN 8 3 2 1 +0 -0 -1
  for (int i = 0; i < 8; i++) CHECK_EQ_INT(all_i[i], sorted_i[i]);
}

// ---------------------------------------------------------------- bad input

static void concat_mismatch(void *ctx) {
  (void)ctx;
  float buf[32];
  Tensor parts[2] = {TENSOR(buf, DT_F32, DEVICE_CPU, 2, 3), TENSOR(buf, DT_F32, DEVICE_CPU, 3, 3)};
  Tensor y = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 6);
  op_concat(&kCpu, parts, 2, 1, &y);
}

static void topk_too_many(void *ctx) {
  (void)ctx;
  float buf[32];
  int32_t idx[32];
  Tensor x = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 3), v = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 4);
  op_topk(&kCpu, &x, 4, &v, TP(idx, DT_I32, DEVICE_CPU, 2, 4));
}

static void permute_repeated_axis(void *ctx) {
  (void)ctx;
  float buf[32];
  Tensor x = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 2), y = TENSOR(buf, DT_F32, DEVICE_CPU, 2, 2);
  op_permute(&kCpu, &x, (int[]){0, 0}, &y);
}

static void preconditions_name_the_op(void) {
  CHECK_DIES_WITH(concat_mismatch, NULL, "op_concat: precondition failed");
  CHECK_DIES_WITH(topk_too_many, NULL, "op_topk: precondition failed: k >= 1 && k <= *cols");
  CHECK_DIES_WITH(permute_repeated_axis, NULL, "op_permute: precondition failed");
}

// ---------------------------------------------------------------- CUDA against CPU

// The CPU computes in fp32 from the same rounded inputs; the GPU rounds its
// fp32 result once into the output dtype: 2^-11 (fp16) or 2^-8 (bf16)
// relative per element at most, so 1e-3 / 8e-3 in relative L2; fp32 is the
// same arithmetic, 1e-6.
static double tol_once_rounded(DType dt) { return dt == DT_F32 ? 1e-6 : dt == DT_F16 ? 1e-3 : 8e-3; }

static void arithmetic_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  // An odd length (vector body plus tail) and a view one element in, which
  // breaks 16-byte alignment and takes the scalar kernel.
  int64_t n = 100003;
  for (int di = 0; di < N_FLOAT_DTYPES; di++)
    for (int offset = 0; offset < 2; offset++) {
      DType dt = kFloatDtypes[di];
      int64_t m = n - offset;
      float *a = random_array(n, 1, -2, 2, dt), *b = random_array(n, 2, -2, 2, dt), *y = malloc(n * 4);
      uint8_t *da = upload(a, n, dt), *db = upload(b, n, dt), *dy = upload(b, n, dt);
      size_t off = (size_t)offset * dtype_size(dt);
      Tensor ga = TENSOR(da + off, dt, DEVICE_CUDA, m), gb = TENSOR(db + off, dt, DEVICE_CUDA, m);
      Tensor gy = TENSOR(dy + off, dt, DEVICE_CUDA, m);
      Tensor ca = T1(a + offset, m), cb = T1(b + offset, m), cy = T1(y + offset, m);
      struct {
        const char *name;
        int op;
      } ops[] = {{"add", 0}, {"mul", 1}, {"scale", 2}, {"axpy", 3}};
      for (int k = 0; k < 4; k++) {
        if (ops[k].op == 3) {  // axpy updates y = b in place on both sides
          memcpy(y, b, n * 4);
          device_free(DEVICE_CUDA, dy);
          dy = upload(b, n, dt);
          gy.data = dy + off;
        }
        if (ops[k].op == 0) op_add(&kCpu, &ca, &cb, &cy), op_add(&dev, &ga, &gb, &gy);
        if (ops[k].op == 1) op_mul(&kCpu, &ca, &cb, &cy), op_mul(&dev, &ga, &gb, &gy);
        if (ops[k].op == 2) op_scale(&kCpu, &ca, -1.5f, &cy), op_scale(&dev, &ga, -1.5f, &gy);
        if (ops[k].op == 3) op_axpy(&kCpu, 0.75f, &ca, &cy), op_axpy(&dev, 0.75f, &ga, &gy);
        check_close(ops[k].name, dt, gy.data, y + offset, m, tol_once_rounded(dt));
      }
      device_free(DEVICE_CUDA, da), device_free(DEVICE_CUDA, db), device_free(DEVICE_CUDA, dy);
      free(a), free(b), free(y);
    }
  device_close(&dev);
}

// Data movement is exact: tolerance 0.
static void movement_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  for (int di = 0; di < N_FLOAT_DTYPES; di++) {
    DType dt = kFloatDtypes[di];
    int64_t n = 3 * 5 * 7 * 9;
    float *x = random_array(n, 3, -1, 1, dt), *y = malloc(n * 4);
    void *dx = upload(x, n, dt), *dy = upload(x, n, dt);
    int perms[3][4] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {0, 2, 1, 3}};
    for (int p = 0; p < 3; p++) {
      Tensor cx = TENSOR(x, DT_F32, DEVICE_CPU, 3, 5, 7, 9), gx = cx;
      gx.data = dx, gx.dtype = dt, gx.device = DEVICE_CUDA;
      int64_t ys[4];
      for (int k = 0; k < 4; k++) ys[k] = cx.shape[perms[p][k]];
      Tensor cy = tensor_make(y, DT_F32, DEVICE_CPU, 4, ys), gy = tensor_make(dy, dt, DEVICE_CUDA, 4, ys);
      op_permute(&kCpu, &cx, perms[p], &cy);
      op_permute(&dev, &gx, perms[p], &gy);
      check_close("permute", dt, dy, y, n, 0);
    }
    // Concat along the middle axis of (3, 5 | 2 | 8, 9) views of x, then split back.
    int64_t lens[3] = {5, 2, 8};
    Tensor cp[3], gp[3];
    int64_t start = 0;
    for (int k = 0; k < 3; k++) {
      cp[k] = TENSOR(x + start, DT_F32, DEVICE_CPU, 3, lens[k], 21);
      gp[k] = TENSOR((uint8_t *)dx + start * dtype_size(dt), dt, DEVICE_CUDA, 3, lens[k], 21);
      start += 3 * lens[k] * 21;
    }
    Tensor cy = TENSOR(y, DT_F32, DEVICE_CPU, 3, 15, 21), gy = TENSOR(dy, dt, DEVICE_CUDA, 3, 15, 21);
    op_concat(&kCpu, cp, 3, 1, &cy);
    op_concat(&dev, gp, 3, 1, &gy);
    check_close("concat", dt, dy, y, n, 0);
    void *dz = upload(x, n, dt);
    for (int k = 0; k < 3; k++) gp[k].data = (uint8_t *)dz + ((uint8_t *)gp[k].data - (uint8_t *)dx);
    op_split(&dev, &gy, 1, gp, 3);
    check_close("split", dt, dz, x, n, 0);
    device_free(DEVICE_CUDA, dx), device_free(DEVICE_CUDA, dy), device_free(DEVICE_CUDA, dz);
    free(x), free(y);
  }
  device_close(&dev);
}

// fp32 sums in another order (tree over lanes, then parts) against double:
// ~1e-7 relative per sum of O(1e5) terms of one sign; 1e-5 leaves room.
static void reductions_cuda_match_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t shapes[][2] = {{50000, 3}, {7, 1000}, {200000, 1}, {1, 33}, {4099, 65}};
  for (int di = 0; di < N_FLOAT_DTYPES; di++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int mean = 0; mean < 2; mean++) {
        DType dt = kFloatDtypes[di];
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        float *x = random_array(n, 4 + s, 0, 1, dt), *y = malloc(cols * 4);
        void *dx = upload(x, n, dt), *dy = upload(x, cols, DT_F32);
        Tensor cx = TENSOR(x, DT_F32, DEVICE_CPU, rows, cols), gx = TENSOR(dx, dt, DEVICE_CUDA, rows, cols);
        Tensor cy = T1(y, cols), gy = TENSOR(dy, DT_F32, DEVICE_CUDA, cols);
        int lead = cols == 1 ? 2 : 1;
        if (mean) op_mean(&kCpu, &cx, lead, &cy), op_mean(&dev, &gx, lead, &gy);
        else op_sum(&kCpu, &cx, lead, &cy), op_sum(&dev, &gx, lead, &gy);
        check_close(mean ? "mean" : "sum", DT_F32, dy, y, cols, 1e-5);
        device_free(DEVICE_CUDA, dx), device_free(DEVICE_CUDA, dy);
        free(x), free(y);
      }
  device_close(&dev);
}

// Casts must match the CPU bit for bit for every pair of dtypes, on random
// values and on the special ones (ties, overflow, subnormals, NaN, inf).
static void casts_cuda_match_cpu_bitwise(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t n = 4096;
  float *x = random_array(n, 5, -70000, 70000, DT_F32);
  float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f, 0x1.8p-24f,
                     1.0f + 0x1p-8f, NAN, -NAN, INFINITY, -0.0f, 3e38f, 1e-40f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i] = special[i];
  for (int64_t i = 100; i < 1100; i++) x[i] *= 1e-9f;  // subnormal fp16 range
  for (int si = 0; si < N_FLOAT_DTYPES; si++)
    for (int ti = 0; ti < N_FLOAT_DTYPES; ti++) {
      DType src = kFloatDtypes[si], dst = kFloatDtypes[ti];
      size_t out_bytes = (size_t)n * dtype_size(dst);
      uint8_t *host_src = malloc((size_t)n * 4), *want = malloc(out_bytes), *got = malloc(out_bytes);
      op_cast(&kCpu, TP(x, DT_F32, DEVICE_CPU, n), TP(host_src, src, DEVICE_CPU, n));
      op_cast(&kCpu, TP(host_src, src, DEVICE_CPU, n), TP(want, dst, DEVICE_CPU, n));
      void *dsrc = device_alloc(DEVICE_CUDA, (size_t)n * 4), *ddst = device_alloc(DEVICE_CUDA, out_bytes);
      device_copy(DEVICE_CUDA, dsrc, DEVICE_CPU, host_src, (size_t)n * dtype_size(src));
      op_cast(&dev, TP(dsrc, src, DEVICE_CUDA, n), TP(ddst, dst, DEVICE_CUDA, n));
      device_copy(DEVICE_CPU, got, DEVICE_CUDA, ddst, out_bytes);
      CHECK_MSG(memcmp(got, want, out_bytes) == 0, "%s -> %s differs from the CPU", dtype_name(src),
                dtype_name(dst));
      device_free(DEVICE_CUDA, dsrc), device_free(DEVICE_CUDA, ddst);
      free(host_src), free(want), free(got);
    }
  free(x);
  device_close(&dev);
}

// Top-k selects, so values and indices match exactly; the rows have many
// ties (values from a small set) to exercise the index order.
static void topk_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  int64_t shapes[][3] = {{97, 101, 10}, {3, 8732, 200}, {5, 384, 20}, {2, 7, 7}};
  for (int di = 0; di < N_FLOAT_DTYPES; di++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      DType dt = kFloatDtypes[di];
      int64_t rows = shapes[s][0], cols = shapes[s][1], k = shapes[s][2], n = rows * cols;
      float *x = random_array(n, 6 + s, -4, 4, dt), *v = malloc(rows * k * 4);
      for (int64_t i = 0; i < n; i += 3) x[i] = roundf(x[i]);  // ties
      int32_t *idx = malloc(rows * k * 4), *gidx = malloc(rows * k * 4);
      void *dx = upload(x, n, dt), *dv = upload(x, rows * k, dt), *di32 = device_alloc(DEVICE_CUDA, rows * k * 4);
      op_topk(&kCpu, TP(x, DT_F32, DEVICE_CPU, rows, cols), (int)k,
              TP(v, DT_F32, DEVICE_CPU, rows, k), TP(idx, DT_I32, DEVICE_CPU, rows, k));
      op_topk(&dev, TP(dx, dt, DEVICE_CUDA, rows, cols), (int)k, TP(dv, dt, DEVICE_CUDA, rows, k),
              TP(di32, DT_I32, DEVICE_CUDA, rows, k));
      device_copy(DEVICE_CPU, gidx, DEVICE_CUDA, di32, (size_t)(rows * k) * 4);
      CHECK_MSG(memcmp(idx, gidx, (size_t)(rows * k) * 4) == 0, "indices differ (%s, shape %zu)",
                dtype_name(dt), s);
      check_close("topk values", dt, dv, v, rows * k, 0);
      device_free(DEVICE_CUDA, dx), device_free(DEVICE_CUDA, dv), device_free(DEVICE_CUDA, di32);
      free(x), free(v), free(idx), free(gidx);
    }
  device_close(&dev);
}

// ImageNet normalisation of loader bytes: the loader's own CPU version
// (augment_normalize_cpu) bit for bit, and a hand-checked 2-channel case.
static ChannelAffine imagenet_affine(void) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  ChannelAffine a = {{0}, {0}};
  for (int c = 0; c < 3; c++) {
    a.scale[c] = 1.0f / (255.0f * std[c]);
    a.shift[c] = -mean[c] / std[c];
  }
  return a;
}

static void affine_u8_matches_loader_normalisation(void) {
  enum { PIXELS = 7 * 5 };
  uint8_t x[PIXELS * 3];
  for (int i = 0; i < PIXELS * 3; i++) x[i] = (uint8_t)(i * 37 + 11);
  float want[PIXELS * 3], got[PIXELS * 3];
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  augment_normalize_cpu(x, want, PIXELS, mean, std);
  ChannelAffine a = imagenet_affine();
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(got, DT_F32, DEVICE_CPU, 1, 7, 5, 3));
  CHECK(memcmp(want, got, sizeof want) == 0);
  uint8_t two[4] = {0, 255, 10, 20};
  float out[4];
  ChannelAffine b = {{2, 0.5f}, {1, -1}};
  op_affine_u8(&kCpu, TP(two, DT_U8, DEVICE_CPU, 2, 2), &b, TP(out, DT_F32, DEVICE_CPU, 2, 2));
  CHECK(out[0] == 1 && out[1] == 126.5f && out[2] == 21 && out[3] == 9);
  // Low-precision output: the fp32 result rounded once.
  uint16_t lowp[PIXELS * 3];
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(lowp, DT_BF16, DEVICE_CPU, 1, 7, 5, 3));
  int same = 1;
  for (int i = 0; i < PIXELS * 3; i++) same &= lowp[i] == f32_to_bf16(want[i]);
  CHECK(same);
  op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 1, 7, 5, 3), &a, TP(lowp, DT_F16, DEVICE_CPU, 1, 7, 5, 3));
  same = 1;
  for (int i = 0; i < PIXELS * 3; i++) same &= lowp[i] == f32_to_f16(want[i]);
  CHECK(same);
}

static void affine_u8_cuda_matches_cpu(void) {
  Device dev;
  open_gpu_or_skip(&dev);
  const int64_t n = 3 * 33 * 31 * 3;  // odd extents
  uint8_t *x = malloc((size_t)n);
  float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(rng_u32(9, 0, (uint64_t)i) >> 24);
  ChannelAffine a = imagenet_affine();
  void *dx = device_alloc(DEVICE_CUDA, (size_t)n), *dy = device_alloc(DEVICE_CUDA, (size_t)n * 4);
  device_copy(DEVICE_CUDA, dx, DEVICE_CPU, x, (size_t)n);
  const DType dts[] = {DT_F32, DT_BF16, DT_F16};
  for (int k = 0; k < 3; k++) {
    DType dt = dts[k];
    void *cpu_out = malloc((size_t)n * 4), *gpu_out = malloc((size_t)n * 4);
    op_affine_u8(&kCpu, TP(x, DT_U8, DEVICE_CPU, 3, 33, 31, 3), &a, TP(cpu_out, dt, DEVICE_CPU, 3, 33, 31, 3));
    op_affine_u8(&dev, TP(dx, DT_U8, DEVICE_CUDA, 3, 33, 31, 3), &a, TP(dy, dt, DEVICE_CUDA, 3, 33, 31, 3));
    device_sync(&dev);
    device_copy(DEVICE_CPU, gpu_out, DEVICE_CUDA, dy, (size_t)n * dtype_size(dt));
    op_cast(&kCpu, TP(cpu_out, dt, DEVICE_CPU, n), TP(want, DT_F32, DEVICE_CPU, n));
    op_cast(&kCpu, TP(gpu_out, dt, DEVICE_CPU, n), TP(got, DT_F32, DEVICE_CPU, n));
    // One multiply and one add (fused on the GPU, so the fp32 results may
    // differ in the last bit): within 1e-6 relative in fp32; in fp16 / bf16
    // that last bit can move the rounding by one unit of the narrow type
    // (2^-11 / 2^-8 relative).
    double tol = dt == DT_F32 ? 1e-6 : dt == DT_F16 ? 1e-3 : 8e-3;
    test_check_error("affine_u8 y", dtype_name(dt), test_rel_error(got, want, n), tol);
    free(cpu_out), free(gpu_out);
  }
  device_free(DEVICE_CUDA, dx), device_free(DEVICE_CUDA, dy);
  free(x), free(want), free(got);
  device_close(&dev);
}

int main(void) {
  TEST_RUN(arithmetic_hand_checked);
  TEST_RUN(concat_split_hand_checked);
  TEST_RUN(permutes_move_every_element);
  TEST_RUN(reductions_hand_checked);
  TEST_RUN(reduction_over_zero_axes_copies);
  TEST_RUN(casts_hand_checked);
  TEST_RUN(topk_hand_checked);
  TEST_RUN(preconditions_name_the_op);
  TEST_RUN(arithmetic_cuda_matches_cpu);
  TEST_RUN(movement_cuda_matches_cpu);
  TEST_RUN(reductions_cuda_match_cpu);
  TEST_RUN(casts_cuda_match_cpu_bitwise);
  TEST_RUN(topk_cuda_matches_cpu);
  TEST_RUN(affine_u8_matches_loader_normalisation);
  TEST_RUN(affine_u8_cuda_matches_cpu);
  return test_finish();
}
