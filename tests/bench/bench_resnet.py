"""ResNet-50 v1.5 training throughput: this suite's trainer (build/bin/resnet
--synthetic: random data already on the device, no loader) beside
torchvision's resnet50 on the same GPU in the same run, precision by
precision: fp32 with TF32, bf16 and fp16 (PyTorch: autocast, fp16 with a
GradScaler; ours: precision = bf16 / fp16, fp16 with dynamic loss scaling),
channels_last, eager, and torch.compile for bf16. Same batch, image size, SGD
with momentum and label-smoothed cross-entropy; images/s over the same
number of timed steps after warm-up.

Then the same in bf16 with real input: --images ImageNet-sized JPEGs (500x375,
quality 90, cut from real photos by build/bench/bench_loader --out), ours
through its loader (`resnet --bench_steps`: LMDB, TurboJPEG decode,
random-resized-crop + flip to 224, pinned ring, device copy; --loader_threads
workers) and torchvision's usual recipe (ImageFolder, PIL decode,
RandomResizedCrop + flip, DataLoader with as many workers, pinned memory).
Prints one table and writes tests/bench/results/resnet_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_resnet.py [--build build] [--batch 256] [--steps 50]
        [--images 5120] [--loader_threads N] [--precisions tf32,bf16,fp16] [--no_compile]
    python3 tests/bench/bench_resnet.py --device cpu --batch 4 --image_size 64 --steps 2 --images 64
        (a smoke run of the script's own logic: fp32 only, no results file)
"""
import os
import subprocess
import sys
import tempfile

import benchlib
from benchlib import ROOT


def run_ours(args, precision, data_dir=None, profile=False):
    """images/s of our trainer: synthetic, or with data_dir its real loader
    (and the share of the time it waited for the loader); with profile, also
    the op-by-op table of 10 more synthetic steps."""
    conf = os.path.join(ROOT, "image_classification", "configs", "full_1gpu.conf")
    cmd = [os.path.join(args.build, "bin", "resnet"), f"--config={conf}",
           f"--batch_size={args.batch}", f"--image_size={args.image_size}",
           f"--device={args.device}", f"--precision={precision}",
           # PyTorch's optimizer below, at a constant rate: the full
           # config's LARS rate (3.7) under SGD, on one repeated batch,
           # diverges, and the steps would time NaN arithmetic (or, in
           # fp16, overflow-skipped steps without an optimizer step).
           "--optimizer=sgd", "--base_lr=0.1", "--end_lr=0.1", "--warmup_epochs=0",
           "--momentum=0.9", "--weight_decay=5e-5"]
    if data_dir:
        cmd += [f"--data_dir={data_dir}", f"--bench_steps={args.steps}",
                f"--loader_threads={args.loader_threads}"]
        m, _ = benchlib.trainer_throughput(
            "bench_resnet", cmd,
            r"real data: .*: ([0-9.]+) images/s; trainer waited for the loader ([0-9.]+)%")
        return float(m.group(1)), float(m.group(2)) / 100
    cmd += ["--synthetic", f"--synthetic_steps={args.steps}"] + (["--profile_steps=10"] if profile else [])
    m, out = benchlib.trainer_throughput("bench_resnet", cmd)
    return float(m.group(1)), benchlib.profile_block(out)


