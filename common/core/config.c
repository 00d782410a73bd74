// config.c: declared keys, typed values, files and flags.
#include "core/config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"

void config_init(Config *c) { memset(c, 0, sizeof *c); }

static int find_key(const Config *c, const char *name) {
  for (int i = 0; i < c->count; i++)
    if (strcmp(c->keys[i]->name, name) == 0) return i;
  return -1;
}

static int fail(char *err, size_t err_bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_bytes, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_bytes, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *type_name(ConfigType t) {
  static const char *names[] = {"an integer", "a number", "a string", "a bool (true/false)"};
  return names[t];
}

static bool parse_int(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

static bool parse_float(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return false;
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(s, yes[i]) == 0) return *out = true, true;
    if (strcmp(s, no[i]) == 0) return *out = false, true;
  }
  return false;
}

static bool value_fits(ConfigType type, const char *value) {
  int64_t i;
  double f;
  bool b;
  switch (type) {
    case CFG_INT: return parse_int(value, &i);
    case CFG_FLOAT: return parse_float(value, &f);
    case CFG_BOOL: return parse_bool(value, &b);
    case CFG_STRING: return true;
  }
  return false;
}

// An interval "[lo, hi]", "(lo, hi)" or mixed; inf allowed. False when the
// text is not one.
typedef struct Interval {
  double lo, hi;
  bool lo_open, hi_open;
} Interval;

static bool parse_interval(const char *text, Interval *iv) {
  size_t n = strlen(text);
  if (n < 5 || (text[0] != '[' && text[0] != '(') || (text[n - 1] != ']' && text[n - 1] != ')'))
    return false;
  char *end;
  iv->lo_open = text[0] == '(';
  iv->hi_open = text[n - 1] == ')';
  iv->lo = strtod(text + 1, &end);
  if (end == text + 1 || *end != ',') return false;
  const char *second = end + 1;
  iv->hi = strtod(second, &end);
  return end != second && end == text + n - 1 && !isnan(iv->lo) && !isnan(iv->hi);
}

static bool in_interval(const Interval *iv, double v) {
  return (iv->lo_open ? v > iv->lo : v >= iv->lo) && (iv->hi_open ? v < iv->hi : v <= iv->hi);
}

// Whether value is one of the '|'-separated choices.
static bool is_choice(const char *choices, const char *value) {
  size_t n = strlen(value);
  for (const char *c = choices; *c;) {
    const char *bar = strchr(c, '|');
    size_t len = bar ? (size_t)(bar - c) : strlen(c);
    if (len == n && strncmp(c, value, n) == 0) return true;
    if (!bar) break;
    c = bar + 1;
  }
  return false;
}

// Whether a value of the right type is among the key's allowed ones.
static bool value_allowed(const ConfigKey *k, const char *value) {
  if (!k->allowed) return true;
  if (k->type == CFG_STRING) return is_choice(k->allowed, value);
  Interval iv;
  parse_interval(k->allowed, &iv);  // checked when the key was declared
  int64_t i;
  double f;
  if (k->type == CFG_INT) return parse_int(value, &i) && in_interval(&iv, (double)i);
  return parse_float(value, &f) && in_interval(&iv, f);
}

static void check_declaration(const ConfigKey *k) {
  Interval iv;
  if (k->allowed && (k->type == CFG_BOOL ||
                     (k->type != CFG_STRING && !parse_interval(k->allowed, &iv))))
    DIE("config: allowed values of '%s' are not an interval: '%s'", k->name, k->allowed);
  if (!value_fits(k->type, k->default_value))
    DIE("config: default of '%s' is not %s", k->name, type_name(k->type));
  if (!value_allowed(k, k->default_value))
    DIE("config: default of '%s' is outside its allowed values %s", k->name, k->allowed);
}

