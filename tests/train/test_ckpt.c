// Checkpoints: a round trip, resume giving bit-identical parameters to an
// uninterrupted run, refusal of corrupt, truncated, foreign and mismatched
// files with a message naming the file, and a writer killed with SIGKILL
// mid-write leaving the previous checkpoint loadable; the warm start
// (ckpt_read_named) taking tensors by name from a larger checkpoint, and
// refusing a missing tensor or one of another size.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_dist_model.h"
#include "tests/harness/test.h"
#include "train/amp.h"
#include "train/ckpt.h"
#include "train/optim.h"
#include "train/schedule.h"

enum { BATCH = 32 };

// A whole training run: model, Adam, fp16-style dynamic loss scaling (its
// logic runs on the CPU as well), a warmup schedule and the data cursor.
typedef struct Run {
  Device dev;
  ParamSet ps;
  Optimizer opt;
  LossScaler sc;
  Schedule sched;
  Rng rng;
  int64_t epoch, position;
} Run;

static void run_init(Run *r, uint64_t init_seed) {
  memset(r, 0, sizeof *r);
  device_open(&r->dev, DEVICE_CPU, 0);
  OptConfig oc = optim_defaults(OPT_ADAMW);
  oc.weight_decay = 0.01f;
  paramset_init(&r->ps, kToySpecs, TOY_N_TENSORS, optim_state_count(oc.kind), DEVICE_CPU);
  optim_init(&r->opt, &oc, &r->ps);
  AmpConfig ac = {.precision = PREC_FP16, .scale_init = 256, .growth_interval = 4,
                  .growth_factor = 2, .backoff = 0.5f, .scale_min = 1};
  amp_scaler_init(&r->sc, &ac, DEVICE_CPU);
  r->sched = (Schedule){.kind = SCHED_LINEAR, .base_lr = 0.01, .warmup_steps = 5, .total_steps = 100};
  r->rng = rng_make(11, 0);
  toy_init_params(&r->ps, init_seed);
}

static void run_free(Run *r) {
  amp_scaler_free(&r->sc);
  optim_free(&r->opt);
  paramset_free(&r->ps);
}

// Every 7th iteration overflows, so the scaler's state matters on resume.
static void run_steps(Run *r, int n) {
  for (int i = 0; i < n; i++) {
    int64_t samples[BATCH];
    for (int s = 0; s < BATCH; s++) samples[s] = rng_next_below(&r->rng, TOY_DATASET);
    optim_grads_zero(&r->dev, &r->ps);
    toy_accumulate_grads(&r->ps, samples, BATCH);
    optim_grads_scale(&r->dev, &r->ps, amp_loss_scale(&r->sc));
    if ((r->opt.step + r->sc.skipped_steps) % 7 == 6) r->ps.grads[0] = INFINITY;
    amp_unscale(&r->sc, &r->dev, r->ps.grads, r->ps.total_numel, 1.0f);
    if (amp_update(&r->sc, &r->dev))
      optim_step(&r->opt, &r->dev, &r->ps, (float)schedule_lr(&r->sched, r->opt.step));
    r->position += BATCH;
    if (r->position >= TOY_DATASET) r->epoch++, r->position = 0;
  }
}

static char *tmp_path(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  return path;
}

static bool same_buffers(const ParamSet *a, const ParamSet *b) {
  size_t bytes = (size_t)a->total_numel * sizeof(float);
  bool same = memcmp(a->params, b->params, bytes) == 0;
  for (int k = 0; k < a->n_state; k++) same = same && memcmp(a->state[k], b->state[k], bytes) == 0;
  return same;
}

