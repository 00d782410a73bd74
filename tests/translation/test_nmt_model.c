// The translation Transformer (translation/nmt_model.h) against PyTorch and
// against itself: the CPU training step's loss and every gradient, the
// evaluation loss and logits against tests/golden/nmt.gld (a tiny model
// written out in torch.nn.functional by gen_nmt.py); incremental decoding
// with the key/value cache (and the beam's reordering) against the full
// forward of the same sequences; the CUDA step against the CPU in fp32,
// fp16 and bf16; dropout's determinism, its CPU/CUDA agreement and its
// backward against finite differences.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../translation/nmt_model.h"
#include "tests/harness/test.h"
#include "tests/ops/ops_test_util.h"

static const Device CPU = {.kind = DEVICE_CPU};

// gen_nmt.py's model and batch.
#define VOCAB 23
#define B 3
#define S 5
#define T 6
#define BEAM 2

typedef struct Batch {
  int32_t src[B * S], tgt_in[B * T], tgt_out[B * T], src_len[B];
  WmtBatch b;
} Batch;

// Opens nmt.gld and reads its batch into bt.
static GoldenFile *golden_batch(Batch *bt) {
  GoldenFile *g = golden_load("nmt.gld");
  golden_i32(g, "batch.src", bt->src, B * S);
  golden_i32(g, "batch.tgt_in", bt->tgt_in, B * T);
  golden_i32(g, "batch.tgt_out", bt->tgt_out, B * T);
  golden_i32(g, "batch.src_len", bt->src_len, B);
  bt->b = (WmtBatch){.b = B, .s = S, .t = T, .src = bt->src, .tgt_in = bt->tgt_in,
                     .tgt_out = bt->tgt_out, .src_len = bt->src_len};
  return g;
}

// gen_nmt.py's model on `device` in dtype dt with the golden weights;
// buffers for a batch of B * BEAM sequences (the decoding tests' expanded
// batches) and as many hypotheses.
static void golden_model(NmtModel *m, GoldenFile *g, DeviceKind device, DType dt, float dropout) {
  NmtShape shape = {.vocab = VOCAB, .d_model = 16, .d_ff = 24, .heads = 2, .enc_layers = 2,
                    .dec_layers = 2, .dropout = dropout, .attention_dropout = dropout,
                    .label_smoothing = 0.1f, .dtype = dt,
                    .max_rows = B * BEAM * T, .max_len = T, .max_decode_seqs = B * BEAM};
  nmt_model_init(m, &shape, 0, 1, device);
  for (int i = 0; i < m->ps.count; i++) {
    char name[64];
    snprintf(name, sizeof name, "param.%s", m->specs[i].name);
    int64_t numel;
    const float *v = golden_get(g, name, &numel);
    REQUIRE(numel == m->ps.numels[i]);
    device_copy(device, m->ps.params + m->ps.offsets[i], DEVICE_CPU, v,
                (size_t)numel * sizeof(float));
  }
}

// Host copies of what a step left on the device: the loss, and the
// gradients (n floats) or the first n logits.
static float host_loss(const NmtModel *m) {
  float loss;
  device_copy(DEVICE_CPU, &loss, m->ps.device, m->loss.data, sizeof loss);
  return loss;
}


// ---------------------------------------------------------------- PyTorch

// The golden tensors were computed in fp32 by PyTorch: the same terms
// summed in other orders, measured ~1e-7; TOL_GOLDEN (1e-5, ops_test_util.h)
// per tensor, relative L2. A wrong term (a missing scale, sin and cos
// swapped, a mask off by one) is off by order 1e-2 or more.
static void train_step_matches_pytorch(void) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  NmtModel m;
  golden_model(&m, g, DEVICE_CPU, DT_F32, 0.0f);
  nmt_model_train_step(&m, &CPU, &bt.b, 1.0f, 0, 0, (GradHook){0});
  check_golden(g, "loss", m.loss.data, 1, TOL_GOLDEN);
  for (int i = 0; i < m.ps.count; i++) {
    char name[64];
    snprintf(name, sizeof name, "grad.%s", m.specs[i].name);
    check_golden(g, name, m.ps.grads + m.ps.offsets[i], m.ps.numels[i], TOL_GOLDEN);
  }
  nmt_model_free(&m);
  golden_free(g);
}

