// test_ops_async.c: every CUDA op keeps to the caller's stream. Called a
// second time on the same shapes (the first call builds plans; the
// convolutions' first call is checked on its own), no op makes the host wait for the
// device, allocates device memory, or queues work on another stream; so a
// trainer's host thread runs ahead of the GPU and launches never leave it
// idle. The values computed are not checked here (the op tests do that):
// the inputs are whatever the allocations hold, except that indices and
// lengths are valid. Counting host waits needs the CUDA emulation
// (make test-emu, tests/emu/emu_activity.h); elsewhere the cases skip.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/device.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "tests/harness/test.h"

static Device g_gpu;
static void *g_owned[64];
static int g_owned_count;

// A device tensor of the given shape, its memory freed at the end of the case.
static Tensor dev_tensor(DType dtype, int ndim, const int64_t *shape) {
  Tensor t = tensor_make(NULL, dtype, DEVICE_CUDA, ndim, shape);
  REQUIRE(g_owned_count < 64);
  t.data = g_owned[g_owned_count++] = device_alloc(DEVICE_CUDA, tensor_bytes(&t) + 16);
  return t;
}
#define DEV(dtype, ...)                                                                  \
  dev_tensor((dtype), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
             (int64_t[]){__VA_ARGS__})

// A device int32 tensor of n values, v[i] = i % modulo.
static Tensor dev_indices(int64_t n, int32_t modulo) {
  Tensor t = DEV(DT_I32, n);
  int32_t *host = malloc((size_t)n * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) host[i] = (int32_t)(i % modulo);
  device_copy(DEVICE_CUDA, t.data, DEVICE_CPU, host, (size_t)n * sizeof(int32_t));
  free(host);
  return t;
}

static bool open_case(void) {
  if (!test_have_gpu()) test_skip("no GPU");
  device_open(&g_gpu, DEVICE_CUDA, 0);
  g_owned_count = 0;
  return true;
}

static void close_case(void) {
  device_sync(&g_gpu);
  for (int i = 0; i < g_owned_count; i++) device_free(DEVICE_CUDA, g_owned[i]);
  device_close(&g_gpu);
}

// On the counted pass, each op call by itself: what it asked of the device.
static const char *g_what;
static bool g_counting;

