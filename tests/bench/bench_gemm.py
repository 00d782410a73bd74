"""The GEMMs of one BERT-large layer: this suite's op_gemm (build/bench/bench_gemm)
beside PyTorch (torch.matmul) on the same shapes, dtype and GPU, in one run.

Runs the C program first (it defines the shapes and writes them with its
timings as JSON), then times torch.matmul on each shape the same way (CUDA
events, same warm-up and repetitions), prints both in one table and writes
tests/bench/results/gemm_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_gemm.py [--build build] [--dtype bf16] [--iters 50]
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
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def run_ours(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ours.json")
        exe = os.path.join(args.build, "bench", "bench_gemm")
        cmd = [exe, f"--dtype={args.dtype}", f"--iters={args.iters}",
               f"--warmup={args.warmup}", f"--json={path}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        if out.startswith("SKIP"):
            print(out.strip())
            sys.exit(0)
        with open(path) as f:
            return json.load(f)


def time_torch(torch, gemm, dtype, warmup, iters):
    """Mean milliseconds of torch.matmul on the shape; transposed operands are
    transposed views, as a framework's backward pass passes them."""
    m, n, k, batch = gemm["m"], gemm["n"], gemm["k"], gemm["batch"]
    a = torch.zeros(batch, *((k, m) if gemm["trans_a"] else (m, k)), dtype=dtype, device="cuda")
    b = torch.zeros(batch, *((n, k) if gemm["trans_b"] else (k, n)), dtype=dtype, device="cuda")
    if batch == 1:
        a, b = a[0], b[0]
    a_op = a.transpose(-1, -2) if gemm["trans_a"] else a
    b_op = b.transpose(-1, -2) if gemm["trans_b"] else b
    for _ in range(warmup):
        torch.matmul(a_op, b_op)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a_op, b_op)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP bench_gemm: PyTorch is not installed (pip install torch)")
        return
    if not torch.cuda.is_available():
        print("SKIP bench_gemm: PyTorch sees no GPU")
        return
    ours = run_ours(args)
    dtype = getattr(torch, DTYPES[args.dtype])
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "fp32"
    rows = []
    for g in ours["gemms"]:
        flop = 2.0 * g["m"] * g["n"] * g["k"] * g["batch"]
        ms = time_torch(torch, g, dtype, args.warmup, args.iters)
        rows.append(dict(g, torch_ms=ms, torch_tflops=flop / ms / 1e9, flop=flop))
    total = dict(name="layer total", ms=sum(r["ms"] for r in rows),
                 torch_ms=sum(r["torch_ms"] for r in rows), flop=sum(r["flop"] for r in rows))
    total["tflops"] = total["flop"] / total["ms"] / 1e9
    total["torch_tflops"] = total["flop"] / total["torch_ms"] / 1e9

    header = (f"BERT-large layer GEMMs (batch 32 x 384 tokens), {args.dtype}, {ours['device']}, "
              f"torch {torch.__version__}, {args.iters} iterations")
    lines = [header, "",
             "| gemm | m | n | k | batch | ta | tb | ours ms | ours TFLOP/s | torch ms | torch TFLOP/s | ours/torch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows + [total]:
        shape = ("", "", "", "", "", "") if r is total else (
            r["m"], r["n"], r["k"], r["batch"], int(r["trans_a"]), int(r["trans_b"]))
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %.3f | %.1f | %.3f | %.1f | %.2f |" % (
            (r["name"],) + shape + (r["ms"], r["tflops"], r["torch_ms"], r["torch_tflops"],
                                    r["tflops"] / r["torch_tflops"])))
    print("\n".join(lines))

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", ours["device"]).strip("-")
    base = os.path.join(HERE, "results", f"gemm_{stamp}_{gpu}")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".json", "w") as f:
        json.dump(dict(date=stamp, device=ours["device"], dtype=args.dtype,
                       torch=torch.__version__, iters=args.iters, gemms=rows, total=total), f,
                  indent=1)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", base + ".json", "and .md")


if __name__ == "__main__":
    main()