static void eval_loss_and_logits_match_pytorch(void) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  NmtModel m;
  golden_model(&m, g, DEVICE_CPU, DT_F32, 0.1f);  // eval ignores the dropout
  nmt_model_eval_loss(&m, &CPU, &bt.b);
  check_golden(g, "eval_loss", m.loss.data, 1, TOL_GOLDEN);
  check_golden(g, "logits", m.logits.data, B * T * VOCAB, TOL_GOLDEN);
  nmt_model_free(&m);
  golden_free(g);
}

// ---------------------------------------------------------------- decoding

// The token hypothesis h feeds at step t: the batch's decoder input for
// beam 1, else ids that differ between hypotheses and steps.
static int32_t step_token(const Batch *bt, int beam, int64_t h, int64_t t) {
  if (beam == 1) return bt->tgt_in[h * T + t];
  return (int32_t)(2 + (3 + 5 * h + 7 * t) % (VOCAB - 2));
}

// The full forward's logits (n * T, V) of hypotheses hist (n, T) (each
// reading source h / beam), by the evaluation forward of ref.
static float *full_logits(NmtModel *ref, const Device *dev, const Batch *bt, int beam,
                          const int32_t *hist) {
  int64_t n = B * beam;
  int32_t src[B * BEAM * S], src_len[B * BEAM], tgt_out[B * BEAM * T] = {0};
  for (int64_t h = 0; h < n; h++) {
    memcpy(src + h * S, bt->src + h / beam * S, S * sizeof(int32_t));
    src_len[h] = bt->src_len[h / beam];
  }
  WmtBatch wb = {.b = n, .s = S, .t = T, .src = src, .tgt_in = (int32_t *)hist,
                 .tgt_out = tgt_out, .src_len = src_len};
  nmt_model_eval_loss(ref, dev, &wb);  // all labels pad: only the logits matter
  device_sync(dev);
  return host_floats(ref->ps.device, ref->logits.data, ref->shape.dtype, n * T * VOCAB);
}

// Encodes the golden batch for beam hypotheses per source, feeds step_token
// at t = 0..T-1 and, after each step t with reorder[t], makes hypothesis h
// continue from parent[t][h] (within its source's beam). Each step's logits
// must equal the full forward's at position t of the sequences fed so far
// (the reordered prefixes included). Returns the worst relative error.
static double decode_vs_full(const Device *dev, DType dt, int beam,
                             const int32_t (*parent)[B * BEAM]) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  NmtModel dec, ref;
  golden_model(&dec, g, dev->kind, dt, 0.1f);
  golden_model(&ref, g, dev->kind, dt, 0.1f);
  int64_t n = B * beam;
  int32_t hist[B * BEAM * T] = {0}, moved[B * BEAM * T], ids[B * BEAM];
  nmt_model_encode(&dec, dev, &bt.b, beam);
  double worst = 0;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t h = 0; h < n; h++) ids[h] = hist[h * T + t] = step_token(&bt, beam, h, t);
    Tensor lg = nmt_model_decode_step(&dec, dev, ids, t);
    device_sync(dev);
    float *step = host_floats(dec.ps.device, lg.data, dt, n * VOCAB);
    float *full = full_logits(&ref, dev, &bt, beam, hist);
    for (int64_t h = 0; h < n; h++) {
      double err = test_rel_error(step + h * VOCAB, full + (h * T + t) * VOCAB, VOCAB);
      if (err > 1e-3) printf("  step %lld hypothesis %lld: relative error %.3g\n", (long long)t,
                             (long long)h, err);
      worst = test_worst(worst, err);
    }
    free(step);
    free(full);
    if (parent && parent[t][0] >= 0) {
      for (int64_t h = 0; h < n; h++)
        memcpy(moved + h * T, hist + parent[t][h] * T, T * sizeof(int32_t));
      memcpy(hist, moved, sizeof moved);
      nmt_model_reorder(&dec, dev, parent[t], t);
    }
  }
  nmt_model_free(&dec);
  nmt_model_free(&ref);
  golden_free(g);
  return worst;
}

