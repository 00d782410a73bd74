// train.c: a pretrained BERT encoder fine-tuned on SQuAD v1.1 to an F1
// target, MLPerf style. Reads top to bottom as the procedure:
//   init: flags, device, ranks, the pretrained model (--init_checkpoint:
//         Hugging Face's config.json and model.safetensors) with a span
//         head, the data set's counts, AdamW (decay off biases and layer
//         norms) with linear warmup then linear decay, gradient clipping
//   run:  epochs over the training windows in a fresh order; after each,
//         every dev question's windows through the model, the best span of
//         each question (n-best starts and ends, max-context windows,
//         squad_eval.h) scored by the official v1.1 EM and F1, until
//         F1 / 100 >= target (run_stop success) or the epoch limit (aborted)
//
//   bert --config=language/configs/small.conf --data_dir=data/bert/small
//     --init_checkpoint=<folder of config.json, model.safetensors>
// (the data set in DATA_DIR/lmdb: language/prepare_data.sh, squad_data.h)
//   bert --init_checkpoint=DIR --bench_steps=N [--profile_steps=M]
// times training steps of random windows instead (tests/bench/bench_bert.py)
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/json.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/parallel.h"
#include "device/profile.h"
#include "language/bert_model.h"
#include "language/squad_data.h"
#include "language/squad_eval.h"
#include "language/squad_features.h"
#include "train/amp.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/schedule.h"

#define BERT_BENCH_WARMUP 5                   // untimed steps before a bench_steps measurement

static const ConfigKey kKeys[] = {
    {"init_checkpoint", CFG_STRING, "",
     "the pretrained model's folder: config.json and model.safetensors (Hugging Face's files); "
     "default DATA_DIR/model, where language/prepare_data.sh puts it", NULL},
    TFM_FUSED_ATTENTION_KEY,
    {"max_seq_length", CFG_INT, "384", "the longest window the data set holds (buffer size)", "[8, 4096]"},
    {"batch_size", CFG_INT, "32", "global batch: windows per step over all ranks", "[1, inf)"},
    {"length_group", CFG_INT, "0",
     "0: batches of windows in random order; N: of similar length (the shuffled order sorted by "
     "length in runs of N batches, the batches then shuffled: less padding)", "[0, inf)"},
    {"learning_rate", CFG_FLOAT, "3e-5", "peak learning rate, after the warmup; then linear decay to 0",
     "(0, inf)"},
    {"warmup_proportion", CFG_FLOAT, "0.1", "the share of the schedule's steps that warms the rate up from 0",
     "[0, 1)"},
    {"decay_epochs", CFG_FLOAT, "0",
     "the schedule's length in epochs (warmup, then linear decay to 0); 0: max_epochs", "[0, inf)"},
    {"weight_decay", CFG_FLOAT, "0.01", "AdamW's decoupled weight decay (not on biases, norms)", "[0, 1)"},
    OPTIM_ADAM_KEYS("0.999", "1e-6"),
    {"max_grad_norm", CFG_FLOAT, "1.0", "gradients clipped to this global norm (0: never)", "[0, inf)"},
    {"eval_batch", CFG_INT, "64", "windows per eval forward per rank", "[1, 65536]"},
    {"n_best", CFG_INT, "20", "starts and ends kept per window by the span search", "[1, 1000]"},
    {"max_answer_length", CFG_INT, "30", "the longest answer, in tokens", "[1, 4096]"},
    {"predictions_out", CFG_STRING, "",
     "write the last eval's answers here as predictions.json (question id -> text)", NULL},
    {"bench_steps", CFG_INT, "0",
     "throughput only: this many timed training steps of random full-length windows (after "
     "5 untimed); weights random in the shape of init_checkpoint's config.json; no data set read",
     "[0, inf)"},
};

static const RunSpec kSpec = {
    .benchmark = "bert", .logged_as = "bert_squad", .metric = "F1", .max_epochs = "2",
    .target = "0.905", .eval_every = "1", .keys = kKeys, .n_keys = (int)(sizeof kKeys / sizeof kKeys[0]),
    .resume_may_change = (const char *const[]){"eval_batch", "bench_steps", NULL},
    .outputs = (const char *const[]){"predictions_out", NULL},
};

