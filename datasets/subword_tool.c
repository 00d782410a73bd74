// subword_tool: the Transformer's subword vocabulary (translation/subword.h)
// from the command line.
//   subword_tool build --target_size=N --out=VOCAB FILE...
//       a vocabulary of about N entries from the lines of the files
//       (surrounding whitespace stripped, as the reference strips them)
//   subword_tool encode VOCAB < text    one line of space-separated ids per line
//   subword_tool decode VOCAB < ids     the text of each line of ids
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "translation/subword.h"

static const char USAGE[] =
    "usage: subword_tool build --target_size=N --out=VOCAB FILE... | encode VOCAB | decode VOCAB";

static const ConfigKey BUILD_KEYS[] = {
    {"target_size", CFG_INT, "0", "entries the vocabulary should have, about (required)", "[0, 10000000]"},
    {"out", CFG_STRING, "", "the vocabulary file to write", NULL},
};

static void strip(const char **s, size_t *n) {
  while (*n && strchr(" \t\r\n\v\f", (*s)[*n - 1])) (*n)--;
  while (*n && strchr(" \t\r\n\v\f", (*s)[0])) (*s)++, (*n)--;
}

// Dies unless line `line` of `name` is valid UTF-8.
static void check_utf8(const char *name, int64_t line, const char *s, size_t n) {
  int64_t bad = subword_invalid_utf8(s, n);
  if (bad < 0) return;
  char where[4200];
  snprintf(where, sizeof where, "%s:%lld", name, (long long)line);
  die_input(where, "invalid UTF-8 at byte %lld", (long long)bad + 1);
}

static void count_file(SubwordCounts *c, const char *path) {
  size_t n;
  char *bytes = (char *)file_read(path, &n);
  int64_t line = 0;
  for (size_t at = 0; at < n;) {
    const char *eol = memchr(bytes + at, '\n', n - at), *s = bytes + at;
    size_t len = eol ? (size_t)(eol - s) : n - at;
    at += len + 1;
    check_utf8(path, ++line, s, len);
    strip(&s, &len);
    subword_counts_add(c, s, len);
  }
  free(bytes);
}

static int build(int argc, char **argv) {
  // Flags go to the config parser, the rest are the input files.
  char **flags = xcalloc((size_t)argc + 1, sizeof *flags);
  int n_flags = 1;
  for (int a = 1; a < argc; a++)
    if (strncmp(argv[a], "--", 2) == 0) flags[n_flags++] = argv[a];
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, BUILD_KEYS, 2);
  flags[0] = "subword_tool build";
  config_from_args(&cfg, n_flags, flags, "subword_tool build");
  if (config_int(&cfg, "target_size") == 0) die_input("--target_size", "required");
  const char *out = config_string(&cfg, "out");
  if (!*out) die_input("--out", "required (the vocabulary file to write)");
  if (argc - n_flags < 1) die_input("subword_tool build", "no input files");
  SubwordCounts *c = subword_counts_new();
  for (int a = 1; a < argc; a++)
    if (strncmp(argv[a], "--", 2) != 0) count_file(c, argv[a]);
  Subword *sw = subword_build(c, (int32_t)config_int(&cfg, "target_size"));
  subword_save(sw, out);
  fprintf(stderr, "subword_tool: %s: %d entries\n", out, subword_size(sw));
  subword_free(sw);
  subword_counts_free(c);
  config_free(&cfg);
  free(flags);
  return 0;
}

static int encode(const Subword *sw) {
  char *line = NULL;
  size_t line_capacity = 0;
  int64_t max_ids = 1024, n_line = 0;
  int32_t *ids = xmalloc((size_t)max_ids * sizeof *ids);
  ssize_t len;
  while ((len = getline(&line, &line_capacity, stdin)) >= 0) {
    if (len && line[len - 1] == '\n') len--;
    check_utf8("<stdin>", ++n_line, line, (size_t)len);
    int64_t n = subword_encode(sw, line, (size_t)len, ids, max_ids);
    if (n > max_ids) {
      free(ids);
      max_ids = 2 * n;
      ids = xmalloc((size_t)max_ids * sizeof *ids);
      subword_encode(sw, line, (size_t)len, ids, max_ids);
    }
    for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
  }
  free(ids);
  free(line);
  return 0;
}

// The ids of one line; a word that is not an id of the vocabulary dies.
static int64_t parse_ids(const Subword *sw, int64_t n_line, char *line, int32_t **ids,
                         int64_t *max_ids) {
  int64_t n = 0;
  for (char *word = strtok(line, " \t\r\n"); word; word = strtok(NULL, " \t\r\n")) {
    char *end;
    long long id = strtoll(word, &end, 10);
    if (*end || id < 0 || id >= subword_size(sw)) {
      char where[64];
      snprintf(where, sizeof where, "<stdin>:%lld", (long long)n_line);
      die_input(where, "'%s' is not an id of the vocabulary (0..%d)", word, subword_size(sw) - 1);
    }
    if (n == *max_ids) {
      *max_ids *= 2;
      *ids = realloc(*ids, (size_t)*max_ids * sizeof **ids);
      CHECK_TRUE(*ids, "out of memory");
    }
    (*ids)[n++] = (int32_t)id;
  }
  return n;
}

static int decode(const Subword *sw) {
  char *line = NULL, *text = xmalloc(1024);
  size_t line_capacity = 0, text_bytes = 1024;
  int64_t max_ids = 1024, n_line = 0;
  int32_t *ids = xmalloc((size_t)max_ids * sizeof *ids);
  while (getline(&line, &line_capacity, stdin) >= 0) {
    int64_t n = parse_ids(sw, ++n_line, line, &ids, &max_ids);
    size_t need = subword_decode(sw, ids, n, text, text_bytes);
    if (need >= text_bytes) {
      free(text);
      text_bytes = 2 * need + 1;
      text = xmalloc(text_bytes);
      subword_decode(sw, ids, n, text, text_bytes);
    }
    fwrite(text, 1, need, stdout);
    putchar('\n');
  }
  free(ids);
  free(text);
  free(line);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) die_input("subword_tool", "%s", USAGE);
  if (strcmp(argv[1], "build") == 0) return build(argc - 1, argv + 1);
  if (strcmp(argv[1], "encode") != 0 && strcmp(argv[1], "decode") != 0)
    die_input("subword_tool", "unknown command '%s'; %s", argv[1], USAGE);
  if (argc != 3) die_input("subword_tool", "%s takes one argument, VOCAB; %s", argv[1], USAGE);
  Subword *sw = subword_load(argv[2]);
  int rc = strcmp(argv[1], "encode") == 0 ? encode(sw) : decode(sw);
  subword_free(sw);
  return rc;
}
