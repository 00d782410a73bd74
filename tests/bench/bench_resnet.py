"""ResNet-50 v1.5 training throughput: this suite's trainer (build/bin/resnet
--synthetic: random data already on the device, no loader) beside
torchvision's resnet50 on the same GPU in the same run, precision by
precision: fp32 with TF32, bf16 and fp16 (PyTorch: autocast, fp16 with a
GradScaler; ours: precision = bf16 / fp16, fp16 with dynamic loss scaling),
channels_last, eager, and torch.compile for bf16. Same batch, image size, SGD
with momentum and label-smoothed cross-entropy; images/s over the same
number of timed steps after warm-up.
Prints one table and writes tests/bench/results/resnet_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_resnet.py [--build build] [--batch 256] [--steps 50]
    python3 tests/bench/bench_resnet.py --device cpu --batch 4 --image_size 64 --steps 2
        (a smoke run of the script's own logic: fp32 only, no results file)
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT


def run_ours(args, precision):
    conf = os.path.join(ROOT, "image_classification", "configs", "full_1gpu.conf")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [os.path.join(args.build, "bin", "resnet"), f"--config={conf}", "--synthetic",
               f"--synthetic_steps={args.steps}", f"--batch_size={args.batch}",
               f"--image_size={args.image_size}", f"--device={args.device}", f"--precision={precision}",
               "--optimizer=sgd", f"--log_file={os.path.join(tmp, 'bench.log')}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"synthetic: .*: ([0-9.]+) images/s", proc.stdout)
    if proc.returncode != 0 or not m:
        raise SystemExit("bench_resnet: our trainer failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    return float(m.group(1))


def torch_images_per_s(torch, args, precision, compile_it=False):
    """precision: 'fp32', 'tf32', 'bf16' or 'fp16' (autocast + GradScaler)."""
    import torchvision
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=dev).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    lowp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def step():
        with torch.autocast(args.device, dtype=lowp or torch.float32, enabled=lowp is not None):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)  # a disabled scaler (all but fp16) just steps
        scaler.update()

    run = torch.compile(step) if compile_it else step
    for _ in range(10):
        run()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        run()
    sync()
    return args.batch * args.steps / (time.perf_counter() - start)


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    torch = benchlib.require_torch("bench_resnet", cuda=args.device == "cuda",
                                   modules=("torchvision",),
                                   missing="PyTorch with torchvision is not installed")
    precisions = ["tf32", "bf16", "fp16"] if args.device == "cuda" else ["fp32"]
    rows = []
    for prec in precisions:
        ours = run_ours(args, prec)
        eager = torch_images_per_s(torch, args, prec)
        compiled = torch_images_per_s(torch, args, prec, compile_it=True) if prec == "bf16" else None
        rows.append({"precision": prec, "ours": ours, "torch_eager": eager, "torch_compile": compiled})
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    date = benchlib.utc_stamp()
    lines = [f"ResNet-50 v1.5 training images/s, batch {args.batch}, {args.image_size}x{args.image_size}, "
             f"synthetic data, {gpu}, {date}", "",
             "| precision | ours | torchvision eager | ours / eager | torch.compile | ours / compile |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        c = r["torch_compile"]
        lines.append(f"| {r['precision']} | {r['ours']:.1f} | {r['torch_eager']:.1f} | "
                     f"{r['ours'] / r['torch_eager']:.2f} | "
                     + (f"{c:.1f} | {r['ours'] / c:.2f} |" if c else "- | - |"))
    table = "\n".join(lines)
    print(table)
    if args.device == "cuda":
        benchlib.write_results("resnet", date, gpu,
                               {"date": date, "gpu": gpu, "batch": args.batch,
                                "image_size": args.image_size, "steps": args.steps, "rows": rows},
                               table + "\n")


if __name__ == "__main__":
    sys.exit(main())