// Decoding computes the same sums as the full forward over fewer rows (the
// masked keys' probabilities are exact zeros): only summation order and
// GEMM blocking differ, ~1e-7 relative; 1e-5. A stale or misplaced cache
// row, a wrong position or a missed reorder is off by order 1e-1.
#define DECODE_TOL 1e-5

static void decode_steps_match_full_forward(void) {
  double err = decode_vs_full(&CPU, DT_F32, 1, NULL);
  test_check_error("decode steps vs full forward, beam 1", "fp32 CPU", err, DECODE_TOL);
}

// Reorders after steps 1, 2 and 4 (-1: none): swaps, a hypothesis copied
// to both places of its beam, the identity.
static const int32_t kParents[T][B * BEAM] = {
    {-1}, {1, 0, 3, 3, 4, 5}, {0, 0, 3, 2, 5, 4}, {-1}, {1, 1, 2, 2, 5, 5}, {-1}};

static void decode_with_beam_reorder_matches_full_forward(void) {
  double err = decode_vs_full(&CPU, DT_F32, BEAM, kParents);
  test_check_error("decode steps vs full forward, beam 2 reordered", "fp32 CPU", err, DECODE_TOL);
}

// ---------------------------------------------------------------- CUDA

typedef struct StepOut {
  float loss, *grads;  // grads malloc'd (total_numel)
} StepOut;

// One training step of the golden model on device in dt (seed 5, `step`).
static StepOut golden_step(DeviceKind device, DType dt, float dropout, int64_t step) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  Device dev;
  device_open(&dev, device, 0);
  NmtModel m;
  golden_model(&m, g, device, dt, dropout);
  nmt_model_train_step(&m, &dev, &bt.b, 1.0f, 5, step, (GradHook){0});
  device_sync(&dev);
  StepOut o = {host_loss(&m), host_floats(m.ps.device, m.ps.grads, DT_F32, m.ps.total_numel)};
  nmt_model_free(&m);
  device_close(&dev);
  golden_free(g);
  return o;
}

// The GPU step in dt against the fp32 CPU step: the loss and all gradients
// (relative L2), and the worst single tensor.
static void cuda_step_matches_cpu(DType dt, float dropout, double loss_tol, double grads_tol,
                                  double tensor_tol) {
  if (!test_have_gpu()) test_skip("no GPU");
  StepOut c = golden_step(DEVICE_CPU, DT_F32, dropout, 3), gp = golden_step(DEVICE_CUDA, dt, dropout, 3);
  NmtModel probe;  // the table's offsets and names
  GoldenFile *g = golden_load("nmt.gld");
  golden_model(&probe, g, DEVICE_CPU, DT_F32, 0.0f);
  const char *name = dtype_name(dt);
  test_check_error("nmt loss vs fp32 CPU", name, test_rel_error(&gp.loss, &c.loss, 1), loss_tol);
  test_check_error("nmt gradients vs fp32 CPU", name,
                   test_rel_error(gp.grads, c.grads, probe.ps.total_numel), grads_tol);
  double worst = 0;
  int worst_i = 0;
  for (int i = 0; i < probe.ps.count; i++) {
    int64_t o = probe.ps.offsets[i];
    double err = test_rel_error(gp.grads + o, c.grads + o, probe.ps.numels[i]);
    if (!(err <= worst)) worst_i = i;
    worst = test_worst(worst, err);
  }
  printf("  nmt %s dropout %.1f: worst tensor gradient error %.3g (%s)\n", name, dropout, worst,
         probe.specs[worst_i].name);
  test_check_error("nmt worst tensor gradient vs fp32 CPU", name, worst, tensor_tol);
  free(c.grads);
  free(gp.grads);
  nmt_model_free(&probe);
  golden_free(g);
}

