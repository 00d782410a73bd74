// movielens_generate: a ratings.csv in the MovieLens format from a latent-
// factor model, deterministic from --seed, and the HR@10 / NDCG@10 its true
// model scores on the converter's test split (same split code, same
// negatives, same ranking rule as the trainer), so targets can be set
// against a known ceiling.
//   movielens_generate --size=small|full --out=DIR [--seed=1]
//
// The model: user factors p_u and item factors q_i ~ N(0, I_d), item
// popularity b_i ~ N(0, pop_std^2) (a log-normal skew of item counts). User u
// picks its n_u items one after another without replacement, each pick with
// probability noise uniform over all items and otherwise from
// softmax_i(s(u, i)), s(u, i) = sharpness * p_u.q_i / sqrt(d) + b_i. n_u =
// 20 + a log-normal count (mean ~ mean_extra); every 40th user is a light one
// with 5..19 ratings, which the converter drops (ml-20m itself has none).
// Ratings (0.5..5 in halves) follow p_u.q_i plus noise; timestamps are
// uniform in a per-user activity window (whole minutes, so ties occur), so
// the held-out latest item is an ordinary pick of the user's.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>

#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/check.h"
#include "core/rng.h"
#include "recommendation/movielens.h"

typedef struct GenSize {
  const char *name;
  int64_t users;  // kept by the converter (>= 20 ratings)
  int64_t items;
  int dim;
  double sharpness, pop_std, noise, mean_extra;
} GenSize;

static const GenSize GEN_SIZES[] = {
    {"small", 3000, 3000, 8, 6.0, 1.0, 0.1, 100.0},
    {"full", 138493, 26744, 16, 6.0, 1.0, 0.1, 124.0},
};

enum { GEN_LIGHT_EVERY = 40, GEN_USER_BLOCK = 256 };
// Philox streams of the generator's draws.
enum { GEN_STREAM_P = 1, GEN_STREAM_Q = 2, GEN_STREAM_B = 3, GEN_STREAM_USER = 1000 };

typedef struct GenModel {
  GenSize size;
  int64_t n_users;  // all generated users, light ones included
  float *p;         // (n_users, dim)
  float *q;         // (items, dim)
  float *b;         // (items)
} GenModel;

static const ConfigKey GEN_KEYS[] = {
    {"size", CFG_STRING, "small", "small (3,000 users, 3,000 items) | full (ml-20m's shape)", "small|full"},
    {"out", CFG_STRING, "", "output directory: ratings.csv and ceiling.txt", NULL},
    {"seed", CFG_INT, "1", "seed of the model and the ratings", "[0, inf)"},
    {"neg_seed", CFG_INT, "0", "the converter's --seed, for the ceiling's test negatives", "[0, inf)"},
    {"negatives", CFG_INT, "999", "the converter's --negatives", "[1, inf)"},
};

static GenSize gen_size_parse(const char *name) {
  for (size_t i = 0; i < sizeof GEN_SIZES / sizeof GEN_SIZES[0]; i++)
    if (strcmp(GEN_SIZES[i].name, name) == 0) return GEN_SIZES[i];
  die_input("--size", "unknown size \"%s\" (want small or full)", name);
}

static void gen_model_init(GenModel *m, GenSize size, uint64_t seed) {
  m->size = size;
  m->n_users = size.users + size.users / (GEN_LIGHT_EVERY - 1);
  m->p = xmalloc((size_t)(m->n_users * size.dim) * sizeof(float));
  m->q = xmalloc((size_t)(size.items * size.dim) * sizeof(float));
  m->b = xmalloc((size_t)size.items * sizeof(float));
  rng_fill_normal_cpu(m->p, m->n_users * size.dim, seed, GEN_STREAM_P, 0, 0.0f, 1.0f);
  rng_fill_normal_cpu(m->q, size.items * size.dim, seed, GEN_STREAM_Q, 0, 0.0f, 1.0f);
  rng_fill_normal_cpu(m->b, size.items, seed, GEN_STREAM_B, 0, 0.0f, (float)size.pop_std);
}

static void gen_model_free(GenModel *m) {
  free(m->p);
  free(m->q);
  free(m->b);
}

// p_u.q_i / sqrt(d): the standardised preference of user for item.
static double gen_affinity(const GenModel *m, int64_t user, int64_t item) {
  const float *p = m->p + user * m->size.dim, *q = m->q + item * m->size.dim;
  double dot = 0;
  for (int k = 0; k < m->size.dim; k++) dot += (double)p[k] * q[k];
  return dot / sqrt(m->size.dim);
}

// s(u, i), the logit of the user's picks.
static double gen_score(const GenModel *m, int64_t user, int64_t item) {
  return m->size.sharpness * gen_affinity(m, user, item) + m->b[item];
}

