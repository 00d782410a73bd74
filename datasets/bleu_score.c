// bleu_score: the uncased BLEU of a translations file against a reference
// file, as the Transformer trainer computes it (translation/bleu.h), for
// scoring --translations_out files and for testing against sacrebleu.
//   bleu_score HYP_FILE REF_FILE
// Line i of one file is the translation of line i of the other; a line ends
// at "\n" (a "\r" before it is whitespace to the tokeniser), a last line
// may lack it, and empty lines count (an empty translation scores as one).
// Prints one line:
//   bleu=B matches=m1,m2,m3,m4 possible=p1,p2,p3,p4 hyp_len=H ref_len=R
// Bad input is one line naming the file and exit status 2.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/file.h"
#include "translation/bleu.h"

static const char *const USAGE = "usage: bleu_score HYP_FILE REF_FILE";

typedef struct BleuLines {
  char **line;  // NUL-terminated, pointing into the file's bytes
  size_t n;
  char *bytes;
} BleuLines;

// The lines of the file at path, cut in place at each "\n".
static BleuLines read_lines(const char *path) {
  size_t n_bytes;
  uint8_t *raw = file_read(path, &n_bytes);
  BleuLines l = {NULL, 0, xmalloc(n_bytes + 1)};
  memcpy(l.bytes, raw, n_bytes);
  l.bytes[n_bytes] = '\0';
  free(raw);
  if (memchr(l.bytes, '\0', n_bytes))
    die_input(path, "holds a NUL byte at offset %zu (not text)",
              (size_t)((char *)memchr(l.bytes, '\0', n_bytes) - l.bytes));
  size_t cap = 1;
  for (size_t i = 0; i < n_bytes; i++) cap += l.bytes[i] == '\n';
  l.line = xmalloc(cap * sizeof(char *));
  for (char *s = l.bytes; s < l.bytes + n_bytes;) {
    char *end = strchr(s, '\n');
    if (end) *end = '\0';
    l.line[l.n++] = s;
    s = end ? end + 1 : l.bytes + n_bytes;
  }
  return l;
}

static void print_counts(const char *key, const double *v) {
  printf(" %s=%.10g,%.10g,%.10g,%.10g", key, v[0], v[1], v[2], v[3]);
}

int main(int argc, char **argv) {
  if (argc != 3) die_input("bleu_score", "%s", USAGE);
  BleuLines hyp = read_lines(argv[1]), ref = read_lines(argv[2]);
  if (hyp.n != ref.n)
    die_input(argv[1], "%zu lines, but the reference %s has %zu", hyp.n, argv[2], ref.n);
  BleuStats st = {0};
  for (size_t i = 0; i < hyp.n; i++) bleu_add(&st, hyp.line[i], ref.line[i]);
  printf("bleu=%.10g", bleu_score(&st));
  print_counts("matches", st.matches);
  print_counts("possible", st.possible);
  printf(" hyp_len=%.10g ref_len=%.10g\n", st.hyp_len, st.ref_len);
  free(hyp.line);
  free(hyp.bytes);
  free(ref.line);
  free(ref.bytes);
  return 0;
}
