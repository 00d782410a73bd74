#!/usr/bin/env python3
"""wmt_generate and wmt_to_lmdb end to end on a small set (300 train / 40 eval
pairs from trans-de-en): the raw files are parallel, no eval source is
trained on, the same seed gives the same files and another seed others;
every LMDB record (read back with lmdb-utils' mdb_dump, decoded by the
layout of common/data/record.h) holds two sequences, source then target,
each ending with its only EOS, whose ids decode (by tensor2tensor's
SubwordTextEncoder rules, written out below, against the written
vocab.subwords) to the pair's English and German lines; eval.ref is the
eval target file. A conversion with --vocab gives the same records and a
byte-for-byte copy of the vocabulary; a training pair with an empty side
is skipped and counted, and a CRLF line loses its CR. Then
translation/prepare_data.sh small with the sizes overridden, twice (the
second keeps the first's data set).

    python3 tests/datasets/test_wmt_convert.py BUILD_DIR
"""
import os
import re
import shutil
import struct
import sys
import tempfile
import unicodedata
from pathlib import Path

from convert_check import check_prepare, payload, records, report, run

ROOT = Path(__file__).resolve().parents[2]
DICT = Path("/usr/share/trans/de-en")
EOS, PAD = 1, 0


def lines(path):
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def decode_record(value):
    """A TOKENS record: its sequences of ids."""
    value, fmt = payload(value, 3)
    assert fmt == 0, fmt
    (count,) = struct.unpack_from("<I", value, 0)
    lens = struct.unpack_from(f"<{count}I", value, 4)
    at, seqs = 4 + 4 * count, []
    for n in lens:
        seqs.append(list(struct.unpack_from(f"<{n}i", value, at)))
        at += 4 * n
    assert at == len(value), f"{len(value) - at} bytes after the sequences"
    return seqs


def load_vocab(path):
    return [line[1:-1] for line in lines(path)]


def alnum(ch):
    return unicodedata.category(ch)[0] in "LN"


def subword_text(vocab, ids):
    """tensor2tensor's decode: subwords joined, split into tokens at '_',
    unescaped, and a space put back between two alphanumeric tokens."""
    joined = "".join(vocab[i] for i in ids if i not in (PAD, EOS))
    unescape = lambda m: "_" if m.group(0) == "\\u" else "\\" if m.group(0) == "\\\\" else chr(int(m.group(1)))
    tokens = [re.sub(r"\\u|\\\\|\\([0-9]+);", unescape, t) for t in joined.split("_") if t]
    text = ""
    for i, t in enumerate(tokens):
        if i and alnum(tokens[i - 1][0]) and alnum(t[0]):
            text += " "
        text += t
    return text


def check_records(lmdb_split, vocab, src_lines, tgt_lines):
    """None, or what is wrong with the records against the pairs."""
    got = [decode_record(v) for v in records(lmdb_split)]
    if len(got) != len(src_lines):
        return f"{len(got)} records, want {len(src_lines)}"
    for k, (seqs, src, tgt) in enumerate(zip(got, src_lines, tgt_lines)):
        if len(seqs) != 2:
            return f"record {k}: {len(seqs)} sequences, want 2"
        for name, ids, want in (("source", seqs[0], src), ("target", seqs[1], tgt)):
            if not ids or ids[-1] != EOS or EOS in ids[:-1] or PAD in ids:
                return f"record {k}: {name} ids {ids[:8]}..{ids[-3:]}: want one EOS, at the end, and no pad"
            if max(ids) >= len(vocab):
                return f"record {k}: {name} id {max(ids)} outside the vocabulary of {len(vocab)}"
            text = subword_text(vocab, ids)
            if text != want:
                return f"record {k}: {name} decodes to {text!r}, want {want!r}"
    return None


def generate(build, out, seed=1, extra=""):
    p = run(f"{build}/bin/wmt_generate --out={out} --train_pairs=300 --eval_pairs=40 --seed={seed} {extra}")
    if p.returncode:
        raise SystemExit(f"FAIL wmt_generate: status {p.returncode}: {p.stderr.strip()[-300:]}")
    return p


def convert(build, raw, out, vocab_flag, train="train"):
    return run(f"{build}/bin/wmt_to_lmdb --train_src={raw}/{train}.en --train_tgt={raw}/{train}.de "
               f"--eval_src={raw}/newstest2014.en --eval_tgt={raw}/newstest2014.de --out={out} {vocab_flag}")


