// dist_cuda.cu: NCCL for data parallelism on GPUs. Gradient buckets are
// averaged (ncclAvg) on dev->comm_stream, each after the compute stream has
// produced it, and the compute stream waits for the last one before the
// optimizer: the host never blocks.
#include <stdlib.h>
#include <string.h>

#include "core/check_cuda.h"
#include "train/dist.h"

static_assert(sizeof(ncclUniqueId) == DIST_NCCL_ID_BYTES, "NCCL id size");

struct DistCuda {
  ncclComm_t comm;
  cudaEvent_t produced;  // recorded on the compute stream before each bucket
  cudaEvent_t reduced;   // recorded on the comm stream after the last bucket
};

extern "C" void dist_nccl_get_id_cuda(void *id) {
  ncclUniqueId uid;
  CHECK_NCCL(ncclGetUniqueId(&uid));
  memcpy(id, &uid, sizeof uid);
}

extern "C" void dist_nccl_init_cuda(Dist *d, const void *id) {
  DistCuda *dc = (DistCuda *)xcalloc(1, sizeof *dc);
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  CHECK_CUDA(cudaSetDevice(d->dev->index));
  CHECK_NCCL(ncclCommInitRank(&dc->comm, d->size, uid, d->rank));
  CHECK_CUDA(cudaEventCreateWithFlags(&dc->produced, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&dc->reduced, cudaEventDisableTiming));
  d->cuda = dc;
}

extern "C" void dist_nccl_free_cuda(Dist *d) {
  DistCuda *dc = d->cuda;
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_NCCL(ncclCommDestroy(dc->comm));
  CHECK_CUDA(cudaEventDestroy(dc->produced));
  CHECK_CUDA(cudaEventDestroy(dc->reduced));
  free(dc);
  d->cuda = NULL;
}

extern "C" void dist_broadcast_params_cuda(Dist *d) {
  CHECK_NCCL(ncclBroadcast(d->ps->params, d->ps->params, (size_t)d->ps->total_numel, ncclFloat, 0,
                           d->cuda->comm, d->dev->stream));
}

// One event serves every bucket: a wait uses the record made just before it.
extern "C" void dist_bucket_launch_cuda(Dist *d, DistBucket *b) {
  DistCuda *dc = d->cuda;
  CHECK_CUDA(cudaEventRecord(dc->produced, d->dev->stream));
  CHECK_CUDA(cudaStreamWaitEvent(d->dev->comm_stream, dc->produced, 0));
  float *g = d->ps->grads + b->offset;
  CHECK_NCCL(ncclAllReduce(g, g, (size_t)b->numel, ncclFloat, ncclAvg, dc->comm,
                           d->dev->comm_stream));
}

extern "C" void dist_grad_wait_cuda(Dist *d) {
  DistCuda *dc = d->cuda;
  CHECK_CUDA(cudaEventRecord(dc->reduced, d->dev->comm_stream));
  CHECK_CUDA(cudaStreamWaitEvent(d->dev->stream, dc->reduced, 0));
}
