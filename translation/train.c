// train.c: the Transformer on WMT-layout parallel text (English to German)
// to an uncased BLEU target, MLPerf style. Reads top to bottom as the
// procedure:
//   init: flags, device, ranks, the data set's counts, model, Adam, the
//         rsqrt schedule with warmup
//   run:  epochs of batches by token count (length buckets, shuffled per
//         epoch); after each epoch the eval set translated by beam search
//         (beam 4, length penalty 0.6), detokenised, and scored with the
//         reference's BLEU, until BLEU >= target (run_stop success) or the
//         epoch limit (aborted)
//
//   transformer --config=translation/configs/small.conf --data_dir=data/transformer/small
// (the data set in DATA_DIR/lmdb: translation/prepare_data.sh, wmt_data.h)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/rng.h"
#include "device/profile.h"
#include "ops/reduce.h"
#include "train/amp.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/schedule.h"
#include "translation/beam.h"
#include "translation/bleu.h"
#include "translation/nmt_model.h"
#include "translation/subword.h"
#include "translation/wmt_data.h"

#define NMT_BENCH_WARMUP 5  // untimed steps before a bench_steps measurement

static const ConfigKey kKeys[] = {
    // Model (defaults: Transformer-big).
    {"d_model", CFG_INT, "1024", "model width", "[2, 65536]"},
    {"d_ff", CFG_INT, "4096", "feed-forward width", "[1, 1048576]"},
    {"heads", CFG_INT, "16", "attention heads (d_model a multiple of them)", "[1, 1024]"},
    {"enc_layers", CFG_INT, "6", "encoder layers", "[1, 16]"},
    {"dec_layers", CFG_INT, "6", "decoder layers", "[1, 16]"},
    {"dropout", CFG_FLOAT, "0.1", "dropout on sub-layer outputs, after the ReLU and on the embedded inputs", "[0, 1)"},
    {"attention_dropout", CFG_FLOAT, "0.1", "dropout on the attention probabilities", "[0, 1)"},
    TFM_FUSED_ATTENTION_KEY,
    {"label_smoothing", CFG_FLOAT, "0.1", "label smoothing of the training loss", "[0, 1)"},
    {"max_positions", CFG_INT, "512",
     "positions the model encodes and decodes: the longest training pair, and eval source plus "
     "extra_decode_length (eval_sources)", "[2, 65536]"},
    // Data.
    {"max_length", CFG_INT, "256",
     "max_sequence_length: training pairs with a longer side (tokens with EOS) are cut or dropped", "[2, 65536]"},
    {"length_method", CFG_STRING, "discard", "what max_length does: discard or truncate", NULL},
    {"max_tokens", CFG_INT, "5120", "tokens per batch per rank, padding included", "[2, inf)"},
    // Optimisation.
    {"learning_rate", CFG_FLOAT, "0.0019", "peak learning rate, at the end of the warmup", "(0, inf)"},
    {"warmup_steps", CFG_INT, "750", "linear warmup, then lr x sqrt(warmup / step)", "[1, inf)"},
    OPTIM_ADAM_KEYS("0.997", "1e-9"),  // beta2: the MLPerf reference's (NVIDIA used 0.98)
    // Evaluation.
    {"beam", CFG_INT, "4", "beam width", "[1, 64]"},
    {"alpha", CFG_FLOAT, "0.6", "length penalty exponent", "[0, 10]"},
    {"extra_decode_length", CFG_INT, "50", "decode up to the source length plus this many tokens", "[1, 65536]"},
    {"eval_sources", CFG_STRING, "cut",
     "whole: every eval source translated whole, as the v0.7 rules ask (one that does not fit in "
     "max_positions with extra_decode_length more is an error); cut: sources cut to max_positions "
     "and decoding stopped there (scaled runs)", "cut|whole"},
    {"eval_batch", CFG_INT, "64", "sentences decoded at once per rank", "[1, 65536]"},
    {"translations_out", CFG_STRING, "",
     "write the last eval's detokenised translations here, one per line (score them with sacrebleu)", NULL},
    // Throughput.
    {"bench_steps", CFG_INT, "0",
     "throughput only: time this many steps (after 5 warm-up) of random pairs of max_length "
     "tokens a side, max_tokens / max_length pairs a batch; no eval or target", "[0, inf)"},
    {"bench_vocab", CFG_INT, "33708", "a bench run's vocabulary size (it reads no data set)",
     "[8, 1048576]"},
};

