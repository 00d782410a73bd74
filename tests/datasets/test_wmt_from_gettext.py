#!/usr/bin/env python3
"""datasets/wmt_from_gettext.py on catalogs made here (their .mo bytes
written by the format's layout: magic, counts, the two tables of lengths
and offsets, the strings), one per domain the generator reads: each
cleaning rule keeps or drops the messages made for it, and the output
lines are exactly the kept pairs; accelerators go, a Latin-1 catalog is
read by its charset, an eval message's pairs leave training, sources.txt
names every catalog's package and counts; the same seed gives the same
files, another seed another order, --train_pairs keeps a prefix;
scripts/deps.sh installs every catalog's package. Bad
input: a missing folder, a missing catalog, a corrupt and a truncated one,
an --out holding a set: one line naming the file, status 2, nothing
written. Then the installed catalogs (where they are): the set
prepare_data.sh small makes.

    python3 tests/datasets/test_wmt_from_gettext.py BUILD_DIR
"""
import importlib.util
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "datasets" / "wmt_from_gettext.py"
spec = importlib.util.spec_from_file_location("wmt_from_gettext", GENERATOR)
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
OUTPUTS = ("train.en", "train.de", "newstest2014.en", "newstest2014.de", "sources.txt")


def mo_bytes(messages, charset="UTF-8"):
    """A GNU .mo catalog of messages (msgid -> msgstr; a msgid with a NUL
    is a plural's ids, a msgstr with NULs its forms), with its header."""
    header = f"Content-Type: text/plain; charset={charset}\nPlural-Forms: nplurals=2; plural=(n != 1);\n"
    items = sorted([("", header)] + list(messages.items()))
    ids = [k.encode(charset) for k, _ in items]
    strs = [v.encode(charset) for _, v in items]
    n = len(items)
    ids_at = 28
    strs_at = ids_at + 8 * n
    data_at = strs_at + 8 * n
    table_ids, table_strs, blob = b"", b"", b""
    for s in ids:
        table_ids += struct.pack("<II", len(s), data_at + len(blob))
        blob += s + b"\0"
    for s in strs:
        table_strs += struct.pack("<II", len(s), data_at + len(blob))
        blob += s + b"\0"
    return struct.pack("<7I", 0x950412de, 0, n, ids_at, strs_at, 0, 0) + table_ids + table_strs + blob


# Train catalog "git": one message per rule; KEPT are those that stay, as written.
GIT = {
    "Show the commit log of a branch": "Den Commit-Verlauf eines Branches anzeigen",
    "  Print the working tree status  ": "Den Status des Arbeitsverzeichnisses ausgeben",
    "Remove untracked files from the tree": "",                                    # untranslated
    "Do not copy the same words": "Do not copy the same words",                    # untranslated
    "First line of usage\nsecond line": "Erste Zeile\nzweite Zeile",               # multiline
    "could not read file %s": "konnte Datei %s nicht lesen",                       # placeholder
    "cannot open {name} for reading": "kann {name} nicht zum Lesen öffnen",        # placeholder
    "set the value a=b now please": "setze den Wert a=b jetzt bitte",              # placeholder
    "<b>Bold</b> text goes here": "<b>Fetter</b> Text steht hier",                 # markup
    "use the --all option here": "die Option --all hier verwenden",                # markup
    "cannot write to /etc/hosts file": "kann nicht in /etc/hosts schreiben",       # markup
    "the core_bare setting is wrong": "die Einstellung core_bare ist falsch",       # markup
    "_Open the selected file": "Die ausgewählte Datei _öffnen",                   # accelerator
    "&Save all open files": "Alle offenen Dateien &speichern",                    # accelerator
    "Drag & drop the files": "Dateien ziehen & ablegen",                           # & with a space stays
    "Too short": "Zu kurz",                                                         # words
    " ".join(["word"] * 21): " ".join(["Wort"] * 21),                              # words
    "1 2 3 4 5": "1 2 3 4 5 6",                                                     # words (no letters)
    "ctx\x04Open a new window": "Ein neues Fenster öffnen",                        # context prefix dropped
    "one file changed\0many files changed": "eine Datei geändert\0viele Dateien geändert",  # plural
    "Cannot lock the ref file": "Die Referenzdatei kann nicht gesperrt werden",    # is an eval message too
}
# Train catalog "libc", in Latin-1: one new pair and one duplicate of git's.
LIBC = {"No space left on the device": "Kein Platz mehr auf dem Gerät",
        "Show the commit log of a branch": "Den Commit-Verlauf eines Branches anzeigen"}
