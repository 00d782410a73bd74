// fuzz_ncf_bin: the NCF trainer's read of ncf.bin (ncf_data_open on the CPU:
// ml_data_map and its validation, movielens.h) on any file, then what the
// trainer reads from data it accepted: the first training samples of an
// epoch (positives and the negatives drawn for them, ncf_batch.h) and the
// eval candidates of the first users. Every user and item id handed out must
// lie inside the data's counts (the embedding tables' rows): ml_data_validate
// promises that no later lookup goes out of bounds.
#include <stdio.h>
#include <stdlib.h>

#include "../../recommendation/ncf_data.h"
#include "core/file.h"
#include "fuzz_util.h"

enum { kMaxSamples = 4096, kMaxEvalUsers = 64, kTrainNegatives = 4 };

typedef struct Case {
  const char *dir;
  Device dev;
} Case;

static void check_ids(const char *what, const int32_t *ids, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= limit)
      fuzz_fail("%s %lld is %d, outside [0, %lld)", what, (long long)i, ids[i], (long long)limit);
}

static void train_samples(const Case *c, const NcfData *d) {
  int64_t n = ncf_epoch_samples(&d->train);
  if (n > kMaxSamples) n = kMaxSamples;
  int32_t *users = malloc((size_t)n * sizeof(int32_t)), *items = malloc((size_t)n * sizeof(int32_t));
  float *labels = malloc((size_t)n * sizeof(float));
  ncf_train_batch_cpu(&c->dev, &d->train, 0, 0, n, users, items, labels);
  check_ids("training sample user", users, n, d->n_users);
  check_ids("training sample item", items, n, d->n_items);
  free(users);
  free(items);
  free(labels);
}

static void eval_candidates(const Case *c, const NcfData *d) {
  int64_t n = d->n_users < kMaxEvalUsers ? d->n_users : kMaxEvalUsers;
  size_t count = (size_t)(n * (1 + d->n_test_neg));
  int32_t *users = malloc(count * sizeof(int32_t)), *items = malloc(count * sizeof(int32_t));
  ncf_eval_batch_cpu(&c->dev, d->test_items, d->test_negs, d->n_test_neg, 0, n, users, items);
  check_ids("eval candidate user", users, (int64_t)count, d->n_users);
  check_ids("eval candidate item", items, (int64_t)count, d->n_items);
  free(users);
  free(items);
}

static void open_and_read(void *ctx) {
  const Case *c = ctx;
  NcfData d;
  ncf_data_open(&d, c->dir, kTrainNegatives, 5, DEVICE_CPU);
  train_samples(c, &d);
  eval_candidates(c, &d);
  ncf_data_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[1024];
  static Case c;
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s", fuzz_temp_path("ncf"));
    file_make_dirs(dir);
    c = (Case){.dir = dir};
    device_open(&c.dev, DEVICE_CPU, 0);
  }
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, ML_FILE_NAME);
  fuzz_write_file(path, data, size);
  fuzz_call(open_and_read, &c, FUZZ_RELEASE_LEFTOVERS);
  return 0;
}
