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
PASSES = ("fwd", "dgrad", "wgrad")


def skip(why):
    print("SKIP bench_conv: " + why)
    sys.exit(0)


def run_ours(args):
    exe = os.path.join(args.build, "bench", "bench_conv")
    if not os.access(exe, os.X_OK):
        skip(exe + " is not built (run make; a CUDA build is needed)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ours.json")
        cmd = [exe, "--net=resnet50", "--device=cuda", f"--dtype={args.dtype}",
               f"--batch={args.batch}", f"--iters={args.iters}", f"--warmup={args.warmup}",
               f"--json={path}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.stdout.startswith("SKIP"):
            print(proc.stdout.strip())
            sys.exit(0)
        if proc.returncode != 0 or not os.path.exists(path):
            sys.stderr.write(proc.stdout + proc.stderr)
            sys.exit("bench_conv: %s failed with status %d" % (exe, proc.returncode))
        print(proc.stdout.rstrip())
        with open(path) as f:
            return json.load(f)


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
    times = []
    for fn in fns:
        for _ in range(warmup):
            fn(x, w, dy, stride, pad)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn(x, w, dy, stride, pad)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iters)
    del x, w, dy
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        skip("PyTorch is not installed (pip install torch)")
    if not torch.cuda.is_available():
        skip("PyTorch sees no GPU")
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

    def total(prefix):
        return sum(r["count"] * sum(r[prefix + k + "_ms"] for k in PASSES) for r in rows)
    flop = sum(r["count"] * 3 * r["flop"] for r in rows)
    ours_ms, torch_ms = total(""), total("torch_")

    header = ("ResNet-50 v1.5 convolutions (%d, %d shapes), batch %d, %s NHWC, %s, torch %s, "
              "%d iterations" % (ours["convs"], len(rows), args.batch, args.dtype, ours["device"],
                                 torch.__version__, args.iters))
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

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", ours["device"]).strip("-")
    base = os.path.join(HERE, "results", "conv_%s_%s" % (stamp, gpu))
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".json", "w") as f:
        json.dump(dict(date=stamp, device=ours["device"], dtype=args.dtype, batch=args.batch,
                       torch=torch.__version__, iters=args.iters, layers=rows,
                       total_ms=ours_ms, torch_total_ms=torch_ms, total_flop=flop), f, indent=1)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", base + ".json", "and .md")


if __name__ == "__main__":
    main()
