// dist.h: data parallelism. One process per GPU (or per CPU rank), launched
// by mpirun or run alone. MPI gives rank, size and local rank; on GPUs an NCCL
// communicator is bootstrapped over MPI and all-reduces the gradients in
// buckets on dev->comm_stream while the backward pass goes on; on CPU ranks
// MPI all-reduces them (non-blocking, so they overlap too).
//
// A training step:
//   backward ... dist_grad_ready(d, t) as each tensor's gradient is final
//   dist_grad_wait(d)       every bucket averaged; the compute stream waits
//   amp_unscale / optim_step
// Buckets are runs of consecutive tensors in the flat gradient buffer,
// filled from the last tensor to the first (the order backward produces
// them), and launched in that fixed order on every rank, whatever the order
// of the dist_grad_ready calls.
//
// A rank that fails exits through check.h without MPI_Finalize; mpirun then
// ends the whole job (tests/train/test_dist.sh checks this).
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"
#include "device/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct DistBucket {
  int first_tensor, last_tensor;  // tensors first..last (inclusive)
  int64_t offset, numel;          // the range of the flat buffer, padding included
  int pending;                    // tensors not ready yet this step
  bool launched;
} DistBucket;

struct DistCuda;  // NCCL communicator and events (dist_cuda.cu)

typedef struct Dist {
  int rank, size;
  int local_rank, local_size;  // among the processes on this node
  bool mpi;                    // MPI_Init was called (under a launcher)
  const Device *dev;           // set by dist_attach
  ParamSet *ps;
  // Gradient buckets (dist_attach).
  int n_buckets;
  DistBucket *buckets;
  int *tensor_bucket;  // (count) bucket of each tensor
  int next_launch;     // buckets launch in index order
  void *requests;      // (n_buckets) MPI_Request of CPU ranks
  struct DistCuda *cuda;
} Dist;

// Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or a PMI/PMIx launcher's
// variables): MPI_Init, rank, size, local rank. Alone: rank 0 of 1 without
// MPI. Sets check_set_rank, so every error names its rank.
void dist_init(Dist *d, int *argc, char ***argv);
// dist_detach, then MPI_Finalize when dist_init called MPI_Init.
void dist_finalize(Dist *d);
// The GPU this process drives: local rank modulo the GPUs on the node.
int dist_device_index(const Dist *d);

// Binds the ParamSet and device: buckets of about bucket_bytes each and, on
// CUDA with more than one rank, the NCCL communicator. The trainers' buckets
// are DIST_BUCKET_BYTES (25 MiB, PyTorch DDP's default).
#define DIST_BUCKET_BYTES ((size_t)25 << 20)
void dist_attach(Dist *d, const Device *dev, ParamSet *ps, size_t bucket_bytes);
// Frees what dist_attach made (buckets, NCCL communicator); ranks stay.
void dist_detach(Dist *d);
// Rank 0's parameters to every rank (before the first step).
void dist_broadcast_params(Dist *d);
// Marks tensor t's gradient final; launches its bucket (and any complete
// buckets after it in launch order) once all their tensors are final.
void dist_grad_ready(Dist *d, int t);
// A GradHook (tensor.h) that calls dist_grad_ready on d: what a model's
// backward takes.
GradHook dist_grad_hook(Dist *d);
// Launches what is left, waits for every bucket and averages: afterwards
// ps->grads holds the mean over ranks. On CUDA, dev->stream waits on the
// all-reduces (no host sync).
void dist_grad_wait(Dist *d);

// Host values across ranks (eval counts and sums): in place, every rank gets
// the result.
void dist_sum_f64(Dist *d, double *values, int count);
void dist_sum_i64(Dist *d, int64_t *values, int count);
void dist_barrier(Dist *d);
// Every rank's bytes, concatenated in rank order, on every rank: malloc'd,
// *total_bytes its length (eval results of unequal size, such as a
// detector's matches). A total over INT_MAX bytes is an internal error.
void *dist_allgather_bytes(Dist *d, const void *bytes, size_t n_bytes, size_t *total_bytes);
// True on every rank when it is true on every rank; use for stop decisions,
// so that all ranks leave the training loop at the same step.
bool dist_all_agree(Dist *d, bool local);
// Rank 0's value on every rank.
bool dist_broadcast_bool(Dist *d, bool value);

#if HAVE_CUDA
// The CUDA halves (dist_cuda.cu). Rank 0 makes the NCCL id, dist.c
// broadcasts it over MPI (the .cu files are built without MPI's headers).
#define DIST_NCCL_ID_BYTES 128
void dist_nccl_get_id_cuda(void *id);
void dist_nccl_init_cuda(Dist *d, const void *id);
void dist_nccl_free_cuda(Dist *d);
void dist_broadcast_params_cuda(Dist *d);
void dist_bucket_launch_cuda(Dist *d, DistBucket *b);
void dist_grad_wait_cuda(Dist *d);
#endif

#ifdef __cplusplus
}
#endif
