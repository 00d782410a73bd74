// Config: defaults, files, flags over files, typed getters, and every error
// case (unknown key, missing value, wrong type, bad line, missing file).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "tests/harness/test.h"

static const ConfigKey kKeys[] = {
    {"batch_size", CFG_INT, "32", "samples per step", "[1, 4096]"},
    {"lr", CFG_FLOAT, "0.1", "learning rate", "(0, 10)"},
    {"name", CFG_STRING, "resnet", "benchmark", "resnet|ssd|ncf"},
    {"synthetic", CFG_BOOL, "false", "random data", NULL},
};
static const ConfigKey kMoreKeys[] = {{"epochs", CFG_INT, "10", NULL, NULL},
                                      {"title", CFG_STRING, "", NULL, NULL}};

static void make_config(Config *c) {
  config_init(c);
  config_add_keys(c, kKeys, 4);
  config_add_keys(c, kMoreKeys, 2);
}

static const char *write_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static void defaults(void) {
  Config c;
  make_config(&c);
  CHECK_EQ_INT(config_int(&c, "batch_size"), 32);
  CHECK_NEAR(config_float(&c, "lr"), 0.1, 1e-15);
  CHECK_STR(config_string(&c, "name"), "resnet");
  CHECK(!config_bool(&c, "synthetic"));
  CHECK_EQ_INT(config_int(&c, "epochs"), 10);
  config_free(&c);
}

static void file_then_flags(void) {
  const char *path = write_file("a.conf",
                                "# a comment\n"
                                "batch_size = 256   # trailing comment\n"
                                "\n"
                                "  lr=2.5e-3\n"
                                "name = ssd\n");
  char arg_config[600];
  snprintf(arg_config, sizeof arg_config, "--config=%s", path);
  // The flag stands before --config but still wins: files load first.
  char *argv[] = {"prog", "--batch_size=64", arg_config, "--synthetic"};
  Config c;
  make_config(&c);
  char err[256] = "";
  bool help = true;
  CHECK_EQ_INT(config_parse_args(&c, 4, argv, &help, err, sizeof err), 0);
  CHECK_STR(err, "");
  CHECK(!help);
  CHECK_EQ_INT(config_int(&c, "batch_size"), 64);
  CHECK_NEAR(config_float(&c, "lr"), 2.5e-3, 1e-15);
  CHECK_STR(config_string(&c, "name"), "ssd");
  CHECK(config_bool(&c, "synthetic"));
  // The effective config names where each value came from.
  char buf[4096] = "";
  FILE *mem = fmemopen(buf, sizeof buf, "w");
  config_print(&c, mem);
  fclose(mem);
  CHECK_CONTAINS(buf, "config: batch_size = 64  # flag");
  CHECK_CONTAINS(buf, "config: name = ssd  # ");
  CHECK_CONTAINS(buf, "a.conf");
  CHECK_CONTAINS(buf, "config: epochs = 10  # default");
  config_free(&c);
}

