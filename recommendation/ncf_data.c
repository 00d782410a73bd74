// ncf_data.c: loading the split onto the device; the CPU batch builders.
#include "ncf_data.h"

#include <string.h>

#include "core/parallel.h"

// A copy of host array src (bytes) on the data's device, freed by close.
static void *ncf_upload(NcfData *d, int slot, const void *src, size_t bytes) {
  void *dst = device_alloc(d->device, bytes ? bytes : 1);
  device_copy(d->device, dst, DEVICE_CPU, src, bytes);
  d->owned[slot] = dst;
  return dst;
}

MlFileHeader ncf_data_check(const char *dir) {
  char path[1024];
  ml_data_path(dir, path, sizeof path);
  return ml_data_header(path);
}

void ncf_data_open(NcfData *d, const char *dir, int64_t train_negatives, uint64_t seed,
                   DeviceKind device) {
  memset(d, 0, sizeof *d);
  char path[1024];
  ml_data_path(dir, path, sizeof path);
  ml_data_map(path, &d->file);
  const MlData *f = &d->file;
  d->device = device;
  d->n_users = f->n_users;
  d->n_items = f->n_items;
  d->n_test_neg = f->n_neg;

  // The user of each training positive: the CSR row it lies in.
  int32_t *users = xmalloc((size_t)f->n_train * sizeof(int32_t));  // (n_train)
  for (int64_t u = 0; u < f->n_users; u++)
    for (int64_t k = f->train_offsets[u]; k < f->train_offsets[u + 1]; k++) users[k] = (int32_t)u;
  d->train.offsets = ncf_upload(d, 0, f->train_offsets, (size_t)(f->n_users + 1) * sizeof(int64_t));
  d->train.items = ncf_upload(d, 1, f->train_items, (size_t)f->n_train * sizeof(int32_t));
  d->train.users = ncf_upload(d, 2, users, (size_t)f->n_train * sizeof(int32_t));
  free(users);
  d->test_items = ncf_upload(d, 3, f->test_items, (size_t)f->n_users * sizeof(int32_t));
  // The test negatives are the largest array (553 MB for ml-20m): on CPU the
  // mapping itself serves.
  if (device == DEVICE_CPU) {
    d->test_negs = f->test_negs;
  } else {
    void *negs = device_alloc(device, (size_t)(f->n_users * f->n_neg) * sizeof(int32_t));
    device_copy(device, negs, DEVICE_CPU, f->test_negs,
                (size_t)(f->n_users * f->n_neg) * sizeof(int32_t));
    d->test_negs = negs;
  }
  d->train.n_train = f->n_train;
  d->train.n_items = f->n_items;
  d->train.n_neg = train_negatives;
  d->train.seed = seed;
}

void ncf_data_close(NcfData *d) {
  for (int i = 0; i < 4; i++)
    if (d->owned[i]) device_free(d->device, d->owned[i]);
  if (d->device != DEVICE_CPU) device_free(d->device, (void *)d->test_negs);
  ml_data_free(&d->file);
  memset(d, 0, sizeof *d);
}

void ncf_train_batch_cpu(const Device *dev, const NcfTrainView *v, int64_t epoch, int64_t s0,
                         int64_t n, int32_t *users, int32_t *items, float *labels) {
  (void)dev;
  // Each sample a function of (epoch, index) alone: any team gives the same
  // batch. A sample costs some hundred element operations (its negatives'
  // rejection tests), hence the lower bar for waking the team.
#pragma omp parallel for if (n * 64 >= parallel_min_work)
  for (int64_t b = 0; b < n; b++) ncf_train_sample(v, epoch, s0 + b, &users[b], &items[b], &labels[b]);
}

void ncf_eval_batch_cpu(const Device *dev, const int32_t *test_items, const int32_t *test_negs,
                        int64_t n_neg, int64_t u0, int64_t n, int32_t *users, int32_t *items) {
  (void)dev;
  for (int64_t u = 0; u < n; u++) {
    int32_t *row_users = users + u * (1 + n_neg), *row_items = items + u * (1 + n_neg);
    for (int64_t j = 0; j <= n_neg; j++) row_users[j] = (int32_t)(u0 + u);
    row_items[0] = test_items[u0 + u];
    memcpy(row_items + 1, test_negs + (u0 + u) * n_neg, (size_t)n_neg * sizeof(int32_t));
  }
}
