// MovieLens data for NCF (common/movielens.h): the r-th unrated item, the
// MLPerf split of a hand-made ratings.csv (filter, dense ids, the latest
// rating with its tie rule, test negatives), the ncf.bin round trip, and
// one-line errors naming file:line for bad input and corrupt files.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "movielens.h"
#include "test.h"

static const char *write_file(const char *name, const char *text) {
  static char path[8][1024];
  static int next = 0;
  char *p = path[next++ % 8];
  snprintf(p, 1024, "%s/%s", test_tmpdir(), name);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
  return p;
}

static void unrated_item_matches_brute_force(void) {
  Rng r = rng_make(3, 0);
  for (int trial = 0; trial < 200; trial++) {
    int32_t n_items = 1 + (int32_t)rng_next_below(&r, 40), rated[40], n_rated = 0;
    uint8_t is_rated[40] = {0};
    for (int32_t i = 0; i < n_items; i++)
      if (rng_next_below(&r, 3) == 0) is_rated[i] = 1, rated[n_rated++] = i;
    int32_t r_th = 0;
    for (int32_t i = 0; i < n_items; i++) {
      CHECK(ml_is_rated(rated, n_rated, i) == is_rated[i]);
      if (is_rated[i]) continue;
      CHECK_EQ_INT(ml_unrated_item(rated, n_rated, (uint32_t)r_th), i);
      r_th++;
    }
  }
}

// Users 10 and 30 kept (>= 3 ratings), 20 dropped. User 10's latest is a tie
// at t = 300 between movies 7 (line 3) and 3 (line 4): the later line wins.
static const char *CSV =
    "userId,movieId,rating,timestamp\n"
    "10,5,4.0,100\n"
    "10,7,3.5,300\n"
    "10,3,5,300\n"
    "20,5,1.0,50\n"
    "20,9,2.0,60\n"
    "30,9,0.5,10\n"
    "30,7,4.5,20\n"
    "30,11,5.0,5\n"
    "30,2,3.0,15\n";

static void split_follows_the_rules(void) {
  MlRatings r;
  ml_ratings_read(write_file("ratings.csv", CSV), &r);
  REQUIRE(r.count == 9);
  MlData d;
  ml_split(&r, 3, 50, 7, &d);
  REQUIRE(d.n_users == 2 && d.n_items == 6 && d.n_train == 5);
  CHECK(d.user_ids[0] == 10 && d.user_ids[1] == 30);
  const int32_t movies[6] = {2, 3, 5, 7, 9, 11};  // dense ids, ascending
  for (int i = 0; i < 6; i++) CHECK_EQ_INT(d.item_ids[i], movies[i]);
  // User 10: test movie 3 (dense 1), train movies 5, 7 (2, 3).
  CHECK_EQ_INT(d.test_items[0], 1);
  CHECK(d.train_offsets[1] == 2 && d.train_items[0] == 2 && d.train_items[1] == 3);
  // User 30: test movie 7 (dense 3, the largest timestamp), train 2, 9, 11.
  CHECK_EQ_INT(d.test_items[1], 3);
  CHECK(d.train_offsets[2] == 5 && d.train_items[2] == 0 && d.train_items[3] == 4 &&
        d.train_items[4] == 5);
  // Negatives: only never-rated items, ascending, every one of them drawn.
  const int32_t unrated[2][3] = {{0, 4, 5}, {1, 2, -1}};
  for (int u = 0; u < 2; u++) {
    const int32_t *neg = d.test_negs + u * 50;
    int seen[6] = {0};
    for (int j = 0; j < 50; j++) {
      CHECK(neg[j] == unrated[u][0] || neg[j] == unrated[u][1] || neg[j] == unrated[u][2]);
      if (j) CHECK(neg[j] >= neg[j - 1]);
      if (neg[j] >= 0 && neg[j] < 6) seen[neg[j]] = 1;
    }
    for (int k = 0; k < 3; k++)
      if (unrated[u][k] >= 0) CHECK_MSG(seen[unrated[u][k]], "user %d never drew %d", u, unrated[u][k]);
  }
  // The seed fixes the negatives.
  MlData same, other;
  ml_split(&r, 3, 50, 7, &same);
  ml_split(&r, 3, 50, 8, &other);
  CHECK(memcmp(same.test_negs, d.test_negs, 100 * sizeof(int32_t)) == 0);
  CHECK(memcmp(other.test_negs, d.test_negs, 100 * sizeof(int32_t)) != 0);

  // ncf.bin: what is written maps back the same.
  ml_data_write(&d, test_tmpdir());
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), ML_FILE_NAME);
  MlData m;
  ml_data_map(path, &m);
  CHECK(m.n_users == 2 && m.n_items == 6 && m.n_train == 5 && m.n_neg == 50 && m.neg_seed == 7);
  CHECK(memcmp(m.train_offsets, d.train_offsets, 3 * sizeof(int64_t)) == 0);
  CHECK(memcmp(m.train_items, d.train_items, 5 * sizeof(int32_t)) == 0);
  CHECK(memcmp(m.test_items, d.test_items, 2 * sizeof(int32_t)) == 0);
  CHECK(memcmp(m.test_negs, d.test_negs, 100 * sizeof(int32_t)) == 0);
  CHECK(memcmp(m.item_ids, d.item_ids, 6 * sizeof(int32_t)) == 0);
  ml_data_free(&m);
  ml_data_free(&same);
  ml_data_free(&other);
  ml_data_free(&d);
  ml_ratings_free(&r);
}