// Each bad input must fail with a message naming the key (or line, or file).
static void error_cases(void) {
  // write_file returns a static buffer: copy each path before the next call.
  char cfg_bad_line[600], cfg_bad_type[600], cfg_unknown[600], cfg_range[600], cfg_dir[600];
  snprintf(cfg_bad_line, sizeof cfg_bad_line, "--config=%s",
           write_file("bad_line.conf", "batch_size = 1\nthis line has no equals\n"));
  snprintf(cfg_bad_type, sizeof cfg_bad_type, "--config=%s",
           write_file("bad_type.conf", "\n\nlr = fast\n"));
  snprintf(cfg_unknown, sizeof cfg_unknown, "--config=%s",
           write_file("unknown.conf", "momentum = 0.9\n"));
  snprintf(cfg_range, sizeof cfg_range, "--config=%s", write_file("range.conf", "batch_size = 0\n"));
  snprintf(cfg_dir, sizeof cfg_dir, "--config=%s", test_tmpdir());
  struct {
    const char *arg;
    const char *want[3];
  } cases[] = {
      {"--momentum=0.9", {"--momentum: unknown key"}},
      {"--batch_size=", {"--batch_size: no value given"}},
      {"--batch_size", {"--batch_size: no value given"}},
      {"--batch_size=12x", {"--batch_size: wants an integer", "'12x'"}},
      {"--batch_size=1.5", {"--batch_size: wants an integer"}},
      {"--lr=abc", {"--lr: wants a number", "'abc'"}},
      {"--lr=inf", {"--lr: wants a number"}},
      {"--synthetic=maybe", {"--synthetic: wants a bool"}},
      {"positional", {"argument 'positional': expected --key=value"}},
      {"--", {"expected --key=value"}},
      // Allowed values: both ends of an interval, open and closed, and choices.
      {"--batch_size=0", {"--batch_size: 0 is outside [1, 4096]"}},
      {"--batch_size=4097", {"--batch_size: 4097 is outside [1, 4096]"}},
      {"--batch_size=-1", {"--batch_size: -1 is outside [1, 4096]"}},
      {"--lr=0", {"--lr: 0 is outside (0, 10)"}},
      {"--lr=10", {"--lr: 10 is outside (0, 10)"}},
      {"--lr=nan", {"--lr: wants a number"}},
      {"--name=bert", {"--name: 'bert' is not one of resnet|ssd|ncf"}},
      {"--name=res", {"--name: 'res' is not one of resnet|ssd|ncf"}},
      {cfg_range, {"range.conf:1: batch_size: 0 is outside [1, 4096]"}},
      {cfg_bad_line, {"bad_line.conf:2", "expected 'key = value'"}},
      {cfg_bad_type, {"bad_type.conf:3: lr: wants a number"}},
      {cfg_unknown, {"unknown.conf:1: momentum: unknown key"}},
      {cfg_dir, {"is not a config file (a directory?)"}},
      {"--config=/nonexistent/x.conf", {"/nonexistent/x.conf", "cannot open config file"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Config c;
    make_config(&c);
    char *argv[] = {"prog", (char *)cases[i].arg};
    char err[1024] = "";
    bool help;
    CHECK_MSG(config_parse_args(&c, 2, argv, &help, err, sizeof err) == -1,
              "case %zu (%s) was accepted", i, cases[i].arg);
    for (int w = 0; w < 3 && cases[i].want[w]; w++)
      CHECK_MSG(strstr(err, cases[i].want[w]), "case %zu: '%s' lacks '%s'", i, err, cases[i].want[w]);
    CHECK_MSG(!strchr(err, '\n'), "case %zu: message is not one line", i);
    // A failed set leaves the old value in place.
    CHECK_EQ_INT(config_int(&c, "batch_size"), cases[i].arg == cfg_bad_line ? 1 : 32);
    config_free(&c);
  }
}

static void die_on_bad_flag(void *ctx) {
  (void)ctx;
  Config c;
  make_config(&c);
  char *argv[] = {"prog", "--nope=1"};
  config_from_args(&c, 2, argv, "prog");
}

static void from_args_dies_with_one_line(void) {
  CHECK_DIES_WITH(die_on_bad_flag, NULL, "error: --nope: unknown key (--help lists the keys)");
}

// A line of any length is one line (a 10,000-byte value once split into two
// lines at 4096 bytes), and a UTF-8 byte-order mark that an editor put at the
// start of the file is not part of the first key.
static void long_lines_and_bom(void) {
  static char text[10100];
  size_t n = (size_t)snprintf(text, sizeof text, "\xEF\xBB\xBFtitle = ");
  memset(text + n, 'x', 10000);
  strcpy(text + n + 10000, "\nbatch_size = 7\n");
  Config c;
  make_config(&c);
  char err[512] = "";
  CHECK_EQ_INT(config_load_file(&c, write_file("long.conf", text), err, sizeof err), 0);
  CHECK_STR(err, "");
  CHECK_EQ_INT(config_int(&c, "batch_size"), 7);
  CHECK_EQ_INT(strlen(config_string(&c, "title")), 10000);
  config_free(&c);
}

// What a checkpoint keeps of a run: numbers in one spelling (a 9,000-digit
// 0.1000... once overflowed the checkpoint's buffer), every key compared
// whatever the length of its value, an over-long string refused by name.
static void snapshot_round_trip(void) {
  Config c;
  make_config(&c);
  char err[512] = "", snap[256];
  static char long_lr[9100];
  strcpy(long_lr, "0.1");
  memset(long_lr + 3, '0', 9000);
  CHECK_EQ_INT(config_set(&c, "lr", long_lr, "flag", err, sizeof err), 0);
  const char *const ignore[] = {"title", NULL};
  CHECK_EQ_INT(config_snapshot(&c, ignore, snap, sizeof snap, err, sizeof err), 0);
  CHECK_STR(snap, "batch_size = 32\nepochs = 10\nlr = 0.1\nname = resnet\nsynthetic = false\n");
  CHECK_EQ_INT(config_check_snapshot(&c, snap, ignore, "x.ckpt", err, sizeof err), 0);
  config_set(&c, "lr", "0.1", "flag", err, sizeof err);
  CHECK_EQ_INT(config_check_snapshot(&c, snap, ignore, "x.ckpt", err, sizeof err), 0);
  config_set(&c, "batch_size", "64", "flag", err, sizeof err);
  CHECK_EQ_INT(config_check_snapshot(&c, snap, ignore, "x.ckpt", err, sizeof err), -1);
  CHECK_STR(err, "--batch_size: 64 here, 32 in the run of x.ckpt");
  // A line longer than any buffer is still compared whole.
  static char title[6000], big[7000];
  memset(title, 'a', 5000);
  CHECK_EQ_INT(config_set(&c, "title", title, "flag", err, sizeof err), 0);
  snprintf(big, sizeof big, "title = %sb\n", title);
  CHECK_EQ_INT(config_check_snapshot(&c, big, NULL, "x.ckpt", err, sizeof err), -1);
  CHECK_EQ_INT(config_snapshot(&c, NULL, snap, sizeof snap, err, sizeof err), -1);
  CHECK_STR(err, "--title: a value of 5000 bytes; the run's settings must fit in 256");
  config_free(&c);
}

static void bool_spellings(void) {
  const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
  Config c;
  make_config(&c);
  char err[256];
  for (int i = 0; i < 4; i++) {
    CHECK(config_set(&c, "synthetic", yes[i], "test", err, sizeof err) == 0 && config_bool(&c, "synthetic"));
    CHECK(config_set(&c, "synthetic", no[i], "test", err, sizeof err) == 0 && !config_bool(&c, "synthetic"));
  }
  config_free(&c);
}

// Number lists: separators, spaces, the empty list; a bad item, an empty
// item, a list longer than the room, NaN and overflow give -1.
static void number_lists(void) {
  double v[4];
  CHECK_EQ_INT(config_parse_numbers("8, 16,32 ,2.5e-3", ',', v, 4), 4);
  CHECK(v[0] == 8 && v[1] == 16 && v[2] == 32 && v[3] == 2.5e-3);
  CHECK_EQ_INT(config_parse_numbers("2;3", ';', v, 4), 2);
  CHECK(v[0] == 2 && v[1] == 3);
  CHECK_EQ_INT(config_parse_numbers("", ',', v, 4), 0);
  CHECK_EQ_INT(config_parse_numbers("  ", ',', v, 4), 0);
  const char *bad[] = {"1,,2", "1,", ",1", "1;2", "a", "1,2,3,4,5", "nan", "1e999", "1 2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_MSG(config_parse_numbers(bad[i], ',', v, 4) == -1, "'%s' accepted", bad[i]);
}

int main(void) {
  TEST_RUN(number_lists);
  TEST_RUN(defaults);
  TEST_RUN(file_then_flags);
  TEST_RUN(error_cases);
  TEST_RUN(from_args_dies_with_one_line);
  TEST_RUN(bool_spellings);
  TEST_RUN(long_lines_and_bom);
  TEST_RUN(snapshot_round_trip);
  return test_finish();
}
