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
import os

import benchlib

# Our kind -> the PyTorch optimizer timed beside it (LARS and LAMB have no
# PyTorch counterpart).
TORCH_PEERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


def run_ours(args):
    exe = os.path.join(args.build, "bench", "bench_optim")
    return benchlib.run_json("bench_optim", exe, [f"--iters={args.iters}",
                                                  f"--warmup={args.warmup}"])


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
    ms = benchlib.time_ms(torch, opt.step, warmup, iters)
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


def report(ours, torch_version, rows):
    """Prints the table and writes the result files."""
    text = table(ours, rows)
    print(text)
    stamp = benchlib.utc_stamp()
    result = {k: v for k, v in ours.items() if k != "tensors"}
    result.update(date=stamp, torch_version=torch_version, rows=rows)
    benchlib.write_results("optim", stamp, ours["device"], result,
                           f"# Fused optimizer step, {stamp}\n\n{text}\n")


def main():
    args = benchlib.arg_parser(__doc__, iters=20, warmup=5).parse_args()
    torch = benchlib.require_torch("bench_optim")
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
    report(ours, torch.__version__, rows)


if __name__ == "__main__":
    main()
