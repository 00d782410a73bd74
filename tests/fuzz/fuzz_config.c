// fuzz_config: config files and flags (config.c). The input is loaded as a
// config file, and its lines are also given as command-line arguments, each
// into a fresh Config of the trainers' common keys, the AMP keys and keys of
// every type and kind of allowed values. After a load that succeeds, every
// key reads back as its type (a failure there is an internal error), every
// value is accepted again when set as a flag, amp_config_get reads its keys
// as a trainer would, and the config continues the run of its own snapshot
// as a checkpoint keeps it (config_snapshot, config_check_snapshot). The
// input's text is also checked as a snapshot kept by a checkpoint.
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "train/amp.h"
#include "train/ckpt.h"

static const ConfigKey kKeys[] = {
    {"batch_size", CFG_INT, "32", "an interval of integers", "[1, 1024]"},
    {"steps", CFG_INT, "-1", "any integer", NULL},
    {"learning_rate", CFG_FLOAT, "0.1", "a half-open interval", "(0, 1]"},
    {"weight_decay", CFG_FLOAT, "0", "an unbounded interval", "[0, inf)"},
    {"momentum", CFG_FLOAT, "0.9", "any number", NULL},
    {"optimizer", CFG_STRING, "sgd", "choices", "lars|sgd|adam"},
    {"name", CFG_STRING, "", "any string", NULL},
    {"eval", CFG_BOOL, "true", "a bool", NULL},
};

enum { kMaxArgs = 64 };

typedef struct Case {
  const char *path;
  const char *text;  // the input, ended by a zero
  char *argv[kMaxArgs + 1];
  int argc;
} Case;

static void declare(Config *c) {
  fuzz_trainer_config(c);
  config_add_keys(c, kKeys, (int)(sizeof kKeys / sizeof kKeys[0]));
}

static void read_back(Config *c) {
  for (int i = 0; i < c->count; i++) {
    const ConfigKey *k = c->keys[i];
    switch (k->type) {
      case CFG_INT: (void)config_int(c, k->name); break;
      case CFG_FLOAT: (void)config_float(c, k->name); break;
      case CFG_STRING: (void)config_string(c, k->name); break;
      case CFG_BOOL: (void)config_bool(c, k->name); break;
    }
    if (strcmp(c->origins[i], "default") == 0) continue;  // a default may be empty
    char *value = strdup(c->values[i]), err[512];
    if (config_set(c, k->name, value, "flag", err, sizeof err) != 0)
      fuzz_fail("the loaded value of %s is refused when set again: %s", k->name, err);
    free(value);
  }
  (void)amp_config_get(c, DEVICE_CUDA);  // only names the device: fp16 is allowed
  FILE *null = fopen("/dev/null", "w");
  config_print(c, null);
  fclose(null);
  char snapshot[CKPT_RUN_CONFIG_BYTES], err[600];
  if (config_snapshot(c, NULL, snapshot, sizeof snapshot, err, sizeof err) == 0 &&
      config_check_snapshot(c, snapshot, NULL, "its own snapshot", err, sizeof err) != 0)
    fuzz_fail("a config does not continue the run of its own snapshot: %s", err);
}

static void load_file(void *ctx) {
  const Case *k = ctx;
  char err[512];
  Config c;
  declare(&c);
  if (config_load_file(&c, k->path, err, sizeof err) == 0) read_back(&c);
  (void)config_check_snapshot(&c, k->text, NULL, "the input", err, sizeof err);
  config_free(&c);
}

static void load_args(void *ctx) {
  Case *k = ctx;
  char err[512];
  bool help;
  Config c;
  declare(&c);
  if (config_parse_args(&c, k->argc, k->argv, &help, err, sizeof err) == 0) read_back(&c);
  config_free(&c);
}

// The lines of text as arguments after a program name; --config= ones are
// left out (they would name files of this machine).
static int split_args(char *text, char **argv) {
  int argc = 0;
  argv[argc++] = "fuzz_config";
  for (char *line = strtok(text, "\n"); line && argc < kMaxArgs; line = strtok(NULL, "\n"))
    if (strncmp(line, "--config=", 9) != 0) argv[argc++] = line;
  argv[argc] = NULL;
  return argc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  Case c = {.path = fuzz_temp_path("fuzz.conf"), .text = text};
  fuzz_write_file(c.path, data, size);
  fuzz_call(load_file, &c, FUZZ_RELEASE_LEFTOVERS);
  c.argc = split_args(text, c.argv);  // cuts text into lines
  fuzz_call(load_args, &c, FUZZ_RELEASE_LEFTOVERS);
  free(text);
  return 0;
}
