// MLLOG: every line written parses as JSON with the keys in MLPerf's order,
// the right types, metadata file/lineno plus the event fields, null values for
// intervals, escaped strings; only rank 0 writes.
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mllog.h"
#include "core/progress.h"
#include "tests/harness/test.h"

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

// Parses line k (0-based) of text after its ":::MLLOG " prefix.
static cJSON *parse_line(const char *text, int k) {
  const char *p = text;
  for (int i = 0; i < k && p; i++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (!p || strncmp(p, ":::MLLOG {", 10) != 0) return NULL;
  const char *end = strchr(p, '\n');
  char line[8192];
  size_t len = (size_t)(end ? end - p : (ptrdiff_t)strlen(p));
  if (len >= sizeof line) return NULL;
  memcpy(line, p, len);
  line[len] = 0;
  return cJSON_Parse(line + 9);
}

static void check_key_order(cJSON *obj) {
  static const char *order[] = {"namespace", "time_ms", "event_type", "key", "value", "metadata"};
  int i = 0;
  for (cJSON *item = obj->child; item; item = item->next, i++) {
    REQUIRE(i < 6);
    CHECK_STR(item->string, order[i]);
  }
  CHECK_EQ_INT(i, 6);
}

static void events_parse_with_fields(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/logs/sub/run.log", test_tmpdir());  // dirs get created
  MLLog log;
  mllog_open(&log, path, 0, false);
  int64_t before = time_unix_ms();
  MLLOG_POINT(&log, "submission_benchmark", mlv_str("resnet"));
  int line_point = __LINE__ - 1;
  MLLOG_POINT(&log, "opt_base_learning_rate", mlv_float(0.1));
  MLLOG_POINT(&log, "global_batch_size", mlv_int(3264));
  MLLOG_POINT(&log, "cache_clear", mlv_bool(true));
  MLLOG_START(&log, "block_start", {"first_epoch_num", mlv_int(1)}, {"epoch_count", mlv_int(4)});
  MLLOG_END(&log, "run_stop", {"status", mlv_str("success")});
  MLLOG_POINT(&log, "eval_accuracy", mlv_float(2.0), {"epoch_num", mlv_int(3)});
  MLLOG_POINT(&log, "weird", mlv_str("a\"b\\c\nd\te\x01"));
  MLLOG_POINT(&log, "not_finite", mlv_float(NAN));
  mllog_close(&log);
  int64_t after = time_unix_ms();

  char *text = read_all(path);
  REQUIRE(text);
  cJSON *e[9];
  for (int k = 0; k < 9; k++) {
    e[k] = parse_line(text, k);
    CHECK_MSG(e[k] != NULL, "line %d does not parse", k);
    if (!e[k]) test_abort_case();
    check_key_order(e[k]);
    CHECK_STR(cJSON_GetObjectItem(e[k], "namespace")->valuestring, "");
    cJSON *t = cJSON_GetObjectItem(e[k], "time_ms");
    // An integer in ms, within the window the events were written in.
    CHECK(cJSON_IsNumber(t) && t->valuedouble == floor(t->valuedouble));
    CHECK(t->valuedouble >= (double)before && t->valuedouble <= (double)after);
    cJSON *meta = cJSON_GetObjectItem(e[k], "metadata");
    CHECK_STR(cJSON_GetObjectItem(meta, "file")->valuestring, "tests/core/test_mllog.c");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(meta, "lineno")));
  }
  CHECK_STR(cJSON_GetObjectItem(e[0], "event_type")->valuestring, "POINT_IN_TIME");
  CHECK_STR(cJSON_GetObjectItem(e[0], "key")->valuestring, "submission_benchmark");
  CHECK_STR(cJSON_GetObjectItem(e[0], "value")->valuestring, "resnet");
  CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(e[0], "metadata"), "lineno")->valueint, line_point);
  CHECK_NEAR(cJSON_GetObjectItem(e[1], "value")->valuedouble, 0.1, 0);
  CHECK(strstr(text, "\"value\": 0.1,") != NULL);  // shortest form, not 0.10000000000000001
  CHECK_EQ_INT(cJSON_GetObjectItem(e[2], "value")->valueint, 3264);
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(e[3], "value")));
  CHECK_STR(cJSON_GetObjectItem(e[4], "event_type")->valuestring, "INTERVAL_START");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(e[4], "value")));
  cJSON *m4 = cJSON_GetObjectItem(e[4], "metadata");
  CHECK_EQ_INT(cJSON_GetObjectItem(m4, "first_epoch_num")->valueint, 1);
  CHECK_EQ_INT(cJSON_GetObjectItem(m4, "epoch_count")->valueint, 4);
  CHECK_STR(m4->child->string, "file");  // file and lineno come first
  CHECK_STR(m4->child->next->string, "lineno");
  CHECK_STR(cJSON_GetObjectItem(e[5], "event_type")->valuestring, "INTERVAL_END");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(e[5], "value")));
  CHECK_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(e[5], "metadata"), "status")->valuestring, "success");
  CHECK(strstr(text, "\"value\": 2.0,") != NULL);  // a float stays a float
  CHECK_STR(cJSON_GetObjectItem(e[7], "value")->valuestring, "a\"b\\c\nd\te\x01");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(e[8], "value")));
  for (int k = 0; k < 9; k++) cJSON_Delete(e[k]);
}

static void only_rank_zero_writes(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/rank1.log", test_tmpdir());
  MLLog log;
  mllog_open(&log, path, 1, true);
  MLLOG_POINT(&log, "seed", mlv_int(1));
  mllog_close(&log);
  FILE *f = fopen(path, "r");
  CHECK_MSG(f == NULL, "rank 1 created a log file");
  if (f) fclose(f);
}

static void long_values_are_not_cut(void) {
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/long.log", test_tmpdir());
  MLLog log;
  mllog_open(&log, path, 0, false);
  MLLOG_POINT(&log, "submission_platform", mlv_str(big));
  mllog_close(&log);
  cJSON *e = parse_line(read_all(path), 0);
  REQUIRE(e);
  CHECK_EQ_INT(strlen(cJSON_GetObjectItem(e, "value")->valuestring), sizeof big - 1);
  cJSON_Delete(e);
}

int main(void) {
  TEST_RUN(events_parse_with_fields);
  TEST_RUN(only_rank_zero_writes);
  TEST_RUN(long_values_are_not_cut);
  return test_finish();
}