static const RunSpec kSpec = {
    .benchmark = "transformer", .metric = "BLEU", .max_epochs = "30", .target = "0.25",
    .eval_every = "1", .keys = kKeys, .n_keys = (int)(sizeof kKeys / sizeof kKeys[0]),
    .resume_may_change = (const char *const[]){"eval_batch", "bench_steps", NULL},
    .outputs = (const char *const[]){"translations_out", NULL},
};

typedef struct NmtTrainer {
  Run run;
  char lmdb[4096];      // DATA_DIR/lmdb: the converted data set
  WmtCounts counts;     // the data set's sizes, checked before run_start
  WmtSplit train, eval; // read after run_start
  Subword *vocab;
  char **refs;          // (eval pairs) the reference translations
  int64_t n_refs;
  NmtModel model;
  Optimizer opt;
  Schedule sched;
  WmtBatches plan;      // this epoch's batches
  WmtBatch batch;       // host buffers of one batch
  int64_t max_tokens, max_length, eval_batch, max_positions;
  WmtLengthMethod method;
  bool eval_whole;      // eval_sources = whole: no eval source cut
  BeamConfig beam;
} NmtTrainer;

static WmtLengthMethod parse_method(const char *name) {
  if (!strcmp(name, "discard")) return WMT_DISCARD;
  if (!strcmp(name, "truncate")) return WMT_TRUNCATE;
  die_input("--length_method", "want discard or truncate, got \"%s\"", name);
}

// Adam with the rsqrt schedule, logged under the checker's keys.
static OptConfig nmt_optimizer(NmtTrainer *r) {
  const Config *cfg = &r->run.cfg;
  OptConfig oc = optim_adam_config(cfg, OPT_ADAM);
  optim_log(&oc, &r->run.log);
  r->sched = (Schedule){.kind = SCHED_RSQRT, .base_lr = config_float(cfg, "learning_rate"),
                        .warmup_steps = config_int(cfg, "warmup_steps")};
  schedule_check(&r->sched, "--warmup_steps");
  schedule_log(&r->sched, OPT_ADAM, &r->run.log);
  return oc;
}

// The model and its buffers: a training batch holds at most max_tokens
// token rows; an eval batch eval_batch sources of up to max_positions, each
// decoded as beam hypotheses.
static void nmt_setup(NmtTrainer *r) {
  const Config *cfg = &r->run.cfg;
  OptConfig oc = nmt_optimizer(r);
  int64_t eval_rows = r->eval_batch * r->max_positions;
  NmtShape shape = {
      .vocab = r->counts.vocab_size, .d_model = config_int(cfg, "d_model"),
      .d_ff = config_int(cfg, "d_ff"), .heads = config_int(cfg, "heads"),
      .enc_layers = (int)config_int(cfg, "enc_layers"), .dec_layers = (int)config_int(cfg, "dec_layers"),
      .dropout = (float)config_float(cfg, "dropout"),
      .attention_dropout = (float)config_float(cfg, "attention_dropout"),
      .label_smoothing = (float)config_float(cfg, "label_smoothing"),
      .dtype = amp_compute_dtype(r->run.amp.precision),
      .fused_attention = config_bool(cfg, "fused_attention"),
      .max_rows = r->max_tokens > eval_rows ? r->max_tokens : eval_rows,
      .max_len = r->max_positions, .max_decode_seqs = r->eval_batch * r->beam.beam};
  if (shape.d_model % shape.heads || shape.d_model % 2)
    die_input("--d_model", "%lld is not an even multiple of the %lld heads",
              (long long)shape.d_model, (long long)shape.heads);
  nmt_model_init(&r->model, &shape, optim_state_count(OPT_ADAM), (uint64_t)config_int(cfg, "seed"),
                 r->run.dev.kind);
  optim_init(&r->opt, &oc, &r->model.ps);
  dist_attach(&r->run.dist, &r->run.dev, &r->model.ps, DIST_BUCKET_BYTES);
  dist_broadcast_params(&r->run.dist);
  int64_t cap = shape.max_rows;  // a batch's pairs times its padded length
  r->batch.src = xmalloc((size_t)cap * sizeof(int32_t));
  r->batch.tgt_in = xmalloc((size_t)cap * sizeof(int32_t));
  r->batch.tgt_out = xmalloc((size_t)cap * sizeof(int32_t));
  r->batch.src_len = xmalloc((size_t)cap * sizeof(int32_t));
  if (r->run.rank == 0)
    printf("transformer: %lld training pairs, %lld eval pairs, vocabulary %d; %lld parameters; "
           "batches of %lld tokens per rank; %s, %s attention\n",
           (long long)r->counts.train_pairs, (long long)r->counts.eval_pairs,
           r->counts.vocab_size, (long long)paramset_count_params(&r->model.ps),
           (long long)r->max_tokens, amp_precision_name(r->run.amp.precision),
           r->model.dims.fused_attention ? "fused" : "unfused");
}

