"""Faults of the machine, not of the input, for ResNet, SSD, the Transformer
and BERT alike (one row of each kind per trainer; tiny models, so that each
row takes seconds):

- converter_killed: the data set's converter killed midway (SIGKILL at a
  fixed record: tests/bad_input/kill_at.c, preloaded into prepare_data.sh's
  programs). The trainer refuses the unfinished data set in one line; run
  again, prepare_data.sh makes the data set an uninterrupted run makes,
  record for record.
- killed_mid_epoch: the trainer killed (SIGKILL) the moment epoch 1's
  checkpoint has landed, in epoch 2 before any of it is saved (kill_at.c,
  preloaded: a signal sent at a line of the log once came after a tiny
  model had finished epoch 2 on a loaded machine); --resume then continues
  after epoch 1 and ends with the checkpoint of an uninterrupted run, bit
  for bit.
- sigterm_under_mpirun: SIGTERM to mpirun (what a batch system's time limit
  sends): rank 0's log ends with run_stop aborted. mpirun stops reading its
  ranks' output when told to end the job; rank 0 once blocked writing
  run_stop to its stdout and never reached the log file before mpirun's
  SIGKILL. mpirun itself exits with status 1.
- disk_full_*: the checkpoint's or the output's folder on a full disk (a
  filled tmpfs in a mount namespace of its own: tests/bad_input/full_disk.sh).
  One line naming the file and the reason, run_stop aborted, the temporary
  file removed, and the checkpoint there before (an earlier run's) kept as
  it was.
"""
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from case import Case
from cases_resnet import MPIRUN, SIGNAL_RUN, ended_by_signal, run_stop_aborted
from cases_squad import BERT, SMALL, squad, write_model

FULL_DISK = "bash {root}/tests/bad_input/full_disk.sh {tmp}/disk -- "
LOG = " --log_file={tmp}/run.log"


@dataclass
class Trainer:
    name: str
    cmd: str                # the trainer on {data}, its target out of reach (no --log_file)
    data: str               # a fixture name, or "" when setup makes {tmp}/d
    prepare: str            # the prepare_data.sh command that makes the data set in {out}
    kill_at: int            # a record in the middle of what prepare converts
    split: str              # the split that record is in
    output: Optional[str]   # the flag of the file its eval writes
    setup: Optional[object] = None  # makes {tmp}/d and the model, where data is ""
    model: Optional[object] = None  # makes the model alone

    def run(self, data=None):
        """The command on data: the fixture (or setup's {tmp}/d) by default."""
        return self.cmd.replace("{data}", data or ("{%s}" % self.data if self.data else "{tmp}/d"))


RESNET = Trainer(
    "resnet", "{build}/bin/resnet --config={root}/image_classification/configs/small.conf --stages=1 "
    "--width=16 --batch_size=32 --device=cpu --data_dir={data} --target_accuracy=0.999",
    "resnet_data", "TRAIN_COUNT=512 VAL_COUNT=128 SIDE=32 bash {root}/datasets/prepare_fmnist_classification.sh "
    "small {out} {build}", 256, "train", None)
SSD = Trainer(
    "ssd", "{build}/bin/ssd --config={root}/object_detection/configs/small.conf --width=8 --device=cpu "
    "--data_dir={data} --target_accuracy=0.999",
    "ssd_data", "TRAIN_COUNT=64 VAL_COUNT=16 bash {root}/object_detection/prepare_data.sh small {out} {build}",
    32, "train", "--detections_out")
TRANSFORMER = Trainer(
    "transformer", "{build}/bin/transformer --config={root}/translation/configs/small.conf --d_model=32 "
    "--d_ff=64 --heads=2 --enc_layers=1 --dec_layers=1 --max_tokens=256 --device=cpu --data_dir={data} "
    "--target_accuracy=0.999",
    "wmt_data", "TRAIN_PAIRS=400 EVAL_PAIRS=40 bash {root}/translation/prepare_data.sh small {out} {build}",
    200, "train", "--translations_out")


def many_questions(d):
    """The tiny training set's two questions 200 times (an epoch of 200
    steps, long enough to be killed in)."""
    para = d["data"][0]["paragraphs"][0]
    para["qas"] = [dict(q, id=f"{q['id']}-{i}") for i in range(200) for q in para["qas"]]


