"""What the Python benchmark drivers (tests/bench/bench_*.py) share: their
command line, the checks that end a run with "SKIP <name>: <why>" (exit 0)
when PyTorch or a GPU is missing, running this suite's C program and reading
the JSON it writes, running a trainer's benchmark mode and reading its
images/s, timing PyTorch with CUDA events (the wall clock on a CPU), a
PyTorch training step in a given precision and its images/s, and the result
files tests/bench/results/<kind>_<UTC date>_<GPU>.{json,md}.
"""
import argparse
import datetime
import importlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")


def skip(name, why):
    """Ends the run as a benchmark this machine cannot do."""
    print(f"SKIP {name}: {why}")
    sys.exit(0)


def arg_parser(doc, iters=None, warmup=None):
    """The driver's parser: its docstring's first line, --build, and
    --iters / --warmup when their defaults are given."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--build", default="build")
    if iters is not None:
        p.add_argument("--iters", type=int, default=iters)
    if warmup is not None:
        p.add_argument("--warmup", type=int, default=warmup)
    return p


def require_torch(name, cuda=True, modules=(), missing="PyTorch is not installed (pip install torch)"):
    """torch, or a SKIP when it (or one of modules) cannot be imported, or
    when cuda is wanted and PyTorch sees no GPU."""
    try:
        import torch
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        skip(name, missing)
    if cuda and not torch.cuda.is_available():
        skip(name, "PyTorch sees no GPU")
    return torch


def run_json(name, exe, args, echo=False):
    """Runs exe with args and --json=<temporary file>; returns the parsed
    JSON. The program's own SKIP line ends the run as a skip; a missing
    executable is a skip too, a failure an error with its output. echo:
    print the program's output."""
    if not os.access(exe, os.X_OK):
        skip(name, exe + " is not built (run make; a CUDA build is needed)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ours.json")
        proc = subprocess.run([exe] + list(args) + [f"--json={path}"], capture_output=True,
                              text=True)
        if proc.stdout.startswith("SKIP"):
            print(proc.stdout.strip())
            sys.exit(0)
        if proc.returncode != 0 or not os.path.exists(path):
            sys.stderr.write(proc.stdout + proc.stderr)
            sys.exit("%s: %s failed with status %d" % (name, exe, proc.returncode))
        if echo:
            print(proc.stdout.rstrip())
        with open(path) as f:
            return json.load(f)


