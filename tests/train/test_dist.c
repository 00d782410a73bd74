// Data parallelism. Run alone (by run_tests.sh): one rank without MPI, and
// the gradient buckets. Under `mpirun -np 2` (by test_dist.sh): two CPU ranks,
// each with half of every batch, end with the same parameters as one rank
// with the whole batch; broadcast, eval sums and stop decisions agree; and,
// given two GPUs (or the CUDA emulation, whose NCCL goes through MPI), the
// same through NCCL and the fused GPU optimizers. Only
// rank 0 prints case lines; what another rank sees reaches them through
// dist_all_agree. With --fail-rank=R, rank R dies while the others wait in a
// barrier: mpirun must end the job (test_dist.sh checks that it does, with the
// message, before its timeout).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/elementwise.h"
#include "test_dist_model.h"
#include "tests/harness/test.h"
#include "train/dist.h"
#include "train/optim.h"

enum { GLOBAL_BATCH = 32, STEPS = 12 };

static Dist g_dist;

static Device cpu_device(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  return dev;
}

// ------------------------------------------------------------ run alone

static void alone_is_rank_0_of_1(void) {
  CHECK(!g_dist.mpi);
  CHECK_EQ_INT(g_dist.rank, 0);
  CHECK_EQ_INT(g_dist.size, 1);
  CHECK_EQ_INT(g_dist.local_rank, 0);
  CHECK_EQ_INT(dist_device_index(&g_dist), 0);
  double s[2] = {1.5, -2};
  int64_t c[1] = {7};
  dist_sum_f64(&g_dist, s, 2);
  dist_sum_i64(&g_dist, c, 1);
  CHECK(s[0] == 1.5 && s[1] == -2 && c[0] == 7);
  size_t n;
  char *all = dist_allgather_bytes(&g_dist, "xyz", 3, &n);
  CHECK(n == 3 && memcmp(all, "xyz", 3) == 0);
  free(all);
  CHECK(dist_all_agree(&g_dist, true) && !dist_all_agree(&g_dist, false));
  dist_barrier(&g_dist);
}

// Buckets tile the flat buffer from its end, each holding whole tensors and
// at least bucket_bytes (the last may hold less), in backward order.
static void buckets_tile_the_buffer(void) {
  Device dev = cpu_device();
  ParamSet ps;
  paramset_init(&ps, kToySpecs, TOY_N_TENSORS, 1, DEVICE_CPU);
  Dist d = g_dist;
  dist_attach(&d, &dev, &ps, 300);
  REQUIRE(d.n_buckets >= 2);
  int64_t end = ps.total_numel;
  int next_tensor = ps.count - 1;
  for (int i = 0; i < d.n_buckets; i++) {
    const DistBucket *b = &d.buckets[i];
    CHECK_EQ_INT(b->last_tensor, next_tensor);
    CHECK_EQ_INT(b->offset + b->numel, end);
    CHECK_EQ_INT(b->offset, ps.offsets[b->first_tensor]);
    if (i < d.n_buckets - 1) CHECK(b->numel * 4 >= 300);
    for (int t = b->first_tensor; t <= b->last_tensor; t++) CHECK_EQ_INT(d.tensor_bucket[t], i);
    end = b->offset;
    next_tensor = b->first_tensor - 1;
  }
  CHECK_EQ_INT(end, 0);
  CHECK_EQ_INT(next_tensor, -1);
  dist_detach(&d);
  paramset_free(&ps);
}

// ------------------------------------------------------------ two ranks

// Global batch `step`: samples step * G .. step * G + G - 1 (mod the data
// set); this rank takes the slice [rank G / size, (rank + 1) G / size).
// Returns the share's size.
static int step_samples(int step, int rank, int size, int64_t samples[GLOBAL_BATCH]) {
  int share = GLOBAL_BATCH / size;
  for (int s = 0; s < share; s++)
    samples[s] = ((int64_t)step * GLOBAL_BATCH + rank * share + s) % TOY_DATASET;
  return share;
}

static void train(ParamSet *ps, Optimizer *opt, Dist *d, int rank, int size) {
  Device dev = cpu_device();
  for (int step = 0; step < STEPS; step++) {
    int64_t samples[GLOBAL_BATCH];
    int share = step_samples(step, rank, size, samples);
    optim_grads_zero(&dev, ps);
    toy_accumulate_grads(ps, samples, share);
    if (d) {
      // Rank 0 marks tensors in backward order, rank 1 front to back: the
      // buckets must still go out in the same sequence on both.
      for (int i = 0; i < ps->count; i++) dist_grad_ready(d, rank == 0 ? ps->count - 1 - i : i);
      dist_grad_wait(d);
    }
    optim_step(opt, &dev, ps, 0.05f);
  }
}