static void read_csv(void *path) {
  MlRatings r;
  ml_ratings_read(path, &r);
  MlData d;
  ml_split(&r, 3, 5, 1, &d);
}

static void bad_csv_lines_name_file_and_line(void) {
  const char *p = write_file("h.csv", "user,movie,rating,timestamp\n1,2,3.0,4\n");
  char want[1100];
  snprintf(want, sizeof want, "%s:1: want the header line", p);
  CHECK_DIES_WITH(read_csv, (void *)p, want);
  p = write_file("r.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,5.5,4\n");
  snprintf(want, sizeof want, "%s:3: bad rating", p);
  CHECK_DIES_WITH(read_csv, (void *)p, want);
  p = write_file("t.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,2.5,x\n");
  snprintf(want, sizeof want, "%s:3: bad timestamp", p);
  CHECK_DIES_WITH(read_csv, (void *)p, want);
  p = write_file("u.csv", "userId,movieId,rating,timestamp\n-1,2,3.0,4\n");
  snprintf(want, sizeof want, "%s:2: bad userId", p);
  CHECK_DIES_WITH(read_csv, (void *)p, want);
  p = write_file("d.csv",
                 "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,2.5,5\n1,2,1.0,6\n1,4,1.0,6\n");
  snprintf(want, sizeof want, "%s:4: user 1 rated movie 2 again (first on line 2)", p);
  CHECK_DIES_WITH(read_csv, (void *)p, want);
  CHECK_DIES_WITH(read_csv, (void *)"/nonexistent/ratings.csv", "cannot open");
}

static void map_file(void *path) {
  MlData d;
  ml_data_map(path, &d);
}

// Copies ncf.bin (written by split_follows_the_rules) to name, changes it
// with edit, returns the new path.
static const char *corrupt_copy(const char *name, void (*edit)(uint8_t *, long *)) {
  char src[1024];
  snprintf(src, sizeof src, "%s/%s", test_tmpdir(), ML_FILE_NAME);
  FILE *f = fopen(src, "rb");
  if (!f) return "/missing";
  static uint8_t buf[1 << 16];
  long n = (long)fread(buf, 1, sizeof buf, f);
  fclose(f);
  edit(buf, &n);
  static char dst[4][1024];
  static int next = 0;
  char *p = dst[next++ % 4];
  snprintf(p, 1024, "%s/%s", test_tmpdir(), name);
  f = fopen(p, "wb");
  fwrite(buf, 1, (size_t)n, f);
  fclose(f);
  return p;
}

static void truncate_last(uint8_t *b, long *n) { (void)b, *n -= 4; }
static void break_magic(uint8_t *b, long *n) { (void)n, b[0] = 'X'; }
static void bad_item(uint8_t *b, long *n) {
  (void)n;
  const MlFileHeader *h = (const MlFileHeader *)b;
  int32_t big = 1000;
  memcpy(b + h->off_test_items, &big, sizeof big);
}

static void corrupt_files_are_input_errors(void) {
  CHECK_DIES_WITH(map_file, (void *)corrupt_copy("short.bin", truncate_last), "corrupt or truncated");
  CHECK_DIES_WITH(map_file, (void *)corrupt_copy("magic.bin", break_magic), "not an NCF data file");
  CHECK_DIES_WITH(map_file, (void *)corrupt_copy("item.bin", bad_item), "an item id outside [0, 6)");
}

int main(void) {
  TEST_RUN(unrated_item_matches_brute_force);
  TEST_RUN(split_follows_the_rules);
  TEST_RUN(bad_csv_lines_name_file_and_line);
  TEST_RUN(corrupt_files_are_input_errors);
  return test_finish();
}
