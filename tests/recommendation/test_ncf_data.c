// MovieLens data for NCF (recommendation/movielens.h): the r-th unrated item, the
// MLPerf split of a hand-made ratings.csv (filter, dense ids, the latest
// rating with its tie rule, test negatives, drawn again as a timed run
// draws them), the ncf.bin round trip and its
// whole-or-nothing write, what ratings.csv may hold (a byte-order mark,
// blank lines at the end), and one-line errors naming file:line for bad
// input and the file and first inconsistency for every corrupt field.
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/rng.h"
#include "recommendation/movielens.h"
#include "tests/harness/test.h"

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

// The test negatives drawn again after a run's clock starts
// (ml_draw_all_test_negs, draw_test_negatives) are the converter's, for every
// user: 300 users who rated 20 to 59 of 200 items at random times, split in
// memory and through ncf.bin.
static void test_negatives_drawn_again_are_the_converters(void) {
  enum { USERS = 300, ITEMS = 200, NEG = 99 };
  MlRatings r = {.user = xmalloc(USERS * 60 * sizeof(int32_t)),
                 .item = xmalloc(USERS * 60 * sizeof(int32_t)),
                 .timestamp = xmalloc(USERS * 60 * sizeof(int64_t)), .source = "generated"};
  Rng rng = rng_make(3, 0);
  for (int32_t u = 0; u < USERS; u++) {
    int32_t items[ITEMS];
    for (int32_t i = 0; i < ITEMS; i++) items[i] = i;
    int64_t n = 20 + (int64_t)rng_next_below(&rng, 40);
    for (int64_t k = 0; k < n; k++) {  // the first n of a shuffle: no item twice
      int64_t j = k + (int64_t)rng_next_below(&rng, (uint32_t)(ITEMS - k));
      int32_t t = items[k];
      items[k] = items[j];
      items[j] = t;
      r.user[r.count] = u;
      r.item[r.count] = items[k];
      r.timestamp[r.count++] = (int64_t)rng_next_below(&rng, 1000);
    }
  }
  MlData d, m;
  ml_split(&r, 20, NEG, 11, &d);
  REQUIRE(d.n_users == USERS);
  int32_t *again = xmalloc((size_t)(USERS * NEG) * sizeof(int32_t));
  ml_draw_all_test_negs(&d, again);
  CHECK(memcmp(again, d.test_negs, (size_t)(USERS * NEG) * sizeof(int32_t)) == 0);
  char dir[1024], path[1100];
  snprintf(dir, sizeof dir, "%s/redraw", test_tmpdir());
  mkdir(dir, 0755);
  ml_data_write(&d, dir);
  snprintf(path, sizeof path, "%s/%s", dir, ML_FILE_NAME);
  ml_data_map(path, &m);
  memset(again, 0, (size_t)(USERS * NEG) * sizeof(int32_t));
  ml_draw_all_test_negs(&m, again);
  CHECK(memcmp(again, d.test_negs, (size_t)(USERS * NEG) * sizeof(int32_t)) == 0);
  free(again);
  ml_data_free(&m);
  ml_data_free(&d);
  ml_ratings_free(&r);
}

// In a child (an error must fail the case, not end the program): reads the
// file and exits 0 when it holds CSV's nine ratings.
static void read_csv_ratings(void *path) {
  MlRatings r;
  ml_ratings_read(path, &r);
  bool same = r.count == 9 && r.user[8] == 30 && r.item[8] == 2 && r.timestamp[8] == 15;
  exit(same ? 0 : 10);
}

static void reads_as_csv(const char *name, const char *text, size_t bytes) {
  char path[1024], msg[1024];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  FILE *f = fopen(path, "wb");
  fwrite(text, 1, bytes, f);
  fclose(f);
  int status = test_run_child(read_csv_ratings, path, msg, sizeof msg);
  CHECK_MSG(status == 0, "%s: exit %d (10: other ratings) %s", name, status, msg);
}

