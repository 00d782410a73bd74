#!/usr/bin/env python3
"""wmt_from_gettext: an English->German translation set of real human
translations, in WMT's raw layout (the files wmt_to_lmdb reads), from the
German gettext catalogs that Debian packages install
(/usr/share/locale/de/LC_MESSAGES/<domain>.mo): each catalog maps a
program's English messages (msgid) to what its German translators wrote
(msgstr).

    python3 datasets/wmt_from_gettext.py --out=DIR [--locale_dir=DIR]
        [--train_pairs=N] [--eval_pairs=N] [--seed=S]

writes DIR/train.en, train.de, newstest2014.en, newstest2014.de (parallel,
one sentence a line) and DIR/sources.txt (each catalog: its split, its
Debian package and version, the pairs it gave). The catalogs are the fixed
lists TRAIN and EVAL below, from light packages: the eval catalogs (GNU's
basic tools, which every Debian system has) are other programs' text than
the training ones, so the eval set is unseen text in the same register.

Each message goes through these rules, in this order (the name in
sources.txt's counts after each):
  1. Plural forms and the catalog's header are left out; a context prefix
     (msgctxt) is dropped. Leading and trailing white space goes.
  2. "untranslated": msgstr empty or equal to msgid.
  3. "multiline": a newline or tab left inside (usage texts, tables).
  4. "placeholder": a printf format (%), a {} or $ substitution, or any of
     @ \\ ` | = (variables, escapes, key=value, option syntax).
  5. "markup": < or > (Pango and HTML markup), [ or ] (option syntax),
     "--" or a word starting with "-" (command-line options), a word
     holding "/" or "_" after accelerators go (paths, identifiers).
     Accelerators go first: one "_" or "&" starting a word, before a
     letter (GTK's "_Open", "Save _As"; "&File"); one inside a word
     ("Sa_ve", also an identifier's) drops the message, "&" with a space
     after it stays.
  6. White space runs become one space.
  7. "words": a side with fewer than --min_words (3) or more than
     --max_words (20) words, or fewer than --min_words words holding a
     letter (a list of numbers or symbols).
  8. "duplicate": an (English, German) pair seen before.
The eval set keeps one pair per English message (the first); training
then loses every pair whose English (case-folded) is an eval message, so
no eval source is trained on (sources.txt's last line counts them).
Both splits are shuffled from --seed; --train_pairs / --eval_pairs > 0
keep their first so many. The set depends only on the seed and the
installed catalogs (sources.txt records their packages' versions).

Bad input (a catalog missing or not a gettext catalog, a folder that is not
there, an --out that holds a set already) ends with one line, "error: FILE:
what", exit status 2, and nothing written. Each file is written to a
temporary name and renamed.
"""
import argparse
import gettext
import os
import random
import re
import struct
import subprocess
import sys

# domain -> Debian package that installs /usr/share/locale/de/LC_MESSAGES/<domain>.mo.
TRAIN = {
    "git": "git", "libc": "libc-l10n", "mit-krb5": "krb5-locales", "gnupg2": "gnupg-l10n",
    "xkeyboard-config": "xkb-data", "glib20": "libglib2.0-data", "gtk20-properties": "libgtk2.0-common",
    "gtk20": "libgtk2.0-common", "gsettings-desktop-schemas": "gsettings-desktop-schemas",
    "opcodes": "binutils-common", "ld": "binutils-common", "gnutls30": "libgnutls30", "dpkg": "dpkg",
    "dpkg-dev": "libdpkg-perl", "apt": "apt", "libapt-pkg6.0": "libapt-pkg6.0", "bash": "bash",
    "gettext-tools": "gettext", "procps-ng": "procps", "gdk-pixbuf": "libgdk-pixbuf2.0-common",
    "elfutils": "libelf1", "shadow": "login", "make": "make",
}
EVAL = {"coreutils": "coreutils", "tar": "tar", "findutils": "findutils", "diffutils": "diffutils",
        "sed": "sed", "grep": "grep"}
DEFAULT_LOCALE_DIR = "/usr/share/locale/de/LC_MESSAGES"
OUTPUTS = ("train.en", "train.de", "newstest2014.en", "newstest2014.de", "sources.txt")
RULES = ("untranslated", "multiline", "placeholder", "markup", "words", "duplicate")

ACCELERATOR = re.compile(r"(?<!\w)[_&](?=[^\W\d_])")
PLACEHOLDER = re.compile(r"[%{}$@\\`|=]")
MARKUP = re.compile(r"[<>\[\]]|--|(^|\s)-\w|\S*[/_]\S*")
LETTER = re.compile(r"[^\W\d_]")


class InputError(Exception):
    """Bad input: its message is the one line printed."""


def clean(text):
    """(text, None) after rules 3-6, or (None, the rule that drops it)."""
    if "\n" in text or "\t" in text:
        return None, "multiline"
    if PLACEHOLDER.search(text):
        return None, "placeholder"
    text = ACCELERATOR.sub("", text, count=1)
    if MARKUP.search(text):
        return None, "markup"
    return " ".join(text.split()), None


