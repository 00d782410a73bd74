"""NCF: damaged ncf.bin files, ratings.csv as editors write it, failed and
killed conversions, benchmark runs and out-of-range flags."""
import json
import shutil
import struct
from pathlib import Path

from case import Case, left_nothing

NCF = ("{build}/bin/ncf --config={root}/recommendation/configs/small.conf --device=cpu "
       "--log_file={tmp}/run.log")
CONVERT = "{build}/bin/movielens_convert"

# recommendation/movielens.h, MlFileHeader: the byte offsets of the fields edited here.
N_USERS, N_ITEMS, N_TRAIN, N_NEG, NEG_SEED, MIN_RATINGS = 16, 24, 32, 40, 48, 56
OFF_TRAIN_OFFSETS, OFF_TRAIN_ITEMS, FILE_BYTES = 64, 72, 112
SECTIONS = ("off_train_offsets", "off_train_items", "off_test_items", "off_test_negs",
            "off_user_ids", "off_item_ids")


def layout(n_users, n_items, n_train, n_neg):
    """The section offsets and file size ncf.bin's format gives these counts
    (recommendation/movielens.h: a 136-byte header, then the sections in order, each
    at a multiple of 64 bytes)."""
    def align(x):
        return (x + 63) // 64 * 64
    at, offsets = 136, []
    for item_bytes, count in ((8, n_users + 1), (4, n_train), (4, n_users), (4, n_users * n_neg),
                              (4, n_users), (4, n_items)):
        at = align(at)
        offsets.append(at)
        at += item_bytes * count
    return offsets, at


def copy_data(t):
    """{tmp}/data/ncf.bin, a copy of the fixture's; its path."""
    (t.path / "data").mkdir()
    return Path(shutil.copy(t.fixture("ncf_data") / "ncf.bin", t.path / "data" / "ncf.bin"))


def field(raw, at):
    return struct.unpack_from("<q", raw, at)[0]


def edit_header(at, value_of):
    """A setup: the copy's int64 header field at `at` set to value_of(old);
    the substitutions {old} and {new}."""
    def setup(t):
        path = copy_data(t)
        raw = bytearray(path.read_bytes())
        old = field(raw, at)
        struct.pack_into("<q", raw, at, value_of(old))
        path.write_bytes(raw)
        return {"old": old, "new": value_of(old), "n_train": field(raw, N_TRAIN)}
    return setup


def double_items(t):
    """n_items doubled: the last section (the items' original ids) would run
    past the end."""
    subs = edit_header(N_ITEMS, lambda n: 2 * n)(t)
    raw = (t.path / "data" / "ncf.bin").read_bytes()
    subs.update(size=len(raw), need=len(raw) + 4 * subs["old"])
    return subs


def one_more_user(t):
    """n_users one more: the first section whose offset the new count moves
    is the one named."""
    subs = edit_header(N_USERS, lambda n: n + 1)(t)
    raw = (t.path / "data" / "ncf.bin").read_bytes()
    counts = struct.unpack_from("<4q", raw, N_USERS)
    have = struct.unpack_from("<6Q", raw, OFF_TRAIN_OFFSETS)
    want, _ = layout(*counts)
    s = next(s for s in range(6) if have[s] != want[s])
    subs.update(section=SECTIONS[s], at=have[s], want=want[s])
    return subs


def tiny_file(t):
    copy_data(t)
    t.write("data/ncf.bin", b"NCFMLBIN\x01\x00")