// Blank lines that end the file (several, CRLF, spaces) and a UTF-8
// byte-order mark before the header are what editors and spreadsheets
// write: accepted.
static void blank_lines_at_the_end_and_a_bom_are_accepted(void) {
  char text[1024];
  int n = snprintf(text, sizeof text, "%s\n\n\r\n  \t\n\n", CSV);
  reads_as_csv("blank_end.csv", text, (size_t)n);
  n = snprintf(text, sizeof text, "\xEF\xBB\xBF%s", CSV);
  reads_as_csv("bom.csv", text, (size_t)n);
}

static bool exists(const char *dir, const char *name) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return stat(path, &st) == 0;
}

static MlData g_split;  // written by write_split

static void write_split(void *dir) { ml_data_write(&g_split, dir); }

// ncf.bin is written whole or not at all: through ncf.bin.tmp (a stale one
// is replaced), renamed when complete; a write that fails leaves no ncf.bin
// once ml_data_remove has taken the earlier one away.
static void write_is_whole_or_nothing(void) {
  MlRatings r;
  ml_ratings_read(write_file("ratings.csv", CSV), &r);
  ml_split(&r, 3, 50, 7, &g_split);
  char dir[1024], tmp[1100];
  snprintf(dir, sizeof dir, "%s/out", test_tmpdir());
  mkdir(dir, 0755);
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, ML_FILE_NAME);
  FILE *f = fopen(tmp, "w");
  REQUIRE(f);
  fputs("a stale partial file", f);
  fclose(f);
  write_split(dir);
  CHECK(exists(dir, ML_FILE_NAME) && !exists(dir, ML_FILE_NAME ".tmp"));
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, ML_FILE_NAME);
  MlData m;
  ml_data_map(path, &m);
  CHECK(m.n_users == 2 && m.n_items == 6 && m.n_train == 5);
  ml_data_free(&m);

  ml_data_remove(dir);
  CHECK(!exists(dir, ML_FILE_NAME));
  ml_data_remove(dir);  // nothing to remove is no error
  // A temporary name that cannot be replaced (a directory): the write fails
  // with a message naming it, and no ncf.bin appears.
  unlink(tmp);
  REQUIRE(mkdir(tmp, 0755) == 0);
  char sub[1200];
  snprintf(sub, sizeof sub, "%s/x", tmp);
  FILE *inside = fopen(sub, "w");
  REQUIRE(inside);
  fclose(inside);
  char want[1200];
  snprintf(want, sizeof want, "%s: cannot remove this stale temporary file", tmp);
  CHECK_DIES_WITH(write_split, dir, want);
  CHECK(!exists(dir, ML_FILE_NAME));
  ml_data_free(&g_split);
  ml_ratings_free(&r);
}

static void read_csv(void *path) {
  MlRatings r;
  ml_ratings_read(path, &r);
  MlData d;
  ml_split(&r, 3, 5, 1, &d);
}

// Bad ratings.csv files and what their errors say after the file's path.
static const struct {
  const char *name, *text, *want;
} BAD_CSVS[] = {
    {"h.csv", "user,movie,rating,timestamp\n1,2,3.0,4\n", ":1: want the header line"},
    {"r.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,5.5,4\n", ":3: bad rating"},
    {"t.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,2.5,x\n", ":3: bad timestamp"},
    {"u.csv", "userId,movieId,rating,timestamp\n-1,2,3.0,4\n", ":2: bad userId"},
    {"d.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,2.5,5\n1,2,1.0,6\n1,4,1.0,6\n",
     ":4: user 1 rated movie 2 again (first on line 2)"},
    // A blank line with ratings after it.
    {"b.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n\n1,3,2.5,5\n\n",
     ":3: blank line before more ratings (blank lines may only end the file)"},
    // Bytes that are not printable show as \xNN, so the message stays one line.
    {"c.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\r\r\n",
     ":2: bad timestamp (want unix seconds ending the line): \"1,2,3.0,4\\x0d\""},
    {"w.csv", "\xFF\xFEu\0s\0",
     ": UTF-16 text (it starts with the byte-order mark \"\\xff\\xfe\"); save it as UTF-8"},
};