// Splits text into lines in place; returns the count.
static int64_t split_lines(char *text, char ***lines) {
  int64_t n = 0, cap = 0;
  *lines = NULL;
  for (char *p = text; *p;) {
    char *end = strchr(p, '\n');
    if (end) *end = '\0';
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      char **grown = xmalloc((size_t)cap * sizeof(char *));
      if (n) memcpy(grown, *lines, (size_t)n * sizeof(char *));
      free(*lines);
      *lines = grown;
    }
    (*lines)[n++] = p;
    if (!end) break;
    p = end + 1;
  }
  return n;
}

// The data set into memory (after run_start: this reads it).
static void nmt_open_data(void *trainer) {
  NmtTrainer *r = trainer;
  const char *dir = r->lmdb;
  char path[4200];
  wmt_split_read(&r->train, dir, "train", r->max_length, r->method);
  int64_t longest = wmt_eval_read(&r->eval, dir, r->max_positions, r->beam.extra_len, r->eval_whole);
  if (r->run.rank == 0 && r->eval_whole)
    printf("transformer: eval sources whole: the longest %lld tokens, decoded up to %lld more "
           "(max_positions %lld)\n", (long long)longest, (long long)r->beam.extra_len,
           (long long)r->max_positions);
  snprintf(path, sizeof path, "%s/vocab.subwords", dir);
  r->vocab = subword_load(path);
  snprintf(path, sizeof path, "%s/eval.ref", dir);
  size_t n_bytes;
  uint8_t *bytes = file_read(path, &n_bytes);
  char *text = xmalloc(n_bytes + 1);
  memcpy(text, bytes, n_bytes);
  text[n_bytes] = '\0';
  free(bytes);
  r->n_refs = split_lines(text, &r->refs);
  if (r->n_refs != r->eval.n_pairs)
    die_input(path, "%lld lines for %lld eval pairs", (long long)r->n_refs, (long long)r->eval.n_pairs);
  if (r->run.rank == 0 && (r->train.dropped || r->eval.dropped))
    printf("transformer: max_length %lld (%s) dropped %lld training pairs\n",
           (long long)r->max_length, r->method == WMT_DISCARD ? "discard" : "truncate",
           (long long)r->train.dropped);
  MLLOG_POINT(&r->run.log, "train_samples", mlv_int(r->train.n_pairs));
  MLLOG_POINT(&r->run.log, "eval_samples", mlv_int(r->eval.n_pairs));
}

// The epoch's batches by token count (this rank's share), which decide its
// size.
static void nmt_plan_epoch(void *trainer, int64_t epoch) {
  NmtTrainer *r = trainer;
  wmt_batches_free(&r->plan);
  wmt_batches_plan(&r->plan, &r->train, r->max_tokens, (uint64_t)config_int(&r->run.cfg, "seed"),
                   epoch, r->run.dist.rank, r->run.dist.size);
  run_set_epoch_size(&r->run, r->train.n_pairs, r->plan.n_batches);
}

// A training step on the batch in r->batch; `stream` picks its dropout
// masks.
static void nmt_step(NmtTrainer *r, uint64_t stream) {
  float lr = (float)schedule_lr(&r->sched, r->opt.step);
  nmt_model_train_step(&r->model, &r->run.dev, &r->batch, amp_loss_scale(&r->run.scaler),
                       (uint64_t)config_int(&r->run.cfg, "seed"), stream, dist_grad_hook(&r->run.dist));
  run_add_loss(&r->run, &r->model.loss);
  run_update(&r->run.dev, &r->run.dist, &r->run.scaler, &r->opt, &r->model.ps, lr);
}

// Batch i of the epoch's plan; returns its pairs over all ranks.
static int64_t nmt_train_step(void *trainer, int64_t epoch, int64_t i) {
  NmtTrainer *r = trainer;
  wmt_batch_fill(&r->plan, &r->train, i, &r->batch);
  nmt_step(r, (uint64_t)((epoch << 24) + i));
  return r->plan.count[i] * r->run.dist.size;
}