// fp32 on both sides: cuBLAS and the CPU loops sum in other orders (~1e-7
// per op); attention's tolerance (tol_attention, 1e-4) bounds a chain of
// four layers' worth of them.
static void cuda_fp32_matches_cpu(void) {
  cuda_step_matches_cpu(DT_F32, 0.0f, tol_rounded(DT_F32), tol_attention(DT_F32),
                        tol_attention(DT_F32));
}
// 16 bits: every activation, weight copy and attention probability is
// rounded (tol_attention per op: 1e-2 fp16, 6e-2 bf16); the loss is a mean
// over 12 tokens of fp32 softmaxes of rounded logits, so it errs less than
// one op (tol_rounded). The gradients go through the whole chain backward:
// tol_attention bounds them all together (measured on the CUDA emulation:
// fp16 2.5e-3, bf16 2.5e-2); a single small tensor's near-cancelling sums
// err more (measured 1.1e-2 fp16 on enc1.wk, 6.6e-2 bf16 on enc1.b1), so
// the worst tensor gets 4 tol_attention (4e-2, 0.24): a missing, doubled or
// wrong-signed gradient still errs by 1 or more.
static void cuda_fp16_matches_cpu_fp32(void) {
  cuda_step_matches_cpu(DT_F16, 0.0f, tol_rounded(DT_F16), tol_attention(DT_F16),
                        4 * tol_attention(DT_F16));
}
static void cuda_bf16_matches_cpu_fp32(void) {
  cuda_step_matches_cpu(DT_BF16, 0.0f, tol_rounded(DT_BF16), tol_attention(DT_BF16),
                        4 * tol_attention(DT_BF16));
}

// Dropout draws the same elements on both devices (op_dropout: rng of the
// element index), so with dropout on the steps agree as closely as without.
static void cuda_dropout_matches_cpu(void) {
  cuda_step_matches_cpu(DT_F32, 0.1f, tol_rounded(DT_F32), tol_attention(DT_F32),
                        tol_attention(DT_F32));
}

// On the GPU, in each dtype, decoding against the full forward on the same
// GPU: the same roundings at the same points, over fewer rows; cuBLAS may
// pick another algorithm for another row count (another summation order
// before the one rounding), so the bound is attention's per-op tolerance.
static void cuda_decode_matches_full_forward(void) {
  Device gpu;
  open_gpu_or_skip(&gpu);
  for (int i = 0; i < N_FLOAT_DTYPES; i++) {
    DType dt = kFloatDtypes[i];
    double err = decode_vs_full(&gpu, dt, BEAM, kParents);
    test_check_error("decode steps vs full forward, beam 2 reordered, CUDA", dtype_name(dt), err,
                     tol_attention(dt));
  }
  device_close(&gpu);
}

// ---------------------------------------------------------------- dropout

// The same (seed, step) gives the same loss and gradients bit for bit;
// another step draws other masks, so another loss; dropout 0.1 differs
// from none.
static void dropout_is_a_function_of_seed_and_step(void) {
  StepOut a = golden_step(DEVICE_CPU, DT_F32, 0.1f, 3), b = golden_step(DEVICE_CPU, DT_F32, 0.1f, 3);
  StepOut c = golden_step(DEVICE_CPU, DT_F32, 0.1f, 4), off = golden_step(DEVICE_CPU, DT_F32, 0.0f, 3);
  printf("  losses: step 3 %.6f %.6f, step 4 %.6f, no dropout %.6f\n", a.loss, b.loss, c.loss,
         off.loss);
  CHECK(a.loss == b.loss);
  NmtModel probe;
  GoldenFile *g = golden_load("nmt.gld");
  golden_model(&probe, g, DEVICE_CPU, DT_F32, 0.0f);
  CHECK(!memcmp(a.grads, b.grads, (size_t)probe.ps.total_numel * sizeof(float)));
  CHECK(fabsf(a.loss - c.loss) > 1e-3f * a.loss);
  CHECK(fabsf(a.loss - off.loss) > 1e-3f * a.loss);
  StepOut *all[] = {&a, &b, &c, &off};
  for (int i = 0; i < 4; i++) free(all[i]->grads);
  nmt_model_free(&probe);
  golden_free(g);
}

typedef struct FdCtx {
  NmtModel *m;
  const WmtBatch *b;
} FdCtx;

static double dropout_loss(void *ctx) {
  FdCtx *c = ctx;
  nmt_model_train_step(c->m, &CPU, c->b, 1.0f, 5, 3, (GradHook){0});
  return *(float *)c->m->loss.data;
}

