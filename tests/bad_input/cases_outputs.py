"""The files a trainer writes (its log, checkpoint and predictions) and the
schedules it derives from flags: every output path is tried before
run_start, and each error names the flag it came from. A bad predictions
path once failed after a whole epoch of training, naming no flag."""
import re

from case import Case

RESNET = ("{build}/bin/resnet --config={root}/image_classification/configs/small.conf "
          "--stages=1 --width=8 --device=cpu --data_dir={resnet_data}")
TRANSFORMER = ("{build}/bin/transformer --config={root}/translation/configs/small.conf --device=cpu "
               "--log_file={tmp}/run.log --bench_steps=1")
SSD = ("{build}/bin/ssd --config={root}/object_detection/configs/small.conf --device=cpu "
       "--log_file={tmp}/run.log --synthetic --synthetic_steps=1")


def nothing_run(t, proc):
    """A check: the run stopped before run_start (or benchmark_start)."""
    log = t.path / "run.log"
    text = log.read_text() if log.exists() else ""
    for key in ("run_start", "benchmark_start"):
        if f'"key": "{key}"' in text:
            return f"{key} was logged before the error: the check came too late"
    return None


CASES = [
    Case("log_file_folder_uncreatable", RESNET + " --log_file=/proc/nope/run.log",
         "error: --log_file: cannot create directory /proc/nope: No such file or directory", 2,
         "a log in a folder that cannot be made (once named the folder, not the flag)"),
    Case("log_file_is_a_directory", RESNET + " --log_file={tmp}",
         "error: --log_file: cannot write {tmp}: Is a directory", 2, "a log path that is a folder"),
    Case("warmup_past_decay", RESNET + " --log_file={tmp}/run.log --warmup_epochs=3 --decay_epochs=2",
         re.compile(r"error: --warmup_epochs, --decay_epochs: poly decay over -\d+ steps \(need >= 1\)"),
         2, "a warmup longer than the schedule (once named 'schedule', no flag)", check=nothing_run),
    Case("translations_out_unwritable", TRANSFORMER + " --translations_out=/nonexistent/t.txt",
         "error: --translations_out: cannot write /nonexistent/t.txt.tmp: No such file or directory", 2,
         "a translations file in a missing folder (once found after the first epoch)",
         check=nothing_run),
    Case("detections_out_unwritable", SSD + " --detections_out=/nonexistent/d.json",
         "error: --detections_out: cannot write /nonexistent/d.json.tmp: No such file or directory", 2,
         "a detections file in a missing folder (once found after the first eval, naming the "
         "temporary file)", check=nothing_run),
    Case("detections_out_is_a_directory", SSD + " --detections_out={tmp}",
         "error: --detections_out: {tmp} is not a file (a directory?)", 2,
         "a detections path that is a folder", check=nothing_run),
]
