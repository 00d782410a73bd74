"""The GEMMs of one BERT-large layer: this suite's op_gemm (build/bench/bench_gemm)
beside PyTorch (torch.matmul) on the same shapes, dtype and GPU, in one run.

Runs the C program first (it defines the shapes and writes them with its
timings as JSON), then times torch.matmul on each shape the same way (CUDA
events, same warm-up and repetitions), prints both in one table and writes
tests/bench/results/gemm_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_gemm.py [--build build] [--dtype bf16] [--iters 50]
"""
import os

import benchlib

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def run_ours(args):
    exe = os.path.join(args.build, "bench", "bench_gemm")
    return benchlib.run_json("bench_gemm", exe, [f"--dtype={args.dtype}", f"--iters={args.iters}",
                                                 f"--warmup={args.warmup}"])


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
    return benchlib.time_ms(torch, lambda: torch.matmul(a_op, b_op), warmup, iters)


def table(args, ours, torch_version, rows, total):
    header = (f"BERT-large layer GEMMs (batch 32 x 384 tokens), {args.dtype}, {ours['device']}, "
              f"torch {torch_version}, {args.iters} iterations")
    lines = [header, "",
             "| gemm | m | n | k | batch | ta | tb | ours ms | ours TFLOP/s | torch ms | torch TFLOP/s | ours/torch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows + [total]:
        shape = ("", "", "", "", "", "") if r is total else (
            r["m"], r["n"], r["k"], r["batch"], int(r["trans_a"]), int(r["trans_b"]))
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %.3f | %.1f | %.3f | %.1f | %.2f |" % (
            (r["name"],) + shape + (r["ms"], r["tflops"], r["torch_ms"], r["torch_tflops"],
                                    r["tflops"] / r["torch_tflops"])))
    return "\n".join(lines)


def totals(rows):
    total = dict(name="layer total", ms=sum(r["ms"] for r in rows),
                 torch_ms=sum(r["torch_ms"] for r in rows), flop=sum(r["flop"] for r in rows))
    total["tflops"] = total["flop"] / total["ms"] / 1e9
    total["torch_tflops"] = total["flop"] / total["torch_ms"] / 1e9
    return total


def report(args, ours, torch_version, rows):
    """Prints the table and writes the result files."""
    total = totals(rows)
    text = table(args, ours, torch_version, rows, total)
    print(text)
    stamp = benchlib.utc_stamp(seconds=True)
    benchlib.write_results("gemm", stamp, ours["device"],
                           dict(date=stamp, device=ours["device"], dtype=args.dtype,
                                torch=torch_version, iters=args.iters, gemms=rows, total=total),
                           text + "\n")


def main():
    p = benchlib.arg_parser(__doc__, iters=50, warmup=10)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    args = p.parse_args()
    torch = benchlib.require_torch("bench_gemm")
    ours = run_ours(args)
    dtype = getattr(torch, DTYPES[args.dtype])
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "fp32"
    rows = []
    for g in ours["gemms"]:
        flop = 2.0 * g["m"] * g["n"] * g["k"] * g["batch"]
        ms = time_torch(torch, g, dtype, args.warmup, args.iters)
        rows.append(dict(g, torch_ms=ms, torch_tflops=flop / ms / 1e9, flop=flop))
    report(args, ours, torch.__version__, rows)


if __name__ == "__main__":
    main()