// This rank's parameters against the whole-batch run, to tol on every rank;
// and the ranks agree with each other exactly (the same averaged gradient).
static void check_against_whole(Dist *d, const float *params, const ParamSet *whole, double tol,
                                const char *opt, const char *what) {
  double err = test_rel_error(params, whole->params, whole->total_numel);
  CHECK_MSG(dist_all_agree(d, err < tol), "%s: %s: relative error %g on rank %d", opt, what, err,
            d->rank);
  double sum = 0;
  for (int64_t i = 0; i < whole->total_numel; i++) sum += params[i] * (double)(i + 1);
  double both[2] = {d->rank == 0 ? sum : 0, d->rank == 1 ? sum : 0};
  dist_sum_f64(d, both, 2);
  CHECK(both[0] == both[1]);
}

static void train_case(OptKind kind, double tol) {
  Device dev = cpu_device();
  OptConfig cfg = optim_defaults(kind);
  cfg.weight_decay = 1e-3f;
  ParamSet whole, part;
  Optimizer ow, op;
  paramset_init(&whole, kToySpecs, TOY_N_TENSORS, optim_state_count(kind), DEVICE_CPU);
  paramset_init(&part, kToySpecs, TOY_N_TENSORS, optim_state_count(kind), DEVICE_CPU);
  optim_init(&ow, &cfg, &whole);
  optim_init(&op, &cfg, &part);
  toy_init_params(&whole, 5);
  // Each rank starts from other weights: the broadcast must make them equal.
  toy_init_params(&part, 5 + (uint64_t)g_dist.rank);
  Dist d = g_dist;
  dist_attach(&d, &dev, &part, 256);
  dist_broadcast_params(&d);
  CHECK(dist_all_agree(&d, memcmp(part.params, whole.params,
                                  (size_t)whole.total_numel * sizeof(float)) == 0));
  train(&whole, &ow, NULL, 0, 1);
  train(&part, &op, &d, d.rank, d.size);
  check_against_whole(&d, part.params, &whole, tol, optim_kind_name(kind), "2 ranks vs 1");
  dist_detach(&d);
  optim_free(&ow);
  optim_free(&op);
  paramset_free(&whole);
  paramset_free(&part);
}

// The mean of two half-batch means equals the whole-batch mean up to fp32
// rounding of the sums; after 12 steps the parameters differ by 1e-8 (SGD,
// LARS) to 1e-7 (Adam, whose 1/sqrt(v) amplifies small gradients' noise)
// relative. 2e-6 leaves a factor of 20; a wrong average (a sum, or one rank's
// half) is off by orders of magnitude more.
static void two_ranks_match_one_sgd(void) { train_case(OPT_SGD, 2e-6); }
static void two_ranks_match_one_adam(void) { train_case(OPT_ADAM, 2e-6); }
static void two_ranks_match_one_lars(void) { train_case(OPT_LARS, 2e-6); }

// The same on GPUs, one per rank: parameters, gradients and optimizer state
// on the device, the broadcast and the bucketed averages through NCCL, the
// fused optimizer. The toy model's gradients are computed on the host from
// a copy of the parameters and uploaded, step by step; a kernel on the
// compute stream moves them into the gradient buffer, as backward would
// write them, so the collectives must wait for the compute stream (and the
// optimizer for the collectives: the emulated GPU runs stream work in orders
// that show a missing wait either way, tests/emu/README.md). Against the whole
// batch on the CPU: the fused CUDA optimizers round differently from the
// CPU ones (op tests: ~1e-7 a step), so 1e-5 after 12 steps.
static void two_gpus_match_one_cpu(OptKind kind) {
  int gpus = device_cuda_count();
  if (!dist_all_agree(&g_dist, gpus >= g_dist.size))
    test_skip("needs one GPU per rank (%d found; NCCL refuses two ranks on one)", gpus);
  Device dev, cpu = cpu_device();
  device_open(&dev, DEVICE_CUDA, dist_device_index(&g_dist));
  OptConfig cfg = optim_defaults(kind);
  cfg.weight_decay = 1e-3f;
  int states = optim_state_count(kind);
  ParamSet whole, host, part;  // CPU reference; host mirror of part; part on the GPU
  paramset_init(&whole, kToySpecs, TOY_N_TENSORS, states, DEVICE_CPU);
  paramset_init(&host, kToySpecs, TOY_N_TENSORS, 0, DEVICE_CPU);
  paramset_init(&part, kToySpecs, TOY_N_TENSORS, states, DEVICE_CUDA);
  size_t bytes = (size_t)whole.total_numel * sizeof(float);
  float *staged = device_alloc(DEVICE_CUDA, bytes);
  Tensor staged_grads = TENSOR(staged, DT_F32, DEVICE_CUDA, whole.total_numel);
  Tensor grads = TENSOR(part.grads, DT_F32, DEVICE_CUDA, whole.total_numel);
  Optimizer ow, op;
  optim_init(&ow, &cfg, &whole);
  optim_init(&op, &cfg, &part);
  toy_init_params(&whole, 5);
  toy_init_params(&host, 5 + (uint64_t)g_dist.rank);  // the broadcast must make them equal
  device_copy(DEVICE_CUDA, part.params, DEVICE_CPU, host.params, bytes);
  Dist d = g_dist;
  dist_attach(&d, &dev, &part, 256);
  dist_broadcast_params(&d);
  device_sync(&dev);
  device_copy(DEVICE_CPU, host.params, DEVICE_CUDA, part.params, bytes);
  CHECK(dist_all_agree(&d, memcmp(host.params, whole.params, bytes) == 0));
  train(&whole, &ow, NULL, 0, 1);
  for (int step = 0; step < STEPS; step++) {
    int64_t samples[GLOBAL_BATCH];
    int share = step_samples(step, d.rank, d.size, samples);
    optim_grads_zero(&cpu, &host);
    toy_accumulate_grads(&host, samples, share);
    device_copy(DEVICE_CUDA, staged, DEVICE_CPU, host.grads, bytes);
    op_scale(&dev, &staged_grads, 1.0f, &grads);
    for (int i = 0; i < part.count; i++) dist_grad_ready(&d, part.count - 1 - i);
    dist_grad_wait(&d);
    optim_step(&op, &dev, &part, 0.05f);
    device_sync(&dev);
    device_copy(DEVICE_CPU, host.params, DEVICE_CUDA, part.params, bytes);
  }
  check_against_whole(&d, host.params, &whole, 1e-5, optim_kind_name(kind), "2 GPUs vs 1 CPU");
  dist_detach(&d);
  optim_free(&ow);
  optim_free(&op);
  paramset_free(&whole);
  paramset_free(&host);
  paramset_free(&part);
  device_free(DEVICE_CUDA, staged);
  device_close(&dev);
}