def main():
    build = (ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")).resolve()
    if not DICT.is_file():
        print(f"SKIP wmt_convert: {DICT} missing (Debian trans-de-en)")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="wmt-test-"))
    try:
        raw = tmp / "raw"
        generate(build, raw)
        en, de = lines(raw / "train.en"), lines(raw / "train.de")
        ev_en, ev_de = lines(raw / "newstest2014.en"), lines(raw / "newstest2014.de")
        sentence = re.compile(r"^\S+( \S+){3,}[.!?]$")
        report("wmt_generate_layout",
               None if len(en) == len(de) == 300 and len(ev_en) == len(ev_de) == 40 and all(en + de)
               and all(sentence.match(s) and len(s.split()) <= 8 for s in ev_en + ev_de)
               and not set(ev_en) & set(en) else f"{len(en)}/{len(de)} train, {len(ev_en)}/{len(ev_de)} eval lines")
        report("wmt_generate_no_markup",
               next((f"line {s!r}" for s in en + de + ev_en + ev_de
                     if re.search(r"[{}\[\]<>()/~]|\b(sth|sb|etw|jdn|jdm)\.", s) or s != s.strip()), None))
        generate(build, tmp / "again")
        same = all((raw / f).read_bytes() == (tmp / "again" / f).read_bytes() for f in os.listdir(raw))
        report("wmt_generate_same_seed_same_files", None if same else "files differ")
        generate(build, tmp / "other", seed=2)
        report("wmt_generate_other_seed_other_files",
               None if (tmp / "other/train.en").read_bytes() != (raw / "train.en").read_bytes() else "same train.en")
        p = generate(build, tmp / "sentences", extra="--phrases=0 --train_pairs=0")
        sent_en = lines(tmp / "sentences/train.en")
        report("wmt_generate_sentences_only",
               None if len(sent_en) > 5000 and all(sentence.match(s) for s in sent_en)
               else f"{len(sent_en)} lines, or a phrase among them: {p.stdout.strip()}")

        lmdb = tmp / "lmdb"
        p = convert(build, raw, lmdb, "--vocab_size=300")
        report("wmt_to_lmdb_runs", None if p.returncode == 0 and "skipped 0 pairs" in p.stdout
               else f"status {p.returncode}: {p.stdout[-300:]}{p.stderr[-300:]}")
        vocab = load_vocab(lmdb / "vocab.subwords")
        report("wmt_vocab_built", None if vocab[:2] == ["<pad>", "<EOS>"] and 100 < len(vocab) < 1000
               else f"{len(vocab)} entries starting {vocab[:3]}")
        report("wmt_records_train", check_records(lmdb / "train", vocab, en, de))
        report("wmt_records_eval", check_records(lmdb / "eval", vocab, ev_en, ev_de))
        report("wmt_eval_ref", None if (lmdb / "eval.ref").read_bytes() == (raw / "newstest2014.de").read_bytes()
               else "eval.ref is not newstest2014.de")

        given = tmp / "given"
        p = convert(build, raw, given, f"--vocab={lmdb}/vocab.subwords")
        report("wmt_to_lmdb_given_vocab",
               None if p.returncode == 0 and (given / "vocab.subwords").read_bytes() ==
               (lmdb / "vocab.subwords").read_bytes() and records(given / "train") == records(lmdb / "train")
               else f"status {p.returncode}: {p.stderr[-300:]} (or other records or vocabulary)")

        # An empty pair (skipped, counted) and a CRLF line (its CR dropped).
        (raw / "odd.en").write_bytes(("\n".join(en[:3]) + "\n \n" + en[3] + "\r\n").encode())
        (raw / "odd.de").write_bytes(("\n".join(de[:3]) + "\n" + de[4] + "\n" + de[3] + "\r\n").encode())
        p = convert(build, raw, tmp / "odd", f"--vocab={lmdb}/vocab.subwords", train="odd")
        problem = (f"status {p.returncode}: {p.stderr[-300:]}" if p.returncode else
                   "no 'skipped 1 pairs with an empty side' line" if "skipped 1 pairs with an empty side"
                   not in p.stdout else check_records(tmp / "odd/train", vocab, en[:4], de[:4]))
        report("wmt_empty_pair_skipped_crlf_stripped", problem)

        env = dict(os.environ, TRAIN_PAIRS="200", EVAL_PAIRS="20", VOCAB_SIZE="300")
        check_prepare("wmt_prepare_small", ROOT / "translation" / "prepare_data.sh", tmp / "prepared", build, env,
                      ROOT, "eval", 20)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
