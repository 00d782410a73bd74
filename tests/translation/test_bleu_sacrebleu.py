#!/usr/bin/env python3
"""build/bin/bleu_score (translation/bleu.c) against sacrebleu's
corpus_bleu(tokenize="intl", lowercase=True): the BLEU to 1e-6 and the
n-gram statistics exactly.

References are the German side of lines of the Debian de-en dictionary
(/usr/share/trans/de-en, package trans-de-en: "de | de2 :: en | en2"),
punctuation-heavy text with braces, brackets, slashes and semicolons, plus
hand-written lines of umlauts, ß, accents, CJK, emoji, currency signs and
numbers; hypotheses are deterministic perturbations of them (words dropped,
swapped, duplicated or replaced, case changed, punctuation moved, lines
emptied).

sacrebleu's settings are the ones under which it coincides with the MLPerf
reference that bleu.c follows: smooth_method="exp" is the reference's
smoothing of an order without matches, and use_effective_order=False keeps
the divisor at 4. Inputs where the two still differ by design are left out
(translation/bleu.h): a backslash (not punctuation in the reference's
regex), numbers of category No or Nl (the reference's "non-digit" is
non-Nd, sacrebleu's non-N), and corpora with no unigram match or no 4-gram
(sacrebleu scores those 0); tests/translation/test_bleu.c checks bleu.c's
side of each.

    python3 tests/translation/test_bleu_sacrebleu.py BUILD_DIR
"""
import os
import random
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from cases import run_case  # noqa: E402

DICTIONARY = "/usr/share/trans/de-en"
# bleu_score prints %.10g: 10 significant digits of a score below 100 are
# within 1e-7; the two sides' arithmetic (precisions in percent or not, the
# brevity ratio inverted or not) differs by a few ulps of double.
TOLERANCE = 1e-6

SPECIAL = [
    "Größere Äpfel, Öl und Übermaß kosten 3,50 € (statt 4.000,00 €)!",
    "STRASSE, Straße & Maße: ÄÖÜ äöü ß.",
    "Café crème, naïve façade; résumé à la carte — voilà…",
    "東京は日本の首都です。北京、上海！",
    "Ich ❤️ Berlin 😀👍🏽 – wirklich?!",
    "Preis: $5, £3, ¥100, ₹20, 10% Rabatt + 2× Versand = ?",
    "\"Zitat\" «Guillemets» „Anführung“ ‚einfach‘ 'apostroph' (Klammer) [eckig] {geschweift}",
    "...!!! ??? --- ;;; ::: /// @@@ ### ***",
    "E-Mail: info@example.org; URL: https://example.org/a-b_c?x=1&y=2#z",
    "Am 3.10.1990 um 12:30 Uhr; 1,000.5 km/h; -5 °C; 3/4 Liter.",
    "ΟΔΟΣ ΣΟΦΙΑΣ, Ελληνικά; Русский ТЕКСТ; İstanbul ve Iğdır.",
    "Tab\tgetrennt\u00a0und\u3000Leerraum  doppelt",
    "a.b,c;d:e!f?g",
    "x1.y2,z3",
]


def german_side(line):
    """The German half of a dictionary line, or None for comments."""
    if line.startswith("#") or " :: " not in line:
        return None
    return line.split(" :: ", 1)[0].strip()


def comparable(text):
    """Whether text avoids what the reference and sacrebleu treat apart."""
    return text and "\\" not in text and not any(
        unicodedata.category(c) in ("No", "Nl") for c in text)


def dictionary_sides():
    with open(DICTIONARY, encoding="utf-8") as f:
        return [s for s in (german_side(l) for l in f) if s and comparable(s)]


def move_punctuation(rng, text):
    """Takes one punctuation char out of text and puts it somewhere else."""
    at = [i for i, c in enumerate(text) if unicodedata.category(c).startswith("P")]
    if not at:
        return text
    i = rng.choice(at)
    c, rest = text[i], text[:i] + text[i + 1:]
    j = rng.randrange(len(rest) + 1)
    return rest[:j] + c + rest[j:]


