// dist.c: ranks, gradient buckets, MPI collectives; NCCL calls go to
// dist_cuda.cu.
#include "train/dist.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#if HAVE_MPI
#include <mpi.h>
#endif

// Set by a launcher that starts MPI ranks: Open MPI's mpirun, or a PMI/PMIx
// one (srun). Run alone, the process does not call MPI_Init: a singleton
// MPI_Init would start Open MPI's runtime daemons for nothing (slow, and it
// fails on machines without a usable network), and a lone process needs no
// communication at all.
static bool under_launcher(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

#if HAVE_MPI
static void mpi_ranks(Dist *d, int *argc, char ***argv) {
  CHECK_MPI(MPI_Init(argc, argv));
  d->mpi = true;
  // Errors come back as codes, so CHECK_MPI names the call and the rank.
  CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &d->size));
  // The ranks sharing this node's memory: what OMPI_COMM_WORLD_LOCAL_RANK
  // says under Open MPI, and also right under other launchers.
  MPI_Comm node;
  CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                                &node));
  CHECK_MPI(MPI_Comm_rank(node, &d->local_rank));
  CHECK_MPI(MPI_Comm_size(node, &d->local_size));
  CHECK_MPI(MPI_Comm_free(&node));
}
#endif

void dist_init(Dist *d, int *argc, char ***argv) {
  memset(d, 0, sizeof *d);
  d->size = d->local_size = 1;
  if (!under_launcher()) return;
#if HAVE_MPI
  mpi_ranks(d, argc, argv);
  check_set_rank(d->rank);
#else
  (void)argc;
  (void)argv;
  const char *size = getenv("OMPI_COMM_WORLD_SIZE");
  if (size && atoi(size) > 1)
    die_input("mpirun", "launched as one of %s ranks, but this build has no MPI (built with MPI=0)",
              size);
#endif
}

void dist_detach(Dist *d) {
#if HAVE_CUDA
  if (d->cuda) dist_nccl_free_cuda(d);
#endif
  free(d->buckets);
  free(d->tensor_bucket);
  free(d->requests);
  d->buckets = NULL;
  d->tensor_bucket = NULL;
  d->requests = NULL;
  d->n_buckets = 0;
  d->dev = NULL;
  d->ps = NULL;
}

void dist_finalize(Dist *d) {
  dist_detach(d);
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Finalize());
#endif
  memset(d, 0, sizeof *d);
}

int dist_device_index(const Dist *d) {
  int gpus = device_cuda_count();
  return gpus > 0 ? d->local_rank % gpus : 0;
}

// ------------------------------------------------------------------ buckets

// From the last tensor backwards, about bucket_bytes a bucket; a bucket's
// range runs to the next tensor's offset, padding included (zeros, averaged
// harmlessly), so the buckets tile the flat buffer.
static void make_buckets(Dist *d, size_t bucket_bytes) {
  const ParamSet *ps = d->ps;
  d->buckets = xcalloc((size_t)ps->count + 1, sizeof(DistBucket));
  d->tensor_bucket = xmalloc(((size_t)ps->count + 1) * sizeof(int));
  int n = 0;
  for (int t = ps->count - 1; t >= 0; t--) {
    DistBucket *b = &d->buckets[n];
    if (b->pending == 0) b->last_tensor = t;
    b->first_tensor = t;
    b->pending++;
    d->tensor_bucket[t] = n;
    int64_t end = b->last_tensor + 1 < ps->count ? ps->offsets[b->last_tensor + 1] : ps->total_numel;
    b->offset = ps->offsets[t];
    b->numel = end - b->offset;
    if ((size_t)b->numel * sizeof(float) >= bucket_bytes || t == 0) n++;
  }
  d->n_buckets = n;
}

static void reset_buckets(Dist *d) {
  for (int i = 0; i < d->n_buckets; i++) {
    DistBucket *b = &d->buckets[i];
    b->pending = b->last_tensor - b->first_tensor + 1;
    b->launched = false;
  }
  d->next_launch = 0;
}

void dist_attach(Dist *d, const Device *dev, ParamSet *ps, size_t bucket_bytes) {
  if (dev->kind != ps->device) DIE("dist_attach: ParamSet on %s, device %s",
                                   device_kind_name(ps->device), device_kind_name(dev->kind));
  d->dev = dev;
  d->ps = ps;
  make_buckets(d, bucket_bytes);
  reset_buckets(d);
#if HAVE_MPI
  d->requests = xcalloc((size_t)d->n_buckets + 1, sizeof(MPI_Request));
#endif
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA && d->size > 1) {
    uint8_t id[DIST_NCCL_ID_BYTES] = {0};
    if (d->rank == 0) dist_nccl_get_id_cuda(id);
#if HAVE_MPI
    CHECK_MPI(MPI_Bcast(id, DIST_NCCL_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD));
#endif
    dist_nccl_init_cuda(d, id);
  }
#endif
}