typedef struct BertTrainer {
  Run run;
  char lmdb[4096];          // DATA_DIR/lmdb
  char ckpt[4096];          // the model's folder: init_checkpoint, or DATA_DIR/model
  SquadCounts counts;       // checked before run_start
  SquadSplit train, dev_set;  // read after run_start
  SquadSet questions;       // the dev questions: ids, contexts, gold answers
  BertModel model;
  Optimizer opt;
  Schedule sched;
  SquadBatchBuf buf;
  int64_t batch, local_batch, eval_batch, steps_per_epoch;
  int64_t *order;  // (train windows) this epoch's order
  int64_t *idx;    // (local_batch) a step's windows
} BertTrainer;

// ---------------------------------------------------------------- setup

// root[key], a number; fallback where root has no key, or an error when
// fallback is NULL (a required key).
static double json_number(const cJSON *root, const char *path, const char *key,
                          const double *fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v) {
    if (fallback) return *fallback;
    die_input(path, "no \"%s\"", key);
  }
  if (!cJSON_IsNumber(v)) die_input(path, "\"%s\" is not a number", key);
  return v->valuedouble;
}

// The encoder's shape from the checkpoint's config.json (BERT's keys).
static BertShape read_model_config(const char *dir, DType dtype) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  cJSON *root = json_read_file(path);
  if (!cJSON_IsObject(root)) die_input(path, "not a JSON object");
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
  if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu")))
    die_input(path, "hidden_act \"%s\": the model implements \"gelu\" (the erf form)",
              cJSON_IsString(act) ? act->valuestring : "?");
  BertShape s = {
      .vocab = (int64_t)json_number(root, path, "vocab_size", NULL),
      .d_model = (int64_t)json_number(root, path, "hidden_size", NULL),
      .d_ff = (int64_t)json_number(root, path, "intermediate_size", NULL),
      .heads = (int64_t)json_number(root, path, "num_attention_heads", NULL),
      .layers = (int64_t)json_number(root, path, "num_hidden_layers", NULL),
      .max_positions = (int64_t)json_number(root, path, "max_position_embeddings", NULL),
      .type_vocab = (int64_t)json_number(root, path, "type_vocab_size", &(double){2}),
      .dropout = (float)json_number(root, path, "hidden_dropout_prob", &(double){0.1}),
      .attention_dropout = (float)json_number(root, path, "attention_probs_dropout_prob", &(double){0.1}),
      .ln_eps = (float)json_number(root, path, "layer_norm_eps", &(double){1e-12}),
      .pad_id = (int32_t)json_number(root, path, "pad_token_id", &(double){0}),
      .dtype = dtype};
  cJSON_Delete(root);
  if (s.vocab < 1 || s.d_model < 1 || s.d_ff < 1 || s.heads < 1 || s.d_model % s.heads ||
      s.layers < 1 || s.layers > BERT_MAX_LAYERS || s.max_positions < 1 || s.type_vocab < 1 ||
      s.pad_id < 0 || s.pad_id >= s.vocab)
    die_input(path, "not a BERT configuration this model takes (vocab %lld, hidden %lld, heads %lld, "
              "layers %lld of at most %d)", (long long)s.vocab, (long long)s.d_model,
              (long long)s.heads, (long long)s.layers, BERT_MAX_LAYERS);
  return s;
}

// AdamW with linear warmup and decay over decay_epochs' steps (resolved to
// max_epochs' value when 0).
static OptConfig bert_optimizer(BertTrainer *r) {
  const Config *cfg = &r->run.cfg;
  OptConfig oc = optim_adam_config(cfg, OPT_ADAMW);
  oc.weight_decay = (float)config_float(cfg, "weight_decay");
  oc.max_grad_norm = (float)config_float(cfg, "max_grad_norm");
  optim_log(&oc, &r->run.log);
  r->steps_per_epoch = (r->counts.train_windows + r->batch - 1) / r->batch;
  int64_t total = llround((double)r->steps_per_epoch * config_float(cfg, "decay_epochs"));
  r->sched = (Schedule){.kind = SCHED_LINEAR, .base_lr = config_float(cfg, "learning_rate"),
                        .warmup_steps = (int64_t)llround(config_float(cfg, "warmup_proportion") * (double)total),
                        .total_steps = total, .steps_per_epoch = r->steps_per_epoch};
  schedule_check(&r->sched, "--warmup_proportion, --decay_epochs");
  schedule_log(&r->sched, OPT_ADAMW, &r->run.log);
  return oc;
}

