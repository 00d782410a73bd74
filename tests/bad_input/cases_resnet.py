"""ResNet: damaged data sets, checkpoints, resumes, the eval cadence and
benchmark runs."""
import json
import re
import shutil
import subprocess

from case import Case

# A tiny network, so that the rows that train take a second.
RESNET = ("{build}/bin/resnet --config={root}/image_classification/configs/small.conf "
          "--stages=1 --width=8 --device=cpu --log_file={tmp}/run.log")


def copy_data(t):
    shutil.copytree(t.fixture("resnet_data"), t.path / "d", symlinks=True)
    return t.path / "d"


def log_events(t):
    events = []
    for line in (t.path / "run.log").read_text().splitlines():
        if line.startswith(":::MLLOG "):
            events.append(json.loads(line[len(":::MLLOG "):]))
    return events


def keys(t):
    return [e["key"] for e in log_events(t)]


def run_stop_aborted(t, proc):
    stops = [e for e in log_events(t) if e["key"] == "run_stop"]
    if len(stops) != 1 or stops[0]["metadata"].get("status") != "aborted":
        return f"want one run_stop aborted in the log, got {stops}"
    return None


def no_run_start(t, proc):
    if (t.path / "run.log").exists() and "run_start" in keys(t):
        return "run_start was logged before the error: the check came too late"
    return None


def truncate_train(t):
    d = copy_data(t)
    data = d / "lmdb" / "train" / "data.mdb"
    info = subprocess.run(["mdb_stat", "-e", str(d / "lmdb" / "train")], capture_output=True,
                          text=True, check=True).stdout
    page = int(re.search(r"Page size: (\d+)", info).group(1))
    used = int(re.search(r"Number of pages used: (\d+)", info).group(1))
    size = data.stat().st_size // 2 // page * page
    with open(data, "r+b") as f:
        f.truncate(size)
    return {"size": size, "need": used * page}


def unfinished(t):
    d = copy_data(t)
    (d / "lmdb" / "train").rename(d / "lmdb" / "train.partial")


