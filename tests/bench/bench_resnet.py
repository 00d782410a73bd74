"""ResNet-50 v1.5 training throughput: this suite's trainer (build/bin/resnet
--synthetic: random data already on the device, no loader) beside
torchvision's resnet50 on the same GPU in the same run: channels_last, fp32
with TF32 (what our trainer computes in today), and bf16 autocast, eager and
torch.compile. Same batch, image size, SGD with momentum and label-smoothed
cross-entropy; images/s over the same number of timed steps after warm-up.
Prints one table and writes tests/bench/results/resnet_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_resnet.py [--build build] [--batch 256] [--steps 50]
    python3 tests/bench/bench_resnet.py --device cpu --batch 4 --image_size 64 --steps 2
        (a smoke run of the script's own logic, no results file)
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT


def run_ours(args):
    conf = os.path.join(ROOT, "image_classification", "configs", "full_1gpu.conf")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [os.path.join(args.build, "bin", "resnet"), f"--config={conf}", "--synthetic",
               f"--synthetic_steps={args.steps}", f"--batch_size={args.batch}",
               f"--image_size={args.image_size}", f"--device={args.device}", "--tf32=true",
               "--optimizer=sgd", f"--log_file={os.path.join(tmp, 'bench.log')}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"synthetic: .*: ([0-9.]+) images/s", proc.stdout)
    if proc.returncode != 0 or not m:
        raise SystemExit("bench_resnet: our trainer failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    return float(m.group(1))


def torch_images_per_s(torch, args, mode):
    """mode: 'tf32', 'bf16', 'bf16-compile'."""
    import torchvision
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=dev).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def step():
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=mode != "tf32"):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    run = torch.compile(step) if mode.endswith("compile") else step
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
    ours = run_ours(args)
    modes = ["tf32", "bf16"] + (["bf16-compile"] if args.device == "cuda" else [])
    rows = [("mlsuite resnet (fp32/TF32)", ours)]
    for mode in modes:
        rows.append(("torchvision resnet50, " + mode, torch_images_per_s(torch, args, mode)))
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    date = benchlib.utc_stamp()
    lines = [f"ResNet-50 v1.5 training, batch {args.batch}, {args.image_size}x{args.image_size}, "
             f"synthetic data, {gpu}, {date}", "",
             "| run | images/s | ours / this |", "|---|---|---|"]
    for name, ips in rows:
        lines.append(f"| {name} | {ips:.1f} | {ours / ips:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.device == "cuda":
        benchlib.write_results("resnet", date, gpu,
                               {"date": date, "gpu": gpu, "batch": args.batch,
                                "image_size": args.image_size, "steps": args.steps,
                                "rows": [{"run": n, "images_per_s": v} for n, v in rows]},
                               table + "\n")


if __name__ == "__main__":
    sys.exit(main())