static void bert_setup(BertTrainer *r) {
  const Config *cfg = &r->run.cfg;
  OptConfig oc = bert_optimizer(r);
  const char *ckpt = r->ckpt;
  BertShape shape = read_model_config(ckpt, amp_compute_dtype(r->run.amp.precision));
  bool bench = config_int(cfg, "bench_steps") > 0;
  if (!bench) squad_data_check_vocab(r->lmdb, shape.vocab, ckpt);
  shape.max_batch = r->local_batch > r->eval_batch ? r->local_batch : r->eval_batch;
  shape.max_train_batch = r->local_batch;
  shape.max_len = config_int(cfg, "max_seq_length");
  shape.fused_attention = config_bool(cfg, "fused_attention");
  if (shape.max_len > shape.max_positions)
    die_input("--max_seq_length", "%lld is more than the model's %lld positions",
              (long long)shape.max_len, (long long)shape.max_positions);
  bert_model_init(&r->model, &shape, optim_state_count(OPT_ADAMW), (uint64_t)config_int(cfg, "seed"),
                  r->run.dev.kind);
  char path[4200];
  snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
  bool head = !bench && bert_model_load_safetensors(&r->model, path);
  optim_init(&r->opt, &oc, &r->model.ps);
  dist_attach(&r->run.dist, &r->run.dev, &r->model.ps, DIST_BUCKET_BYTES);
  dist_broadcast_params(&r->run.dist);
  squad_batch_buf_init(&r->buf, shape.max_batch, shape.max_len);
  char threads[48] = "";
  if (r->run.dev.kind == DEVICE_CPU) snprintf(threads, sizeof threads, ", %d threads", parallel_threads());
  if (r->run.rank == 0)
    printf("bert: %s: %lld layers, width %lld, %lld heads; %lld parameters (span head %s); "
           "%lld training windows, %lld dev windows; batch %lld (%lld a rank); %s, %s attention%s\n",
           ckpt, (long long)shape.layers, (long long)shape.d_model, (long long)shape.heads,
           (long long)paramset_count_params(&r->model.ps),
           bench ? "random, as every weight of a bench run" : head ? "from the checkpoint" : "new",
           (long long)r->counts.train_windows, (long long)r->counts.dev_windows,
           (long long)r->batch, (long long)r->local_batch, amp_precision_name(r->run.amp.precision),
           r->model.dims.fused_attention ? "fused" : "unfused", threads);
}

// The data set into memory (after run_start: this reads it).
static void bert_open_data(void *trainer) {
  BertTrainer *r = trainer;
  squad_split_read(&r->train, r->lmdb, "train");
  squad_split_read(&r->dev_set, r->lmdb, "dev");
  char path[4200];
  snprintf(path, sizeof path, "%s/dev.json", r->lmdb);
  squad_set_build(&r->questions, path, NULL, NULL);
  int64_t longest = r->train.max_tokens > r->dev_set.max_tokens ? r->train.max_tokens : r->dev_set.max_tokens;
  if (longest > r->buf.max_t)
    die_input("--max_seq_length", "%lld, but the data set holds windows of %lld tokens",
              (long long)r->buf.max_t, (long long)longest);
  for (int64_t i = 0; i < r->dev_set.n; i++)
    if (r->dev_set.windows[i].example >= r->questions.n_examples)
      die_input(path, "%lld questions, but a dev window is of question %lld", (long long)r->questions.n_examples,
                (long long)r->dev_set.windows[i].example);
  r->idx = xmalloc((size_t)r->local_batch * sizeof(int64_t));
  MLLOG_POINT(&r->run.log, "train_samples", mlv_int(r->train.n));
  MLLOG_POINT(&r->run.log, "eval_samples", mlv_int(r->questions.n_examples));
}

// ---------------------------------------------------------------- training

// A training step on batch b; `stream` picks its dropout masks.
static void bert_step(BertTrainer *r, const BertBatch *b, uint64_t stream) {
  float lr = (float)schedule_lr(&r->sched, r->opt.step);
  bert_model_train_step(&r->model, &r->run.dev, b, amp_loss_scale(&r->run.scaler),
                        (uint64_t)config_int(&r->run.cfg, "seed"), stream, dist_grad_hook(&r->run.dist));
  run_add_loss(&r->run, &r->model.loss);
  run_update(&r->run.dev, &r->run.dist, &r->run.scaler, &r->opt, &r->model.ps, lr);
}

