"""The fused optimizer step over BERT-large's parameters: this suite's
optim_step (build/bench/bench_optim) beside PyTorch's fused optimizers on the
same tensors and GPU, in one run.

Runs the C program first (it defines the parameter table and writes it with
its timings and the measured copy bandwidth as JSON), then builds the same
tensors in PyTorch (fp32, decay and no-decay groups as the table says) and
times torch.optim.AdamW / Adam / SGD with fused=True the same way (CUDA
events, same warm-up and repetitions); prints one table and writes
tests/bench/results/optim_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_optim.py [--build build] [--iters 20]
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Our kind -> the PyTorch optimizer timed beside it (LARS and LAMB have no
# PyTorch counterpart).
TORCH_PEERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


def run_ours(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ours.json")
        exe = os.path.join(args.build, "bench", "bench_optim")
        cmd = [exe, f"--iters={args.iters}", f"--warmup={args.warmup}", f"--json={path}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        if out.startswith("SKIP"):
            print(out.strip())
            sys.exit(0)
        with open(path) as f:
            return json.load(f)


def make_optimizer(torch, name, decay, no_decay):
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    cls = getattr(torch.optim, name)
    kwargs = {"lr": 1e-6, "fused": True}
    if name == "SGD":
        kwargs["momentum"] = 0.9
    return cls(groups, **kwargs)


def time_torch(torch, tensors, name, warmup, iters):
    """Mean milliseconds of one step of torch.optim.<name>(fused=True)."""
    decay, no_decay = [], []
    for t in tensors:
        p = torch.nn.Parameter(torch.empty(t["shape"], device="cuda").uniform_(-0.05, 0.05))
        p.grad = torch.empty_like(p).uniform_(-1e-3, 1e-3)
        (no_decay if t["no_decay"] else decay).append(p)
    opt = make_optimizer(torch, name, decay, no_decay)
    for _ in range(warmup):
        opt.step()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        opt.step()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop) / iters
    del opt, decay, no_decay
    torch.cuda.empty_cache()
    return ms


def table(ours, rows):
    lines = [
        f"{ours['device']}: {ours['params']:,} fp32 parameters in {len(ours['tensors'])} tensors, "
        f"{ours['iters']} iterations; device copy bandwidth {ours['copy_gbps']:.1f} GB/s",
        "",
        "| optimizer | GB moved | ours ms | ours GB/s | of copy | PyTorch fused | torch ms "
        "| torch GB/s | torch / ours time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["torch"]
        peer = (f"{t['name']} | {t['ms']:.3f} | {t['gbps']:.1f} | {t['ms'] / r['ms']:.2f}"
                if t else "- | - | - | -")
        lines.append(f"| {r['kind']} | {r['gb']:.2f} | {r['ms']:.3f} | {r['gbps']:.1f} | "
                     f"{100 * r['gbps'] / ours['copy_gbps']:.0f}% | {peer} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP bench_optim: PyTorch is not installed (pip install torch)")
        return
    if not torch.cuda.is_available():
        print("SKIP bench_optim: PyTorch sees no GPU")
        return
    ours = run_ours(args)
    rows = []
    for o in ours["optimizers"]:
        row = dict(o, torch=None)
        peer = TORCH_PEERS.get(o["kind"])
        if peer:
            ms = time_torch(torch, ours["tensors"], peer, args.warmup, args.iters)
            # The same traffic: PyTorch's fused kernels touch the same buffers.
            row["torch"] = {"name": peer, "ms": ms, "gbps": o["gb"] / ms * 1e3}
        rows.append(row)
    text = table(ours, rows)
    print(text)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", ours["device"]).strip("-")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    base = os.path.join(HERE, "results", f"optim_{stamp}_{gpu}")
    result = {k: v for k, v in ours.items() if k != "tensors"}
    result.update(date=stamp, torch_version=torch.__version__, rows=rows)
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(f"# Fused optimizer step, {stamp}\n\n{text}\n")
    print("wrote", base + ".{json,md}")


if __name__ == "__main__":
    main()
