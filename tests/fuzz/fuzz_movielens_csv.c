// fuzz_movielens_csv: the MovieLens ratings.csv reader (ml_ratings_read,
// movielens.h) on any file, then the MLPerf split (ml_split) of what it read,
// with FUZZ_ML_MIN_RATINGS ratings per user and FUZZ_ML_NEGATIVES test
// negatives (fuzz_inputs.h) so that small inputs reach it. The split must give
// data that ncf.bin's reader accepts (ml_data_validate). The split indexes
// tables by the original ids (up to 2^26), so inputs with ids of 2^16 or more
// are read but not split, to keep each run small.
#include <stdbool.h>
#include <stdio.h>

#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "recommendation/movielens.h"

enum { kMaxSplitId = 1 << 16 };

typedef struct Case {
  const char *path;
  MlRatings ratings;
  MlData split;
  bool split_done;
} Case;

static void read_and_split(void *ctx) {
  Case *c = ctx;
  ml_ratings_read(c->path, &c->ratings);
  const MlRatings *r = &c->ratings;
  if (ml_max_id(r->user, r->count) >= kMaxSplitId || ml_max_id(r->item, r->count) >= kMaxSplitId)
    return;
  ml_split(r, FUZZ_ML_MIN_RATINGS, FUZZ_ML_NEGATIVES, 7, &c->split);
  c->split_done = true;
}

static void validate(void *ctx) {
  Case *c = ctx;
  ml_data_validate(&c->split, "the split");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Case c = {.path = fuzz_temp_path("ratings.csv")};
  fuzz_write_file(c.path, data, size);
  if (fuzz_call(read_and_split, &c, FUZZ_RELEASE_LEFTOVERS) != 0) return 0;
  if (c.split_done) {
    if (fuzz_call(validate, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
      fuzz_fail("ncf.bin's reader refuses the split of these ratings: %s", fuzz_last_error());
    ml_data_free(&c.split);
  }
  ml_ratings_free(&c.ratings);
  return 0;
}