def bad_magic(t):
    """The first record's MLRC magic overwritten, in the middle of the
    training split."""
    d = copy_data(t)
    data = d / "lmdb" / "train" / "data.mdb"
    raw = bytearray(data.read_bytes())
    at = raw.find(b"MLRC", len(raw) // 2)
    raw[at:at + 4] = b"XXXX"
    data.write_bytes(bytes(raw))


def flipped_bit(t):
    """One bit flipped inside a record's image, in the middle of the
    training split: the JPEG may still decode, the checksum does not match."""
    d = copy_data(t)
    data = d / "lmdb" / "train" / "data.mdb"
    raw = bytearray(data.read_bytes())
    at = raw.find(b"MLRC", len(raw) // 2)
    raw[at + 40] ^= 0x10
    data.write_bytes(bytes(raw))


def train_one_epoch(t):
    t.run(RESNET.format(build=t.build, root=t.root, tmp=t.path) +
          f" --data_dir={t.fixture('resnet_data')} --max_epochs=1 --checkpoint={t.path}/c.ckpt")


def resume_row(name, flag, here, there):
    key = flag.split("=")[0]
    return Case(name, RESNET + " --data_dir={resnet_data} --max_epochs=1 --checkpoint={tmp}/c.ckpt "
                "--resume " + flag,
                f"error: --resume: {key}: {here} here, {there} in the run of {{tmp}}/c.ckpt; "
                "resume with the same settings, or start afresh", 2,
                f"a resume with another {key[2:]} than the checkpoint's run", setup=train_one_epoch)


def evals_on_cadence(t, proc):
    events = log_events(t)
    evals = [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"]
    if evals != [2]:
        return f"evals after epochs {evals}, want [2] (2-epoch cadence, 3 epochs)"
    starts = sum(e["key"] == "block_start" for e in events)
    stops = sum(e["key"] == "block_stop" for e in events)
    if starts != 2 or stops != 2:
        return f"{starts} block_start and {stops} block_stop, want 2 of each"
    last = [e for e in events if e["key"] == "block_start"][-1]["metadata"]
    if last != {**last, "first_epoch_num": 3, "epoch_count": 1}:
        return f"the last block is {last}, want epoch 3 alone (cut by max_epochs)"
    return run_stop_aborted(t, proc)


def benchmark_aborted(t, proc):
    stops = [e for e in log_events(t) if e["key"] == "benchmark_stop"]
    if len(stops) != 1 or stops[0]["metadata"].get("status") != "aborted":
        return f"want one benchmark_stop aborted in the log, got {stops}"
    return None


def benchmark_log(t, proc):
    k = keys(t)
    if "run_start" in k or "run_stop" in k or "benchmark_stop" not in k:
        return f"a benchmark log with run_start/run_stop or without benchmark_stop: {k}"
    if "NOT reached" in proc.stdout or "benchmark of " not in proc.stdout:
        return f"stdout does not say it was a benchmark: {proc.stdout[-300:]!r}"
    return None


def ended_by_signal(status):
    def check(t, proc):
        if f"exit status {status}" not in proc.stdout:
            return f"want the run to end with status {status}, got {proc.stdout.strip()!r}"
        stops = [e for e in log_events(t) if e["key"] == "run_stop"]
        if len(stops) != 1 or stops[0]["metadata"].get("status") != "aborted":
            return f"want one run_stop aborted in the log, got {stops}"
        return None
    return check


MPIRUN = "mpirun --allow-run-as-root --oversubscribe -np 2 "
SIGNAL_RUN = "bash {root}/tests/bad_input/signal_run.sh "

CASES = [
    Case("lmdb_truncated", RESNET + " --data_dir={tmp}/d",
         "error: {tmp}/d/lmdb/train: data.mdb is truncated: {size} bytes, its LMDB metadata needs "
         "{need} (a copy cut short?): copy or convert it again", 2,
         "data.mdb cut to half its size (once SIGBUS, no message)", setup=truncate_train),
    Case("lmdb_unfinished_conversion", RESNET + " --data_dir={tmp}/d",
         "error: {tmp}/d/lmdb/train: missing; {tmp}/d/lmdb/train.partial is an unfinished conversion "
         "(the converter failed or was stopped): convert again", 2,
         "what a converter killed midway leaves (once a partial data set was trained on)",
         setup=unfinished),
    Case("record_corrupt_in_loader", RESNET + " --data_dir={tmp}/d --loader_threads=4",
         re.compile(r"error: .*/d/lmdb/train record \d+: not a record of this suite \(\d+ bytes, "
                    r"no MLRC magic\)"), 2,
         "a corrupt record met by a loader thread (once SIGSEGV after the message); the log ends "
         "with run_stop aborted", setup=bad_magic, check=run_stop_aborted),
    Case("record_bit_flipped", RESNET + " --data_dir={tmp}/d --loader_threads=2",
         re.compile(r"error: .*/d/lmdb/train record \d+: checksum mismatch over its \d+ bytes: the record "
                    r"is damaged; convert the data set again"), 2,
         "one flipped bit in a record's image (once trained on without a word when the JPEG "
         "still decoded: 33 of 40 flips)", setup=flipped_bit, check=run_stop_aborted),
    Case("label_outside_classes", RESNET + " --data_dir={resnet_data} --num_classes=9",
         re.compile(r"error: .*/lmdb/train record \d+: label 9 is outside the 9 classes of this run "
                    r"\(--num_classes\)"), 2,
         "a label outside 0..num_classes-1 (once ignored in training, counted wrong in eval)",
         check=run_stop_aborted),
    Case("checkpoint_unwritable", RESNET + " --data_dir={resnet_data} --checkpoint=/proc/nope/c.ckpt",
         "error: --checkpoint: cannot write /proc/nope/c.ckpt.tmp: No such file or directory", 2,
         "a checkpoint path that cannot be written (once found at the first save, after epoch 4)",
         check=no_run_start),
    Case("checkpoint_is_a_directory", RESNET + " --data_dir={resnet_data} --checkpoint={tmp}",
         "error: --checkpoint: {tmp} is not a file (a directory?)", 2,
         "a checkpoint path that is a directory", check=no_run_start),
    resume_row("resume_other_batch_size", "--batch_size=64", "64", "128"),
    resume_row("resume_other_seed", "--seed=5", "5", "1"),
    resume_row("resume_other_learning_rate", "--base_lr=0.1", "0.1", "0.2"),
    Case("crop_scale_min_above_max", RESNET + " --data_dir={resnet_data} --crop_scale_max=0.5",
         "error: --crop_scale_min: 1 is above --crop_scale_max=0.5", 2,
         "a crop area range upside down (small.conf's minimum is 1)", check=no_run_start),
    Case("crop_ratio_min_above_max", RESNET + " --data_dir={resnet_data} --crop_ratio_min=1.5",
         "error: --crop_ratio_min: 1.5 is above --crop_ratio_max=1.33333", 2,
         "a crop aspect range upside down", check=no_run_start),
    Case("keep_last_batch_short_of_ranks",
         "mpirun --allow-run-as-root --oversubscribe -np 3 " + RESNET +
         " --data_dir={resnet_data} --batch_size=510 --train_last_batch=keep",
         re.compile(r"error: --train_last_batch: keep: the last step's 2 images cannot give each of "
                    r"the 3 ranks one \(drop them, or choose another --batch_size\) \[rank \d\]"), 2,
         "keeping an epoch's last batch when its 512 % 510 = 2 images cannot reach 3 ranks (a rank "
         "without a step would leave the others waiting in the all-reduce)",
         check=no_run_start, needs=("mpirun",), timeout_s=60),
    Case("eval_only_on_cadence", RESNET + " --data_dir={resnet_data} --eval_every=2 --max_epochs=3 "
         "--target_accuracy=0.999", None, 0,
         "max_epochs off the eval cadence: no eval there (once an extra eval at max_epochs could "
         "end the run in a success the rules do not allow)", check=evals_on_cadence),
    Case("rank_killed_under_mpirun",
         SIGNAL_RUN + "rank1 {tmp}/run.log -- " + MPIRUN + RESNET +
         " --data_dir={resnet_data} --max_epochs=50 --target_accuracy=0.999", None, 0,
         "rank 1 of 2 killed mid-run: mpirun ends the job, rank 0 logs run_stop aborted on its "
         "SIGTERM (once no run_stop)", check=ended_by_signal(137), needs=("mpirun",), timeout_s=90),
    Case("ctrl_c", SIGNAL_RUN + "int {tmp}/run.log -- " + RESNET +
         " --data_dir={resnet_data} --max_epochs=50 --target_accuracy=0.999", None, 0,
         "Ctrl-C (SIGINT) mid-run: run_stop aborted, then the signal's usual end",
         check=ended_by_signal(130), timeout_s=90),
    Case("synthetic_is_a_benchmark", RESNET + " --synthetic --synthetic_steps=1", None, 0,
         "a synthetic run logs benchmark_start/benchmark_stop, not a failed training run",
         check=benchmark_log),
    Case("bench_steps_corrupt_record", RESNET + " --data_dir={tmp}/d --bench_steps=20",
         re.compile(r"error: .*/d/lmdb/train record \d+: not a record of this suite \(\d+ bytes, "
                    r"no MLRC magic\)"), 2,
         "a benchmark run stopped by a corrupt record ends its log with benchmark_stop aborted",
         setup=bad_magic, check=benchmark_aborted),
    Case("bench_steps_is_a_benchmark", RESNET + " --data_dir={resnet_data} --bench_steps=2", None, 0,
         "a real-loader throughput run, the same", check=benchmark_log),
    Case("profile_without_synthetic", RESNET + " --data_dir={resnet_data} --profile_steps=3",
         "error: --profile_steps: profiles the steps after a bench run: give --synthetic too", 2,
         "--profile_steps on a training run (once ignored: it profiles a synthetic run's steps)",
         check=no_run_start),
    Case("ssd_profile_without_synthetic",
         "{build}/bin/ssd --config={root}/object_detection/configs/small.conf --device=cpu "
         "--log_file={tmp}/run.log --data_dir={tmp} --profile_steps=3",
         "error: --profile_steps: profiles the steps after a bench run: give --synthetic too", 2,
         "the same for SSD", check=no_run_start),
]
