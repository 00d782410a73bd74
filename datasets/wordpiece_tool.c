// wordpiece_tool: BERT's WordPiece tokeniser (language/wordpiece.h) on the
// command line: one output line per input line (lines end at "\n"; a "\r"
// before it is whitespace to the tokeniser), the token ids separated by
// spaces; with --offsets each token as ID:START:END, the bytes [START, END)
// of the line it came from. No [CLS] or [SEP] is added.
//   wordpiece_tool --vocab=vocab.txt [--input=FILE] [--offsets]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "language/wordpiece.h"

static const ConfigKey KEYS[] = {
    {"vocab", CFG_STRING, "", "the vocabulary, vocab.txt (required)", NULL},
    {"input", CFG_STRING, "", "the text to tokenise (default: standard input)", NULL},
    {"offsets", CFG_BOOL, "false", "print each token as ID:START:END (its bytes in the line)", NULL},
};

static void print_line(const WpToken *tokens, int64_t n, bool offsets) {
  for (int64_t i = 0; i < n; i++) {
    if (i) putchar(' ');
    if (offsets) printf("%d:%d:%d", tokens[i].id, tokens[i].start, tokens[i].end);
    else printf("%d", tokens[i].id);
  }
  putchar('\n');
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, sizeof KEYS / sizeof KEYS[0]);
  config_from_args(&cfg, argc, argv, "wordpiece_tool");
  const char *vocab_path = config_string(&cfg, "vocab"), *input = config_string(&cfg, "input");
  if (!*vocab_path) die_input("--vocab", "required (the vocabulary, vocab.txt)");
  WpVocab *v = wp_vocab_load(vocab_path);
  FILE *f = *input ? fopen(input, "rb") : stdin;
  if (!f) die_input(input, "cannot open: %m");
  char *line = NULL;
  size_t line_capacity = 0;
  WpToken *tokens = NULL;
  size_t tokens_capacity = 0;  // a line of n bytes has at most n tokens (wordpiece.h)
  ssize_t len;
  while ((len = getline(&line, &line_capacity, f)) >= 0) {
    if (len && line[len - 1] == '\n') len--;
    if ((size_t)len > tokens_capacity) {
      free(tokens);
      tokens_capacity = 2 * (size_t)len;
      tokens = xmalloc(tokens_capacity * sizeof *tokens);
    }
    int64_t n = wp_tokenize(v, line, (size_t)len, tokens, (int64_t)tokens_capacity);
    print_line(tokens, n, config_bool(&cfg, "offsets"));
  }
  if (ferror(f)) die_input(*input ? input : "<stdin>", "read failed: %m");
  if (f != stdin) fclose(f);
  free(tokens);
  free(line);
  wp_vocab_free(v);
  config_free(&cfg);
  return 0;
}
