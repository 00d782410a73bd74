// mllog.h: the MLPerf log. Each event is one line
//   :::MLLOG {"namespace": "", "time_ms": 1592947486431, "event_type": "POINT_IN_TIME",
//             "key": "seed", "value": 1, "metadata": {"file": "x.c", "lineno": 12, ...}}
// with the keys in that order, written by rank 0 only, to stdout and a file.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MLV_NULL, MLV_INT, MLV_FLOAT, MLV_STRING, MLV_BOOL, MLV_JSON } MLValueKind;

typedef struct MLValue {
  MLValueKind kind;
  int64_t i;
  double f;
  const char *s;
} MLValue;

MLValue mlv_null(void);
MLValue mlv_int(int64_t v);
MLValue mlv_float(double v);
MLValue mlv_str(const char *v);
MLValue mlv_bool(bool v);
// Raw JSON written as is (a list such as "[40, 50]"); the caller makes it valid.
MLValue mlv_json(const char *json);

typedef struct MLMeta {
  const char *key;
  MLValue value;
} MLMeta;

typedef enum { MLLOG_POINT_IN_TIME, MLLOG_INTERVAL_START, MLLOG_INTERVAL_END } MLLogType;

typedef struct MLLog {
  bool enabled;   // rank 0
  bool to_stdout;
  FILE *file;
  char path[1024];
} MLLog;

// path may be NULL (stdout only). Only rank 0 writes; other ranks' calls do
// nothing. The directory of path is created when missing.
void mllog_open(MLLog *log, const char *path, int rank, bool to_stdout);
void mllog_close(MLLog *log);

void mllog_write(MLLog *log, const char *src_file, int line, MLLogType type, const char *key,
                 MLValue value, const MLMeta *meta, int n_meta);
// The JSON part of one line (after ":::MLLOG "), for mllog_write and the tests.
// Returns the length, or the length needed when it does not fit.
int mllog_format(char *buf, size_t buf_bytes, int64_t time_ms, const char *src_file, int line,
                 MLLogType type, const char *key, MLValue value, const MLMeta *meta, int n_meta);

// MLLOG_POINT(log, "eval_accuracy", mlv_float(acc), {"epoch_num", mlv_int(e)});
// The metadata pairs follow the value; the leading empty entry lets the list
// be empty in standard C, and is skipped.
#define MLLOG_EVENT_(log, type, key, value, ...)                                       \
  mllog_write((log), __FILE__, __LINE__, (type), (key), (value),                      \
              (const MLMeta[]){{0}, __VA_ARGS__} + 1,                                 \
              (int)(sizeof((const MLMeta[]){{0}, __VA_ARGS__}) / sizeof(MLMeta)) - 1)
#define MLLOG_POINT(log, key, value, ...) \
  MLLOG_EVENT_(log, MLLOG_POINT_IN_TIME, key, value, __VA_ARGS__)
#define MLLOG_START(log, key, ...) \
  MLLOG_EVENT_(log, MLLOG_INTERVAL_START, key, mlv_null(), __VA_ARGS__)
#define MLLOG_END(log, key, ...) \
  MLLOG_EVENT_(log, MLLOG_INTERVAL_END, key, mlv_null(), __VA_ARGS__)

#ifdef __cplusplus
}
#endif