def bert_setup(t):
    """The tiny data set of many_questions in {tmp}/d, the tiny model in {tmp}/model."""
    squad(change=many_questions)(t)
    t.run("{build}/bin/squad_to_lmdb --train={tmp}/train.json --dev={tmp}/dev.json --vocab={tmp}/vocab.txt "
          "--out={tmp}/d/lmdb" + SMALL)
    write_model(t, "model")


# The learning rate so low that the tiny model never reaches the target.
BERT_T = Trainer(
    "bert", BERT.replace("--data_dir={tmp}/d", "--data_dir={data}").replace(" --log_file={tmp}/run.log", "")
    + " --learning_rate=1e-7 --target_accuracy=1",
    "", "TRAIN_QUESTIONS=40 DEV_QUESTIONS=10 bash {root}/language/prepare_data.sh small {out} {build}",
    25, "train", "--predictions_out", setup=bert_setup,
    model=lambda t: write_model(t, "model"))


@lru_cache(maxsize=None)
def cannot_mount():
    """Why full_disk.sh cannot run here, or None."""
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if p.returncode == 0 else f"no mount namespace here ({p.stderr.strip()})"


# ------------------------------------------------------------ converter killed

def mdb_dump(folder):
    return subprocess.run(["mdb_dump", "-p", str(folder)], capture_output=True, check=True).stdout


def same_data(a, b):
    """What differs between two prepared data sets' lmdb/ folders (records
    compared through mdb_dump, other files byte for byte), or None."""
    a, b = a / "lmdb", b / "lmdb"
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return f"{a} holds {names}, {b} {sorted(p.name for p in b.iterdir())}"
    for name in names:
        x, y = a / name, b / name
        same = mdb_dump(x) == mdb_dump(y) if x.is_dir() else x.read_bytes() == y.read_bytes()
        if not same:
            return f"{name} differs from an uninterrupted conversion's"
    return None


def killed_conversion(tr):
    def setup(t):
        if tr.model:
            tr.model(t)
        so = t.fixture("kill_at")
        p = t.run(f"LD_PRELOAD={so} KILL_AT_PUT={tr.kill_at} " + tr.prepare.replace("{out}", "{tmp}/d"),
                  check=False)
        if p.returncode == 0 or not (t.path / "d" / "lmdb" / f"{tr.split}.partial").is_dir():
            raise RuntimeError(f"the killed conversion ended {p.returncode} and left "
                               f"{sorted(x.name for x in (t.path / 'd' / 'lmdb').iterdir())}")
    return setup


def reconverted(tr):
    def check(t, proc):
        for out in ("{tmp}/d", "{tmp}/clean"):
            p = t.run(tr.prepare.replace("{out}", out), check=False)
            if p.returncode != 0:
                return f"prepare_data.sh into {out} after the kill: status {p.returncode}: {p.stderr[-300:]}"
        return same_data(t.path / "d", t.path / "clean")
    return check


def converter_killed(tr):
    return Case(f"{tr.name}_converter_killed", tr.run("{tmp}/d") + LOG,
                f"error: {{tmp}}/d/lmdb/{tr.split}: missing; {{tmp}}/d/lmdb/{tr.split}.partial is an unfinished "
                "conversion (the converter failed or was stopped): convert again", 2,
                f"prepare_data.sh killed (SIGKILL) at record {tr.kill_at}, in {tr.split}: the trainer refuses "
                "the unfinished set; run again, prepare_data.sh makes what an uninterrupted run makes",
                setup=killed_conversion(tr), check=reconverted(tr), timeout_s=60)


# ------------------------------------------------------------ killed mid-epoch

def resumes_bit_identical(tr):
    def check(t, proc):
        if "exit status 137" not in proc.stdout:
            return f"the trainer was not killed mid-run: {proc.stdout.strip()!r}"
        resumed = t.run(tr.run() + " --max_epochs=2 --checkpoint={tmp}/c.ckpt --resume --log_file={tmp}/r.log",
                        check=False)
        if "continuing after epoch 1" not in resumed.stdout:
            return f"the resume did not continue after epoch 1: {resumed.stdout[-300:]!r} {resumed.stderr[-300:]!r}"
        t.run(tr.run() + " --max_epochs=2 --checkpoint={tmp}/whole.ckpt --log_file={tmp}/w.log", check=False)
        whole, split = t.path / "whole.ckpt", t.path / "c.ckpt"
        if not whole.exists() or whole.read_bytes() != split.read_bytes():
            return "the resumed run's checkpoint differs from the uninterrupted run's"
        return None
    return check