def change_case(rng, word):
    return rng.choice([str.upper, str.lower, str.title, str.swapcase])(word)


def perturb(rng, text, vocabulary):
    """A hypothesis near text: word edits, then now and then punctuation."""
    words, out = text.split(), []
    for w in words:
        r = rng.random()
        if r < 0.08:
            continue  # dropped
        if r < 0.14:
            out += [w, w]  # duplicated
        elif r < 0.22:
            out.append(change_case(rng, w))
        elif r < 0.28:
            out.append(rng.choice(vocabulary))  # replaced
        else:
            out.append(w)
    for _ in range(len(out) // 6):
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]  # swapped
    hyp = " ".join(out)
    return move_punctuation(rng, hyp) if rng.random() < 0.3 else hyp


def make_corpus(rng, refs, empty_share):
    vocabulary = [w for r in refs for w in r.split()]
    hyps = ["" if rng.random() < empty_share else perturb(rng, r, vocabulary) for r in refs]
    return hyps, refs


def run_tool(build, hyps, refs, dir_):
    paths = []
    for name, lines in (("hyp.txt", hyps), ("ref.txt", refs)):
        path = os.path.join(dir_, name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(l + "\n" for l in lines))
        paths.append(path)
    res = subprocess.run([os.path.join(build, "bin", "bleu_score")] + paths,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"bleu_score exited {res.returncode}: {res.stderr.strip()}")
    return dict(kv.split("=", 1) for kv in res.stdout.split())


def compare(build, hyps, refs, dir_):
    """None when bleu_score and sacrebleu agree, else what differs."""
    import sacrebleu
    want = sacrebleu.corpus_bleu(hyps, [refs], tokenize="intl", lowercase=True,
                                 smooth_method="exp", use_effective_order=False)
    got = run_tool(build, hyps, refs, dir_)
    counts = [float(x) for x in got["matches"].split(",")]
    totals = [float(x) for x in got["possible"].split(",")]
    if counts != list(want.counts) or totals != list(want.totals):
        return f"matches {counts} possible {totals}, sacrebleu {want.counts} {want.totals}"
    if (float(got["hyp_len"]), float(got["ref_len"])) != (want.sys_len, want.ref_len):
        return f"lengths {got['hyp_len']}/{got['ref_len']}, sacrebleu {want.sys_len}/{want.ref_len}"
    if not abs(float(got["bleu"]) - want.score) <= TOLERANCE:
        return f"BLEU {got['bleu']}, sacrebleu {want.score!r}"
    return None


def corpora():
    """(case name, hypotheses, references), all deterministic."""
    rng = random.Random(18)
    sides = dictionary_sides()
    for n in (1, 2, 3):
        yield f"dictionary_sample{n}", *make_corpus(rng, rng.sample(sides, 300), 0.0)
    yield "dictionary_with_empty_hypotheses", *make_corpus(rng, rng.sample(sides, 200), 0.3)
    special = SPECIAL * 4
    yield "special_text", *make_corpus(rng, special, 0.1)
    # Right words, mostly wrong case and punctuation: the lowercasing and the
    # tokeniser carry the score.
    hyps = [move_punctuation(rng, change_case(rng, s)) for s in special]
    yield "special_text_case_and_punctuation", hyps, special
    # Words in reverse order: unigrams match, no 3- or 4-gram does, so the
    # score rests on the smoothing of orders without a match.
    refs = ["der kleine Hund läuft schnell nach Hause", "wir essen heute Äpfel und Birnen"]
    yield "orders_without_matches", [" ".join(r.split()[::-1]) for r in refs], refs


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    try:
        import sacrebleu  # noqa: F401  (scripts/deps.sh installs it)
    except ImportError:
        print("SKIP bleu_matches_sacrebleu: sacrebleu is not installed (make deps)")
        return 0
    if not os.path.exists(DICTIONARY):
        print(f"SKIP bleu_matches_sacrebleu: no {DICTIONARY} (make deps installs trans-de-en)")
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as dir_:
        for name, hyps, refs in corpora():
            failed += not run_case(f"bleu_matches_sacrebleu_{name}", compare, build, hyps, refs,
                                   dir_)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
