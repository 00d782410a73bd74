// config.h: `key = value` config files under flags `--key=value`. Every key is
// declared with a type and default; an unknown key, a missing value or a value
// of the wrong type or outside the key's allowed values is a one-line error
// naming the key as the user wrote it: "--loader_threads: ..." for a flag,
// "FILE:LINE: loader_threads: ..." for a config file line.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CFG_INT, CFG_FLOAT, CFG_STRING, CFG_BOOL } ConfigType;

typedef struct ConfigKey {
  const char *name;
  ConfigType type;
  const char *default_value;  // text, parsed like any other value
  const char *help;
  // What values are allowed, checked wherever a value is set (NULL: any of
  // the type). Numbers: an interval, "[1, 1024]", "(0, 1]", "[0, inf)".
  // Strings: the choices, "lars|sgd".
  const char *allowed;
} ConfigKey;

#define CONFIG_MAX_KEYS 256

typedef struct Config {
  int count;
  const ConfigKey *keys[CONFIG_MAX_KEYS];
  char *values[CONFIG_MAX_KEYS];        // owned copies
  const char *origins[CONFIG_MAX_KEYS]; // "default", "flag" or the file path (interned)
  char *files[16];                      // config files loaded, owned
  int n_files;
} Config;

void config_init(Config *c);
// Declares a table of keys; may be called several times (common + trainer keys).
void config_add_keys(Config *c, const ConfigKey *keys, int count);
void config_free(Config *c);

// Each returns 0, or -1 with a one-line message in err.
int config_set(Config *c, const char *key, const char *value, const char *origin,
               char *err, size_t err_bytes);
int config_load_file(Config *c, const char *path, char *err, size_t err_bytes);
// Loads every --config=FILE in order, then applies the other flags over them.
// "--flag" alone sets a bool key to true. "--help" sets *help_asked.
int config_parse_args(Config *c, int argc, char **argv, bool *help_asked, char *err,
                      size_t err_bytes);
// A message of the calls above as a user sees it: "error: <err>", exit
// status 2.
NORETURN void config_die(const char *err);
// config_parse_args, dying with the message on error; prints the keys and
// exits 0 on --help.
void config_from_args(Config *c, int argc, char **argv, const char *program);

int64_t config_int(const Config *c, const char *key);
double config_float(const Config *c, const char *key);
const char *config_string(const Config *c, const char *key);
bool config_bool(const Config *c, const char *key);
// A list of numbers in `text`, separated by `sep` ("8,16,32"): their count,
// or -1 when an item is not a finite number or there are more than max.
// Spaces around items are allowed; an empty text is an empty list.
int config_parse_numbers(const char *text, char sep, double *out, int max);
// The numbers of a string key, as above; a malformed list or one outside
// [min_count, max] items is a one-line error naming the key.
int config_numbers(const Config *c, const char *key, double *out, int min_count, int max);

// What shapes a run, for a checkpoint to keep: every key but those named in
// ignore (a NULL-terminated list), one "key = value" line each, sorted,
// numbers in one spelling. Returns 0, or -1 with a message naming the key
// whose value does not fit in buf.
int config_snapshot(const Config *c, const char *const *ignore, char *buf, size_t buf_bytes,
                    char *err, size_t err_bytes);
// Whether c continues the run a snapshot describes: 0 when each key of the
// snapshot that c declares and ignore does not name has an equal value
// (numbers compared as numbers); else -1 with a message naming the first
// that differs: "--batch_size: 128 here, 256 in the run of <where>".
int config_check_snapshot(const Config *c, const char *snapshot, const char *const *ignore,
                          const char *where, char *err, size_t err_bytes);

// The effective config, one "key = value  # origin" line each, sorted by key.
void config_print(const Config *c, FILE *out);
void config_print_help(const Config *c, FILE *out, const char *program);

#ifdef __cplusplus
}
#endif