static void round_trip(void) {
  Run a, b;
  run_init(&a, 1);
  run_steps(&a, 9);
  const char *path = tmp_path("rt.ckpt");
  ckpt_save(path, &a.dev, &a.ps, NULL, &a.opt, &a.sc, a.epoch, a.position, a.rng,
            "batch_size = 32\nseed = 1\n");
  run_init(&b, 2);
  CkptMeta m;
  REQUIRE(ckpt_resume(path, &b.dev, &b.ps, NULL, &b.opt, &b.sc, &m));
  CHECK(same_buffers(&a.ps, &b.ps));
  CHECK_EQ_INT(b.opt.step, a.opt.step);
  CHECK(b.sc.scale == a.sc.scale);
  CHECK_EQ_INT(b.sc.skipped_steps, 1);
  CHECK_EQ_INT(b.sc.good_steps, a.sc.good_steps);
  CHECK_EQ_INT(m.data_position, 9 * BATCH);
  CHECK(m.rng.seed == a.rng.seed && m.rng.counter == a.rng.counter);
  CHECK_STR(m.run_config, "batch_size = 32\nseed = 1\n");
  run_free(&a);
  run_free(&b);
}

// 2N steps straight through against N, save, a fresh process state (other
// initial weights), resume, N more: bit-identical on the CPU.
static void resume_matches_uninterrupted(void) {
  enum { N = 20 };
  Run whole, first, second;
  run_init(&whole, 1);
  run_steps(&whole, 2 * N);
  run_init(&first, 1);
  run_steps(&first, N);
  const char *path = tmp_path("resume.ckpt");
  ckpt_save(path, &first.dev, &first.ps, NULL, &first.opt, &first.sc, first.epoch, first.position,
            first.rng, "");
  run_free(&first);
  run_init(&second, 99);
  CkptMeta m;
  REQUIRE(ckpt_resume(path, &second.dev, &second.ps, NULL, &second.opt, &second.sc, &m));
  second.rng = m.rng;
  second.epoch = m.epoch;
  second.position = m.data_position;
  run_steps(&second, N);
  CHECK(same_buffers(&whole.ps, &second.ps));
  CHECK_EQ_INT(second.opt.step, whole.opt.step);
  CHECK_EQ_INT(second.sc.skipped_steps, whole.sc.skipped_steps);
  CHECK(second.sc.skipped_steps >= 5);  // the overflows happened on both sides
  CHECK(second.rng.counter == whole.rng.counter);
  CHECK_EQ_INT(second.epoch * TOY_DATASET + second.position, 2 * N * BATCH);
  run_free(&whole);
  run_free(&second);
}

static void missing_file_is_no_resume(void) {
  Run r;
  run_init(&r, 1);
  CkptMeta m;
  CHECK(!ckpt_resume(tmp_path("absent.ckpt"), &r.dev, &r.ps, NULL, &r.opt, &r.sc, &m));
  run_free(&r);
}

// ------------------------------------------------------------ bad files

static void read_into_toy(void *ctx) {
  Run r;
  run_init(&r, 1);
  CkptMeta m;
  ckpt_read((const char *)ctx, &r.dev, &r.ps, NULL, &m);
}