// The beam search's view of the model: each hypothesis's k best tokens and
// its log-sum-exp picked where the logits are (op_topk, op_logsumexp), so
// a GPU copies (n, k) values per step instead of (n, vocab) logits. The
// picks share one buffer on the device, copied back in one piece (one wait
// a step): the (n, k) values in the logits' dtype, then (n, k) int32 ids,
// then (n) fp32 norms, each part 16-byte aligned; host is its copy.
typedef struct BeamPick {
  NmtTrainer *r;
  void *dev_buf, *host;
  size_t bytes;  // of each, for the most sequences a step decodes
  int k;
} BeamPick;

static size_t align16(size_t bytes) { return (bytes + 15) & ~(size_t)15; }

// The parts' offsets for n sequences; returns the bytes the picks take.
static size_t beam_pick_layout(int64_t n, int k, DType dtype, size_t *ids_at, size_t *norm_at) {
  *ids_at = align16((size_t)(n * k) * dtype_size(dtype));
  *norm_at = *ids_at + align16((size_t)(n * k) * sizeof(int32_t));
  return *norm_at + (size_t)n * sizeof(float);
}

static void beam_step(void *ctx, const int32_t *ids, int64_t n, int64_t t, int k, float *top,
                      int32_t *top_ids, float *norm) {
  BeamPick *bp = ctx;
  NmtTrainer *r = bp->r;
  const Device *dev = &r->run.dev;
  Tensor logits = nmt_model_decode_step(&r->model, dev, ids, t);
  if (k != bp->k) DIE("beam_step: %d best tokens asked for, buffers of %d", k, bp->k);
  size_t ids_at, norm_at, bytes = beam_pick_layout(n, k, logits.dtype, &ids_at, &norm_at);
  if (bytes > bp->bytes) DIE("beam_step: %lld sequences need %zu bytes of picks, %zu made",
                             (long long)n, bytes, bp->bytes);
  char *buf = bp->dev_buf, *host = bp->host;
  Tensor dtop = tensor_make(buf, logits.dtype, dev->kind, 2, (int64_t[]){n, k});
  Tensor dids = tensor_make(buf + ids_at, DT_I32, dev->kind, 2, (int64_t[]){n, k});
  Tensor dnorm = tensor_make(buf + norm_at, DT_F32, dev->kind, 1, (int64_t[]){n});
  op_topk(dev, &logits, k, &dtop, &dids);
  op_logsumexp(dev, &logits, &dnorm);
  device_copy(DEVICE_CPU, host, dev->kind, buf, bytes);  // the step's one wait
  for (int64_t i = 0; i < n * k; i++) top[i] = dtype_load_f32(host, dtop.dtype, i);
  memcpy(top_ids, host + ids_at, (size_t)(n * k) * sizeof(int32_t));
  memcpy(norm, host + norm_at, (size_t)n * sizeof(float));
}

static void beam_reorder(void *ctx, const int32_t *parent, int64_t n, int64_t t) {
  BeamPick *bp = ctx;
  (void)n;
  nmt_model_reorder(&bp->r->model, &bp->r->run.dev, parent, t);
}

// Translates this rank's share of the eval set, eval_batch sentences at a
// time (sorted by length), into hyps[pair] (detokenised, malloc'd).
static void nmt_translate(NmtTrainer *r, char **hyps) {
  WmtBatches all;
  wmt_batches_plan_eval(&all, &r->eval, INT64_MAX / 4, r->run.dist.rank, r->run.dist.size);
  int64_t width = r->beam.max_len, n_order = 0;
  for (int64_t i = 0; i < all.n_batches; i++) n_order += all.count[i];
  int32_t *out = xmalloc((size_t)(r->eval_batch * width) * sizeof(int32_t));
  int64_t *out_len = xmalloc((size_t)r->eval_batch * sizeof(int64_t));
  int64_t seqs = r->model.shape.max_decode_seqs;
  BeamPick pick = {.r = r, .k = 2 * r->beam.beam};
  size_t ids_at, norm_at;
  pick.bytes = beam_pick_layout(seqs, pick.k, r->model.dims.dtype, &ids_at, &norm_at);
  pick.dev_buf = device_alloc(r->run.dev.kind, pick.bytes);
  pick.host = xmalloc(pick.bytes);
  BeamModel bm = {.ctx = &pick, .vocab = r->model.shape.vocab, .step = beam_step, .reorder = beam_reorder};
  WmtBatches chunk = all;  // eval_batch pairs at a time, in the sorted order
  int64_t first = all.n_batches ? all.first[0] : 0;
  for (int64_t done = 0; done < n_order; done += r->eval_batch) {
    int64_t count = n_order - done < r->eval_batch ? n_order - done : r->eval_batch;
    chunk.n_batches = 1;
    chunk.first = &(int64_t){first + done};
    chunk.count = &count;
    wmt_batch_fill(&chunk, &r->eval, 0, &r->batch);
    nmt_model_encode(&r->model, &r->run.dev, &r->batch, r->beam.beam);
    beam_search(&bm, &r->beam, r->batch.b, r->batch.src_len, out, out_len);
    for (int64_t j = 0; j < count; j++) {
      int64_t pair = all.order[first + done + j];
      size_t need = subword_decode(r->vocab, out + j * width, out_len[j], NULL, 0);
      hyps[pair] = xmalloc(need + 1);
      subword_decode(r->vocab, out + j * width, out_len[j], hyps[pair], need + 1);
    }
  }
  free(pick.host);
  device_free(r->run.dev.kind, pick.dev_buf);
  free(out_len);
  free(out);
  wmt_batches_free(&all);
}

