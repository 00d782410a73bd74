// mllog.c: the MLPerf log writer.
#include "core/mllog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/file.h"
#include "core/progress.h"

MLValue mlv_null(void) { return (MLValue){.kind = MLV_NULL}; }
MLValue mlv_int(int64_t v) { return (MLValue){.kind = MLV_INT, .i = v}; }
MLValue mlv_float(double v) { return (MLValue){.kind = MLV_FLOAT, .f = v}; }
MLValue mlv_str(const char *v) { return (MLValue){.kind = MLV_STRING, .s = v}; }
MLValue mlv_bool(bool v) { return (MLValue){.kind = MLV_BOOL, .i = v}; }
MLValue mlv_json(const char *json) { return (MLValue){.kind = MLV_JSON, .s = json}; }

void mllog_open(MLLog *log, const char *path, int rank, bool to_stdout) {
  memset(log, 0, sizeof *log);
  log->enabled = rank == 0;
  log->to_stdout = to_stdout;
  if (!log->enabled || !path) return;
  snprintf(log->path, sizeof log->path, "%s", path);
  file_make_parent_dirs(path);
  log->file = fopen(path, "w");
  if (!log->file) die_input(path, "cannot open the log file for writing: %s", strerror(errno));
}

void mllog_close(MLLog *log) {
  if (log->file) fclose(log->file);
  log->file = NULL;
}

// A tiny string builder that never overflows and counts what it would need.
typedef struct {
  char *buf;
  size_t cap, len;
} Out;

static void out_raw(Out *o, const char *s, size_t n) {
  if (o->len < o->cap) {
    size_t room = o->cap - o->len - 1;
    memcpy(o->buf + o->len, s, n < room ? n : room);
    o->buf[o->len + (n < room ? n : room)] = 0;
  }
  o->len += n;
}

static void out_str(Out *o, const char *s) { out_raw(o, s, strlen(s)); }

static void out_json_string(Out *o, const char *s) {
  out_raw(o, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    switch (*p) {
      case '"': out_raw(o, "\\\"", 2); break;
      case '\\': out_raw(o, "\\\\", 2); break;
      case '\n': out_raw(o, "\\n", 2); break;
      case '\r': out_raw(o, "\\r", 2); break;
      case '\t': out_raw(o, "\\t", 2); break;
      default:
        if (*p < 0x20) {
          snprintf(esc, sizeof esc, "\\u%04x", *p);
          out_str(o, esc);
        } else {
          out_raw(o, (const char *)p, 1);
        }
    }
  }
  out_raw(o, "\"", 1);
}

// Shortest decimal that reads back as the same double; JSON has no inf/nan,
// so those become null.
static void out_double(Out *o, double v) {
  if (!isfinite(v)) {
    out_str(o, "null");
    return;
  }
  char num[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(num, sizeof num, "%.*g", digits, v);
    if (strtod(num, NULL) == v) break;
  }
  // Keep it a JSON float: 2 -> 2.0.
  if (!strpbrk(num, ".eE")) strcat(num, ".0");
  out_str(o, num);
}

static void out_value(Out *o, MLValue v) {
  char num[32];
  switch (v.kind) {
    case MLV_NULL: out_str(o, "null"); break;
    case MLV_INT:
      snprintf(num, sizeof num, "%lld", (long long)v.i);
      out_str(o, num);
      break;
    case MLV_FLOAT: out_double(o, v.f); break;
    case MLV_STRING: out_json_string(o, v.s ? v.s : ""); break;
    case MLV_BOOL: out_str(o, v.i ? "true" : "false"); break;
    case MLV_JSON: out_str(o, v.s ? v.s : "null"); break;
  }
}

int mllog_format(char *buf, size_t buf_bytes, int64_t time_ms, const char *src_file, int line,
                 MLLogType type, const char *key, MLValue value, const MLMeta *meta, int n_meta) {
  static const char *type_names[] = {"POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"};
  Out o = {buf, buf_bytes, 0};
  if (buf_bytes) buf[0] = 0;
  char num[32];
  snprintf(num, sizeof num, "%lld", (long long)time_ms);
  out_str(&o, "{\"namespace\": \"\", \"time_ms\": ");
  out_str(&o, num);
  out_str(&o, ", \"event_type\": ");
  out_json_string(&o, type_names[type]);
  out_str(&o, ", \"key\": ");
  out_json_string(&o, key);
  out_str(&o, ", \"value\": ");
  out_value(&o, type == MLLOG_POINT_IN_TIME ? value : mlv_null());
  out_str(&o, ", \"metadata\": {\"file\": ");
  out_json_string(&o, src_file);
  snprintf(num, sizeof num, "%d", line);
  out_str(&o, ", \"lineno\": ");
  out_str(&o, num);
  for (int m = 0; m < n_meta; m++) {
    out_str(&o, ", ");
    out_json_string(&o, meta[m].key);
    out_str(&o, ": ");
    out_value(&o, meta[m].value);
  }
  out_str(&o, "}}");
  return (int)o.len;
}

void mllog_write(MLLog *log, const char *src_file, int line, MLLogType type, const char *key,
                 MLValue value, const MLMeta *meta, int n_meta) {
  if (!log->enabled) return;
  char stack_buf[2048];
  char *buf = stack_buf;
  int64_t now = time_unix_ms();
  int n = mllog_format(buf, sizeof stack_buf, now, src_file, line, type, key, value, meta, n_meta);
  if ((size_t)n >= sizeof stack_buf) {
    buf = xmalloc((size_t)n + 1);
    mllog_format(buf, (size_t)n + 1, now, src_file, line, type, key, value, meta, n_meta);
  }
  if (log->to_stdout) {
    printf(":::MLLOG %s\n", buf);
    fflush(stdout);
  }
  if (log->file) {
    fprintf(log->file, ":::MLLOG %s\n", buf);
    fflush(log->file);
  }
  if (buf != stack_buf) free(buf);
}