static const char *good_checkpoint(void) {
  static char path[512];
  if (!path[0]) {
    Run r;
    run_init(&r, 1);
    snprintf(path, sizeof path, "%s", tmp_path("good.ckpt"));
    ckpt_save(path, &r.dev, &r.ps, NULL, &r.opt, &r.sc, 0, 0, r.rng, "");
    run_free(&r);
  }
  return path;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

// A copy of the good checkpoint with `bytes` bytes at `at` overwritten, cut
// to `size` bytes (or kept whole when size < 0).
static const char *damaged(const char *name, long at, const void *bytes, size_t n, long size) {
  const char *src = good_checkpoint();
  char *dst = strdup(tmp_path(name));
  long len = file_size(src);
  char *buf = malloc((size_t)len);
  FILE *f = fopen(src, "rb");
  REQUIRE(f && fread(buf, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  if (bytes) memcpy(buf + at, bytes, n);
  f = fopen(dst, "wb");
  REQUIRE(f);
  fwrite(buf, 1, (size_t)(size < 0 ? len : size), f);
  fclose(f);
  free(buf);
  return dst;
}

static void corrupt_files_refused(void) {
  long len = file_size(good_checkpoint());
  REQUIRE(len > 200);
  uint8_t flip = 0x5a;
  const char *flipped = damaged("flipped.ckpt", len - 40, &flip, 1, -1);
  CHECK_DIES_WITH(read_into_toy, (void *)flipped, "checksum mismatch");
  CHECK_DIES_WITH(read_into_toy, (void *)flipped, "flipped.ckpt");
  const char *cut = damaged("cut.ckpt", 0, NULL, 0, len / 2);
  CHECK_DIES_WITH(read_into_toy, (void *)cut, "cut.ckpt: truncated checkpoint");
  uint32_t next_version = CKPT_VERSION + 1;
  const char *newer = damaged("newer.ckpt", 8, &next_version, 4, -1);
  char want[96];
  snprintf(want, sizeof want, "checkpoint version %d; this build reads version %d", CKPT_VERSION + 1,
           CKPT_VERSION);
  CHECK_DIES_WITH(read_into_toy, (void *)newer, want);
  const char *foreign = tmp_path("foreign.txt");
  FILE *f = fopen(foreign, "w");
  fputs("step = 3\nthis is not a checkpoint at all\n", f);
  fclose(f);
  CHECK_DIES_WITH(read_into_toy, (void *)foreign, "foreign.txt: not a checkpoint of this suite");
  CHECK_DIES_WITH(read_into_toy, (void *)tmp_path("nope.ckpt"), "nope.ckpt: cannot open checkpoint");
}

// The same tensor count, another model.
static void read_into_other_model(void *ctx) {
  static const ParamSpec other[] = {
      {"w1", 2, {TOY_HIDDEN, TOY_IN + 1}, 0}, {"b1", 1, {TOY_HIDDEN}, 0},
      {"w2", 2, {TOY_OUT, TOY_HIDDEN}, 0},     {"b2", 1, {TOY_OUT}, 0}};
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  ParamSet ps;
  paramset_init(&ps, other, 4, 2, DEVICE_CPU);
  CkptMeta m;
  ckpt_read((const char *)ctx, &dev, &ps, NULL, &m);
}

static void resume_with_other_optimizer(void *ctx) {
  Run r;
  run_init(&r, 1);
  CkptMeta m;
  ckpt_read((const char *)ctx, &r.dev, &r.ps, NULL, &m);
  r.opt.cfg.kind = OPT_LAMB;
  ckpt_meta_apply(&m, (const char *)ctx, &r.opt, &r.sc);
}

static void mismatched_model_refused(void) {
  CHECK_DIES_WITH(read_into_other_model, (void *)good_checkpoint(),
                  "tensor 0 is 'w1' (60 elements) in the checkpoint, 'w1' (70) in this model");
  CHECK_DIES_WITH(resume_with_other_optimizer, (void *)good_checkpoint(), "this run uses lamb");
}

// ------------------------------------------------------------- buffers

// A model's untrained state (BN running statistics) rides along.
static const ParamSpec kBufferSpecs[] = {{"bn.running_mean", 1, {5}, 0},
                                         {"bn.running_var", 1, {5}, 0}};

static void make_buffers(ParamSet *b, float base) {
  paramset_init(b, kBufferSpecs, 2, 0, DEVICE_CPU);
  for (int t = 0; t < b->count; t++)
    for (int64_t i = 0; i < b->numels[t]; i++) b->params[b->offsets[t] + i] = base + (float)(t * 10 + i);
}

static void read_without_buffers(void *ctx) {
  Run r;
  run_init(&r, 1);
  CkptMeta m;
  ckpt_read((const char *)ctx, &r.dev, &r.ps, NULL, &m);
}

static void buffers_round_trip(void) {
  Run a, b;
  run_init(&a, 1);
  run_init(&b, 2);
  ParamSet ba, bb;
  make_buffers(&ba, 0.5f);
  make_buffers(&bb, -9.0f);
  const char *path = tmp_path("buffers.ckpt");
  ckpt_save(path, &a.dev, &a.ps, &ba, &a.opt, &a.sc, 0, 0, a.rng, "");
  CkptMeta m;
  REQUIRE(ckpt_resume(path, &b.dev, &b.ps, &bb, &b.opt, &b.sc, &m));
  for (int t = 0; t < ba.count; t++)
    CHECK(memcmp(ba.params + ba.offsets[t], bb.params + bb.offsets[t],
                 (size_t)ba.numels[t] * sizeof(float)) == 0);
  CHECK(same_buffers(&a.ps, &b.ps));
  // A reader that expects no buffers is told what the file holds.
  CHECK_DIES_WITH(read_without_buffers, (void *)path, "checkpoint holds 2 model buffer tensors");
  paramset_free(&ba);
  paramset_free(&bb);
  run_free(&a);
  run_free(&b);
}

// ------------------------------------------------------ warm start

// A trained run's checkpoint with buffers: parameters w1 b1 w2 b2, AdamW's
// two state buffers, bn.running_mean and bn.running_var.
static const char *trained_with_buffers(Run *r, ParamSet *buffers) {
  static char path[512];
  run_init(r, 5);
  run_steps(r, 4);
  make_buffers(buffers, 0.25f);
  snprintf(path, sizeof path, "%s", tmp_path("trained.ckpt"));
  ckpt_save(path, &r->dev, &r->ps, buffers, &r->opt, &r->sc, 3, 64, r->rng, "seed = 5\n");
  return path;
}

static bool same_tensor(const ParamSet *a, int i, const ParamSet *b, int j) {
  return a->numels[i] == b->numels[j] &&
         memcmp(a->params + a->offsets[i], b->params + b->offsets[j],
                (size_t)a->numels[i] * sizeof(float)) == 0;
}

// A detector-like table: its first two tensors are the checkpoint's b1 and
// w1 (in another order), then a head of its own; the checkpoint's w2 and b2
// (a classifier) and its optimizer state are not asked for.
static void read_named_takes_the_asked_tensors(void) {
  Run src;
  ParamSet src_buffers;
  const char *path = trained_with_buffers(&src, &src_buffers);
  static const ParamSpec specs[] = {
      {"b1", 1, {TOY_HIDDEN}, 0}, {"w1", 2, {TOY_HIDDEN, TOY_IN}, 0}, {"head.w", 1, {4}, 0}};
  static const ParamSpec buffer_specs[] = {{"bn.running_var", 1, {5}, 0},
                                           {"bn.running_mean", 1, {5}, 0}};
  ParamSet ps, buffers;
  paramset_init(&ps, specs, 3, 2, DEVICE_CPU);
  paramset_init(&buffers, buffer_specs, 2, 0, DEVICE_CPU);
  float *head = ps.params + ps.offsets[2];
  for (int i = 0; i < 4; i++) head[i] = 7.0f + (float)i;
  ckpt_read_named(path, &src.dev, (CkptTensors){&ps, 0, 2}, (CkptTensors){&buffers, 0, 2});
  CHECK(same_tensor(&ps, 0, &src.ps, 1));  // b1
  CHECK(same_tensor(&ps, 1, &src.ps, 0));  // w1
  for (int i = 0; i < 4; i++) CHECK(head[i] == 7.0f + (float)i);
  CHECK(same_tensor(&buffers, 0, &src_buffers, 1));
  CHECK(same_tensor(&buffers, 1, &src_buffers, 0));
  // A warm start: the optimizer state stays as it was (zero).
  for (int k = 0; k < ps.n_state; k++)
    for (int64_t i = 0; i < ps.total_numel; i++) CHECK(ps.state[k][i] == 0.0f);
  // A tensor outside the range is not looked for: head.w is in no checkpoint.
  ckpt_read_named(path, &src.dev, (CkptTensors){&ps, 1, 2}, (CkptTensors){NULL, 0, 0});
  paramset_free(&ps);
  paramset_free(&buffers);
  paramset_free(&src_buffers);
  run_free(&src);
}

// Each child asks the trained checkpoint for tensors it does not hold as asked.
static void read_named_specs(const char *path, const ParamSpec *specs, int n, bool with_buffers) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  ParamSet ps, buffers;
  paramset_init(&ps, specs, n, 0, DEVICE_CPU);
  paramset_init(&buffers, kBufferSpecs, 2, 0, DEVICE_CPU);
  ckpt_read_named(path, &dev, (CkptTensors){&ps, 0, n},
                  (CkptTensors){with_buffers ? &buffers : NULL, 0, 2});
}

static void ask_missing_tensor(void *ctx) {
  static const ParamSpec specs[] = {{"w1", 2, {TOY_HIDDEN, TOY_IN}, 0}, {"layer9.w", 1, {3}, 0}};
  read_named_specs(ctx, specs, 2, true);
}

static void ask_wrong_size(void *ctx) {
  static const ParamSpec specs[] = {{"b1", 1, {TOY_HIDDEN}, 0}, {"w1", 2, {TOY_HIDDEN, TOY_IN + 1}, 0}};
  read_named_specs(ctx, specs, 2, true);
}

static void ask_buffers(void *ctx) {
  static const ParamSpec specs[] = {{"w2", 2, {TOY_OUT, TOY_HIDDEN}, 0}};
  read_named_specs(ctx, specs, 1, true);
}

static void ask_w1(void *ctx) {
  static const ParamSpec specs[] = {{"w1", 2, {TOY_HIDDEN, TOY_IN}, 0}};
  read_named_specs(ctx, specs, 1, false);
}

static void read_named_refuses_missing_and_wrong_size(void) {
  Run src;
  ParamSet src_buffers;
  const char *path = trained_with_buffers(&src, &src_buffers);
  CHECK_DIES_WITH(ask_missing_tensor, (void *)path, "trained.ckpt: no tensor 'layer9.w' in the checkpoint");
  CHECK_DIES_WITH(ask_wrong_size, (void *)path,
                  "trained.ckpt: tensor 'w1' has 60 elements in the checkpoint, 70 in this model");
  // A checkpoint without buffers cannot give BN statistics.
  CHECK_DIES_WITH(ask_buffers, (void *)good_checkpoint(),
                  "good.ckpt: no tensor 'bn.running_mean' in the checkpoint");
  // The checks of every read: checksum, truncation, foreign files.
  long len = file_size(good_checkpoint());
  uint8_t flip = 0xa5;
  CHECK_DIES_WITH(ask_w1, (void *)damaged("flipped2.ckpt", len - 40, &flip, 1, -1), "checksum mismatch");
  CHECK_DIES_WITH(ask_w1, (void *)damaged("cut2.ckpt", 0, NULL, 0, len - 9), "cut2.ckpt: truncated");
  CHECK_DIES_WITH(ask_w1, (void *)tmp_path("nope2.ckpt"), "nope2.ckpt: cannot open checkpoint");
  paramset_free(&src_buffers);
  run_free(&src);
}

// ------------------------------------------------------------- SIGKILL

static void big_model(Device *dev, ParamSet *ps) {
  static const ParamSpec big[] = {{"big", 1, {1 << 21}, 0}};  // 8 MiB a buffer
  device_open(dev, DEVICE_CPU, 0);
  paramset_init(ps, big, 1, 1, DEVICE_CPU);
}

// Writes checkpoints in a loop; checkpoint i holds parameters all equal to i
// and step i, so a reader can tell a whole one from a torn one.
static _Noreturn void write_forever(const char *path) {
  Device dev;
  ParamSet ps;
  big_model(&dev, &ps);
  for (int64_t i = 1;; i++) {
    for (int64_t j = 0; j < ps.total_numel; j++) ps.params[j] = ps.state[0][j] = (float)i;
    CkptMeta m = {.step = i, .opt_kind = OPT_SGD, .loss_scale = 1};
    ckpt_write(path, &dev, &ps, NULL, &m);
  }
}

static void check_whole(void *ctx) {
  Device dev;
  ParamSet ps;
  big_model(&dev, &ps);
  CkptMeta m;
  ckpt_read((const char *)ctx, &dev, &ps, NULL, &m);
  for (int64_t j = 0; j < ps.numels[0]; j++)
    if (ps.params[j] != (float)m.step || ps.state[0][j] != (float)m.step) {
      fprintf(stderr, "torn checkpoint: element %lld is %g in step %lld\n", (long long)j,
              ps.params[j], (long long)m.step);
      exit(1);
    }
  exit(0);
}

static void sigkill_during_write(void) {
  const char *path = tmp_path("killed.ckpt");
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) write_forever(path);
  // Let a few checkpoints land, then kill while the next is being written
  // (the temporary file exists only then).
  int killed_mid_write = 0;
  for (int tries = 0; tries < 400 && !killed_mid_write; tries++) {
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    if (file_size(path) > 0 && file_size(tmp) > 0 && tries >= 20) {
      kill(pid, SIGKILL);
      killed_mid_write = 1;
    }
  }
  if (!killed_mid_write) kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  CHECK_MSG(killed_mid_write, "never saw a write in progress");
  char msg[512];
  int st = test_run_child(check_whole, (void *)path, msg, sizeof msg);
  CHECK_MSG(st == 0, "the previous checkpoint does not load whole: status %d: %s", st, msg);
}

// A GPU ParamSet saved and read back into a CPU one, and back to the GPU.
static void cuda_round_trip(void) {
  if (!test_have_gpu()) test_skip("no GPU");
  Run cpu;
  run_init(&cpu, 3);
  run_steps(&cpu, 3);
  Device gpu;
  device_open(&gpu, DEVICE_CUDA, 0);
  ParamSet g;
  paramset_init(&g, kToySpecs, TOY_N_TENSORS, cpu.ps.n_state, DEVICE_CUDA);
  size_t bytes = (size_t)cpu.ps.total_numel * sizeof(float);
  device_copy(DEVICE_CUDA, g.params, DEVICE_CPU, cpu.ps.params, bytes);
  for (int k = 0; k < g.n_state; k++)
    device_copy(DEVICE_CUDA, g.state[k], DEVICE_CPU, cpu.ps.state[k], bytes);
  const char *path = tmp_path("gpu.ckpt");
  CkptMeta m = ckpt_meta_make(&cpu.opt, &cpu.sc, 0, 0, cpu.rng, ""), back;
  ckpt_write(path, &gpu, &g, NULL, &m);
  Run fresh;
  run_init(&fresh, 4);
  ckpt_read(path, &fresh.dev, &fresh.ps, NULL, &back);
  CHECK(same_buffers(&cpu.ps, &fresh.ps));
  device_zero(DEVICE_CUDA, g.params, bytes);
  ckpt_read(path, &gpu, &g, NULL, &back);
  float *host = malloc(bytes);
  device_copy(DEVICE_CPU, host, DEVICE_CUDA, g.params, bytes);
  CHECK(memcmp(host, cpu.ps.params, bytes) == 0);
  free(host);
  paramset_free(&g);
  device_close(&gpu);
  run_free(&cpu);
  run_free(&fresh);
}

int main(void) {
  TEST_RUN(round_trip);
  TEST_RUN(resume_matches_uninterrupted);
  TEST_RUN(missing_file_is_no_resume);
  TEST_RUN(corrupt_files_refused);
  TEST_RUN(mismatched_model_refused);
  TEST_RUN(buffers_round_trip);
  TEST_RUN(read_named_takes_the_asked_tensors);
  TEST_RUN(read_named_refuses_missing_and_wrong_size);
  TEST_RUN(sigkill_during_write);
  TEST_RUN(cuda_round_trip);
  return test_finish();
}