// With dropout on, the backward must drop exactly the elements the forward
// dropped (the same streams): each tensor's gradient g against central
// differences of the training loss at a fixed (seed, step) along 3 random
// unit directions u (all of the tensor's elements at once): (L(x + eps u) -
// L(x - eps u)) / 2 eps against g . u, relative to |g| / sqrt(n), the size of
// g . u for a random u. Errors: the rounding of a loss of ~3 (a few 2^-24 *
// 3 / 2 eps ~ 3e-5, against g . u of 2e-3 to 3e-2) and ReLU kinks that a
// step crosses (an error linear in eps). Measured at eps 1e-2: 0.065 here
// (2.3e-3 before the attention probabilities had dropout), and up to 0.09 on
// variants of the input (other positions, other masks; 0.2 at eps 3e-2, 0.02
// at 3e-3, below which rounding takes over). The relu dropout's mask drawn
// from the wrong stream in the backward scores 1.1, the attention dropout's
// 1.5; bound 0.3.
static double directional_error(FdCtx *c, int i, const float *grad, uint64_t seed) {
  const ParamSet *ps = &c->m->ps;
  int64_t n = ps->numels[i];
  float *x = ps->params + ps->offsets[i], *x0 = malloc((size_t)n * sizeof(float));
  float *u = malloc((size_t)n * sizeof(float));
  memcpy(x0, x, (size_t)n * sizeof(float));
  test_fill_uniform(u, n, seed, -1.0f, 1.0f);
  double norm = 0, gnorm = 0, gu = 0, eps = 1e-2, loss[2];
  for (int64_t k = 0; k < n; k++) norm += (double)u[k] * u[k];
  for (int64_t k = 0; k < n; k++) {
    u[k] = (float)(u[k] / sqrt(norm));
    gu += (double)grad[k] * u[k];
    gnorm += (double)grad[k] * grad[k];
  }
  for (int side = 0; side < 2; side++) {
    for (int64_t k = 0; k < n; k++) x[k] = x0[k] + (float)((side ? -eps : eps) * u[k]);
    loss[side] = dropout_loss(c);
  }
  memcpy(x, x0, (size_t)n * sizeof(float));
  free(x0);
  free(u);
  return fabs((loss[0] - loss[1]) / (2 * eps) - gu) / (sqrt(gnorm / (double)n) + 1e-30);
}

static void dropout_backward_matches_finite_differences(void) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  NmtModel m;
  golden_model(&m, g, DEVICE_CPU, DT_F32, 0.1f);
  FdCtx ctx = {&m, &bt.b};
  dropout_loss(&ctx);
  float *grad = malloc((size_t)m.ps.total_numel * sizeof(float));
  memcpy(grad, m.ps.grads, (size_t)m.ps.total_numel * sizeof(float));
  double worst = 0;
  for (int i = 0; i < m.ps.count; i++)
    for (uint64_t dir = 0; dir < 3; dir++) {
      double err = directional_error(&ctx, i, grad + m.ps.offsets[i], 40 + dir);
      CHECK_MSG(err < 0.3, "%s: directional derivative error %.3g", m.specs[i].name, err);
      worst = test_worst(worst, err);
    }
  printf("  worst directional derivative error %.3g\n", worst);
  free(grad);
  nmt_model_free(&m);
  golden_free(g);
}

int main(void) {
  TEST_RUN(train_step_matches_pytorch);
  TEST_RUN(eval_loss_and_logits_match_pytorch);
  TEST_RUN(decode_steps_match_full_forward);
  TEST_RUN(decode_with_beam_reorder_matches_full_forward);
  TEST_RUN(dropout_is_a_function_of_seed_and_step);
  TEST_RUN(dropout_backward_matches_finite_differences);
  TEST_RUN(cuda_fp32_matches_cpu);
  TEST_RUN(cuda_fp16_matches_cpu_fp32);
  TEST_RUN(cuda_bf16_matches_cpu_fp32);
  TEST_RUN(cuda_dropout_matches_cpu);
  TEST_RUN(cuda_decode_matches_full_forward);
  return test_finish();
}