def killed_mid_epoch(tr):
    return Case(f"{tr.name}_killed_mid_epoch",
                "LD_PRELOAD={kill_at} KILL_AFTER_RENAME_TO={tmp}/c.ckpt " + tr.run() + LOG +
                " --max_epochs=2 --checkpoint={tmp}/c.ckpt >/dev/null 2>&1; echo \"exit status $?\"", None, 0,
                "the trainer killed (SIGKILL) the moment epoch 1's checkpoint has landed: --resume continues "
                "after epoch 1 and ends with an uninterrupted run's checkpoint, bit for bit",
                setup=tr.setup, check=resumes_bit_identical(tr), timeout_s=90)


# ------------------------------------------------------------ SIGTERM under mpirun

def sigterm_under_mpirun(tr):
    return Case(f"{tr.name}_sigterm_under_mpirun", SIGNAL_RUN + "term {tmp}/run.log -- " + MPIRUN + tr.run() +
                LOG + " --max_epochs=50", None, 0,
                "SIGTERM to mpirun mid-run (a batch system's time limit): rank 0's log ends with run_stop "
                "aborted (once none: rank 0 blocked writing it to stdout, which mpirun no longer read)",
                setup=tr.setup, check=ended_by_signal(1), needs=("mpirun",), timeout_s=90)


# ------------------------------------------------------------ full disk

def disk_after_holds(want, absent):
    def check(t, proc):
        why = run_stop_aborted(t, proc)
        if why:
            return why
        after = t.path / "disk.after"
        left = [n for n in absent if (after / n).exists()]
        if left:
            return f"left on the full disk: {left}"
        for name in want:
            if (after / name).read_bytes() != (t.path / "disk.before" / name).read_bytes():
                return f"{name} changed"
        return None
    return check


def one_epoch_checkpoint(tr):
    def setup(t):
        if tr.setup:
            tr.setup(t)
        (t.path / "disk.before").mkdir()
        p = t.run(tr.run() + " --max_epochs=1 --checkpoint={tmp}/disk.before/c.ckpt --log_file={tmp}/first.log",
                  check=False)
        if p.returncode != 0:
            raise RuntimeError(f"the first epoch: status {p.returncode}: {p.stderr[-300:]}")
    return setup


def disk_full_checkpoint(tr):
    return Case(f"{tr.name}_disk_full_checkpoint", FULL_DISK + tr.run() + LOG +
                " --max_epochs=1 --checkpoint={tmp}/disk/c.ckpt",
                "error: {tmp}/disk/c.ckpt: cannot write: No space left on device (left as it was)", 2,
                "the disk fills up under the checkpoint (its save after epoch 1): one line naming it, "
                "run_stop aborted, the checkpoint there before (an earlier run's) kept, the temporary file "
                "removed (once an internal-looking fwrite failure naming c.ckpt.tmp, which stayed, filling "
                "the disk)",
                setup=one_epoch_checkpoint(tr), check=disk_after_holds(["c.ckpt"], ["c.ckpt.tmp"]),
                needs=(cannot_mount,), timeout_s=90)


def disk_full_output(tr):
    flag = tr.output
    return Case(f"{tr.name}_disk_full_{flag[2:]}",
                FULL_DISK + tr.run() + LOG + f" --max_epochs=1 {flag}={{tmp}}/disk/out",
                "error: {tmp}/disk/out: cannot write: No space left on device (left as it was)", 2,
                f"the disk fills up under {flag}'s file: one line naming it, run_stop aborted, nothing left",
                setup=tr.setup, check=disk_after_holds([], ["out", "out.tmp"]), needs=(cannot_mount,),
                timeout_s=90)


CASES = []
for _tr in (RESNET, SSD, TRANSFORMER, BERT_T):
    CASES += [converter_killed(_tr), killed_mid_epoch(_tr), sigterm_under_mpirun(_tr), disk_full_checkpoint(_tr)]
    if _tr.output:
        CASES.append(disk_full_output(_tr))