static int64_t gen_count(const GenModel *m, int64_t user, Rng *r) {
  if (user % GEN_LIGHT_EVERY == GEN_LIGHT_EVERY - 1) return 5 + rng_next_below(r, 15);
  // Log-normal with sigma 1.2: mean exp(mu + 0.72) = mean_extra.
  double extra = exp(log(m->size.mean_extra) - 0.72 + 1.2 * rng_next_normal(r));
  int64_t cap = m->size.items / 8;
  int64_t n = 20 + (int64_t)extra;
  return n < cap ? n : cap;
}

// The cumulative weights of the items not taken.
static void gen_build_cdf(const double *weight, const uint8_t *taken, int64_t n_items,
                          double *cdf) {
  double acc = 0;
  for (int64_t i = 0; i < n_items; i++) cdf[i] = acc += taken[i] ? 0.0 : weight[i];
}

// Picks n items of one user without replacement into items (n): each pick
// from the weights of the items not yet taken (a draw that hits one taken
// since the last rebuild of cdf is repeated, which is the same
// distribution; after a few repeats cdf is rebuilt without them). weight
// (items) holds the user's softmax weights; taken (items) is all zero on
// entry and on return.
static void gen_pick(const GenModel *m, const double *weight, int64_t n, Rng *r, uint8_t *taken,
                     double *cdf, int32_t *items) {
  int64_t n_items = m->size.items;
  gen_build_cdf(weight, taken, n_items, cdf);
  for (int64_t k = 0; k < n; k++) {
    int32_t pick;
    int misses = 0;
    bool noisy = rng_next_uniform(r) < m->size.noise;
    do {
      if (misses == 4) {
        gen_build_cdf(weight, taken, n_items, cdf);
        misses = 0;
      }
      if (noisy) {
        pick = (int32_t)rng_next_below(r, (uint32_t)n_items);
      } else {
        double x = rng_next_uniform(r) * cdf[n_items - 1];
        int64_t lo = 0, hi = n_items - 1;
        while (lo < hi) {
          int64_t mid = (lo + hi) / 2;
          if (cdf[mid] > x) hi = mid; else lo = mid + 1;
        }
        pick = (int32_t)lo;
      }
      misses++;
    } while (taken[pick]);
    taken[pick] = 1;
    items[k] = pick;
  }
  for (int64_t k = 0; k < n; k++) taken[items[k]] = 0;
}

// The user's lines, sorted by movieId like ml-20m's.
static void gen_write_user(FILE *f, const GenModel *m, int64_t user, int32_t *items, int64_t n,
                           Rng *r) {
  qsort(items, (size_t)n, sizeof(int32_t), ml_cmp_i32);
  const int64_t t_first = 789652009, t_last = 1427784002;  // ml-20m's time range
  int64_t start = t_first + (int64_t)(rng_next_uniform(r) * (double)(t_last - t_first));
  double span = fmin(exp(log(30.0 * 86400) + 2.0 * rng_next_normal(r)), (double)(t_last - start));
  for (int64_t k = 0; k < n; k++) {
    double stars = 3.5 + 0.7 * gen_affinity(m, user, items[k]) + 0.6 * rng_next_normal(r);
    double halves = fmin(10, fmax(1, floor(stars * 2 + 0.5)));
    int64_t ts = start + (int64_t)(rng_next_uniform(r) * span / 60) * 60;
    fprintf(f, "%lld,%d,%.1f,%lld\n", (long long)user + 1, items[k] + 1, halves / 2,
            (long long)ts);
  }
}

// Writes ratings.csv, GEN_USER_BLOCK users at a time: their logits are one
// GEMM, P_block Q^T.
static int64_t gen_write_csv(const GenModel *m, uint64_t seed, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) die_input(path, "cannot create: %s", strerror(errno));
  fprintf(f, "%s\n", ML_CSV_HEADER);
  int64_t n_items = m->size.items, dim = m->size.dim, lines = 0;
  float *logits = xmalloc((size_t)(GEN_USER_BLOCK * n_items) * sizeof(float));  // (B, items)
  double *weight = xmalloc((size_t)n_items * sizeof(double));                    // (items)
  double *cdf = xmalloc((size_t)n_items * sizeof(double));                       // (items)
  uint8_t *taken = xcalloc((size_t)n_items, 1);
  int32_t *items = xmalloc((size_t)n_items * sizeof(int32_t));
  float scale = (float)(m->size.sharpness / sqrt((double)dim));
  for (int64_t u0 = 0; u0 < m->n_users; u0 += GEN_USER_BLOCK) {
    int64_t nb = m->n_users - u0 < GEN_USER_BLOCK ? m->n_users - u0 : GEN_USER_BLOCK;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)n_items, (int)dim, scale,
                m->p + u0 * dim, (int)dim, m->q, (int)dim, 0.0f, logits, (int)n_items);
    for (int64_t bu = 0; bu < nb; bu++) {
      const float *row = logits + bu * n_items;
      for (int64_t i = 0; i < n_items; i++) weight[i] = exp((double)row[i] + m->b[i]);
      Rng r = rng_make(seed, GEN_STREAM_USER + (uint64_t)(u0 + bu));
      int64_t n = gen_count(m, u0 + bu, &r);
      gen_pick(m, weight, n, &r, taken, cdf, items);
      gen_write_user(f, m, u0 + bu, items, n, &r);
      lines += n;
    }
  }
  CHECK_FILE(fclose(f) == 0, path);
  free(logits);
  free(weight);
  free(cdf);
  free(taken);
  free(items);
  return lines;
}

