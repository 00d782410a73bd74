// ncf_data.h: the converted MovieLens split (ncf.bin, mapped) and its copies
// on the training device, which the batch builders of ncf_batch.h read. On
// CUDA the whole data set lives on the GPU, so a training step reads nothing
// from the host.
#pragma once
#include <stdint.h>

#include "device/device.h"
#include "movielens.h"
#include "ncf_batch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct NcfData {
  MlData file;            // the mapped ncf.bin (host)
  DeviceKind device;
  NcfTrainView train;     // device pointers (host ones on CPU)
  const int32_t *test_items;  // (n_users) on the device
  const int32_t *test_negs;   // (n_users, n_test_neg) on the device
  int64_t n_users, n_items, n_test_neg;
  int32_t *owned[4];      // device (or host) allocations to free
  int32_t *drawn_negs;    // (n_users, n_test_neg) on the CPU: ncf_data_draw_test_negs's
} NcfData;

// The counts of dir/ncf.bin from its header, checked against the file's
// size (a missing, truncated or edited file is an error), without reading
// the data: what a trainer checks before run_start.
MlFileHeader ncf_data_check(const char *dir);
// Maps dir/ncf.bin, checks it, and puts what the batches read on `device`.
void ncf_data_open(NcfData *d, const char *dir, int64_t train_negatives, uint64_t seed,
                   DeviceKind device);
// The test negatives drawn again from ncf.bin's seed (ml_draw_all_test_negs:
// the same ones its converter wrote) in place of those read from it, so
// that a run times their drawing as the v0.5 reference does (its convert.py
// logs run_start, then draws them). Returns the seconds it took.
double ncf_data_draw_test_negs(NcfData *d);
void ncf_data_close(NcfData *d);

#ifdef __cplusplus
}
#endif