def words_ok(text, lo, hi):
    words = text.split()
    return lo <= len(words) <= hi and sum(bool(LETTER.search(w)) for w in words) >= lo


def read_catalog(path, package):
    """The catalog's (msgid, msgstr) pairs of single messages, in msgid order."""
    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # the parsed table; no public accessor lists it
    except FileNotFoundError:
        raise InputError(f"error: {path}: no such catalog (is its package, {package}, installed? "
                         "make deps installs it)")
    except OSError as e:  # gettext's "Bad magic number" too
        raise InputError(f"error: {path}: not a readable gettext catalog ({e.strerror or e})")
    except (UnicodeDecodeError, ValueError, IndexError, LookupError, SyntaxError, struct.error) as e:
        raise InputError(f"error: {path}: not a readable gettext catalog ({type(e).__name__}: {e})")
    pairs = []
    for msgid, msgstr in catalog.items():
        if isinstance(msgid, tuple) or not msgid:  # a plural form, the header
            continue
        pairs.append((msgid.split("\x04", 1)[-1].strip(), msgstr.strip()))
    return sorted(pairs)


def catalog_pairs(path, package, args, counts, seen):
    """The kept pairs of one catalog; counts[rule] += what each rule dropped."""
    kept = []
    for en, de in read_catalog(path, package):
        if not de or de == en:
            counts["untranslated"] += 1
            continue
        (en, why), (de, why_de) = clean(en), clean(de)
        why = why or why_de
        if not why and not (words_ok(en, args.min_words, args.max_words) and
                            words_ok(de, args.min_words, args.max_words)):
            why = "words"
        if not why and (en, de) in seen:
            why = "duplicate"
        if why:
            counts[why] += 1
            continue
        seen.add((en, de))
        kept.append((en, de))
    return kept


def package_version(package):
    p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created; must not hold a set)")
    ap.add_argument("--locale_dir", default=DEFAULT_LOCALE_DIR,
                    help="where the German catalogs are")
    ap.add_argument("--seed", type=int, default=1, help="the splits' shuffle")
    ap.add_argument("--train_pairs", type=int, default=0, help="most training pairs (0: all)")
    ap.add_argument("--eval_pairs", type=int, default=0, help="most eval pairs (0: all)")
    ap.add_argument("--min_words", type=int, default=3, help="fewest words a side")
    ap.add_argument("--max_words", type=int, default=20, help="most words a side")
    args = ap.parse_args()
    try:
        if not os.path.isdir(args.locale_dir):
            raise InputError(f"error: {args.locale_dir}: no such folder (the German gettext catalogs)")
        for name in OUTPUTS:
            if os.path.exists(os.path.join(args.out, name)):
                raise InputError(f"error: {os.path.join(args.out, name)}: exists already; give an empty --out")
        seen, sources, splits = set(), [], {}
        for split, domains in (("eval", EVAL), ("train", TRAIN)):
            splits[split] = []
            for domain, package in domains.items():
                counts = dict.fromkeys(RULES, 0)
                kept = catalog_pairs(os.path.join(args.locale_dir, domain + ".mo"), package, args, counts, seen)
                splits[split] += kept
                sources.append((split, domain, package, kept, counts))
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    # One eval pair per English message; no eval message in training.
    eval_en, eval_pairs = set(), []
    for en, de in splits["eval"]:
        if en.casefold() not in eval_en:
            eval_en.add(en.casefold())
            eval_pairs.append((en, de))
    train_pairs = [p for p in splits["train"] if p[0].casefold() not in eval_en]
    left_out = len(splits["train"]) - len(train_pairs)
    rng = random.Random(args.seed)
    rng.shuffle(eval_pairs)
    rng.shuffle(train_pairs)
    if args.eval_pairs > 0:
        eval_pairs = eval_pairs[:args.eval_pairs]
    if args.train_pairs > 0:
        train_pairs = train_pairs[:args.train_pairs]

    lines = ["# split catalog package version pairs dropped(" + ",".join(RULES) + ")"]
    for split, domain, package, kept, counts in sources:
        dropped = ",".join(str(counts[r]) for r in RULES)
        lines.append(f"{split} {domain} {package} {package_version(package)} {len(kept)} {dropped}")
    lines.append(f"# written: {len(train_pairs)} train, {len(eval_pairs)} eval pairs (seed {args.seed}; "
                 f"{left_out} training pairs left out: their English is an eval source)")
    os.makedirs(args.out, exist_ok=True)
    for name, pairs, side in (("train.en", train_pairs, 0), ("train.de", train_pairs, 1),
                              ("newstest2014.en", eval_pairs, 0), ("newstest2014.de", eval_pairs, 1)):
        write_atomic(os.path.join(args.out, name), "".join(p[side] + "\n" for p in pairs))
    write_atomic(os.path.join(args.out, "sources.txt"), "\n".join(lines) + "\n")
    print(f"wmt_from_gettext: {len(train_pairs)} train, {len(eval_pairs)} eval pairs from "
          f"{len(sources)} catalogs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