# Eval catalogs.
COREUTILS = {"cannot lock the ref file": "kann die Referenzdatei nicht sperren",
             "print the file names in order": "die Dateinamen der Reihe nach ausgeben"}
TAR = {"Print the file names in order": "Die Dateinamen geordnet ausgeben",  # the same English (case-folded)
       "the archive is not readable": "das Archiv ist nicht lesbar"}
WANT_TRAIN = {("Show the commit log of a branch", "Den Commit-Verlauf eines Branches anzeigen"),
              ("Print the working tree status", "Den Status des Arbeitsverzeichnisses ausgeben"),
              ("Open the selected file", "Die ausgewählte Datei öffnen"),
              ("Save all open files", "Alle offenen Dateien speichern"),
              ("Drag & drop the files", "Dateien ziehen & ablegen"),
              ("Open a new window", "Ein neues Fenster öffnen"),
              ("No space left on the device", "Kein Platz mehr auf dem Gerät")}
WANT_EVAL = {("cannot lock the ref file", "kann die Referenzdatei nicht sperren"),
             ("print the file names in order", "die Dateinamen der Reihe nach ausgeben"),
             ("the archive is not readable", "das Archiv ist nicht lesbar")}
# sources.txt's counts for git: untranslated, multiline, placeholder, markup, words, duplicate.
WANT_GIT_COUNTS = "2,1,3,4,3,0"

failures = 0


def report(name, problem):
    global failures
    if problem:
        failures += 1
        print(f"FAIL {name}: {problem}")
    else:
        print(f"PASS {name}")


def make_locale(folder, **catalogs):
    """Every domain the generator reads, empty but for catalogs (domain -> bytes or None: left out)."""
    folder.mkdir(parents=True)
    for domain in list(gen.TRAIN) + list(gen.EVAL):
        content = catalogs.get(domain.replace("-", "_"), mo_bytes({}))
        if content is not None:
            (folder / f"{domain}.mo").write_bytes(content)
    return folder


def run(locale, out, *flags):
    return subprocess.run([sys.executable, str(GENERATOR), f"--locale_dir={locale}", f"--out={out}", *flags],
                          capture_output=True, text=True)


def pairs(out, prefix):
    en = (out / f"{prefix}.en").read_text(encoding="utf-8").split("\n")[:-1]
    de = (out / f"{prefix}.de").read_text(encoding="utf-8").split("\n")[:-1]
    return list(zip(en, de))