static void launch_bucket(Dist *d, DistBucket *b) {
  b->launched = true;
#if HAVE_CUDA
  if (d->dev->kind == DEVICE_CUDA) {
    dist_bucket_launch_cuda(d, b);
    return;
  }
#endif
#if HAVE_MPI
  if (b->numel > INT_MAX) DIE("dist: a bucket of %lld elements exceeds MPI's int count",
                              (long long)b->numel);
  MPI_Request *req = (MPI_Request *)d->requests + (b - d->buckets);
  CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, d->ps->grads + b->offset, (int)b->numel, MPI_FLOAT,
                           MPI_SUM, MPI_COMM_WORLD, req));
#else
  (void)d;  // without MPI there is one rank and nothing to launch
#endif
}

// Launch order is bucket order on every rank: MPI and NCCL both need the
// ranks to issue their collectives in the same sequence.
static void launch_complete(Dist *d) {
  while (d->next_launch < d->n_buckets && d->buckets[d->next_launch].pending == 0)
    launch_bucket(d, &d->buckets[d->next_launch++]);
}

void dist_grad_ready(Dist *d, int t) {
  if (d->size == 1) return;
  if (t < 0 || t >= d->ps->count) DIE("dist_grad_ready: tensor %d of %d", t, d->ps->count);
  DistBucket *b = &d->buckets[d->tensor_bucket[t]];
  if (b->pending <= 0) DIE("dist_grad_ready: tensor %s marked ready twice in one step",
                           d->ps->specs[t].name);
  b->pending--;
  launch_complete(d);
}

static void grad_ready_cb(void *d, int tensor) { dist_grad_ready(d, tensor); }

GradHook dist_grad_hook(Dist *d) { return (GradHook){grad_ready_cb, d}; }

void dist_grad_wait(Dist *d) {
  if (d->size == 1) return;
  for (int i = 0; i < d->n_buckets; i++) d->buckets[i].pending = 0;
  launch_complete(d);
#if HAVE_CUDA
  if (d->dev->kind == DEVICE_CUDA) {
    dist_grad_wait_cuda(d);  // ncclAvg: already averaged
    reset_buckets(d);
    return;
  }
#endif
#if HAVE_MPI
  CHECK_MPI(MPI_Waitall(d->n_buckets, (MPI_Request *)d->requests, MPI_STATUSES_IGNORE));
#endif
  float inv = 1.0f / (float)d->size;
  for (int64_t i = 0; i < d->ps->total_numel; i++) d->ps->grads[i] *= inv;
  reset_buckets(d);
}

// ------------------------------------------------------- host collectives

// MPI counts are int: large buffers go in pieces.
static void bcast_floats(float *x, int64_t n) {
#if HAVE_MPI
  for (int64_t at = 0; at < n; at += INT_MAX / 2) {
    int64_t left = n - at;
    int count = (int)(left < INT_MAX / 2 ? left : INT_MAX / 2);
    CHECK_MPI(MPI_Bcast(x + at, count, MPI_FLOAT, 0, MPI_COMM_WORLD));
  }
#else
  (void)x;
  (void)n;
#endif
}

void dist_broadcast_params(Dist *d) {
  if (d->size == 1) return;
#if HAVE_CUDA
  if (d->dev->kind == DEVICE_CUDA) {
    dist_broadcast_params_cuda(d);
    return;
  }
#endif
  bcast_floats(d->ps->params, d->ps->total_numel);
}

void dist_sum_f64(Dist *d, double *values, int count) {
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
#else
  (void)d, (void)values, (void)count;
#endif
}

void dist_sum_i64(Dist *d, int64_t *values, int count) {
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
#else
  (void)d, (void)values, (void)count;
#endif
}

void *dist_allgather_bytes(Dist *d, const void *bytes, size_t n_bytes, size_t *total_bytes) {
  int world = d->mpi ? d->size : 1;
  int *counts = xcalloc((size_t)world, sizeof(int)), *offsets = xcalloc((size_t)world, sizeof(int));
  int64_t *sizes = xcalloc((size_t)world, sizeof(int64_t));
  sizes[d->mpi ? d->rank : 0] = (int64_t)n_bytes;
  dist_sum_i64(d, sizes, world);
  int64_t total = 0;
  for (int r = 0; r < world; r++) {
    if (total + sizes[r] > INT_MAX)
      DIE("dist_allgather_bytes: more than %d bytes over %d ranks", INT_MAX, world);
    offsets[r] = (int)total;
    counts[r] = (int)sizes[r];
    total += sizes[r];
  }
  char *out = xmalloc(total > 0 ? (size_t)total : 1);
#if HAVE_MPI
  if (d->mpi)
    CHECK_MPI(MPI_Allgatherv(bytes, (int)n_bytes, MPI_BYTE, out, counts, offsets, MPI_BYTE,
                             MPI_COMM_WORLD));
  else
#endif
    if (n_bytes) memcpy(out, bytes, n_bytes);
  free(counts);
  free(offsets);
  free(sizes);
  *total_bytes = (size_t)total;
  return out;
}

void dist_barrier(Dist *d) {
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
#else
  (void)d;
#endif
}

bool dist_all_agree(Dist *d, bool local) {
  int v = local;
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
#else
  (void)d;
#endif
  return v != 0;
}

bool dist_broadcast_bool(Dist *d, bool value) {
  int v = value;
#if HAVE_MPI
  if (d->mpi) CHECK_MPI(MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD));
#else
  (void)d;
#endif
  return v != 0;
}