// The epoch's order of the training windows (length-grouped with
// --length_group).
static void bert_plan_epoch(void *trainer, int64_t epoch) {
  BertTrainer *r = trainer;
  free(r->order);
  r->order = squad_epoch_order(&r->train, (uint64_t)config_int(&r->run.cfg, "seed"), epoch, r->batch,
                               config_int(&r->run.cfg, "length_group"));
}

// Global batch i: windows [i B, (i + 1) B) of the epoch's order; rank k
// takes its k-th share (local_batch windows, continuing past the end from
// the start, so that every rank steps alike). Returns B.
static int64_t bert_train_step(void *trainer, int64_t epoch, int64_t i) {
  BertTrainer *r = trainer;
  int64_t n = r->train.n;
  for (int64_t j = 0; j < r->local_batch; j++)
    r->idx[j] = r->order[(i * r->batch + r->run.dist.rank * r->local_batch + j) % n];
  BertBatch b = squad_batch_fill(&r->train, r->idx, r->local_batch, &r->buf);
  bert_step(r, &b, (uint64_t)(epoch * r->steps_per_epoch + i));
  return r->batch;
}

// ---------------------------------------------------------------- bench

// A bench batch: local_batch windows of max_seq_length random ids (no
// padding), the first quarter token type 0 (the question) and the rest 1,
// answers at random positions of the rest (tests/bench/bench_bert.py times
// transformers' BERT on the same shape).
typedef struct BertBench {
  BertTrainer *r;
  BertBatch batch;
} BertBench;

static BertBatch bert_bench_batch(BertTrainer *r) {
  int64_t b = r->local_batch, t = r->buf.max_t, q = t / 4;
  Rng rng = rng_make((uint64_t)config_int(&r->run.cfg, "seed"), 77 + (uint64_t)r->run.rank);
  int32_t *ids = r->buf.ids, *types = r->buf.types;
  uint32_t vocab = (uint32_t)r->model.shape.vocab;
  for (int64_t i = 0; i < b * t; i++) {
    int32_t id;
    do id = (int32_t)rng_next_below(&rng, vocab);
    while (id == r->model.shape.pad_id);
    ids[i] = id;
    types[i] = i % t >= q;
  }
  for (int64_t i = 0; i < b; i++) {
    r->buf.len[i] = (int32_t)t;
    r->buf.start[i] = (int32_t)(q + (int64_t)rng_next_below(&rng, (uint32_t)(t - q)));
    r->buf.end[i] = r->buf.start[i] + (int32_t)rng_next_below(&rng, (uint32_t)(t - r->buf.start[i]));
  }
  return (BertBatch){.b = b, .t = t, .ids = ids, .types = types, .len = r->buf.len,
                     .start = r->buf.start, .end = r->buf.end};
}

static void bert_bench_step(void *ctx, int64_t i) {
  BertBench *bb = ctx;
  bert_step(bb->r, &bb->batch, (uint64_t)i);
}

// Throughput only: bench_steps timed training steps of the bench batch
// after BERT_BENCH_WARMUP untimed ones; returns the windows (sequences) per
// second over all ranks.
static double bert_bench(void *trainer) {
  BertTrainer *r = trainer;
  int64_t steps = config_int(&r->run.cfg, "bench_steps");
  BertBench bb = {.r = r, .batch = bert_bench_batch(r)};
  double seconds = run_time_steps(&r->run, BERT_BENCH_WARMUP, steps, bert_bench_step, &bb);
  double seqs = (double)(r->batch * steps);
  if (r->run.rank == 0)
    printf("bert: bench: %lld steps of %lld windows x %lld tokens: %.3f ms/step, %.2f sequences/s "
           "(loss %.4f)\n", (long long)steps, (long long)r->batch, (long long)bb.batch.t,
           1e3 * seconds / (double)steps, seqs / seconds, loss_read(&r->run.dev, &r->model.loss));
  return seqs / seconds;
}

// ---------------------------------------------------------------- evaluation

