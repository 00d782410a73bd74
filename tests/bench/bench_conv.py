"""The 53 convolutions of ResNet-50 v1.5: this suite's op_conv2d_* (cuDNN,
build/bench/bench_conv) beside PyTorch (channels_last, cudnn.benchmark) on the
same shapes, dtype and GPU, in one run.

Runs the C program first (it defines the shapes and writes them with its
timings as JSON), then times PyTorch's forward, data gradient and filter
gradient of each shape the same way (CUDA events, same warm-up and
repetitions), prints one table and writes
tests/bench/results/conv_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_conv.py [--build build] [--dtype bf16] [--batch 256] [--iters 20]
"""
import os

import benchlib

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
PASSES = ("fwd", "dgrad", "wgrad")


def run_ours(args):
    exe = os.path.join(args.build, "bench", "bench_conv")
    return benchlib.run_json("bench_conv", exe, [
        "--net=resnet50", "--device=cuda", f"--dtype={args.dtype}", f"--batch={args.batch}",
        f"--iters={args.iters}", f"--warmup={args.warmup}"], echo=True)


def conv_fns(torch):
    """forward, dgrad, wgrad callables (x, w, dy, stride, pad) for PyTorch:
    aten's convolution_backward (what autograd calls) with one output each,
    or the torch.nn.grad helpers on versions without it."""
    F = torch.nn.functional

    def fwd(x, w, dy, stride, pad):
        return F.conv2d(x, w, None, stride, pad)

    backward = getattr(torch.ops.aten, "convolution_backward", None)
    if backward is not None:
        def grad(mask):
            def run(x, w, dy, stride, pad):
                return backward(dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0],
                                1, mask)
            return run
        return fwd, grad([True, False, False]), grad([False, True, False])

    def dgrad(x, w, dy, stride, pad):
        return torch.nn.grad.conv2d_input(x.shape, w, dy, stride, pad)

    def wgrad(x, w, dy, stride, pad):
        return torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, pad)
    return fwd, dgrad, wgrad


def time_torch(torch, fns, layer, batch, dtype, warmup, iters):
    """Mean milliseconds of each pass on the layer's shape, NHWC memory."""
    cl = torch.channels_last
    h, c, k, r = layer["h"], layer["c"], layer["k"], layer["r"]
    stride, pad = layer["stride"], layer["pad"]
    out = (h + 2 * pad - r) // stride + 1
    x = torch.zeros(batch, c, h, layer["w"], dtype=dtype, device="cuda").to(memory_format=cl)
    w = torch.zeros(k, c, r, r, dtype=dtype, device="cuda").to(memory_format=cl)
    dy = torch.zeros(batch, k, out, out, dtype=dtype, device="cuda").to(memory_format=cl)
    times = [benchlib.time_ms(torch, lambda fn=fn: fn(x, w, dy, stride, pad), warmup, iters)
             for fn in fns]
    del x, w, dy
    return times


def report(args, ours, torch_version, rows):
    """Prints the table and writes the result files."""
    def total(prefix):
        return sum(r["count"] * sum(r[prefix + k + "_ms"] for k in PASSES) for r in rows)
    flop = sum(r["count"] * 3 * r["flop"] for r in rows)
    ours_ms, torch_ms = total(""), total("torch_")

    header = ("ResNet-50 v1.5 convolutions (%d, %d shapes), batch %d, %s NHWC, %s, torch %s, "
              "%d iterations" % (ours["convs"], len(rows), args.batch, args.dtype, ours["device"],
                                 torch_version, args.iters))
    lines = [header, "", "TFLOP/s of each pass (ours / torch); count = convolutions of that shape",
             "",
             "| layer | HW | C | K | R | stride | count | fwd | dgrad | wgrad | fwd torch | "
             "dgrad torch | wgrad torch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tf = [r["flop"] / r[k + "_ms"] / 1e9 for k in PASSES]
        tt = [r["flop"] / r["torch_" + k + "_ms"] / 1e9 for k in PASSES]
        lines.append("| %s | %d | %d | %d | %d | %d | %d | %s |" % (
            r["name"], r["h"], r["c"], r["k"], r["r"], r["stride"], r["count"],
            " | ".join("%.1f" % v for v in tf + tt)))
    lines += ["", "all %d convolutions, fwd + dgrad + wgrad: ours %.2f ms (%.1f TFLOP/s), "
              "torch %.2f ms (%.1f TFLOP/s), ours/torch speed %.2f" % (
                  ours["convs"], ours_ms, flop / ours_ms / 1e9, torch_ms, flop / torch_ms / 1e9,
                  torch_ms / ours_ms)]
    print("\n".join(lines))

    stamp = benchlib.utc_stamp(seconds=True)
    benchlib.write_results("conv", stamp, ours["device"],
                           dict(date=stamp, device=ours["device"], dtype=args.dtype,
                                batch=args.batch, torch=torch_version, iters=args.iters,
                                layers=rows, total_ms=ours_ms, torch_total_ms=torch_ms,
                                total_flop=flop), "\n".join(lines) + "\n")


def main():
    p = benchlib.arg_parser(__doc__, iters=20, warmup=5)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    torch = benchlib.require_torch("bench_conv")
    ours = run_ours(args)
    dtype = getattr(torch, DTYPES[args.dtype])
    # Same choices as the C side: cuDNN autotuning per shape; fp32 is true
    # fp32 (the suite sets CUDNN_FMA_MATH), so no TF32 for PyTorch either.
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    fns = conv_fns(torch)
    rows = []
    for layer in ours["layers"]:
        try:
            t = time_torch(torch, fns, layer, args.batch, dtype, args.warmup, args.iters)
        except RuntimeError as e:  # out of memory or an unsupported shape: say so, go on
            print("torch failed on %s: %s" % (layer["name"], str(e).splitlines()[0]))
            t = [float("nan")] * 3
            torch.cuda.empty_cache()
        rows.append(dict(layer, **{"torch_%s_ms" % k: v for k, v in zip(PASSES, t)}))
    report(args, ours, torch.__version__, rows)


if __name__ == "__main__":
    main()
