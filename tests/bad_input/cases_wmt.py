"""Bad input of the translation converter (wmt_to_lmdb) on a tiny parallel
set made under {tmp}/raw, of the generators (wmt_generate;
wmt_from_gettext.py on catalogs under {tmp}/de), and of the trainer's
whole eval sources on the converted set.

The good set: train.en/train.de of three pairs, newstest2014.en/.de of two.
A row's setup replaces files: a name mapped to bytes is written, to None
left out. Every error comes before anything is written."""
from case import Case, left_nothing, printed

TRAIN_EN = b"The cat sleeps.\nA dog barks loudly.\nWe go home.\n"
TRAIN_DE = "Die Katze schläft.\nEin Hund bellt laut.\nWir gehen nach Hause.\n".encode()
EVAL_EN = b"The dog sleeps.\nWe bark.\n"
EVAL_DE = "Der Hund schläft.\nWir bellen.\n".encode()
GOOD = {"train.en": TRAIN_EN, "train.de": TRAIN_DE, "newstest2014.en": EVAL_EN, "newstest2014.de": EVAL_DE}
RAW = "{tmp}/raw"
FILES = (f"--train_src={RAW}/train.en --train_tgt={RAW}/train.de "
         f"--eval_src={RAW}/newstest2014.en --eval_tgt={RAW}/newstest2014.de")
CONVERT = f"{{build}}/bin/wmt_to_lmdb {FILES} --vocab_size=100 --out={{tmp}}/lmdb"
GENERATE = "{build}/bin/wmt_generate --out={tmp}/gen"
GETTEXT = "python3 {root}/datasets/wmt_from_gettext.py --locale_dir={tmp}/de --out={tmp}/gen"
BAD_UTF8 = b"The cat sleeps.\nA dog \xc3\x28barks.\nWe go home.\n"  # 0xC3 then not a continuation byte
NUL = "Der Hund schläft.\nWir\0bellen.\n".encode()
LONG = TRAIN_DE + b"a" * 70000 + b"\n"


def catalog(name, content):
    """A setup: {tmp}/de holding one file."""
    def setup(t):
        t.write("de/" + name, content)
    return setup


def wmt(**files):
    """A setup: the good set with files replaced (None: left out)."""
    def setup(t):
        for name, content in {**GOOD, **files}.items():
            if content is not None:
                t.write("raw/" + name, content)
    return setup


no_output = left_nothing("lmdb/train", "lmdb/eval", "lmdb/eval.ref", "lmdb/vocab.subwords")


def converted(t):
    """A setup: the good set converted into {tmp}/lmdb, a trainer's data set."""
    wmt()(t)
    t.run(CONVERT)


# The trainer, tiny, on the converted good set: its eval sources are 5 and 8
# subwords (EOS included) under the 100-entry vocabulary.
TRAIN_WHOLE = ("{build}/bin/transformer --config={root}/translation/configs/small.conf --d_model=32 "
               "--d_ff=64 --heads=2 --enc_layers=1 --dec_layers=1 --max_tokens=64 --max_length=8 "
               "--extra_decode_length=10 --eval_sources=whole --max_epochs=1 --device=cpu "
               "--data_dir={tmp} --log_file={tmp}/run.log")


def reference_is(want):
    def check(t, proc):
        got = (t.path / "lmdb" / "eval.ref").read_bytes()
        return None if got == want else f"eval.ref is {got!r}, want {want!r}"
    return check