// The start and end logits of dev windows idx[0..n) into logits[idx[i]]
// (2 x the window's tokens, start then end; malloc'd).
static void eval_windows(BertTrainer *r, const int64_t *idx, int64_t n, float **logits) {
  BertBatch b = squad_batch_fill(&r->dev_set, idx, n, &r->buf);
  bert_model_eval(&r->model, &r->run.dev, &b);
  const Tensor *span = &r->model.span_logits;
  size_t bytes = (size_t)(2 * b.b * b.t) * dtype_size(span->dtype);
  void *raw = xmalloc(bytes);
  device_sync(&r->run.dev);
  device_copy(DEVICE_CPU, raw, r->run.dev.kind, span->data, bytes);
  for (int64_t i = 0; i < n; i++) {
    int nt = r->dev_set.windows[idx[i]].n;
    float *out = logits[idx[i]] = xmalloc((size_t)(2 * nt) * sizeof(float));
    for (int k = 0; k < nt; k++) {
      out[k] = dtype_load_f32(raw, span->dtype, i * b.t + k);              // start
      out[nt + k] = dtype_load_f32(raw, span->dtype, (b.b + i) * b.t + k);  // end
    }
  }
  free(raw);
}

// The answer to question q from its windows [first, first + count) of the
// dev set, whose logits are logits[0..count).
static char *answer_question(BertTrainer *r, int64_t q, int64_t first, int64_t count, float **logits) {
  SquadWindow *ws = xcalloc((size_t)count, sizeof *ws);
  for (int64_t w = 0; w < count; w++) {
    const SquadFeature *f = &r->dev_set.windows[first + w];
    int64_t *begin = xmalloc((size_t)f->n * sizeof(int64_t)), *end = xmalloc((size_t)f->n * sizeof(int64_t));
    bool *maxc = xmalloc((size_t)f->n * sizeof(bool));
    for (int t = 0; t < f->n; t++) begin[t] = f->span_begin[t], end[t] = f->span_end[t], maxc[t] = f->max_context[t];
    ws[w] = (SquadWindow){.start_logits = logits[w], .end_logits = logits[w] + f->n, .span_begin = begin,
                          .span_end = end, .max_context = maxc, .n_tokens = f->n};
  }
  const Config *cfg = &r->run.cfg;
  SquadAnswer a = squad_best_span(ws, (int)count, (int)config_int(cfg, "n_best"),
                                  (int)config_int(cfg, "max_answer_length"));
  char *text = squad_answer_text(r->questions.examples[q].context, &a);
  for (int64_t w = 0; w < count; w++) {
    free((void *)ws[w].span_begin), free((void *)ws[w].span_end), free((void *)ws[w].max_context);
  }
  free(ws);
  return text;
}

static void write_predictions(BertTrainer *r, char **answers) {
  const char *path = config_string(&r->run.cfg, "predictions_out");
  if (!*path || r->run.rank != 0) return;
  cJSON *root = cJSON_CreateObject();
  for (int64_t q = 0; q < r->questions.n_examples; q++)
    if (answers[q]) cJSON_AddStringToObject(root, r->questions.examples[q].id, answers[q]);
  char *text = cJSON_Print(root);
  file_write_atomic(path, text, strlen(text));
  free(text);
  cJSON_Delete(root);
}

// F1 / 100 over every dev question: question q is rank q % ranks's, each
// rank scores its questions, and the sums are added over the ranks.
static double bert_evaluate(void *trainer, char *more, size_t more_bytes) {
  BertTrainer *r = trainer;
  int64_t nq = r->questions.n_examples, W = r->run.dist.size, rank = r->run.dist.rank;
  char **answers = xcalloc((size_t)nq, sizeof(char *));
  SquadStats st = {0};
  int64_t *idx = xmalloc((size_t)r->eval_batch * sizeof(int64_t));
  float **logits = xcalloc((size_t)r->dev_set.n, sizeof(float *));
  // This rank's windows (those of its questions), eval_batch at a time.
  int64_t filled = 0;
  for (int64_t i = 0; i <= r->dev_set.n; i++) {
    bool last = i == r->dev_set.n;
    if (!last && r->dev_set.windows[i].example % W == rank) idx[filled++] = i;
    if (filled && (filled == r->eval_batch || last)) {
      eval_windows(r, idx, filled, logits);
      filled = 0;
    }
  }
  // Windows of a question are consecutive (squad_to_lmdb writes them in order).
  for (int64_t i = 0; i < r->dev_set.n;) {
    int64_t q = r->dev_set.windows[i].example, j = i;
    while (j < r->dev_set.n && r->dev_set.windows[j].example == q) j++;
    if (q % W == rank) {
      answers[q] = answer_question(r, q, i, j - i, logits + i);
      const SquadExample *ex = &r->questions.examples[q];
      squad_stats_add(&st, answers[q], (const char *const *)ex->answers, ex->n_answers);
      for (int64_t k = i; k < j; k++) free(logits[k]);
    }
    i = j;
  }
  dist_sum_f64(&r->run.dist, (double *)&st, (int)(sizeof st / sizeof(double)));
  // Questions without any window (none when squad_to_lmdb wrote the set) score 0.
  for (int64_t q = (int64_t)st.questions; q < nq; q++) squad_stats_add_unanswered(&st);
  write_predictions(r, answers);
  for (int64_t q = 0; q < nq; q++) free(answers[q]);
  free(answers);
  free(logits);
  free(idx);
  snprintf(more, more_bytes, "F1 %.2f, EM %.2f", squad_f1(&st), squad_exact_match(&st));
  return squad_f1(&st) / 100.0;
}

