// The fine-tune's epoch order (language/squad_data.h, squad_epoch_order):
// every window exactly once; the same order for the same (seed, epoch), a
// different one for another epoch; and with length groups, batches of
// similar length: less padding than the random order, each run's batches
// sorted, the windows after the last whole batch at the end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../language/squad_data.h"
#include "tests/harness/test.h"

enum { N = 203, BATCH = 8, GROUP = 5 };  // 25 whole batches, 3 windows over

static SquadFeature windows[N];
static const SquadSplit split = {N, windows, 0};

static void make_windows(void) {
  // Lengths 20..119, scattered over the indices.
  for (int i = 0; i < N; i++) windows[i].n = 20 + (int32_t)((i * 37) % 100);
}

// Every window once.
static void check_permutation(const int64_t *order) {
  int seen[N] = {0};
  for (int i = 0; i < N; i++) {
    CHECK(order[i] >= 0 && order[i] < N);
    if (order[i] >= 0 && order[i] < N) seen[order[i]]++;
  }
  for (int i = 0; i < N; i++) CHECK_MSG(seen[i] == 1, "window %d seen %d times", i, seen[i]);
}

// The tokens a batch pads to, summed over the whole batches.
static int64_t padded_tokens(const int64_t *order) {
  int64_t total = 0;
  for (int b = 0; b < N / BATCH; b++) {
    int64_t longest = 0;
    for (int j = 0; j < BATCH; j++)
      if (windows[order[b * BATCH + j]].n > longest) longest = windows[order[b * BATCH + j]].n;
    total += longest * BATCH;
  }
  return total;
}

static void random_order(void) {
  int64_t *a = squad_epoch_order(&split, 7, 1, BATCH, 0), *b = squad_epoch_order(&split, 7, 1, BATCH, 0);
  int64_t *c = squad_epoch_order(&split, 7, 2, BATCH, 0);
  check_permutation(a);
  check_permutation(c);
  CHECK(memcmp(a, b, sizeof(int64_t) * N) == 0);
  CHECK(memcmp(a, c, sizeof(int64_t) * N) != 0);
  free(a), free(b), free(c);
}

static void length_groups(void) {
  int64_t *plain = squad_epoch_order(&split, 7, 1, BATCH, 0);
  int64_t *a = squad_epoch_order(&split, 7, 1, BATCH, GROUP), *b = squad_epoch_order(&split, 7, 1, BATCH, GROUP);
  int64_t *c = squad_epoch_order(&split, 7, 2, BATCH, GROUP);
  check_permutation(a);
  check_permutation(c);
  CHECK(memcmp(a, b, sizeof(int64_t) * N) == 0);
  CHECK(memcmp(a, c, sizeof(int64_t) * N) != 0);
  // Within a batch, longest first (each batch is a slice of a sorted run).
  for (int k = 0; k < N / BATCH; k++)
    for (int j = 1; j < BATCH; j++)
      CHECK_MSG(windows[a[k * BATCH + j]].n <= windows[a[k * BATCH + j - 1]].n,
                "batch %d is not sorted at %d", k, j);
  // The windows past the last whole batch: the random order's.
  for (int i = N / BATCH * BATCH; i < N; i++) CHECK(a[i] == plain[i]);
  // A run of GROUP batches spans a fifth of the lengths' range, so each batch
  // spans about 1/25 of it: the padding falls well below the random order's.
  int64_t grouped = padded_tokens(a), random = padded_tokens(plain), real = 0;
  for (int i = 0; i < N / BATCH * BATCH; i++) real += windows[plain[i]].n;
  printf("padded tokens: random %lld, grouped %lld, real %lld\n", (long long)random,
            (long long)grouped, (long long)real);
  CHECK(grouped < random);
  CHECK(grouped - real < (random - real) / 3);
  // The batches are shuffled: in run order a batch's longest window exceeds
  // the one before it only where a run begins (4 times); shuffled, about
  // half the time.
  int rises = 0;
  for (int k = 1; k < N / BATCH; k++) rises += windows[a[k * BATCH]].n > windows[a[(k - 1) * BATCH]].n;
  CHECK_MSG(rises > N / BATCH / GROUP, "%d rises", rises);
  free(plain), free(a), free(b), free(c);
}

int main(void) {
  make_windows();
  TEST_RUN(random_order);
  TEST_RUN(length_groups);
  return test_finish();
}