void config_add_keys(Config *c, const ConfigKey *keys, int count) {
  for (int k = 0; k < count; k++) {
    if (c->count == CONFIG_MAX_KEYS) DIE("config: more than %d keys", CONFIG_MAX_KEYS);
    if (find_key(c, keys[k].name) >= 0) DIE("config: key '%s' declared twice", keys[k].name);
    check_declaration(&keys[k]);
    int i = c->count++;
    c->keys[i] = &keys[k];
    c->values[i] = strdup(keys[k].default_value);
    c->origins[i] = "default";
  }
}

void config_free(Config *c) {
  for (int i = 0; i < c->count; i++) free(c->values[i]);
  for (int i = 0; i < c->n_files; i++) free(c->files[i]);
  memset(c, 0, sizeof *c);
}

// How a message names a key: "--key" for a flag, "FILE:LINE: key" for a
// config file line.
static void key_name(const char *origin, const char *key, char *buf, size_t buf_bytes) {
  if (strcmp(origin, "flag") == 0)
    snprintf(buf, buf_bytes, "--%s", key);
  else
    snprintf(buf, buf_bytes, "%s: %s", origin, key);
}

int config_set(Config *c, const char *key, const char *value, const char *origin,
               char *err, size_t err_bytes) {
  char name[4400];
  key_name(origin, key, name, sizeof name);
  int i = find_key(c, key);
  if (i < 0) return fail(err, err_bytes, "%s: unknown key (--help lists the keys)", name);
  if (!value || !*value) return fail(err, err_bytes, "%s: no value given", name);
  const ConfigKey *k = c->keys[i];
  if (!value_fits(k->type, value))
    return fail(err, err_bytes, "%s: wants %s, got '%s'", name, type_name(k->type), value);
  if (!value_allowed(k, value))
    return fail(err, err_bytes, k->type == CFG_STRING ? "%s: '%s' is not one of %s"
                                                      : "%s: %s is outside %s",
                name, value, k->allowed);
  free(c->values[i]);
  c->values[i] = strdup(value);
  c->origins[i] = origin;
  return 0;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *end = s + strlen(s);
  while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) end--;
  *end = 0;
  return s;
}

int config_load_file(Config *c, const char *path, char *err, size_t err_bytes) {
  FILE *f = fopen(path, "r");
  if (!f) return fail(err, err_bytes, "%s: cannot open config file: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {  // fopen opens a directory too
    fclose(f);
    return fail(err, err_bytes, "%s: is not a config file (a directory?)", path);
  }
  if (c->n_files == (int)(sizeof c->files / sizeof c->files[0])) {
    fclose(f);
    return fail(err, err_bytes, "%s: too many config files", path);
  }
  char *origin = c->files[c->n_files++] = strdup(path);
  char *line = NULL, where[4200];
  size_t cap = 0;
  int rc = 0;
  for (int lineno = 1; rc == 0 && getline(&line, &cap, f) >= 0; lineno++) {
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    char *start = line;
    if (lineno == 1 && strncmp(start, "\xEF\xBB\xBF", 3) == 0) start += 3;  // a UTF-8 byte-order mark
    char *hash = strchr(start, '#');
    if (hash) *hash = 0;
    char *text = trim(start);
    if (!*text) continue;
    char *eq = strchr(text, '=');
    if (!eq) {
      rc = fail(err, err_bytes, "%s: expected 'key = value', got '%.200s'", where, text);
      break;
    }
    *eq = 0;
    char *key = trim(text), *value = trim(eq + 1);
    // Report the file and line, but remember only the file as the origin.
    rc = config_set(c, key, value, where, err, err_bytes);
    if (rc == 0) c->origins[find_key(c, key)] = origin;
  }
  if (rc == 0 && ferror(f)) rc = fail(err, err_bytes, "%s: cannot read: %s", path, strerror(errno));
  free(line);
  fclose(f);
  return rc;
}