static void write_translations(NmtTrainer *r, char **hyps) {
  const char *path = config_string(&r->run.cfg, "translations_out");
  if (!*path || r->run.rank != 0) return;
  AtomicFile f;
  atomic_file_begin(&f, path);
  for (int64_t i = 0; i < r->eval.n_pairs; i++) atomic_file_printf(&f, "%s\n", hyps[i] ? hyps[i] : "");
  atomic_file_commit(&f);
}

// A bench run's batch: max_tokens / max_length pairs of max_length random
// ids a side (EOS last), no padding: the shape a PyTorch model is timed at
// beside it (tests/bench/bench_transformer.py).
static void nmt_bench_batch(NmtTrainer *r) {
  WmtBatch *b = &r->batch;
  int64_t len = r->max_length, n = r->max_tokens / len;
  Rng rng = rng_make((uint64_t)config_int(&r->run.cfg, "seed"), 77);
  *b = (WmtBatch){.b = n, .s = len, .t = len, .src = b->src, .tgt_in = b->tgt_in,
                  .tgt_out = b->tgt_out, .src_len = b->src_len, .n_tokens = n * len};
  uint32_t ids = (uint32_t)r->counts.vocab_size - 2;
  for (int64_t i = 0; i < n * len; i++) {
    bool last = i % len == len - 1;
    b->src[i] = last ? SUBWORD_EOS : 2 + (int32_t)rng_next_below(&rng, ids);
    b->tgt_out[i] = last ? SUBWORD_EOS : 2 + (int32_t)rng_next_below(&rng, ids);
  }
  for (int64_t i = 0; i < n * len; i++) b->tgt_in[i] = i % len ? b->tgt_out[i - 1] : SUBWORD_PAD;
  for (int64_t i = 0; i < n; i++) b->src_len[i] = (int32_t)len;
}

static void nmt_bench_step(void *ctx, int64_t i) { nmt_step(ctx, (uint64_t)i); }

// Throughput only: bench_steps timed training steps of the bench batch
// after NMT_BENCH_WARMUP untimed ones; returns the tokens (source and
// target) per second over all ranks.
static double nmt_bench(void *trainer) {
  NmtTrainer *r = trainer;
  int64_t steps = config_int(&r->run.cfg, "bench_steps");
  nmt_bench_batch(r);
  double seconds = run_time_steps(&r->run, NMT_BENCH_WARMUP, steps, nmt_bench_step, r);
  double tokens = (double)(2 * r->batch.b * r->max_length * r->run.dist.size * steps);
  if (r->run.rank == 0)
    printf("transformer: bench: %lld steps of %lld pairs x %lld tokens a side: %.3f ms/step, "
           "%.0f tokens/s (loss %.4f)\n",
           (long long)steps, (long long)r->batch.b, (long long)r->max_length,
           1e3 * seconds / (double)steps, tokens / seconds, loss_read(&r->run.dev, &r->model.loss));
  return tokens / seconds;
}

