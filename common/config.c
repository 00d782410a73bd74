// config.c: declared keys, typed values, files and flags.
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

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

void config_add_keys(Config *c, const ConfigKey *keys, int count) {
  for (int k = 0; k < count; k++) {
    if (c->count == CONFIG_MAX_KEYS) DIE("config: more than %d keys", CONFIG_MAX_KEYS);
    if (find_key(c, keys[k].name) >= 0) DIE("config: key '%s' declared twice", keys[k].name);
    if (!value_fits(keys[k].type, keys[k].default_value))
      DIE("config: default of '%s' is not %s", keys[k].name, type_name(keys[k].type));
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

int config_set(Config *c, const char *key, const char *value, const char *origin,
               char *err, size_t err_bytes) {
  int i = find_key(c, key);
  if (i < 0) return fail(err, err_bytes, "%s: unknown key '%s' (--help lists the keys)", origin, key);
  if (!value || !*value) return fail(err, err_bytes, "%s: key '%s' has no value", origin, key);
  const ConfigKey *k = c->keys[i];
  if (!value_fits(k->type, value))
    return fail(err, err_bytes, "%s: key '%s' wants %s, got '%s'", origin, key, type_name(k->type), value);
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
  if (c->n_files == (int)(sizeof c->files / sizeof c->files[0])) {
    fclose(f);
    return fail(err, err_bytes, "%s: too many config files", path);
  }
  char *origin = c->files[c->n_files++] = strdup(path);
  char line[4096], where[4200];
  int rc = 0;
  for (int lineno = 1; rc == 0 && fgets(line, sizeof line, f); lineno++) {
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *text = trim(line);
    if (!*text) continue;
    char *eq = strchr(text, '=');
    if (!eq) {
      rc = fail(err, err_bytes, "%s: expected 'key = value', got '%s'", where, text);
      break;
    }
    *eq = 0;
    char *key = trim(text), *value = trim(eq + 1);
    // Report the file and line, but remember only the file as the origin.
    rc = config_set(c, key, value, where, err, err_bytes);
    if (rc == 0) c->origins[find_key(c, key)] = origin;
  }
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

void config_from_args(Config *c, int argc, char **argv, const char *program) {
  char err[512];
  bool help = false;
  if (config_parse_args(c, argc, argv, &help, err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    exit(2);
  }
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

static int by_name(const void *a, const void *b) {
  return strcmp((*(const ConfigKey *const *)a)->name, (*(const ConfigKey *const *)b)->name);
}

static void sorted_keys(const Config *c, const ConfigKey **out) {
  memcpy(out, c->keys, (size_t)c->count * sizeof *out);
  qsort(out, (size_t)c->count, sizeof *out, by_name);
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
