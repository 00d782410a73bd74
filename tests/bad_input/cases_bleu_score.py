"""Bad input of build/bin/bleu_score (translation/bleu.c): missing files,
files of different lengths, bytes that are not text, and what it accepts by
design (an empty translation, broken UTF-8 in a translation)."""
from case import Case

SCORE = "{build}/bin/bleu_score {tmp}/hyp.txt {tmp}/ref.txt"


def files(hyp, ref):
    """A setup: {tmp}/hyp.txt and {tmp}/ref.txt as given (text or bytes)."""
    def setup(t):
        t.write("hyp.txt", hyp)
        t.write("ref.txt", ref)
    return setup


def printed(want):
    """A check: the printed line holds want (e.g. "bleu=100 ")."""
    def check(t, proc):
        return None if want in proc.stdout else f"want {want!r} in {proc.stdout!r}"
    return check


CASES = [
    Case("bleu_score_missing_hypotheses", "{build}/bin/bleu_score {tmp}/none.txt {tmp}/ref.txt",
         "error: {tmp}/none.txt: cannot open: No such file or directory", 2,
         "no translations file", setup=files("a\n", "a\n")),
    Case("bleu_score_one_argument", "{build}/bin/bleu_score {tmp}/hyp.txt",
         "error: bleu_score: usage: bleu_score HYP_FILE REF_FILE", 2,
         "the reference file left out", setup=files("a\n", "a\n")),
    Case("bleu_score_line_counts_differ", SCORE,
         "error: {tmp}/hyp.txt: 2 lines, but the reference {tmp}/ref.txt has 3", 2,
         "a translation missing (a run stopped early, or the wrong reference file)",
         setup=files("a b\nc d\n", "a b\nc d\ne f\n")),
    Case("bleu_score_nul_byte", SCORE,
         "error: {tmp}/hyp.txt: holds a NUL byte at offset 3 (not text)", 2,
         "a binary file given as translations", setup=files(b"a b\0c\n", "a b\n")),
    Case("bleu_score_empty_translation", SCORE, None, 0,
         "an empty line is an empty translation: no n-grams, only the brevity penalty",
         setup=files("\nthe cat sat\n", "a b c\nthe cat sat\n"), check=printed("bleu=36.78794412 ")),
    # the, cat, U+FFFD against the, cat: 2/3, 1/2, no trigram of 1 -> 1/2, no
    # 4-gram at all: (1/6)^(1/4), longer than the reference.
    Case("bleu_score_broken_utf8", SCORE, None, 0,
         "invalid UTF-8 in a translation reads as U+FFFD (a token of its own) instead of failing",
         setup=files(b"the cat \xff\n", "the cat\n"),
         check=printed("bleu=63.89431042 matches=2,1,0,0 possible=3,2,1,0 hyp_len=3 ")),
]