CASES = [
    Case("transformer_eval_whole_too_few_positions", TRAIN_WHOLE + " --max_positions=17",
         "error: --max_positions: 17 positions do not hold {tmp}/lmdb/eval record 1's source whole "
         "(8 tokens) and the 10 decoded past it (--extra_decode_length): want at least 18", 2,
         "eval sources read whole (eval_sources = whole, the v0.7 rules) that the model's positions "
         "cannot hold with the decoding past them: an error naming the flag, never a cut",
         setup=converted),
    Case("transformer_eval_whole_fits", TRAIN_WHOLE + " --max_positions=18", None, 0,
         "eval sources whole with just enough positions: the run evaluates", setup=converted,
         check=printed("transformer: eval sources whole: the longest 8 tokens, decoded up to 10 more")),
    Case("wmt_line_counts_differ", CONVERT,
         f"error: {RAW}/train.de: 2 lines, but {RAW}/train.en has 3: the two files of a pair must be parallel", 2,
         "a target file a line short (a truncated download)",
         setup=wmt(**{"train.de": TRAIN_DE[:TRAIN_DE.index(b"Wir")]}), check=no_output),
    Case("wmt_invalid_utf8", CONVERT,
         f"error: {RAW}/train.en: line 2: invalid UTF-8 at byte offset {BAD_UTF8.index(0xc3)}", 2,
         "a byte sequence that is not UTF-8 (a Latin-1 file)", setup=wmt(**{"train.en": BAD_UTF8}), check=no_output),
    Case("wmt_nul_byte", CONVERT,
         f"error: {RAW}/newstest2014.de: line 2: a NUL byte at byte offset {NUL.index(0)}: not text", 2,
         "a NUL byte in the eval reference", setup=wmt(**{"newstest2014.de": NUL}), check=no_output),
    Case("wmt_line_too_long", CONVERT,
         f"error: {RAW}/train.de: line 4: 70000 bytes, more than 65536 (not one sentence a line?)", 2,
         "a line of 70,000 bytes (the limit is 64 KiB)",
         setup=wmt(**{"train.de": LONG, "train.en": TRAIN_EN + b"x\n"}), check=no_output),
    Case("wmt_missing_file", CONVERT,
         f"error: --eval_src: '{RAW}/newstest2014.en': No such file or directory", 2,
         "the eval source file is not there", setup=wmt(**{"newstest2014.en": None}), check=no_output),
    Case("wmt_missing_flag", f"{{build}}/bin/wmt_to_lmdb --train_src={RAW}/train.en --train_tgt={RAW}/train.de "
         f"--eval_src={RAW}/newstest2014.en --vocab_size=100 --out={{tmp}}/lmdb",
         "error: --eval_tgt: missing: a text file, one sentence a line", 2, "no --eval_tgt", setup=wmt()),
    Case("wmt_eval_empty_line", CONVERT,
         f"error: {RAW}/newstest2014.de: line 2: empty: every eval line is needed (the BLEU reference)", 2,
         "a white-space-only eval line", setup=wmt(**{"newstest2014.de": "Der Hund schläft.\n \t\n".encode()}),
         check=no_output),
    Case("wmt_train_empty_pair_skipped", CONVERT, None, 0,
         "a training pair whose German is empty (WMT17's files hold a few): skipped and counted",
         setup=wmt(**{"train.de": "Die Katze schläft.\n\nWir gehen nach Hause.\n".encode()}),
         check=printed("train: 2 pairs, ")),
    Case("wmt_crlf_accepted", CONVERT, None, 0,
         "CRLF line ends and a byte-order mark (files written on Windows): the CR and the mark are dropped",
         setup=wmt(**{"newstest2014.de": b"\xef\xbb\xbf" + EVAL_DE.replace(b"\n", b"\r\n")}),
         check=reference_is(EVAL_DE)),
    Case("wmt_no_final_newline", CONVERT, None, 0, "a file whose last line has no line end",
         setup=wmt(**{"newstest2014.de": EVAL_DE[:-1]}), check=reference_is(EVAL_DE)),
    Case("wmt_out_exists", CONVERT, "error: {tmp}/lmdb/train: already exists; remove it first", 2,
         "--out holds a converted set already", setup=wmt(**{"../lmdb/train/x": b""})),
    Case("wmt_out_not_a_folder", f"{{build}}/bin/wmt_to_lmdb {FILES} --vocab_size=100 --out={RAW}/train.en",
         f"error: --out: '{RAW}/train.en' is not a folder", 2, "--out is a file", setup=wmt()),
    Case("wmt_out_cannot_be_made", f"{{build}}/bin/wmt_to_lmdb {FILES} --vocab_size=100 --out={RAW}/train.en/x",
         f"error: {RAW}/train.en/x: cannot create directory: Not a directory", 2,
         "--out below a file (an unwritable place)", setup=wmt()),
    Case("wmt_vocab_and_size", f"{{build}}/bin/wmt_to_lmdb {FILES} --vocab_size=100 --vocab={RAW}/train.en "
         "--out={tmp}/lmdb",
         "error: --vocab: give one of --vocab (an existing vocabulary) and --vocab_size (build one), not both", 2,
         "both a vocabulary and a size", setup=wmt()),
    Case("wmt_no_vocab", f"{{build}}/bin/wmt_to_lmdb {FILES} --out={{tmp}}/lmdb",
         "error: --vocab_size: give one of --vocab (an existing vocabulary) and --vocab_size (build one)", 2,
         "neither a vocabulary nor a size", setup=wmt()),
    Case("wmt_vocab_missing", f"{{build}}/bin/wmt_to_lmdb {FILES} --vocab={RAW}/vocab.ende.32768 --out={{tmp}}/lmdb",
         f"error: --vocab: '{RAW}/vocab.ende.32768': No such file or directory", 2,
         "--vocab names no file", setup=wmt()),
    Case("wmt_generate_eval_too_many", f"{GENERATE} --eval_pairs=100000 --max_words=4",
         "error: --eval_pairs: 100000, but only 676 sentence pairs of at most 4 words were found", 2,
         "more eval pairs than sentence pairs"),
    Case("wmt_generate_out_exists", f"{GENERATE} --eval_pairs=10",
         "error: {tmp}/gen/train.en: already exists; remove it first", 2, "--out holds a generated set already",
         setup=wmt(**{"../gen/train.en": b"x\n"})),
    Case("wmt_generate_no_dictionary", f"{GENERATE} --dict={{tmp}}/none",
         "error: {tmp}/none: cannot open: No such file or directory", 2, "--dict names no file"),
    Case("wmt_gettext_no_locale_dir", GETTEXT, "error: {tmp}/de: no such folder (the German gettext catalogs)",
         2, "the small set's generator without the catalogs' folder", check=left_nothing("gen/train.en")),
    Case("wmt_gettext_missing_catalog", GETTEXT,
         "error: {tmp}/de/coreutils.mo: no such catalog (is its package, coreutils, installed? make deps installs it)",
         2, "a catalog the set is made of is not installed", setup=catalog("x", b""),
         check=left_nothing("gen/train.en")),
    Case("wmt_gettext_corrupt_catalog", GETTEXT,
         "error: {tmp}/de/coreutils.mo: not a readable gettext catalog (Bad magic number)", 2,
         "a catalog that is not a .mo file (a .po's text where the magic number should be)",
         setup=catalog("coreutils.mo", b'msgid ""\nmsgstr ""\n'), check=left_nothing("gen/train.en")),
]