// The trainer's own flags, checked.
static void bert_read_flags(BertTrainer *r) {
  const Config *cfg = &r->run.cfg;
  r->batch = config_int(cfg, "batch_size");
  r->eval_batch = config_int(cfg, "eval_batch");
  r->local_batch = run_local_batch(&r->run, r->batch, "windows");
  bool bench = config_int(cfg, "bench_steps") > 0;
  if (!*config_string(cfg, "init_checkpoint") && !*config_string(cfg, "data_dir") && bench)
    die_input("--init_checkpoint", "missing: a bench run takes the model's shape from FOLDER/config.json "
              "(or DATA_DIR/model with --data_dir)");
  if (*config_string(cfg, "predictions_out") && r->run.dist.size > 1)
    die_input("--predictions_out", "is written by a single rank; run without mpirun to write it");
  run_check_profile(&r->run, bench, "--bench_steps=N");
}

static const RunTraining kBertTraining = {.open_data = bert_open_data, .plan_epoch = bert_plan_epoch,
                                          .train_step = bert_train_step, .evaluate = bert_evaluate};

int main(int argc, char **argv) {
  BertTrainer r = {0};
  run_init(&r.run, &kSpec, &argc, &argv);
  const Config *cfg = &r.run.cfg;
  bert_read_flags(&r);
  // The data set, checked before run_start (run.h): its counts. A bench
  // run reads none: its epoch is one batch (the schedule's length).
  int64_t bench_steps = config_int(cfg, "bench_steps");
  if (bench_steps > 0) {
    r.counts.train_windows = r.batch;
  } else {
    snprintf(r.lmdb, sizeof r.lmdb, "%s/lmdb", run_data_dir(&r.run));
    r.counts = squad_data_check(r.lmdb);
  }
  if (*config_string(cfg, "init_checkpoint")) {
    snprintf(r.ckpt, sizeof r.ckpt, "%s", config_string(cfg, "init_checkpoint"));
  } else {
    snprintf(r.ckpt, sizeof r.ckpt, "%s/model", run_data_dir(&r.run));
    char config[4200];
    snprintf(config, sizeof config, "%s/config.json", r.ckpt);
    if (access(config, F_OK) != 0)
      die_input("--init_checkpoint", "not given, and %s holds no config.json (language/prepare_data.sh "
                "puts the pretrained model there)", r.ckpt);
  }
  run_resolve_epochs(&r.run, "decay_epochs");
  run_check(&r.run);
  MLLOG_POINT(&r.run.log, "global_batch_size", mlv_int(r.batch));
  MLLOG_POINT(&r.run.log, "gradient_accumulation_steps", mlv_int(1));
  MLLOG_POINT(&r.run.log, "max_sequence_length", mlv_int(config_int(cfg, "max_seq_length")));
  bert_setup(&r);
  run_resume(&r.run, &r.model.ps, NULL, &r.opt);

  if (bench_steps > 0)
    run_benchmark(&r.run, "training steps on random windows", bert_bench, &r, "sequences/s");
  else
    run_train(&r.run, &kBertTraining, &r, r.counts.train_windows, r.steps_per_epoch);

  squad_set_free(&r.questions);
  squad_split_free(&r.train);
  squad_split_free(&r.dev_set);
  squad_batch_buf_free(&r.buf);
  free(r.order);
  free(r.idx);
  optim_free(&r.opt);
  bert_model_free(&r.model);
  run_close(&r.run);
  return 0;
}