def time_ms(torch, fn, warmup, iters, device="cuda"):
    """Mean milliseconds of fn() over iters calls after warmup calls: CUDA
    events around the timed calls, or on the CPU the wall clock."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1e3 / iters
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def trainer_throughput(name, cmd, pattern=r"synthetic: .*: ([0-9.]+) images/s", log_file=None,
                       timeout=None, env=None):
    """Runs a trainer's benchmark mode (cmd, a list; --log_file=log_file is
    added, by default in a temporary folder) and finds its throughput line:
    returns the match of pattern (group 1: images/s) and the trainer's
    output. A failed run, one that outlasts timeout seconds, a missing line
    or a loss that is not finite after it ("(loss X)": the steps would have
    timed NaN arithmetic, or in fp16 overflow-skipped steps without an
    optimizer step) ends the run with the output's tail. env: the
    environment, when not this one."""
    with tempfile.TemporaryDirectory() as tmp:
        log = log_file or os.path.join(tmp, "bench.log")
        try:
            proc = subprocess.run(list(cmd) + [f"--log_file={log}"], capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            sys.exit(f"{name}: {' '.join(cmd)}: still running after {timeout} s:\n"
                     + (e.stdout or b"")[-2000:].decode(errors="replace"))
    m = re.search(pattern, proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        sys.exit(f"{name}: {cmd[0]} failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    loss = re.search(r"\(loss ([^)]*)\)", proc.stdout[m.start():])
    if not loss or not math.isfinite(float(loss.group(1))):
        sys.exit(f"{name}: {' '.join(cmd[1:])}: the loss is not finite, so the steps timed NaN "
                 "arithmetic:\n" + proc.stdout[-1500:] + proc.stderr[-1500:])
    return m, proc.stdout


def ours_variants(name, run_once, repeats, gpu):
    """The attention trainers (BERT, the Transformer) as configured and with
    one fusion off at a time: run_once(flags) runs one bench with the extra
    flags and returns (rate, the trainer's output). Returns a dict of medians
    over `repeats` runs each: ours (as configured), attention (the one that
    ran: the trainer's "fused attention" / "unfused attention"), unfused
    (with --fused_attention=false where the default was the fused one, else
    None), separate_bias (on the GPU, with --linear_epilogues=false: the
    linear layers' biases and their gradients in passes of their own; else
    None), and out (the first run's output)."""
    runs = [run_once([]) for _ in range(repeats)]
    m = re.search(r"\b(fused|unfused) attention\b", runs[0][1])
    if not m:
        sys.exit(f"{name}: the trainer did not say which attention it ran:\n" + runs[0][1][-2000:])

    def median_with(flag):
        return statistics.median(run_once([flag])[0] for _ in range(repeats))

    return dict(ours=statistics.median(r for r, _ in runs), attention=m.group(1),
                unfused=median_with("--fused_attention=false") if m.group(1) == "fused" else None,
                separate_bias=median_with("--linear_epilogues=false") if gpu else None,
                out=runs[0][1])


def profile_run(run_once, precisions, steps):
    """The precision profiled (bf16 where it ran, else the first) and the
    op-by-op table of one more run of ours with --profile_steps=steps
    (run_once(precision, flags) -> (rate, output)); "" with steps 0."""
    prec = "bf16" if "bf16" in precisions else precisions[0]
    if not steps:
        return prec, ""
    return prec, profile_block(run_once(prec, [f"--profile_steps={steps}"])[1])


def profile_lines(program, precision, profile):
    """The results file's lines for a profile_run table (none when empty)."""
    if not profile:
        return []
    return ["", f"Where our {precision} step goes (`{program} --profile_steps`, default "
            "flags; each op synchronised, so a little slower than above):", "", "```", profile, "```"]


def rate_cell(rate, fmt):
    """A table cell for an optional rate: fmt % rate, or '-'."""
    return fmt % rate if rate else "-"


def torch_train_step(torch, device, precision, forward_loss, opt, clip_norm=None):
    """A PyTorch training step as a function: forward_loss() (forward pass
    and loss) under autocast in precision's low dtype ('bf16', 'fp16'; none
    for 'fp32' and 'tf32'), backward, the gradients clipped to clip_norm
    when it is given (unscaled first), opt's step; fp16 through a
    GradScaler. Sets PyTorch's math for precision as our trainers do theirs:
    TF32 tensor cores for tf32 only (fp32 is true fp32), and cuDNN's
    autotuner on."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def step():
        with torch.autocast(device, dtype=lowp or torch.float32, enabled=lowp is not None):
            loss = forward_loss()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if clip_norm is not None:
            scaler.unscale_(opt)
            params = [p for g in opt.param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        scaler.step(opt)  # a disabled scaler (all but fp16) just steps
        scaler.update()

    return step


def images_per_s(torch, step, batch, steps, device, warmup=10, repeats=1):
    """Images/s of step() (one batch of batch images), once per repeat:
    warmup calls (our trainers' synthetic runs warm up 10 steps), then
    repeats timings of steps calls, the device synchronised around each."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    rates = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        rates.append(batch * steps / (time.perf_counter() - start))
    return rates


def torch_versions(torch):
    """The PyTorch side's versions for a results file: torch, torchvision
    (when installed), and on a GPU CUDA's and cuDNN's."""
    v = {"torch": torch.__version__}
    try:
        import torchvision
        v["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        v["cuda"] = torch.version.cuda
        v["cudnn"] = torch.backends.cudnn.version()
    return v


def profile_block(text):
    """The op-by-op table a trainer prints for --profile_steps (profile.h):
    the "profile:" line and its indented rows, or "" when there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("profile:"):
            block = [line]
            for row in lines[i + 1:]:
                if not row.startswith("  "):
                    break
                block.append(row)
            return "\n".join(block)
    return ""


def gpu_names():
    """The GPUs nvidia-smi lists ([] without a working nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def cpu_model():
    """The CPU's model name (/proc/cpuinfo, through logs/system_desc.py)."""
    sys.path.insert(0, os.path.join(ROOT, "logs"))
    import system_desc
    import platform
    return system_desc.cpuinfo_field("model name") or platform.processor() or "CPU"


def machine_name(device):
    """What a results file names the machine by: the first GPU for cuda,
    else "<cores>-core <CPU model>"."""
    gpus = gpu_names() if device == "cuda" else []
    return gpus[0] if gpus else f"{os.cpu_count() or 1}-core {cpu_model()}"


def utc_stamp(seconds=False):
    """Today's UTC date (2026-11-22), or the moment (20261122T114500Z)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ" if seconds else "%Y-%m-%d")


def gpu_slug(device):
    """A device name as a file-name part: runs of other characters as '-'."""
    return re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-")


def write_results(kind, stamp, device, record, markdown, folder=RESULTS):
    """Writes record (JSON) and markdown to folder/<kind>_<stamp>_<gpu>.{json,md}
    (folder: results/ by default); returns that path without the extension."""
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, f"{kind}_{stamp}_{gpu_slug(device)}")
    with open(base + ".json", "w") as f:
        json.dump(record, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(markdown)
    print("wrote", base + ".{json,md}")
    return base