typedef struct GenScore {
  double hr, ndcg;
} GenScore;

// HR@10 and NDCG@10 over the split's users of a scorer: the true model
// (popularity_only false) or item popularity alone. Its scores are ranked as
// they are: they are preferences, not a trained model's logits, so the
// trainer's sigmoid (and its saturated ties) does not apply.
static GenScore gen_ceiling(const GenModel *m, const MlData *d, bool popularity_only) {
  float *neg_scores = xmalloc((size_t)d->n_neg * sizeof(float));  // (n_neg)
  double hits = 0, ndcg = 0;
  for (int64_t u = 0; u < d->n_users; u++) {
    int64_t user = d->user_ids[u] - 1;  // userId = generator index + 1
    const int32_t *negs = d->test_negs + u * d->n_neg;
#define GEN_SCORE(item) \
  (popularity_only ? m->b[d->item_ids[item] - 1] : gen_score(m, user, d->item_ids[item] - 1))
    float pos = (float)GEN_SCORE(d->test_items[u]);
    for (int64_t j = 0; j < d->n_neg; j++) neg_scores[j] = (float)GEN_SCORE(negs[j]);
#undef GEN_SCORE
    int64_t rank = ml_positive_rank(ML_RANK_SCORES, pos, neg_scores, negs, d->n_neg);
    if (rank < 10) {
      hits += 1;
      ndcg += 1 / log2((double)rank + 2);
    }
  }
  free(neg_scores);
  return (GenScore){hits / (double)d->n_users, ndcg / (double)d->n_users};
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, GEN_KEYS, (int)(sizeof GEN_KEYS / sizeof GEN_KEYS[0]));
  config_from_args(&cfg, argc, argv, "movielens_generate");
  GenSize size = gen_size_parse(config_string(&cfg, "size"));
  const char *out = config_string(&cfg, "out");
  uint64_t seed = (uint64_t)config_int(&cfg, "seed");
  int64_t n_neg = config_int(&cfg, "negatives");
  if (!*out) die_input("--out", "missing: the output directory");
  if (n_neg < 1 || n_neg >= size.items / 2)
    die_input("--negatives", "want 1..%lld for size %s", (long long)size.items / 2 - 1,
              size.name);
  file_make_dirs(out);

  double t0 = time_now_s();
  GenModel model;
  gen_model_init(&model, size, seed);
  char csv[1024], txt[1024];
  snprintf(csv, sizeof csv, "%s/ratings.csv", out);
  int64_t lines = gen_write_csv(&model, seed, csv);
  double t1 = time_now_s();
  printf("movielens_generate: %s: %lld users, %lld items, %lld ratings (seed %llu) in %.1f s\n",
         csv, (long long)model.n_users, (long long)size.items, (long long)lines,
         (unsigned long long)seed, t1 - t0);

  // The converter's split of the file just written, read back as it will be.
  MlRatings ratings;
  ml_ratings_read(csv, &ratings);
  MlData split;
  ml_split(&ratings, ML_MIN_RATINGS, n_neg, (uint64_t)config_int(&cfg, "neg_seed"), &split);
  GenScore truth = gen_ceiling(&model, &split, false);
  GenScore pop = gen_ceiling(&model, &split, true);
  snprintf(txt, sizeof txt, "%s/ceiling.txt", out);
  FILE *f = fopen(txt, "w");
  if (!f) die_input(txt, "cannot create: %s", strerror(errno));
  fprintf(f, "size %s seed %llu neg_seed %lld negatives %lld users %lld items %lld\n",
          size.name, (unsigned long long)seed, (long long)config_int(&cfg, "neg_seed"),
          (long long)n_neg, (long long)split.n_users, (long long)split.n_items);
  fprintf(f, "true_model hr10 %.4f ndcg10 %.4f\n", truth.hr, truth.ndcg);
  fprintf(f, "popularity hr10 %.4f ndcg10 %.4f\n", pop.hr, pop.ndcg);
  CHECK_FILE(fclose(f) == 0, txt);
  printf("movielens_generate: after the converter's split: %lld users, %lld items, %lld "
         "training positives\n",
         (long long)split.n_users, (long long)split.n_items, (long long)split.n_train);
  printf("movielens_generate: ceiling (true model) HR@10 %.4f NDCG@10 %.4f; popularity alone "
         "HR@10 %.4f NDCG@10 %.4f (%lld test negatives, converter seed %lld) in %.1f s\n",
         truth.hr, truth.ndcg, pop.hr, pop.ndcg, (long long)n_neg,
         (long long)config_int(&cfg, "neg_seed"), time_now_s() - t1);
  ml_data_free(&split);
  ml_ratings_free(&ratings);
  gen_model_free(&model);
  config_free(&cfg);
  return 0;
}