static void two_gpus_match_one_cpu_sgd(void) { two_gpus_match_one_cpu(OPT_SGD); }
static void two_gpus_match_one_cpu_lars(void) { two_gpus_match_one_cpu(OPT_LARS); }

static void eval_sums_and_decisions(void) {
  Dist *d = &g_dist;
  double acc[2] = {0.25 * (d->rank + 1), 1.0};
  int64_t counts[2] = {d->rank + 1, 100};
  dist_sum_f64(d, acc, 2);
  dist_sum_i64(d, counts, 2);
  CHECK(acc[0] == 0.75 && acc[1] == 2.0);
  CHECK(counts[0] == 3 && counts[1] == 200);
  // Only rank 0 reached the target: nobody stops on its own...
  CHECK(!dist_all_agree(d, d->rank == 0));
  CHECK(dist_all_agree(d, true));
  // ... unless rank 0 decides for all.
  CHECK(dist_all_agree(d, dist_broadcast_bool(d, d->rank == 0)));
  CHECK_EQ_INT(d->local_size, 2);
  CHECK(dist_all_agree(d, check_rank() == d->rank));
  // Results of unequal length, gathered in rank order: rank 0 gives "a",
  // rank 1 "bcd"; rank 1 then gives nothing.
  size_t n;
  char *all = dist_allgather_bytes(d, d->rank == 0 ? "a" : "bcd", d->rank == 0 ? 1 : 3, &n);
  CHECK(dist_all_agree(d, n == 4 && memcmp(all, "abcd", 4) == 0));
  free(all);
  all = dist_allgather_bytes(d, "a", d->rank == 0 ? 1 : 0, &n);
  CHECK(dist_all_agree(d, n == 1 && all[0] == 'a'));
  free(all);
  dist_barrier(d);
}

static int fail_rank_arg(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], "--fail-rank=", 12) == 0) return atoi(argv[i] + 12);
  return -1;
}

int main(int argc, char **argv) {
  dist_init(&g_dist, &argc, &argv);
  int fail_rank = fail_rank_arg(argc, argv);
  if (fail_rank >= 0) {
    dist_barrier(&g_dist);
    if (g_dist.rank == fail_rank) die_input("test_dist", "deliberate failure of rank %d", fail_rank);
    dist_barrier(&g_dist);  // never passes: the failed rank never comes
    printf("rank %d passed a barrier its failed peer never reached\n", g_dist.rank);
    return 1;
  }
  if (g_dist.size == 1) {
    TEST_RUN(alone_is_rank_0_of_1);
    TEST_RUN(buckets_tile_the_buffer);
  } else {
    if (g_dist.size != 2) die_input("test_dist", "run with mpirun -np 2, not %d", g_dist.size);
    // One set of case lines per job.
    if (g_dist.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    TEST_RUN(two_ranks_match_one_sgd);
    TEST_RUN(two_ranks_match_one_adam);
    TEST_RUN(two_ranks_match_one_lars);
    TEST_RUN(eval_sums_and_decisions);
    TEST_RUN(two_gpus_match_one_cpu_sgd);
    TEST_RUN(two_gpus_match_one_cpu_lars);
  }
  int rc = test_finish();
  dist_finalize(&g_dist);
  return rc;
}