static void bad_csv_lines_name_file_and_line(void) {
  for (size_t i = 0; i < sizeof BAD_CSVS / sizeof BAD_CSVS[0]; i++) {
    const char *p = write_file(BAD_CSVS[i].name, BAD_CSVS[i].text);
    char want[1100];
    snprintf(want, sizeof want, "%s%s", p, BAD_CSVS[i].want);
    CHECK_DIES_WITH(read_csv, (void *)p, want);
  }
  CHECK_DIES_WITH(read_csv, (void *)"/nonexistent/ratings.csv", "cannot open");
  CHECK_DIES_WITH(read_csv, (void *)test_tmpdir(), "not a file (a directory?)");
}

static void map_file(void *path) {
  MlData d;
  ml_data_map(path, &d);
}

// One change to the ncf.bin of split_follows_the_rules (2 users, 6 items, 5
// training items, 50 test negatives; 920 bytes) and the error it must give.
typedef struct Corruption {
  const char *want;  // the message after "error: PATH: "
  int64_t section;   // offsetof(MlFileHeader, off_...) of the section changed; HEADER: the header
  int64_t at;        // byte offset in the section
  int width;         // bytes of the value written (1, 4, 8); 0: the length changes by value
  int64_t value;
} Corruption;
#define HEADER (-1)
#define FIELD(f) HEADER, offsetof(MlFileHeader, f)
#define SECTION(off, index, type) offsetof(MlFileHeader, off), (index) * (int64_t)sizeof(type)

static const Corruption CORRUPTIONS[] = {
    {"truncated: 916 bytes, header field file_bytes says 920", HEADER, 0, 0, -4},
    {"928 bytes, more than the 920 header field file_bytes says", HEADER, 0, 0, 8},
    {"100 bytes, shorter than the 136-byte header: not a complete ncf.bin", HEADER, 0, 0, -820},
    {"not an NCF data file (it does not start with NCFMLBIN)", FIELD(magic), 1, 'X'},
    {"format version 2; this build reads version 1 (convert ratings.csv again)", FIELD(version), 4,
     2},
    {"header field header_bytes is 128; a version 1 header has 136 bytes", FIELD(header_bytes), 4,
     128},
    {"header field n_users is 0, outside [1, 67108864]", FIELD(n_users), 8, 0},
    {"header field off_user_ids is 832; the counts (1 user, 6 items, 5 training items, 50 test "
     "negatives per user) put that section at byte 640", FIELD(n_users), 8, 1},
    // Half the items: the ids say otherwise.
    {"training item 3 of user 0 is outside the 3 items the header declares", FIELD(n_items), 8, 3},
    {"the counts (2 users, 12 items, 5 training items, 50 test negatives per user) need 944 bytes; "
     "the file has 920", FIELD(n_items), 8, 12},
    {"user 1's training items end at 5, outside [2, 4] (n_train)", FIELD(n_train), 8, 4},
    {"header field n_train is 0, outside [1, 4294967295]", FIELD(n_train), 8, 0},
    {"header field off_user_ids is 832; the counts (2 users, 6 items, 5 training items, 25 test "
     "negatives per user) put that section at byte 640", FIELD(n_neg), 8, 25},
    {"user 0's test negatives are not those header field neg_seed 8 draws", FIELD(neg_seed), 8, 8},
    {"user 0 has 3 ratings (training and test), fewer than header field min_ratings 4",
     FIELD(min_ratings), 8, 4},
    {"header field min_ratings is 1, outside [2, 4294967296]", FIELD(min_ratings), 8, 1},
    {"header field off_item_ids is 960; the counts (2 users, 6 items, 5 training items, 50 test "
     "negatives per user) put that section at byte 896", FIELD(off_item_ids), 8, 960},
    {"truncated: 920 bytes, header field file_bytes says 924", FIELD(file_bytes), 8, 924},
    {"header field reserved is not zero (a newer format, or a damaged file)", FIELD(reserved), 8,
     1},
    {"user 0's training items start at 1, not 0", SECTION(off_train_offsets, 0, int64_t), 8, 1},
    {"user 0's training items end at 6, outside [0, 5] (n_train)",
     SECTION(off_train_offsets, 1, int64_t), 8, 6},
    {"user 0's training items are not strictly ascending (2 after 2)",
     SECTION(off_train_items, 1, int32_t), 4, 2},
    {"test item 1000 of user 0 is outside the 6 items the header declares",
     SECTION(off_test_items, 0, int32_t), 4, 1000},
    {"test item 2 of user 0 is also one of its training items", SECTION(off_test_items, 0, int32_t),
     4, 2},
    {"user 1's test negatives are not ascending (1 after 2)", SECTION(off_test_negs, 50, int32_t),
     4, 2},
    {"test negative 5 of user 1 is an item the user rated", SECTION(off_test_negs, 99, int32_t), 4,
     5},
    {"test negative -3 of user 1 is outside the 6 items the header declares",
     SECTION(off_test_negs, 60, int32_t), 4, -3},
    {"original userId of user 1 is 5: want ascending ids in [0, 67108863]",
     SECTION(off_user_ids, 1, int32_t), 4, 5},
    {"original movieId of item 0 is -1: want ascending ids in [0, 67108863]",
     SECTION(off_item_ids, 0, int32_t), 4, -1},
};

