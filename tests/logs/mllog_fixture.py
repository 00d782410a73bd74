"""MLPerf logs written for the tests of the result tools (logs/), and what
those tests share: case lines, running a tool, reading back a PNG."""
import json
import os
import shutil
import struct
import subprocess
import sys

_failed = []


def case(name, ok, why=""):
    """Prints the case's PASS or FAIL line; failures() counts the FAILs."""
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    if not ok:
        _failed.append(name)


def failures():
    return len(_failed)


def event(t, etype, key, value=None, **meta):
    meta = dict({"file": "t.c", "lineno": 1}, **meta)
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": etype,
                                     "key": key, "value": value, "metadata": meta})


def resnet_log(path, accuracies, run_minutes, status="success", batch=256, benchmark="resnet"):
    """A log with every key the 1.0.0 resnet/lars rules require, an eval
    after every epoch. Another benchmark's name gives a log of the same
    events for the tools that read only the name, the batch and the evals
    (the RCP check)."""
    P, S, E = "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"
    t0 = 1_700_000_000_000
    lines = [event(t0, S, "init_start")]
    for key, value in [("submission_benchmark", benchmark), ("submission_org", "x"),
                       ("submission_division", "closed"), ("submission_status", "research"),
                       ("submission_platform", "1xCPU"), ("cache_clear", True), ("seed", 1),
                       ("global_batch_size", batch), ("gradient_accumulation_steps", 1),
                       ("train_samples", 1000), ("eval_samples", 100), ("opt_name", "lars"),
                       ("lars_opt_base_learning_rate", 2.0), ("lars_opt_end_learning_rate", 0.0001),
                       ("lars_opt_learning_rate_decay_poly_power", 2.0),
                       ("lars_opt_learning_rate_decay_steps", 100), ("lars_epsilon", 0.0),
                       ("lars_opt_learning_rate_warmup_epochs", 1), ("lars_opt_momentum", 0.9),
                       ("lars_opt_weight_decay", 0.0001)]:
        lines.append(event(t0, P, key, value))
    lines += [event(t0 + 1, E, "init_stop"), event(t0 + 2, S, "run_start")]
    t = t0 + 2
    for i, acc in enumerate(accuracies):
        epoch = i + 1
        lines += [event(t, S, "block_start", first_epoch_num=epoch, epoch_count=1),
                  event(t, S, "epoch_start", epoch_num=epoch), event(t, E, "epoch_stop", epoch_num=epoch),
                  event(t, E, "block_stop", first_epoch_num=epoch),
                  event(t, S, "eval_start", epoch_num=epoch), event(t, E, "eval_stop", epoch_num=epoch),
                  event(t, P, "eval_accuracy", acc, epoch_num=epoch)]
    lines.append(event(t0 + 2 + int(run_minutes * 60000), E, "run_stop", status=status))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_tool(tool, *args):
    """(exit status, stdout + stderr) of a Python tool run with args."""
    proc = subprocess.run([sys.executable, tool] + list(args), capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def png_size(path):
    """(width, height) from the PNG's IHDR chunk; None if not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def colours(path):
    """How many colours the picture has (a blank one has one)."""
    from PIL import Image
    return len(Image.open(path).convert("RGB").getcolors(1 << 20) or [])


def require_mpi_program(name, exe):
    """Ends the test unless exe can run on MPI ranks: "FAIL name" when it is
    not built, "SKIP name" without mpirun or when it was built with MPI=0."""
    if not shutil.which("mpirun"):
        print("SKIP %s: mpirun not found (Open MPI is not installed)" % name)
        sys.exit(0)
    if not os.access(exe, os.X_OK):
        print("FAIL %s: %s is not built" % (name, exe))
        sys.exit(1)
    if "libmpi" not in subprocess.run(["ldd", exe], capture_output=True, text=True).stdout:
        print("SKIP %s: %s was built without MPI (MPI=0)" % (name, exe))
        sys.exit(0)
