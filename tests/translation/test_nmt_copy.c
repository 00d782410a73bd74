// The translation Transformer learns a task with a known answer: each
// target is its source reversed. A small model trained on CPU with Adam
// must then decode held-out sources exactly with beam search (and greedily,
// beam 1), which exercises the whole path - training step, optimizer,
// incremental decoding with the key/value cache and the beam's reordering -
// against an exact answer; the untrained model must not.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../translation/beam.h"
#include "../translation/nmt_model.h"
#include "../translation/subword.h"
#include "core/rng.h"
#include "ops/reduce.h"
#include "tests/harness/test.h"
#include "train/optim.h"

static const Device CPU = {.kind = DEVICE_CPU};

#define VOCAB 12       // pad, EOS, then the 10 tokens of the task
#define MIN_LEN 3
#define MAX_LEN 6      // tokens before the EOS
#define BATCH 32
#define POSITIONS 16
#define HELD_OUT 50

typedef struct Task {
  int32_t src[BATCH * (MAX_LEN + 1)], tgt_in[BATCH * (MAX_LEN + 1)], tgt_out[BATCH * (MAX_LEN + 1)];
  int32_t src_len[BATCH];
  int32_t answer[BATCH][MAX_LEN];
  int64_t answer_len[BATCH];
  WmtBatch batch;
} Task;

// BATCH sequences from (seed, stream): source = tokens + EOS, target = the
// tokens reversed + EOS; padded to MAX_LEN + 1.
static void make_batch(Task *k, uint64_t seed, uint64_t stream) {
  Rng rng = rng_make(seed, stream);
  int64_t t = MAX_LEN + 1;
  memset(k->src, 0, sizeof k->src);
  memset(k->tgt_in, 0, sizeof k->tgt_in);
  memset(k->tgt_out, 0, sizeof k->tgt_out);
  for (int b = 0; b < BATCH; b++) {
    int len = MIN_LEN + (int)rng_next_below(&rng, MAX_LEN - MIN_LEN + 1);
    for (int i = 0; i < len; i++) k->src[b * t + i] = 2 + (int32_t)rng_next_below(&rng, VOCAB - 2);
    k->src[b * t + len] = SUBWORD_EOS;
    for (int i = 0; i < len; i++) k->answer[b][i] = k->src[b * t + len - 1 - i];
    k->answer_len[b] = len;
    for (int i = 0; i < len; i++) k->tgt_out[b * t + i] = k->answer[b][i];
    k->tgt_out[b * t + len] = SUBWORD_EOS;
    for (int i = 1; i <= len; i++) k->tgt_in[b * t + i] = k->tgt_out[b * t + i - 1];
    k->src_len[b] = len + 1;
  }
  k->batch = (WmtBatch){.b = BATCH, .s = t, .t = t, .src = k->src, .tgt_in = k->tgt_in,
                        .tgt_out = k->tgt_out, .src_len = k->src_len};
}

static void init_model(NmtModel *m) {
  NmtShape shape = {.vocab = VOCAB, .d_model = 32, .d_ff = 64, .heads = 2, .enc_layers = 2,
                    .dec_layers = 2, .dropout = 0.0f, .label_smoothing = 0.1f, .dtype = DT_F32,
                    .max_rows = BATCH * (MAX_LEN + 1), .max_len = POSITIONS,
                    .max_decode_seqs = BATCH * 4};
  nmt_model_init(m, &shape, optim_state_count(OPT_ADAM), 5, DEVICE_CPU);
}

static void step_fn(void *ctx, const int32_t *ids, int64_t n, int64_t t, int k, float *top,
                    int32_t *top_ids, float *norm) {
  NmtModel *m = ctx;
  Tensor out = nmt_model_decode_step(m, &CPU, ids, t);
  Tensor tt = TENSOR(top, DT_F32, DEVICE_CPU, n, k), ti = TENSOR(top_ids, DT_I32, DEVICE_CPU, n, k);
  Tensor tn = TENSOR(norm, DT_F32, DEVICE_CPU, n);
  op_topk(&CPU, &out, k, &tt, &ti);
  op_logsumexp(&CPU, &out, &tn);
}

static void reorder_fn(void *ctx, const int32_t *parent, int64_t n, int64_t t) {
  (void)n;
  nmt_model_reorder(ctx, &CPU, parent, t);
}

// Held-out sequences decoded exactly, of HELD_OUT (a batch and a part).
static int exact_decodes(NmtModel *m, int beam) {
  Task k;
  make_batch(&k, 99, 0);
  BeamConfig cfg = {.beam = beam, .alpha = 0.6f, .extra_len = 4, .max_len = POSITIONS,
                    .eos = SUBWORD_EOS};
  BeamModel bm = {.ctx = m, .vocab = VOCAB, .step = step_fn, .reorder = reorder_fn};
  int32_t out[BATCH * POSITIONS];
  int64_t out_len[BATCH];
  nmt_model_encode(m, &CPU, &k.batch, beam);
  beam_search(&bm, &cfg, BATCH, k.src_len, out, out_len);
  int exact = 0;
  for (int b = 0; b < BATCH && b < HELD_OUT; b++)
    exact += out_len[b] == k.answer_len[b] &&
             !memcmp(out + b * POSITIONS, k.answer[b], (size_t)out_len[b] * sizeof(int32_t));
  return exact;
}

static void learns_to_reverse(void) {
  NmtModel m;
  init_model(&m);
  int untrained = exact_decodes(&m, 4);
  OptConfig oc = optim_defaults(OPT_ADAM);
  oc.beta2 = 0.98f;
  oc.eps = 1e-9f;
  Optimizer opt;
  optim_init(&opt, &oc, &m.ps);
  Task k;
  float first = 0, last = 0;
  for (int s = 0; s < 800; s++) {
    make_batch(&k, 7, (uint64_t)s);
    nmt_model_train_step(&m, &CPU, &k.batch, 1.0f, 3, s, (GradHook){0});
    float loss = *(float *)m.loss.data;
    if (s == 0) first = loss;
    last = loss;
    float lr = 3e-3f * fminf(1.0f, (float)(s + 1) / 50.0f);
    optim_step(&opt, &CPU, &m.ps, lr);
  }
  int greedy = exact_decodes(&m, 1), beam = exact_decodes(&m, 4);
  printf("  loss %.3f -> %.3f; exact of %d: untrained %d, greedy %d, beam 4 %d\n", first, last,
         BATCH, untrained, greedy, beam);
  CHECK(untrained <= 2);
  CHECK(last < 0.5f * first);
  CHECK(greedy >= BATCH * 9 / 10);
  CHECK(beam >= BATCH * 9 / 10);
  optim_free(&opt);
  nmt_model_free(&m);
}

int main(void) {
  TEST_RUN(learns_to_reverse);
  return test_finish();
}
