// ncf_data.c: loading the split onto the device; the CPU batch builders.
#include "ncf_data.h"

#include <string.h>

#include "core/parallel.h"
#include "core/progress.h"

// A copy of host array src (bytes) on the data's device, freed by close.
static void *ncf_upload(NcfData *d, int slot, const void *src, size_t bytes) {
  return d->owned[slot] = device_upload(d->device, src, bytes);
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

double ncf_data_draw_test_negs(NcfData *d) {
  double t0 = time_now_s();
  size_t bytes = (size_t)(d->n_users * d->n_test_neg) * sizeof(int32_t);
  int32_t *negs = xmalloc(bytes);  // (n_users, n_test_neg)
  ml_draw_all_test_negs(&d->file, negs);
  if (d->device == DEVICE_CPU) {
    d->test_negs = d->drawn_negs = negs;  // in place of the mapping's
  } else {
    device_copy(d->device, (void *)d->test_negs, DEVICE_CPU, negs, bytes);
    free(negs);
  }
  return time_now_s() - t0;
}

void ncf_data_close(NcfData *d) {
  for (int i = 0; i < 4; i++)
    if (d->owned[i]) device_free(d->device, d->owned[i]);
  if (d->device != DEVICE_CPU) device_free(d->device, (void *)d->test_negs);
  free(d->drawn_negs);
  ml_data_free(&d->file);
  memset(d, 0, sizeof *d);
}

// The CPU builds samples in groups of NCF_LANES: a Feistel round of the
// whole group is one rng_blocks_at_cpu call (Philox on the vector units,
// lanes side by side), and so are the group's negative draws. Round r of a
// sample's Feistel network takes word r of block `right`, and its negative
// word p % 4 of block p / 4: ncf_train_sample's draws (rng_u32), the same
// samples (test_ncf_model checks them against it).
enum { NCF_LANES = 16 };

static void ncf_train_group(const NcfTrainView *v, int64_t epoch, int64_t s0, int64_t lanes,
                            int32_t *users, int32_t *items, float *labels) {
  int64_t n = ncf_epoch_samples(v);
  int half = ncf_feistel_half_bits(n);
  uint64_t mask = ((uint64_t)1 << half) - 1;
  uint64_t shuffle = ncf_shuffle_stream(epoch);
  uint64_t x[NCF_LANES], left[NCF_LANES], right[NCF_LANES], blocks[NCF_LANES] = {0};
  uint32_t words[4 * NCF_LANES];
  int64_t walking[NCF_LANES];  // the lanes whose value is still >= n
  int64_t n_walking = lanes;
  for (int64_t l = 0; l < lanes; l++) x[l] = (uint64_t)(s0 + l), walking[l] = l;
  // perm(s): the network applied to every lane still outside [0, n).
  while (n_walking > 0) {
    for (int64_t k = 0; k < n_walking; k++) {
      int64_t l = walking[k];
      left[l] = x[l] >> half, right[l] = x[l] & mask;
    }
    for (int round = 0; round < 4; round++) {
      for (int64_t k = 0; k < n_walking; k++) blocks[k] = right[walking[k]];
      rng_blocks_at_cpu(words, blocks, n_walking, v->seed, shuffle);
      for (int64_t k = 0; k < n_walking; k++) {
        int64_t l = walking[k];
        uint64_t next = (left[l] ^ words[4 * k + round]) & mask;
        left[l] = right[l], right[l] = next;
      }
    }
    int64_t still = 0;
    for (int64_t k = 0; k < n_walking; k++) {
      int64_t l = walking[k];
      x[l] = (left[l] << half) | right[l];
      if (x[l] >= (uint64_t)n) walking[still++] = l;
    }
    n_walking = still;
  }
  // The negatives' draws: word p % 4 of block p / 4 of the epoch's stream.
  int64_t n_neg = 0;
  for (int64_t l = 0; l < lanes; l++)
    if (x[l] >= (uint64_t)v->n_train) blocks[n_neg++] = x[l] >> 2;
  rng_blocks_at_cpu(words, blocks, n_neg, v->seed, ncf_neg_stream(epoch));
  for (int64_t l = 0, k = 0; l < lanes; l++) {
    uint32_t draw = x[l] >= (uint64_t)v->n_train ? words[4 * k++ + (x[l] & 3)] : 0;
    ncf_sample_at(v, (int64_t)x[l], draw, &users[l], &items[l], &labels[l]);
  }
}

void ncf_train_batch_cpu(const Device *dev, const NcfTrainView *v, int64_t epoch, int64_t s0,
                         int64_t n, int32_t *users, int32_t *items, float *labels) {
  (void)dev;
  // Each sample a function of (epoch, index) alone: any team gives the same
  // batch. A sample costs some hundred element operations (its Philox
  // blocks), hence the lower bar for waking the team.
  int64_t groups = parallel_pieces(n, NCF_LANES);
#pragma omp parallel for if (n * 64 >= parallel_min_work)
  for (int64_t g = 0; g < groups; g++) {
    int64_t b = g * NCF_LANES, lanes = n - b < NCF_LANES ? n - b : NCF_LANES;
    ncf_train_group(v, epoch, s0 + b, lanes, users + b, items + b, labels + b);
  }
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
