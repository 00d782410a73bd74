#!/usr/bin/env python3
"""translation/subword.c (through datasets/subword_tool) against a plain
Python implementation of the same rules written here, the "reference
encoder": the MLPerf Transformer reference's tokeniser (tensor2tensor's
SubwordTextEncoder) with Python's unicodedata for the character classes.
On real German and English text (Debian's trans-de-en dictionary,
/usr/share/trans/de-en, lines `de | de2 :: en | en2`):
  - vocabularies the C builder made (about 2,000 and 8,000 entries): the
    reference encoder gives the same ids as the C encoder on every phrase;
  - a vocabulary in the t2t file format written here (characters left out
    of it, so that escapes "\\<decimal>;" occur): the same;
  - decode(encode(line)) == line for every line of the whole file (raw
    lines, punctuation, runs of spaces and all) in C;
  - the reference builder written here, on a small corpus, makes exactly the
    vocabulary file the C builder makes.

    python3 tests/translation/test_subword_reference.py [BUILD_DIR]
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TOOL = os.path.join(ROOT, BUILD, "bin", "subword_tool")
TRANS = "/usr/share/trans/de-en"
RESERVED = ["<pad>", "<EOS>"]
ESCAPES = set("\\_u;0123456789")

failures = 0


def report(name, problem):
    global failures
    print("PASS %s" % name if not problem else "FAIL %s: %s" % (name, problem), flush=True)
    failures += bool(problem)


# ------------------------------------------------------------ the reference

def alnum(ch):
    return unicodedata.category(ch)[0] in "LN"


def split_tokens(text):
    """Runs of one class; a lone space inside the text (not first, not last) goes."""
    out, start = [], 0
    for i in range(1, len(text) + 1):
        if i < len(text) and alnum(text[i]) == alnum(text[i - 1]):
            continue
        piece = text[start:i]
        if piece != " " or start == 0 or i == len(text):
            out.append(piece)
        start = i
    return out


def escape(token, alphabet):
    parts = []
    for ch in token:
        if ch == "\\":
            parts.append("\\\\")
        elif ch == "_":
            parts.append("\\u")
        elif ch in alphabet and ch != "\n":
            parts.append(ch)
        else:
            parts.append("\\%d;" % ord(ch))
    return "".join(parts) + "_"


def unescape_match(m):
    if m.group(0) == "\\u":
        return "_"
    if m.group(0) == "\\\\":
        return "\\"
    n = int(m.group(1))
    return chr(n) if n <= 0x10FFFF and not 0xD800 <= n <= 0xDFFF else "\u3013"


class Vocab:
    def __init__(self, entries):
        self.entries = entries
        self.index = {e: i for i, e in enumerate(entries)}
        self.alphabet = {ch for e in entries for ch in e} | ESCAPES
        self.longest = max(len(e) for e in entries)

    def segment(self, esc):
        """Greedy: at each start the longest entry that fits."""
        out, i = [], 0
        while i < len(esc):
            for j in range(min(len(esc), i + self.longest), i, -1):
                if esc[i:j] in self.index:
                    out.append((i, self.index[esc[i:j]]))
                    i = j
                    break
            else:
                raise ValueError("no entry for %r" % esc[i:])
        return out

    def encode(self, text):
        return [i for tok in split_tokens(text) for _, i in self.segment(escape(tok, self.alphabet))]

    def decode(self, ids):
        joined = "".join(self.entries[i] for i in ids if 1 < i < len(self.entries))
        tokens = [re.sub(r"\\u|\\\\|\\([0-9]+);", unescape_match, p) for p in joined.split("_") if p]
        text = []
        for k, tok in enumerate(tokens):
            if k and alnum(tokens[k - 1][0]) and alnum(tok[0]):
                text.append(" ")
            text.append(tok)
        return "".join(text)


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return Vocab([line.strip()[1:-1] for line in f])


def write_vocab(path, entries):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines("'%s'\n" % e for e in entries)


def build_for_min_count(token_counts, alphabet, min_count):
    entries = RESERVED + sorted(alphabet)
    for _ in range(4):
        vocab = Vocab(entries)
        counts = collections.defaultdict(int)
        for tok, n in token_counts.items():
            esc = escape(tok, alphabet)
            for start, _ in vocab.segment(esc):
                for end in range(start + 1, len(esc) + 1):
                    counts[esc[start:end]] += n
        picked = []
        for sub in sorted((s for s, c in counts.items() if c >= min_count), key=len, reverse=True):
            c = counts[sub]
            if c < min_count:
                continue
            if len(sub) > 1 and sub not in RESERVED:
                picked.append((c, sub))
            for p in range(1, len(sub)):
                counts[sub[:p]] -= c
        picked += [(counts.get(a, 0), a) for a in alphabet]
        entries = RESERVED + [s for _, s in sorted(picked, reverse=True)]
    return entries


def build(lines, target):
    token_counts = collections.Counter(t for line in lines for t in split_tokens(line.strip()))
    alphabet = {ch for t in token_counts for ch in t} | set("".join(RESERVED)) | ESCAPES

    def search(lo, hi):
        mid = (lo + hi) // 2
        entries = build_for_min_count(token_counts, alphabet, mid)
        if abs(len(entries) - target) * 100 < target or lo >= hi or mid < 2:
            return entries
        other = search(mid + 1, hi) if len(entries) > target else search(lo, mid - 1)
        return other if abs(len(other) - target) < abs(len(entries) - target) else entries

    return search(1, 1000)


# ------------------------------------------------------------ the C side

def tool(*args, stdin=b""):
    r = subprocess.run([TOOL, *args], input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("subword_tool %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r.stdout


def c_encode(vocab_path, lines):
    out = tool("encode", vocab_path, stdin="".join(l + "\n" for l in lines).encode())
    return [[int(x) for x in row.split()] for row in out.decode().split("\n")[:-1]]


def c_decode(vocab_path, rows):
    out = tool("decode", vocab_path, stdin="".join(" ".join(map(str, r)) + "\n" for r in rows).encode())
    return out.decode().split("\n")[:-1]


def trans_lines():
    with open(TRANS, "rb") as f:
        return [l.decode("utf-8") for l in f.read().split(b"\n")[:-1]]


def phrases(lines, every):
    """German and English phrases of every `every`-th entry line."""
    de, en = [], []
    for line in lines[::every]:
        if line.startswith("#") or " :: " not in line:
            continue
        left, right = line.split(" :: ", 1)
        de += [p.strip() for p in left.split(" | ") if p.strip()]
        en += [p.strip() for p in right.split(" | ") if p.strip()]
    return de, en


def compare_ids(name, vocab_path, lines):
    ref = read_vocab(vocab_path)
    got = c_encode(vocab_path, lines)
    bad = [k for k, line in enumerate(lines) if ref.encode(line) != got[k]]
    problem = ""
    if len(got) != len(lines):
        problem = "%d rows for %d lines" % (len(got), len(lines))
    elif bad:
        k = bad[0]
        problem = "%d of %d lines differ; first %r: reference %s, C %s" % (
            len(bad), len(lines), lines[k], ref.encode(lines[k]), got[k])
    report(name, problem)
    return got


def round_trip(name, vocab_path, lines, rows=None):
    rows = rows if rows is not None else c_encode(vocab_path, lines)
    back = c_decode(vocab_path, rows)
    bad = [k for k in range(len(lines)) if k >= len(back) or back[k] != lines[k]]
    report(name, bad and "%d of %d lines differ; first %r -> %r" % (
        len(bad), len(lines), lines[bad[0]], back[bad[0]] if bad[0] < len(back) else None))


def hand_written_vocab(path, text_lines, built_path):
    """A t2t-format file of our own: the reserved entries, every character of
    the text but 'q', 'ß', 'é' and the digits 7 and 8 left to escapes (7 and
    8 are escape characters, so they stay), the C vocabulary's first 1,500
    longer entries and a few entries holding escapes."""
    chars = sorted({ch for line in text_lines for ch in line} | ESCAPES | set("<pad><EOS>") - {"\n"})
    left_out = {"q", "ß", "é"}
    chars = [c for c in chars if c not in left_out]
    longer = [e for e in read_vocab(built_path).entries[2:] if len(e) > 1 and not set(e) & left_out]
    extra = ["\\223;", "\\113;_", "ma\\223;", "\\u_", "\\\\"]
    entries = RESERVED + chars + [e for e in longer[:1500] if e not in extra] + extra
    write_vocab(path, list(dict.fromkeys(entries)))


def main():
    if not os.path.exists(TRANS):
        print("SKIP subword_reference: %s missing (make deps installs trans-de-en)" % TRANS)
        return 0
    tmp = tempfile.mkdtemp(prefix="subword_ref_")
    lines = trans_lines()
    de, en = phrases(lines, 40)  # about 5,000 entries: ~6,000 German and ~7,000 English phrases
    corpus = [os.path.join(tmp, n) for n in ("de.txt", "en.txt")]
    for path, text in zip(corpus, (de, en)):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in text)
    for target in (2000, 8000):
        vocab = os.path.join(tmp, "vocab.%d" % target)
        tool("build", "--target_size=%d" % target, "--out=" + vocab, *corpus)
        size = len(read_vocab(vocab).entries)
        report("c_builder_size_near_%d" % target,
               abs(size - target) > target // 5 and "%d entries" % size)
        rows = compare_ids("ids_match_reference_vocab_%d" % target, vocab, de + en)
        round_trip("round_trip_phrases_vocab_%d" % target, vocab, de + en, rows)
    own = os.path.join(tmp, "vocab.own")
    hand_written_vocab(own, de + en, os.path.join(tmp, "vocab.2000"))
    raw = lines[::20]  # raw lines: comments, " :: ", "|", braces, runs of spaces
    odd = ["qualm maß Café", "a_b \\ c\\\\d", "  two  spaces ", " x", "x ", "7 8 78", "\t tab"]
    rows = compare_ids("ids_match_reference_own_t2t_file", own, de + en + raw + odd)
    round_trip("round_trip_own_t2t_file", own, de + en + raw + odd, rows)
    ref = read_vocab(own)
    report("reference_decode_matches_c_decode",
           next(("%r" % l for l, r in zip(odd + raw, c_encode(own, odd + raw)) if ref.decode(r) != l), ""))
    round_trip("round_trip_whole_trans_de_en", os.path.join(tmp, "vocab.8000"), lines)
    small = de[:400] + en[:400]
    small_path = os.path.join(tmp, "small.txt")
    with open(small_path, "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in small)
    built = os.path.join(tmp, "vocab.small")
    tool("build", "--target_size=300", "--out=" + built, small_path)
    want = build(small, 300)
    got = read_vocab(built).entries
    diff = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), None)
    report("c_builder_matches_reference_builder",
           (got != want) and "C %d entries, reference %d; first difference at id %s: %r vs %r" % (
               len(got), len(want), diff, got[diff] if diff is not None else None,
               want[diff] if diff is not None else None))
    subprocess.run(["rm", "-rf", tmp])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