int config_parse_args(Config *c, int argc, char **argv, bool *help_asked, char *err,
                      size_t err_bytes) {
  *help_asked = false;
  // Files first, so that flags override them wherever they stand.
  for (int a = 1; a < argc; a++)
    if (strncmp(argv[a], "--config=", 9) == 0)
      if (config_load_file(c, argv[a] + 9, err, err_bytes)) return -1;
  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      *help_asked = true;
      continue;
    }
    if (strncmp(arg, "--config=", 9) == 0) continue;
    if (strncmp(arg, "--", 2) != 0 || !arg[2])
      return fail(err, err_bytes, "argument '%s': expected --key=value", arg);
    char key[256];
    const char *eq = strchr(arg, '=');
    size_t key_len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (key_len >= sizeof key) return fail(err, err_bytes, "argument '%s': key too long", arg);
    memcpy(key, arg + 2, key_len);
    key[key_len] = 0;
    const char *value = eq ? eq + 1 : NULL;
    int i = find_key(c, key);
    if (!eq && i >= 0 && c->keys[i]->type == CFG_BOOL) value = "true";
    if (config_set(c, key, value, "flag", err, err_bytes)) return -1;
  }
  return 0;
}

void config_die(const char *err) {
  char message[1100];
  snprintf(message, sizeof message, "error: %s", err);
  check_exit_with(2, message);
}

void config_from_args(Config *c, int argc, char **argv, const char *program) {
  char err[512];
  bool help = false;
  if (config_parse_args(c, argc, argv, &help, err, sizeof err)) config_die(err);
  if (help) {
    config_print_help(c, stdout, program);
    exit(0);
  }
}

static int must_find(const Config *c, const char *key, ConfigType type) {
  int i = find_key(c, key);
  if (i < 0) DIE("config: key '%s' read but never declared", key);
  if (c->keys[i]->type != type) DIE("config: key '%s' read as the wrong type", key);
  return i;
}

int64_t config_int(const Config *c, const char *key) {
  int64_t v = 0;
  parse_int(c->values[must_find(c, key, CFG_INT)], &v);
  return v;
}

double config_float(const Config *c, const char *key) {
  double v = 0;
  parse_float(c->values[must_find(c, key, CFG_FLOAT)], &v);
  return v;
}

const char *config_string(const Config *c, const char *key) {
  return c->values[must_find(c, key, CFG_STRING)];
}

bool config_bool(const Config *c, const char *key) {
  bool v = false;
  parse_bool(c->values[must_find(c, key, CFG_BOOL)], &v);
  return v;
}

int config_parse_numbers(const char *text, char sep, double *out, int max) {
  int n = 0;
  const char *p = text;
  while (*p == ' ') p++;
  if (*p == '\0') return 0;
  for (;;) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno == ERANGE || !isfinite(v) || n == max) return -1;
    out[n++] = v;
    p = end;
    while (*p == ' ') p++;
    if (*p == '\0') return n;
    if (*p != sep) return -1;
    p++;
  }
}

int config_numbers(const Config *c, const char *key, double *out, int min_count, int max) {
  const char *text = config_string(c, key);
  int n = config_parse_numbers(text, ',', out, max);
  char name[96];
  snprintf(name, sizeof name, "--%s", key);
  if (n < min_count)
    die_input(name, "'%s' is not a list of %d to %d comma-separated numbers", text, min_count, max);
  return n;
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const ConfigKey *const *)a)->name, (*(const ConfigKey *const *)b)->name);
}

static void sorted_keys(const Config *c, const ConfigKey **out) {
  memcpy(out, c->keys, (size_t)c->count * sizeof *out);
  qsort(out, (size_t)c->count, sizeof *out, by_name);
}

static bool is_ignored(const char *const *ignore, const char *key) {
  for (; ignore && *ignore; ignore++)
    if (strcmp(*ignore, key) == 0) return true;
  return false;
}