// Copies ncf.bin (written by split_follows_the_rules) to name with change c.
static const char *corrupt_copy(const char *name, const Corruption *c) {
  static uint8_t buf[1 << 16];
  static char dst[1024];
  char src[1024];
  snprintf(src, sizeof src, "%s/%s", test_tmpdir(), ML_FILE_NAME);
  FILE *f = fopen(src, "rb");
  if (!f) return "/missing";
  memset(buf, 0, sizeof buf);
  long n = (long)fread(buf, 1, sizeof buf, f);
  fclose(f);
  uint64_t section = 0;
  if (c->section != HEADER) memcpy(&section, buf + c->section, sizeof section);
  if (c->width == 0) n += (long)c->value;
  else memcpy(buf + section + c->at, &c->value, (size_t)c->width);  // little-endian
  snprintf(dst, sizeof dst, "%s/%s", test_tmpdir(), name);
  f = fopen(dst, "wb");
  fwrite(buf, 1, (size_t)n, f);
  fclose(f);
  return dst;
}

// Every inconsistency of the header or the contents is one line naming the
// file and the problem, exit status 2.
static void corrupt_files_are_input_errors(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), ML_FILE_NAME);
  MlData intact;
  ml_data_map(path, &intact);  // the unchanged file passes
  // What the cases assume of it: its size, user 1's first negatives 1 (of 1 and 2).
  REQUIRE(intact.map_bytes == 920 && intact.test_negs[50] == 1 && intact.test_negs[51] == 1);
  ml_data_free(&intact);
  for (size_t i = 0; i < sizeof CORRUPTIONS / sizeof CORRUPTIONS[0]; i++) {
    const Corruption *c = &CORRUPTIONS[i];
    char name[32], want[1200], msg[1024];
    snprintf(name, sizeof name, "corrupt%zu.bin", i);
    const char *copy = corrupt_copy(name, c);
    snprintf(want, sizeof want, "error: %s: %s", copy, c->want);  // one line
    int status = test_run_child(map_file, (void *)copy, msg, sizeof msg);
    CHECK_MSG(status == 2 && strcmp(msg, want) == 0, "case %zu: exit %d, \"%s\", want \"%s\"", i,
              status, msg, want);
  }
  // A directory in the file's place.
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/dir.bin", test_tmpdir());
  mkdir(dir, 0755);
  CHECK_DIES_WITH(map_file, dir, "dir.bin: not a file (a directory?)");
}

int main(void) {
  TEST_RUN(unrated_item_matches_brute_force);
  TEST_RUN(split_follows_the_rules);
  TEST_RUN(test_negatives_drawn_again_are_the_converters);
  TEST_RUN(write_is_whole_or_nothing);
  TEST_RUN(blank_lines_at_the_end_and_a_bom_are_accepted);
  TEST_RUN(bad_csv_lines_name_file_and_line);
  TEST_RUN(corrupt_files_are_input_errors);
  return test_finish();
}