// BLEU / 100 over the whole eval set: each rank translates and counts its
// share, and the n-gram counts are summed over the ranks.
static double nmt_evaluate(void *trainer, char *more, size_t more_bytes) {
  NmtTrainer *r = trainer;
  char **hyps = xcalloc((size_t)r->eval.n_pairs, sizeof(char *));
  nmt_translate(r, hyps);
  BleuStats st = {0};
  for (int64_t i = 0; i < r->eval.n_pairs; i++)
    if (hyps[i]) bleu_add(&st, hyps[i], r->refs[i]);
  dist_sum_f64(&r->run.dist, (double *)&st, (int)(sizeof st / sizeof(double)));
  write_translations(r, hyps);
  for (int64_t i = 0; i < r->eval.n_pairs; i++) free(hyps[i]);
  free(hyps);
  double bleu = bleu_score(&st);
  snprintf(more, more_bytes, "BLEU %.2f", bleu);
  return bleu / 100.0;
}

// The trainer's own flags, checked.
static void nmt_read_flags(NmtTrainer *r) {
  const Config *cfg = &r->run.cfg;
  r->max_tokens = config_int(cfg, "max_tokens");
  r->max_length = config_int(cfg, "max_length");
  r->max_positions = config_int(cfg, "max_positions");
  r->eval_batch = config_int(cfg, "eval_batch");
  r->method = parse_method(config_string(cfg, "length_method"));
  r->eval_whole = !strcmp(config_string(cfg, "eval_sources"), "whole");
  if (r->max_length >= r->max_tokens)
    die_input("--max_tokens", "%lld tokens do not hold a pair of --max_length %lld (want more)",
              (long long)r->max_tokens, (long long)r->max_length);
  if (r->max_length > r->max_positions)
    die_input("--max_length", "%lld is more than the model's %lld positions (--max_positions)",
              (long long)r->max_length, (long long)r->max_positions);
  r->beam = (BeamConfig){.beam = (int)config_int(cfg, "beam"), .alpha = (float)config_float(cfg, "alpha"),
                         .extra_len = config_int(cfg, "extra_decode_length"),
                         .max_len = r->max_positions, .eos = SUBWORD_EOS};
  run_check_profile(&r->run, config_int(cfg, "bench_steps") > 0, "--bench_steps=N");
  if (*config_string(cfg, "translations_out") && r->run.dist.size > 1)
    die_input("--translations_out", "is written by a single rank; run without mpirun to write it");
}

// The epoch's size is known once its batches are planned (nmt_plan_epoch).
static const RunTraining kNmtTraining = {.open_data = nmt_open_data, .plan_epoch = nmt_plan_epoch,
                                         .train_step = nmt_train_step, .evaluate = nmt_evaluate};

int main(int argc, char **argv) {
  NmtTrainer r = {0};
  run_init(&r.run, &kSpec, &argc, &argv);
  const Config *cfg = &r.run.cfg;
  nmt_read_flags(&r);

  // The data set, checked before run_start (run.h): its counts. A bench
  // run reads none.
  int64_t bench_steps = config_int(cfg, "bench_steps");
  if (bench_steps == 0) snprintf(r.lmdb, sizeof r.lmdb, "%s/lmdb", run_data_dir(&r.run));
  if (bench_steps > 0)
    r.counts.vocab_size = (int32_t)config_int(cfg, "bench_vocab");
  else
    r.counts = wmt_data_check(r.lmdb);
  run_check(&r.run);
  MLLOG_POINT(&r.run.log, "global_batch_size", mlv_int(r.max_tokens * r.run.dist.size));
  MLLOG_POINT(&r.run.log, "gradient_accumulation_steps", mlv_int(1));
  MLLOG_POINT(&r.run.log, "max_sequence_length", mlv_int(r.max_length),
              {"method", mlv_str(r.method == WMT_DISCARD ? "discard" : "truncate")});
  nmt_setup(&r);
  run_resume(&r.run, &r.model.ps, NULL, &r.opt);

  if (bench_steps > 0)
    run_benchmark(&r.run, "training steps on random pairs", nmt_bench, &r, "tokens/s");
  else
    run_train(&r.run, &kNmtTraining, &r, r.counts.train_pairs, 1);

  free(r.batch.src);
  free(r.batch.tgt_in);
  free(r.batch.tgt_out);
  free(r.batch.src_len);
  if (r.refs) free(r.refs[0]);
  free(r.refs);
  subword_free(r.vocab);
  wmt_batches_free(&r.plan);
  wmt_split_free(&r.train);
  wmt_split_free(&r.eval);
  optim_free(&r.opt);
  nmt_model_free(&r.model);
  run_close(&r.run);
  return 0;
}