def halve_items(t):
    """n_items halved: the first of user 0's training items at or above the
    new count is the one the trainer names."""
    subs = edit_header(N_ITEMS, lambda n: n // 2)(t)
    raw = (t.path / "data" / "ncf.bin").read_bytes()
    start, end = struct.unpack_from("<2q", raw, field(raw, OFF_TRAIN_OFFSETS))
    items = struct.unpack_from(f"<{end - start}i", raw, field(raw, OFF_TRAIN_ITEMS) + 4 * start)
    subs["item"] = next(i for i in items if i >= subs["new"])
    return subs


def min_ratings_above_user_0(t):
    subs = edit_header(MIN_RATINGS, lambda n: 1000000)(t)
    raw = (t.path / "data" / "ncf.bin").read_bytes()
    start, end = struct.unpack_from("<2q", raw, field(raw, OFF_TRAIN_OFFSETS))
    subs["ratings"] = end - start + 1
    return subs


def resize(delta):
    def setup(t):
        path = copy_data(t)
        raw = path.read_bytes()
        size = len(raw)
        path.write_bytes(raw[:size + delta] if delta < 0 else raw + bytes(delta))
        return {"size": size, "now": size + delta}
    return setup


def ratings(t, edit):
    """{tmp}/ratings.csv: the fixture's raw ratings.csv through edit(bytes)."""
    raw = (t.fixture("ncf_data") / ".." / "raw" / "ratings.csv").read_bytes()
    t.write("ratings.csv", edit(raw))


def blank_line_after_line_3(raw):
    lines = raw.split(b"\n")
    return b"\n".join(lines[:3] + [b""] + lines[3:])


def control_byte_on_line_2(t):
    """A vertical tab ends ratings.csv's line 2 (its first rating); {line_2}
    is that rating."""
    raw = (t.fixture("ncf_data") / ".." / "raw" / "ratings.csv").read_bytes()
    lines = raw.split(b"\n")
    t.write("ratings.csv", b"\n".join(lines[:1] + [lines[1] + b"\x0b"] + lines[2:]))
    return {"line_2": lines[1].decode()}


def same_as_fixture(t, proc):
    """The conversion gave the fixture's very ncf.bin, and no temporary file."""
    out = t.path / "out"
    if (out / "ncf.bin.tmp").exists():
        return "ncf.bin.tmp left behind"
    if not (out / "ncf.bin").exists():
        return "no ncf.bin written"
    if (out / "ncf.bin").read_bytes() != (t.fixture("ncf_data") / "ncf.bin").read_bytes():
        return "ncf.bin differs from the fixture's (the same ratings, converted alike)"
    return None


def no_ncf_bin(t, proc):
    if (t.path / "out" / "ncf.bin").exists():
        return "an ncf.bin is left for a later run to train on"
    return None


def earlier_output(t):
    """{tmp}/out holds the ncf.bin of an earlier conversion."""
    (t.path / "out").mkdir()
    shutil.copy(t.fixture("ncf_data") / "ncf.bin", t.path / "out" / "ncf.bin")


def stale_tmp(t):
    (t.path / "out").mkdir()
    t.write("out/ncf.bin.tmp", b"NCFMLBIN and the rest of a killed run's partial file")


def log_keys(t):
    return [json.loads(line[len(":::MLLOG "):])["key"]
            for line in (t.path / "run.log").read_text().splitlines()
            if line.startswith(":::MLLOG ")]


def benchmark_run(t, proc):
    keys = log_keys(t)
    if "benchmark_stop" not in keys or "run_start" in keys or "run_stop" in keys:
        return f"want benchmark_start/benchmark_stop and no run_start/run_stop, got {keys}"
    if "ncf: benchmark of training steps on the data set:" not in proc.stdout:
        return "no 'ncf: benchmark of ...' line"
    if "target NOT reached" in proc.stdout or "aborted" in proc.stdout:
        return "a benchmark run reported as a failed training run"
    return None


def epoch_one_scored(t, proc):
    if "ncf: epoch 1: HR@10" not in proc.stdout:
        return "no epoch 1 line"
    return None


def metric_tests_pass(t, proc):
    for name in ("saturated_sigmoids_tie", "large_logits_match_reference"):
        if f"PASS {name}" not in proc.stdout:
            return f"no 'PASS {name}'"
    return None


def out_of_range(name, flag, allowed, doc):
    key, value = flag.split("=", 1)
    return Case(name, doc=f"{flag}: {doc}", cmd=NCF + " --data_dir={ncf_data} " + flag,
                error=f"error: {key}: {value} is outside {allowed}", status=2)


def train_one_epoch(t):
    t.run(NCF.format(build=t.build, root=t.root, tmp=t.path) +
          f" --data_dir={t.fixture('ncf_data')} --max_epochs=1 --checkpoint={t.path}/c.ckpt")


BIN = "{tmp}/data/ncf.bin"
ON_COPY = NCF + " --data_dir={tmp}/data"

CASES = [
    # ncf.bin: every inconsistency one line naming the file and the problem.
    Case("ncf_bin_items_halved",
         doc="n_items halved in the header (once a message contradicting itself)",
         setup=halve_items, cmd=ON_COPY,
         error="error: " + BIN + ": training item {item} of user 0 is outside the {new} items "
               "the header declares", status=2),
    Case("ncf_bin_items_doubled", doc="n_items doubled: the counts need more bytes than there are",
         setup=double_items, cmd=ON_COPY,
         error="error: " + BIN + ": the counts (3000 users, {new} items, {n_train} training items, "
               "999 test negatives per user) need {need} bytes; the file has {size}", status=2),
    Case("ncf_bin_truncated", doc="the file cut short by 4 bytes",
         setup=resize(-4), cmd=ON_COPY,
         error="error: " + BIN + ": truncated: {now} bytes, header field file_bytes says {size}",
         status=2),
    Case("ncf_bin_trailing_bytes", doc="bytes appended to the file",
         setup=resize(64), cmd=ON_COPY,
         error="error: " + BIN + ": {now} bytes, more than the {size} header field file_bytes says",
         status=2),
    Case("ncf_bin_file_bytes_edited", doc="the header's file size field changed",
         setup=edit_header(FILE_BYTES, lambda n: n + 64), cmd=ON_COPY,
         error="error: " + BIN + ": truncated: {old} bytes, header field file_bytes says {new}",
         status=2),
    Case("ncf_bin_shorter_than_header", doc="a 10-byte ncf.bin",
         setup=tiny_file, cmd=ON_COPY,
         error="error: " + BIN + ": 10 bytes, shorter than the 136-byte header: not a complete "
               "ncf.bin",
         status=2),
    Case("ncf_bin_users_changed", doc="n_users one more: the sections the header places move",
         setup=one_more_user, cmd=ON_COPY,
         error="error: " + BIN + ": header field {section} is {at}; the counts (3001 users, "
               "3000 items, {n_train} training items, 999 test negatives per user) put that "
               "section at byte {want}", status=2),
    Case("ncf_bin_negatives_zero", doc="n_neg 0",
         setup=edit_header(N_NEG, lambda n: 0), cmd=ON_COPY,
         error="error: " + BIN + ": header field n_neg is 0, outside [1, 100000]", status=2),
    Case("ncf_bin_neg_seed_changed", doc="neg_seed no longer the seed of the negatives",
         setup=edit_header(NEG_SEED, lambda n: 12345), cmd=ON_COPY,
         error="error: " + BIN + ": user 0's test negatives are not those header field neg_seed "
               "12345 draws", status=2),
    Case("ncf_bin_min_ratings_raised", doc="min_ratings above what the users have",
         setup=min_ratings_above_user_0, cmd=ON_COPY,
         error="error: " + BIN + ": user 0 has {ratings} ratings (training and test), fewer than "
               "header field min_ratings 1000000", status=2),
    Case("ncf_bin_is_a_directory", doc="a directory in ncf.bin's place",
         setup=lambda t: (t.path / "data" / "ncf.bin").mkdir(parents=True), cmd=ON_COPY,
         error="error: " + BIN + ": not a file (a directory?)", status=2),
    Case("ncf_bin_missing", doc="a data directory without ncf.bin",
         setup=lambda t: (t.path / "data").mkdir(), cmd=ON_COPY,
         error="error: " + BIN + ": cannot open: No such file or directory (convert ratings.csv "
               "with movielens_convert)", status=2),

    # ratings.csv: what editors and spreadsheets write is accepted.
    Case("ncf_csv_trailing_blank_lines", doc="blank lines (LF, CRLF, spaces) end ratings.csv",
         setup=lambda t: ratings(t, lambda raw: raw + b"\n\n\r\n  \n"),
         cmd=CONVERT + " --input={tmp}/ratings.csv --out={tmp}/out",
         error=None, status=0, check=same_as_fixture),
    Case("ncf_csv_utf8_bom", doc="a UTF-8 byte-order mark starts ratings.csv (skipped)",
         setup=lambda t: ratings(t, lambda raw: b"\xef\xbb\xbf" + raw),
         cmd=CONVERT + " --input={tmp}/ratings.csv --out={tmp}/out",
         error=None, status=0, check=same_as_fixture),
    Case("ncf_csv_blank_line_inside", doc="a blank line with ratings after it",
         setup=lambda t: ratings(t, blank_line_after_line_3),
         cmd=CONVERT + " --input={tmp}/ratings.csv --out={tmp}/out",
         error="error: {tmp}/ratings.csv:4: blank line before more ratings (blank lines may only "
               "end the file)", status=2, check=no_ncf_bin),
    Case("ncf_csv_utf16", doc="ratings.csv saved as UTF-16",
         setup=lambda t: ratings(t, lambda raw: raw.decode().encode("utf-16")),
         cmd=CONVERT + " --input={tmp}/ratings.csv --out={tmp}/out",
         error='error: {tmp}/ratings.csv: UTF-16 text (it starts with the byte-order mark '
               '"\\xff\\xfe"); save it as UTF-8', status=2),
    Case("ncf_csv_control_character", doc="a stray control byte shows as \\xNN, on one line",
         setup=control_byte_on_line_2,
         cmd=CONVERT + " --input={tmp}/ratings.csv --out={tmp}/out",
         error='error: {tmp}/ratings.csv:2: bad timestamp (want unix seconds ending the line): '
               '"{line_2}\\x0b"', status=2),
    Case("ncf_csv_is_a_directory", doc="--input names a directory",
         cmd=CONVERT + " --input={tmp} --out={tmp}/out",
         error="error: {tmp}: not a file (a directory?)", status=2),

    # The converter: no partial or stale ncf.bin for a later run to train on.
    Case("ncf_convert_killed", doc="a conversion killed while writing (file size limit, "
                                   "SIGXFSZ), over an earlier ncf.bin: the trainer finds none",
         setup=earlier_output,
         cmd="{{ (ulimit -f 1000; exec " + CONVERT + " --input={ncf_data}/../raw/ratings.csv "
             "--out={tmp}/out); }} >/dev/null 2>&1; " + NCF + " --data_dir={tmp}/out",
         error="error: {tmp}/out/ncf.bin: cannot open: No such file or directory (convert "
               "ratings.csv with movielens_convert)", status=2),
    Case("ncf_convert_write_fails",
         doc="a write that fails (file too large), over an earlier ncf.bin: the partial ncf.bin.tmp is removed",
         setup=earlier_output,
         cmd="trap '' XFSZ; ulimit -f 1000; " + CONVERT + " --input={ncf_data}/../raw/ratings.csv "
             "--out={tmp}/out",
         error="error: {tmp}/out/ncf.bin: cannot write: File too large (left as it was)", status=2,
         check=lambda t, proc: no_ncf_bin(t, proc) or left_nothing("out/ncf.bin.tmp")(t, proc)),
    Case("ncf_convert_input_missing",
         doc="a conversion that fails on its input, over an earlier ncf.bin",
         setup=earlier_output,
         cmd=CONVERT + " --input={tmp}/missing.csv --out={tmp}/out",
         error="error: {tmp}/missing.csv: cannot open: No such file or directory", status=2,
         check=no_ncf_bin),
    Case("ncf_convert_stale_tmp", doc="a stale ncf.bin.tmp of a killed run is replaced",
         setup=stale_tmp,
         cmd=CONVERT + " --input={ncf_data}/../raw/ratings.csv --out={tmp}/out",
         error=None, status=0, check=same_as_fixture),
    Case("ncf_convert_negatives_zero", doc="--negatives=0",
         cmd=CONVERT + " --input={ncf_data}/../raw/ratings.csv --out={tmp}/out --negatives=0",
         error="error: --negatives: 0 is outside [1, 100000]", status=2),
    Case("ncf_convert_min_ratings_one", doc="--min_ratings=1 (one rating is held out)",
         cmd=CONVERT + " --input={ncf_data}/../raw/ratings.csv --out={tmp}/out --min_ratings=1",
         error="error: --min_ratings: 1 is outside [2, inf)", status=2),
    Case("ncf_generate_size_unknown", doc="--size=huge",
         cmd="{build}/bin/movielens_generate --size=huge --out={tmp}/raw",
         error="error: --size: 'huge' is not one of small|full", status=2),

    # HR@10 ranks the fp32 sigmoids, saturated ties against the positive.
    Case("ncf_hr10_saturated_sigmoids", doc="large logits: ranked as the reference's fp32 "
                                            "sigmoids (unit test)",
         cmd="{build}/tests/test_ncf_metric", error=None, status=0, check=metric_tests_pass),

    # Benchmark runs say what they are.
    Case("ncf_bench_steps", doc="--bench_steps=3: a benchmark run, not a failed training run",
         cmd=NCF + " --data_dir={ncf_data} --bench_steps=3",
         error=None, status=0, check=benchmark_run),
    Case("ncf_bench_batch_over_epoch", doc="--bench_steps with a batch larger than an epoch",
         setup=lambda t: {"samples": 5 * field((t.fixture("ncf_data") / "ncf.bin").read_bytes(),
                                               N_TRAIN)},
         cmd=NCF + " --data_dir={ncf_data} --bench_steps=3 --batch_size=100000000",
         error="error: --batch_size: 100000000 is larger than an epoch ({samples} samples); a "
               "bench run times full batches", status=2),
    Case("ncf_profile_without_bench", doc="--profile_steps without --bench_steps (once ignored)",
         cmd=NCF + " --data_dir={ncf_data} --profile_steps=5",
         error="error: --profile_steps: profiles the steps after a bench run: give "
               "--bench_steps=N too", status=2),

    # Checkpoints (the lifecycle's, as ResNet's: cases_resnet.py).
    Case("ncf_resume_other_batch_size", doc="a resume with another batch size than the "
                                            "checkpoint's run",
         setup=train_one_epoch,
         cmd=NCF + " --data_dir={ncf_data} --checkpoint={tmp}/c.ckpt --resume --batch_size=2048",
         error="error: --resume: --batch_size: 2048 here, 4096 in the run of {tmp}/c.ckpt; resume "
               "with the same settings, or start afresh", status=2),

    # Flags and config lines outside their allowed values.
    out_of_range("ncf_batch_size_zero", "--batch_size=0", "[1, 1073741824]", "an empty batch"),
    out_of_range("ncf_batch_size_huge", "--batch_size=2000000000", "[1, 1073741824]",
                 "a batch whose rows overflow a GEMM's int"),
    out_of_range("ncf_max_epochs_zero", "--max_epochs=0", "[1, 1000000]",
                 "no epoch to train (no division by zero, no empty run)"),
    out_of_range("ncf_eval_users_zero", "--eval_users=0", "[1, inf)", "the eval's step of users"),
    out_of_range("ncf_grad_accumulation_zero", "--grad_accumulation=0", "[1, inf)",
                 "no micro-batch to run a step's rows in"),
    out_of_range("ncf_train_negatives_zero", "--train_negatives=0", "[1, 1000]",
                 "no negatives to learn from"),
    out_of_range("ncf_mf_dim_zero", "--mf_dim=0", "[1, 65536]", "an empty GMF embedding"),
    out_of_range("ncf_target_above_one", "--target_accuracy=1.5", "(0, 1]", "HR@10 is at most 1"),
    out_of_range("ncf_learning_rate_zero", "--learning_rate=0", "(0, inf)", "no step"),
    out_of_range("ncf_adam_beta1_one", "--adam_beta1=1", "[0, 1)", "Adam's bias correction by 0"),
    Case("ncf_eval_users_above_users", doc="--eval_users above the users: one pass of them all",
         cmd=NCF + " --data_dir={ncf_data} --eval_users=100000000 --max_epochs=1",
         error=None, status=0, check=epoch_one_scored),
    Case("ncf_mlp_layers_odd", doc="--mlp_layers with an odd input width",
         cmd=NCF + " --data_dir={ncf_data} --mlp_layers=31,16",
         error='error: --mlp_layers: want an even input width and at least one layer after it, '
               'got "31,16"', status=2),
    Case("ncf_config_line_max_epochs_zero", doc="a config file line max_epochs = 0",
         setup=lambda t: {"conf": t.write("bad.conf", "# NCF\nmax_epochs = 0\n")},
         cmd="{build}/bin/ncf --config={conf} --data_dir={ncf_data} --log_file={tmp}/run.log",
         error="error: {conf}:2: max_epochs: 0 is outside [1, 1000000]", status=2),
]
