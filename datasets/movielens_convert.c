// movielens_convert: a MovieLens ratings.csv (ml-20m) into the NCF trainer's
// binary file <out>/ncf.bin - the MLPerf split described in movielens.h.
//   movielens_convert --input=ml-20m/ratings.csv --out=data/ncf/ml-20m
// It first removes an earlier <out>/ncf.bin and writes the new one through a
// temporary name, so that a failed or killed conversion leaves no ncf.bin
// for a later run to train on.

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/check.h"
#include "recommendation/movielens.h"

static const ConfigKey CONVERT_KEYS[] = {
    {"input", CFG_STRING, "", "ratings.csv (userId,movieId,rating,timestamp)", NULL},
    {"out", CFG_STRING, "", "output directory (created); ncf.bin goes there", NULL},
    {"seed", CFG_INT, "0", "seed of the test negatives", "[0, inf)"},
    {"negatives", CFG_INT, "999", "test negatives per user (ML_MAX_NEGATIVES at most)",
     "[1, 100000]"},
    {"min_ratings", CFG_INT, "20", "users with fewer ratings are dropped (one is held out)",
     "[2, inf)"},
};

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, CONVERT_KEYS, (int)(sizeof CONVERT_KEYS / sizeof CONVERT_KEYS[0]));
  config_from_args(&cfg, argc, argv, "movielens_convert");
  const char *input = config_string(&cfg, "input"), *out = config_string(&cfg, "out");
  int64_t n_neg = config_int(&cfg, "negatives"), min_ratings = config_int(&cfg, "min_ratings");
  if (!*input) die_input("--input", "missing: the path of ratings.csv");
  if (!*out) die_input("--out", "missing: the output directory");
  file_make_dirs(out);
  ml_data_remove(out);

  double t0 = time_now_s();
  MlRatings ratings;
  ml_ratings_read(input, &ratings);
  double t1 = time_now_s();
  MlData data;
  ml_split(&ratings, min_ratings, n_neg, (uint64_t)config_int(&cfg, "seed"), &data);
  ml_data_write(&data, out);
  double t2 = time_now_s();
  printf("movielens_convert: %s: %lld ratings read in %.1f s\n", input,
         (long long)ratings.count, t1 - t0);
  printf("movielens_convert: %lld users (>= %lld ratings), %lld items, %lld training "
         "positives, %lld test negatives per user; wrote %s/%s in %.1f s\n",
         (long long)data.n_users, (long long)min_ratings, (long long)data.n_items,
         (long long)data.n_train, (long long)n_neg, out, ML_FILE_NAME, t2 - t1);
  ml_data_free(&data);
  ml_ratings_free(&ratings);
  config_free(&cfg);
  return 0;
}