// A value as the snapshot keeps it: numbers in one spelling ("0.1" and
// "0.100000" alike), bounded in length.
static void canonical(const ConfigKey *k, const char *value, char *buf, size_t buf_bytes) {
  int64_t i;
  double f;
  bool b;
  if (k->type == CFG_INT && parse_int(value, &i))
    snprintf(buf, buf_bytes, "%lld", (long long)i);
  else if (k->type == CFG_FLOAT && parse_float(value, &f))
    for (int digits = 15; digits <= 17; digits++) {  // the shortest that reads back the same
      snprintf(buf, buf_bytes, "%.*g", digits, f);
      if (strtod(buf, NULL) == f) break;
    }
  else if (k->type == CFG_BOOL && parse_bool(value, &b))
    snprintf(buf, buf_bytes, "%s", b ? "true" : "false");
  else
    snprintf(buf, buf_bytes, "%s", value);
}

int config_snapshot(const Config *c, const char *const *ignore, char *buf, size_t buf_bytes,
                    char *err, size_t err_bytes) {
  const ConfigKey *keys[CONFIG_MAX_KEYS];
  sorted_keys(c, keys);
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < c->count; k++) {
    if (is_ignored(ignore, keys[k]->name)) continue;
    const char *value = c->values[find_key(c, keys[k]->name)];
    char number[64];
    if (keys[k]->type != CFG_STRING) {
      canonical(keys[k], value, number, sizeof number);
      value = number;
    }
    int n = snprintf(buf + len, buf_bytes - len, "%s = %s\n", keys[k]->name, value);
    if (n < 0 || (size_t)n >= buf_bytes - len) {
      buf[len] = 0;
      return fail(err, err_bytes, "--%s: a value of %zu bytes; the run's settings must fit in %zu",
                  keys[k]->name, strlen(value), buf_bytes);
    }
    len += (size_t)n;
  }
  return 0;
}

static bool same_value(ConfigType type, const char *a, const char *b) {
  double x, y;
  bool p, q;
  switch (type) {
    case CFG_INT:
    case CFG_FLOAT: return parse_float(a, &x) && parse_float(b, &y) && x == y;
    case CFG_BOOL: return parse_bool(a, &p) && parse_bool(b, &q) && p == q;
    case CFG_STRING: return strcmp(a, b) == 0;
  }
  return false;
}

int config_check_snapshot(const Config *c, const char *snapshot, const char *const *ignore,
                          const char *where, char *err, size_t err_bytes) {
  int rc = 0;
  for (const char *line = snapshot; *line && rc == 0;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char *text = strndup(line, len);
    line += len + (end != NULL);
    char *eq = strstr(text, " = ");
    if (eq) {
      *eq = 0;
      const char *key = text, *value = eq + 3;
      int i = find_key(c, key);
      // A key this build lacks is one another build had.
      if (i >= 0 && !is_ignored(ignore, key) && !same_value(c->keys[i]->type, c->values[i], value))
        rc = fail(err, err_bytes, "--%s: %.200s here, %.200s in the run of %s", key, c->values[i],
                  value, where);
    }
    free(text);
  }
  return rc;
}

void config_print(const Config *c, FILE *out) {
  const ConfigKey *keys[CONFIG_MAX_KEYS];
  sorted_keys(c, keys);
  for (int k = 0; k < c->count; k++) {
    int i = find_key(c, keys[k]->name);
    fprintf(out, "config: %s = %s  # %s\n", keys[k]->name, c->values[i], c->origins[i]);
  }
}

void config_print_help(const Config *c, FILE *out, const char *program) {
  const ConfigKey *keys[CONFIG_MAX_KEYS];
  sorted_keys(c, keys);
  fprintf(out, "usage: %s [--config=FILE]... [--key=value]...\n", program);
  for (int k = 0; k < c->count; k++)
    fprintf(out, "  --%s=%s  (default %s)  %s\n", keys[k]->name,
            keys[k]->type == CFG_INT ? "INT" : keys[k]->type == CFG_FLOAT ? "NUM"
            : keys[k]->type == CFG_BOOL ? "BOOL" : "STR",
            keys[k]->default_value, keys[k]->help ? keys[k]->help : "");
}