def make_jpegs(args, out):
    """--images JPEGs into out/lmdb (ours) and out/raw/train (ImageFolder)."""
    listing = os.path.join(out, "photos.txt")
    with open(listing, "w") as f:
        subprocess.run(["bash", os.path.join(ROOT, "tests", "bench", "sample_photos.sh")], stdout=f,
                       check=True)
    cmd = [os.path.join(args.build, "bench", "bench_loader"), f"--images={args.images}",
           f"--list={listing}", f"--out={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("bench_resnet: bench_loader failed:\n" + proc.stdout + proc.stderr)
    return proc.stdout.splitlines()[0]  # "data N JPEGs WxH, mean K KB, cut from P photos"


def torch_real_images_per_s(torch, args, folder):
    """torchvision's usual input recipe feeding resnet50 in bf16 autocast."""
    import torchvision
    import torchvision.transforms as T
    dev = torch.device(args.device)
    tf = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(folder, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                                     num_workers=args.loader_threads, pin_memory=args.device == "cuda",
                                     persistent_workers=True)
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def batches():
        while True:
            yield from dl

    it = batches()

    def forward_loss():
        x, y = next(it)
        x = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
        return loss_fn(model(x), y.to(dev, non_blocking=True))

    precision = "bf16" if args.device == "cuda" else "fp32"
    step = benchlib.torch_train_step(torch, args.device, precision, forward_loss, opt)
    return benchlib.images_per_s(torch, step, args.batch, args.steps, args.device)[0]


def torch_images_per_s(torch, args, precision, compile_it=False):
    """precision: 'fp32', 'tf32', 'bf16' or 'fp16' (autocast + GradScaler)."""
    import torchvision
    dev = torch.device(args.device)
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=dev).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    step = benchlib.torch_train_step(torch, args.device, precision, lambda: loss_fn(model(x), y), opt)
    run = torch.compile(step) if compile_it else step
    return benchlib.images_per_s(torch, run, args.batch, args.steps, args.device)[0]


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--images", type=int, default=5120, help="JPEGs of the real-input runs")
    p.add_argument("--loader_threads", type=int, default=os.cpu_count(),
                   help="our loader's threads and PyTorch's DataLoader workers")
    p.add_argument("--precisions", default="tf32,bf16,fp16",
                   help="the synthetic rows on a GPU (the real-input row is bf16 when listed)")
    p.add_argument("--no_compile", action="store_true",
                   help="leave out the torch.compile column (it compiles for a minute or more)")
    args = p.parse_args()
    torch = benchlib.require_torch("bench_resnet", cuda=args.device == "cuda",
                                   modules=("torchvision",),
                                   missing="PyTorch with torchvision is not installed")
    precisions = args.precisions.split(",") if args.device == "cuda" else ["fp32"]
    if not set(precisions) <= {"tf32", "bf16", "fp16"}:
        p.error(f"--precisions: {args.precisions!r}: each must be tf32, bf16 or fp16")
    rows = []
    profile_prec = "bf16" if "bf16" in precisions else precisions[0]
    profile = ""
    for prec in precisions:
        ours, prof = run_ours(args, prec, profile=prec == profile_prec)
        profile = prof or profile
        eager = torch_images_per_s(torch, args, prec)
        compiled = (torch_images_per_s(torch, args, prec, compile_it=True)
                    if prec == "bf16" and not args.no_compile else None)
        rows.append({"precision": prec, "ours": ours, "torch_eager": eager, "torch_compile": compiled})
        # A row as soon as it is measured: a run cut short still says what it found.
        print(f"{prec}: ours {ours:.1f} images/s, torchvision eager {eager:.1f}"
              + (f", torch.compile {compiled:.1f}" if compiled else ""), flush=True)
    real_prec = profile_prec
    with tempfile.TemporaryDirectory() as tmp:
        data_note = make_jpegs(args, tmp)
        ours_real, waited = run_ours(args, real_prec, data_dir=tmp)
        print(f"{real_prec} real input: ours {ours_real:.1f} images/s", flush=True)
        torch_real = torch_real_images_per_s(torch, args, os.path.join(tmp, "raw", "train"))
    real = {"precision": real_prec, "data": data_note, "loader_threads": args.loader_threads,
            "ours": ours_real, "ours_loader_wait": waited, "torch_eager": torch_real}
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    date = benchlib.utc_stamp()
    lines = [f"ResNet-50 v1.5 training images/s, batch {args.batch}, {args.image_size}x{args.image_size}, "
             f"{gpu}, {date}", "", "Synthetic data (already on the device):", "",
             "| precision | ours | torchvision eager | ours / eager | torch.compile | ours / compile |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        c = r["torch_compile"]
        lines.append(f"| {r['precision']} | {r['ours']:.1f} | {r['torch_eager']:.1f} | "
                     f"{r['ours'] / r['torch_eager']:.2f} | "
                     + (f"{c:.1f} | {r['ours'] / c:.2f} |" if c else "- | - |"))
    lines += ["", f"Real input ({data_note}; {args.loader_threads} loader threads / DataLoader "
              f"workers, {os.cpu_count()} CPU cores), {real_prec}:", "",
              "| ours | ours waited for input | torchvision eager + DataLoader | ours / torch |",
              "|---|---|---|---|",
              f"| {ours_real:.1f} | {100 * waited:.0f}% | {torch_real:.1f} | {ours_real / torch_real:.2f} |"]
    if profile:
        lines += ["", f"Where our {profile_prec} synthetic step goes (`resnet --profile_steps`; "
                  "each step synchronised, so a little slower than above):", "", "```", profile, "```"]
    table = "\n".join(lines)
    print(table)
    if args.device == "cuda":
        benchlib.write_results("resnet", date, gpu,
                               {"date": date, "gpu": gpu, "batch": args.batch,
                                "image_size": args.image_size, "steps": args.steps,
                                "versions": benchlib.torch_versions(torch), "rows": rows,
                                "real_input": real, "profile": profile},
                               table + "\n")


if __name__ == "__main__":
    sys.exit(main())