def check_bad(name, locale, out, want, *flags):
    before = {f: (out / f).read_bytes() for f in OUTPUTS if (out / f).exists()}
    p = run(locale, out, *flags)
    lines = p.stderr.strip().split("\n")
    written = [f for f in OUTPUTS if (out / f).exists() and (out / f).read_bytes() != before.get(f)]
    if p.returncode != 2 or len(lines) != 1 or not lines[0].startswith(want):
        report(name, f"status {p.returncode}, stderr {p.stderr.strip()!r}, want a line starting {want!r}")
    elif written:
        report(name, f"a failed run wrote {written}")
    else:
        report(name, None)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        locale = make_locale(tmp / "de", git=mo_bytes(GIT), libc=mo_bytes(LIBC, "ISO-8859-1"),
                             coreutils=mo_bytes(COREUTILS), tar=mo_bytes(TAR))
        out = tmp / "out"
        p = run(locale, out)
        if p.returncode != 0:
            report("gettext_generate", f"status {p.returncode}: {p.stderr.strip()[-300:]}")
            return 1
        train, evals = pairs(out, "train"), pairs(out, "newstest2014")
        report("gettext_train_pairs_cleaned", None if set(train) == WANT_TRAIN and len(train) == len(WANT_TRAIN)
               else f"got {sorted(set(train) ^ WANT_TRAIN)} (symmetric difference), {len(train)} lines")
        report("gettext_eval_pairs_one_per_source", None if set(evals) == WANT_EVAL and len(evals) == len(WANT_EVAL)
               else f"got {sorted(evals)}")
        sources = (out / "sources.txt").read_text(encoding="utf-8").split("\n")
        rows = {line.split()[1]: line.split() for line in sources if line and not line.startswith("#")}
        git = rows.get("git", [])
        problem = None
        if set(rows) != set(gen.TRAIN) | set(gen.EVAL):
            problem = f"catalogs {sorted(rows)}"
        elif git[:3] != ["train", "git", "git"] or git[4:] != ["7", WANT_GIT_COUNTS]:
            problem = f"git's row is {git}, want 7 pairs and dropped {WANT_GIT_COUNTS}"
        elif rows["libc"][4:] != ["1", "0,0,0,0,0,1"] or rows["tar"][:3] != ["eval", "tar", "tar"]:
            problem = f"libc's row {rows['libc']}, tar's {rows['tar']}"
        elif "1 training pairs left out" not in sources[-2]:
            problem = f"the summary line is {sources[-2]!r}"
        report("gettext_sources_txt", problem)

        again = tmp / "again"
        run(locale, again)
        same = all((out / f).read_bytes() == (again / f).read_bytes() for f in OUTPUTS)
        report("gettext_same_seed_same_files", None if same else "files differ")
        other = tmp / "other"
        run(locale, other, "--seed=7")
        report("gettext_other_seed_other_order",
               None if pairs(other, "train") != train and set(pairs(other, "train")) == set(train)
               else "seed 7 gave the same order (or other pairs)")
        capped = tmp / "capped"
        run(locale, capped, "--train_pairs=3", "--eval_pairs=2")
        report("gettext_caps_keep_prefixes",
               None if pairs(capped, "train") == train[:3] and pairs(capped, "newstest2014") == evals[:2]
               else f"got {pairs(capped, 'train')}")

        check_bad("gettext_no_locale_dir", tmp / "nowhere", tmp / "o1", f"error: {tmp}/nowhere: no such folder")
        missing = make_locale(tmp / "missing", gnupg2=None)
        check_bad("gettext_missing_catalog", missing, tmp / "o2",
                  f"error: {missing}/gnupg2.mo: no such catalog (is its package, gnupg-l10n, installed?")
        corrupt = make_locale(tmp / "corrupt", sed=b"\x00" * 64)
        check_bad("gettext_corrupt_catalog", corrupt, tmp / "o3",
                  f"error: {corrupt}/sed.mo: not a readable gettext catalog")
        truncated = make_locale(tmp / "truncated", make=mo_bytes(GIT)[:200])
        check_bad("gettext_truncated_catalog", truncated, tmp / "o4",
                  f"error: {truncated}/make.mo: not a readable gettext catalog")
        check_bad("gettext_out_holds_a_set", locale, out, f"error: {out}/train.en: exists already")

        # make deps installs every package a catalog comes from.
        deps = (ROOT / "scripts" / "deps.sh").read_text(encoding="utf-8")
        listed = re.search(r"gettext_debs=\(([^)]*)\)", deps)
        listed = set(listed.group(1).split()) if listed else set()
        needed = set(gen.TRAIN.values()) | set(gen.EVAL.values())
        report("gettext_packages_in_deps", None if needed <= listed
               else f"scripts/deps.sh's gettext_debs lacks {sorted(needed - listed)}")

        # The installed catalogs: what prepare_data.sh small makes.
        real = tmp / "real"
        p = run(gen.DEFAULT_LOCALE_DIR, real)
        if p.returncode == 2 and "no such catalog" in p.stderr:
            print(f"SKIP gettext_installed_catalogs: {p.stderr.strip()} (make deps installs the packages)")
        else:
            train, evals = pairs(real, "train"), pairs(real, "newstest2014")
            eval_sources = {en.casefold() for en, _ in evals}
            problem = None
            if p.returncode != 0:
                problem = f"status {p.returncode}: {p.stderr.strip()[-300:]}"
            elif not (5000 <= len(train) <= 20000 and 300 <= len(evals) <= 1000):
                problem = f"{len(train)} train, {len(evals)} eval pairs"
            elif any(en.casefold() in eval_sources for en, _ in train):
                problem = "an eval source is in training"
            elif any(c in en + de for en, de in train + evals for c in "%<>{}\\_\n\t"):
                problem = "a kept pair holds a format, markup or an identifier"
            report("gettext_installed_catalogs", problem)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