#define OP(call)                                                      \
  do {                                                                \
    bool counting_ = g_counting && test_device_watch_begin(&g_gpu);   \
    call;                                                             \
    if (counting_) op_counted(#call);                                 \
  } while (0)

static void op_counted(const char *call) {
  EmuActivity n = test_device_watch_end();
  char what[512];
  snprintf(what, sizeof what, "%s: %s", g_what, call);
  test_check_device_activity(what, &n, 0);
}

// Runs calls twice, the second time counting each op call.
static void check_second_call(const char *what, void (*calls)(void *), void *ctx) {
  calls(ctx);
  g_what = what;
  g_counting = test_device_watch_begin(&g_gpu);
  if (g_counting) test_device_watch_end();
  calls(ctx);
  bool counted = g_counting;
  g_counting = false;
  close_case();
  if (!counted) test_skip("counting host waits needs the CUDA emulation (make test-emu)");
}

// ------------------------------------------------------------ convolutional

typedef struct ConvCtx {
  Tensor x, w, bias, y, dy, dx, dw, z, by, bdx, bdz, pooled, dpooled, gpooled, dgpooled;
  BatchNorm bn;
  Tensor dgamma, dbeta;
  ConvParams cp;
  PoolParams pp;
} ConvCtx;

static void conv_calls(void *arg) {
  ConvCtx *c = arg;
  const Device *d = &g_gpu;
  OP(op_conv2d_fwd(d, &c->x, &c->w, &c->bias, &c->y, &c->cp, NULL, 0));
  OP(op_conv2d_bwd_data(d, &c->dy, &c->w, &c->dx, &c->cp, NULL, 0));
  OP(op_conv2d_bwd_filter(d, &c->x, &c->dy, &c->dw, &c->cp, false, NULL, 0));
  OP(op_batchnorm_fwd_train(d, &c->bn, &c->y, &c->z, true, &c->by));
  OP(op_batchnorm_fwd_infer(d, &c->bn, &c->y, NULL, false, &c->by));
  OP(op_batchnorm_bwd(d, &c->bn, &c->y, &c->by, &c->dy, true, &c->bdx, &c->bdz, &c->dgamma,
                   &c->dbeta, false));
  OP(op_relu_fwd(d, &c->y, &c->by));
  OP(op_relu_bwd(d, &c->by, &c->dy, &c->bdx));
  OP(op_maxpool_fwd(d, &c->y, &c->pooled, &c->pp));
  OP(op_maxpool_bwd(d, &c->y, &c->pooled, &c->dpooled, &c->bdx, &c->pp));
  OP(op_avgpool_fwd(d, &c->y, &c->pooled, &c->pp));
  OP(op_avgpool_bwd(d, &c->dpooled, &c->bdx, &c->pp));
  OP(op_global_avgpool_fwd(d, &c->y, &c->gpooled));
  OP(op_global_avgpool_bwd(d, &c->dgpooled, &c->bdx));
}

static void conv_family_in(DType dt) {
  open_case();
  // A 3x3 stride-1 convolution, 8 to 16 channels, on 2 images of 6x6; pooling 2x2 stride 2.
  ConvCtx c = {.cp = {1, 1, 1, 1, 1, 1}, .pp = {2, 2, 2, 2, 0, 0}};
  c.x = DEV(dt, 2, 6, 6, 8);
  c.w = DEV(dt, 16, 3, 3, 8);
  c.bias = DEV(dt, 16);
  c.y = DEV(dt, 2, 6, 6, 16);
  c.dy = DEV(dt, 2, 6, 6, 16);
  c.dx = DEV(dt, 2, 6, 6, 8);
  c.dw = DEV(dt, 16, 3, 3, 8);
  c.z = DEV(dt, 2, 6, 6, 16);
  c.by = DEV(dt, 2, 6, 6, 16);
  c.bdx = DEV(dt, 2, 6, 6, 16);
  c.bdz = DEV(dt, 2, 6, 6, 16);
  c.pooled = DEV(dt, 2, 3, 3, 16);
  c.dpooled = DEV(dt, 2, 3, 3, 16);
  c.gpooled = DEV(dt, 2, 16);
  c.dgpooled = DEV(dt, 2, 16);
  c.bn = (BatchNorm){DEV(DT_F32, 16), DEV(DT_F32, 16), DEV(DT_F32, 16), DEV(DT_F32, 16),
                     DEV(DT_F32, 16), DEV(DT_F32, 16), 0.1f, 1e-5f};
  c.dgamma = DEV(DT_F32, 16);
  c.dbeta = DEV(DT_F32, 16);
  check_second_call(dtype_name(dt), conv_calls, &c);
}

static void conv_family_fp32(void) { conv_family_in(DT_F32); }
static void conv_family_bf16(void) { conv_family_in(DT_BF16); }
static void conv_family_fp16(void) { conv_family_in(DT_F16); }

// The first call on a new shape waits for nothing either: each direction's
// algorithm comes from cuDNN's heuristics, which are host work (the timed
// search, CONV_ALGO=search, waits: this case fails under it).
static void conv_first_call_never_waits(void) {
  open_case();
  ConvParams cp = {2, 2, 1, 1, 1, 1};  // 3x3 stride 2: a shape no other case uses
  Tensor x = DEV(DT_BF16, 3, 7, 5, 4), w = DEV(DT_BF16, 12, 3, 3, 4);
  Tensor y = DEV(DT_BF16, 3, 4, 3, 12), dx = DEV(DT_BF16, 3, 7, 5, 4);
  Tensor dw = DEV(DT_BF16, 12, 3, 3, 4);
  const Device *d = &g_gpu;
  g_what = "first call";
  g_counting = test_device_watch_begin(&g_gpu);
  if (g_counting) test_device_watch_end();
  bool counted = g_counting;
  OP(op_conv2d_fwd(d, &x, &w, NULL, &y, &cp, NULL, 0));
  OP(op_conv2d_bwd_data(d, &y, &w, &dx, &cp, NULL, 0));
  OP(op_conv2d_bwd_filter(d, &x, &y, &dw, &cp, false, NULL, 0));
  g_counting = false;
  close_case();
  if (!counted) test_skip("counting host waits needs the CUDA emulation (make test-emu)");
}

// ------------------------------------------------------------ dense and loss

typedef struct DenseCtx {
  Tensor a, b, c, x, w, bias, y, dy, dx, dw, db, idx, table, rows, drows, dtable;
  Tensor logits, labels, targets, loss, row_loss, dlogits, pred, target, dpred;
} DenseCtx;

static void dense_calls(void *arg) {
  DenseCtx *c = arg;
  const Device *d = &g_gpu;
  OP(op_gemm(d, &c->a, false, &c->b, true, &c->c, 1.0f, 0.0f));
  OP(op_linear_fwd(d, &c->x, &c->w, &c->bias, &c->y));
  OP(op_linear_bwd(d, &c->x, &c->w, &c->dy, &c->dx, &c->dw, &c->db, false));
  OP(op_embedding_fwd(d, &c->idx, &c->table, &c->rows));
  OP(op_embedding_bwd(d, &c->idx, &c->drows, &c->dtable, false));
  OP(op_softmax_xent(d, &c->logits, &c->labels, 0.1f, -1, 1.0f, &c->loss, &c->row_loss,
                  &c->dlogits));
  OP(op_bce_logits(d, &c->pred, &c->targets, 1.0f, &c->loss, &c->dpred));
  OP(op_smooth_l1(d, &c->pred, &c->target, 1.0f, 1.0f, &c->loss, &c->dpred));
}

static void dense_family_in(DType dt) {
  open_case();
  DenseCtx c;
  c.a = DEV(dt, 5, 24);
  c.b = DEV(dt, 7, 24);
  c.c = DEV(dt, 5, 7);
  c.x = DEV(dt, 6, 16);
  c.w = DEV(dt, 24, 16);
  c.bias = DEV(DT_F32, 24);
  c.y = DEV(dt, 6, 24);
  c.dy = DEV(dt, 6, 24);
  c.dx = DEV(dt, 6, 16);
  c.dw = DEV(DT_F32, 24, 16);
  c.db = DEV(DT_F32, 24);
  c.idx = dev_indices(9, 4);  // rows 0..3 repeat: the gradient sums them
  c.table = DEV(dt, 11, 8);
  c.rows = DEV(dt, 9, 8);
  c.drows = DEV(dt, 9, 8);
  c.dtable = DEV(DT_F32, 11, 8);
  c.logits = DEV(dt, 6, 10);
  c.labels = dev_indices(6, 10);
  c.loss = DEV(DT_F32, 1);
  c.row_loss = DEV(DT_F32, 6);
  c.dlogits = DEV(dt, 6, 10);
  c.pred = DEV(dt, 12, 4);
  c.targets = DEV(DT_F32, 12, 4);
  c.target = DEV(DT_F32, 12, 4);
  c.dpred = DEV(dt, 12, 4);
  check_second_call(dtype_name(dt), dense_calls, &c);
}

static void dense_loss_family_fp32(void) { dense_family_in(DT_F32); }
static void dense_loss_family_bf16(void) { dense_family_in(DT_BF16); }

// ------------------------------------------------------------ sequence

typedef struct SeqCtx {
  Tensor x, y, dy, dx, gamma, beta, mean, rstd, dgamma, dbeta;
  Tensor q, k, v, key_len, probs, out, dout, scratch, dq, dk, dv, lse, delta;
} SeqCtx;

static void seq_calls(void *arg) {
  SeqCtx *c = arg;
  const Device *d = &g_gpu;
  OP(op_layernorm_fwd(d, &c->x, &c->gamma, &c->beta, 1e-5f, &c->y, &c->mean, &c->rstd));
  OP(op_layernorm_bwd(d, &c->x, &c->gamma, &c->mean, &c->rstd, &c->dy, &c->dx, &c->dgamma,
                   &c->dbeta, false));
  OP(op_residual_layernorm_fwd(d, &c->x, &c->dy, 0.9f, 7, 3, &c->gamma, &c->beta, 1e-5f, &c->y,
                             &c->dx, &c->mean, &c->rstd));
  OP(op_gelu_fwd(d, &c->x, &c->y));
  OP(op_gelu_bwd(d, &c->x, &c->dy, &c->dx));
  OP(op_softmax_fwd(d, &c->x, &c->y));
  OP(op_softmax_bwd(d, &c->y, &c->dy, &c->dx));
  OP(op_dropout_fwd(d, &c->x, &c->y, 0.9f, 7, 1));
  OP(op_dropout_bwd(d, &c->dy, &c->dx, 0.9f, 7, 1));
  OP(op_gelu_dropout_fwd(d, &c->x, &c->y, 0.9f, 7, 1));
  OP(op_gelu_dropout_bwd(d, &c->x, &c->dy, &c->dx, 0.9f, 7, 1));
  AttnDropout drop = {0.9f, 7, 2};
  OP(op_attention_fwd(d, &c->q, &c->k, &c->v, &c->key_len, false, NULL, &c->probs, NULL, &c->out));
  OP(op_attention_fwd(d, &c->q, &c->k, &c->v, NULL, true, &drop, &c->probs, &c->scratch, &c->out));
  OP(op_attention_bwd(d, &c->q, &c->k, &c->v, &c->probs, &drop, &c->dout, &c->scratch, &c->dq,
                   &c->dk, &c->dv));
  if (c->q.dtype == DT_F32) return;  // the fused op runs fp16 and bf16 on CUDA
  OP(op_attention_fused_fwd(d, &c->q, &c->k, &c->v, &c->key_len, false, &drop, &c->lse, &c->out));
  OP(op_attention_fused_bwd(d, &c->q, &c->k, &c->v, &c->key_len, false, &drop, &c->out, &c->lse,
                         &c->dout, &c->delta, &c->dq, &c->dk, &c->dv));
  OP(op_attention_fused_fwd(d, &c->q, &c->k, &c->v, NULL, true, NULL, &c->lse, &c->out));
}

static void seq_family_in(DType dt) {
  open_case();
  SeqCtx c;
  c.x = DEV(dt, 6, 40);
  c.y = DEV(dt, 6, 40);
  c.dy = DEV(dt, 6, 40);
  c.dx = DEV(dt, 6, 40);
  c.gamma = DEV(DT_F32, 40);
  c.beta = DEV(DT_F32, 40);
  c.mean = DEV(DT_F32, 6);
  c.rstd = DEV(DT_F32, 6);
  c.dgamma = DEV(DT_F32, 40);
  c.dbeta = DEV(DT_F32, 40);
  // 2 sequences of 9 tokens, 2 heads of 16 (a head size the fused op takes).
  c.q = DEV(dt, 2, 9, 2, 16);
  c.k = DEV(dt, 2, 9, 2, 16);
  c.v = DEV(dt, 2, 9, 2, 16);
  c.key_len = dev_indices(2, 9);  // 0 and 1 keys: an all-masked row too
  c.probs = DEV(dt, 2, 2, 9, 9);
  c.scratch = DEV(dt, 2, 2, 9, 9);
  c.out = DEV(dt, 2, 9, 2, 16);
  c.dout = DEV(dt, 2, 9, 2, 16);
  c.dq = DEV(dt, 2, 9, 2, 16);
  c.dk = DEV(dt, 2, 9, 2, 16);
  c.dv = DEV(dt, 2, 9, 2, 16);
  c.lse = DEV(DT_F32, 2, 2, 9);
  c.delta = DEV(DT_F32, 2, 2, 9);
  check_second_call(dtype_name(dt), seq_calls, &c);
}

static void seq_family_fp32(void) { seq_family_in(DT_F32); }
static void seq_family_bf16(void) { seq_family_in(DT_BF16); }

// ------------------------------------------------------------ elementwise

typedef struct ElemCtx {
  Tensor a, b, y, parts[2], whole, perm_in, perm_out, sum, mean, half, bytes, normed, topv, topi, lse;
} ElemCtx;

static void elem_calls(void *arg) {
  ElemCtx *c = arg;
  const Device *d = &g_gpu;
  const ChannelAffine norm = {{0.5f, 0.25f, 2}, {-1, 0, 1}};
  OP(op_add(d, &c->a, &c->b, &c->y));
  OP(op_mul(d, &c->a, &c->b, &c->y));
  OP(op_scale(d, &c->a, 3, &c->y));
  OP(op_axpy(d, 0.5f, &c->a, &c->y));
  OP(op_concat(d, c->parts, 2, 1, &c->whole));
  OP(op_split(d, &c->whole, 1, c->parts, 2));
  OP(op_permute(d, &c->perm_in, (const int[]){0, 2, 1, 3}, &c->perm_out));
  OP(op_sum(d, &c->a, 1, &c->sum));
  OP(op_mean(d, &c->a, 1, &c->mean));
  OP(op_cast(d, &c->a, &c->half));
  OP(op_affine_u8(d, &c->bytes, &norm, &c->normed));
  OP(op_topk(d, &c->a, 3, &c->topv, &c->topi));
  OP(op_logsumexp(d, &c->a, &c->lse));
}

static void elem_family(void) {
  open_case();
  ElemCtx c;
  c.a = DEV(DT_F32, 10, 12);
  c.b = DEV(DT_F32, 10, 12);
  c.y = DEV(DT_F32, 10, 12);
  c.parts[0] = DEV(DT_F32, 10, 5);
  c.parts[1] = DEV(DT_F32, 10, 7);
  c.whole = DEV(DT_F32, 10, 12);
  c.perm_in = DEV(DT_F32, 2, 3, 4, 5);
  c.perm_out = DEV(DT_F32, 2, 4, 3, 5);
  c.sum = DEV(DT_F32, 12);
  c.mean = DEV(DT_F32, 12);
  c.half = DEV(DT_BF16, 10, 12);
  c.bytes = DEV(DT_U8, 10, 4, 3);
  c.normed = DEV(DT_BF16, 10, 4, 3);
  c.topv = DEV(DT_F32, 10, 3);
  c.lse = DEV(DT_F32, 10);
  c.topi = DEV(DT_I32, 10, 3);
  check_second_call("elementwise", elem_calls, &c);
}

int main(void) {
  TEST_RUN(conv_family_fp32);
  TEST_RUN(conv_family_bf16);
  TEST_RUN(conv_family_fp16);
  TEST_RUN(conv_first_call_never_waits);
  TEST_RUN(dense_loss_family_fp32);
  TEST_RUN(dense_loss_family_bf16);
  TEST_RUN(seq_family_fp32);
  TEST_RUN(seq_family_bf16);
  TEST_RUN(elem_family);
  return test_finish();
}
