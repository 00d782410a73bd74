"""SSD300-ResNet34 training throughput: this suite's trainer (build/bin/ssd
--synthetic: random images and matched targets already on the device, no
loader, no eval) beside a PyTorch SSD300 written here as the MLPerf
reference defines it (mlcommons/training single_stage_detector/ssd:
ssd300.py, base_model.py), on the same GPU in the same run, at the same
batch, precision by precision: fp32 (true fp32 on both sides), tf32, bf16
and fp16 (PyTorch: autocast, fp16 with a GradScaler; ours: precision =
bf16 / fp16, fp16 with dynamic loss scaling), channels_last, eager, and
with --compile also torch.compile.

The PyTorch model: torchvision's resnet34 to layer3, layer3[0].conv1 and its
downsample at stride 1 (38x38x256 from 300x300); five extra blocks (1x1
conv + ReLU, 3x3 conv + ReLU, with bias); 3x3 location and class heads with
4, 6, 6, 6, 4, 4 boxes a location; 8,732 boxes, 81 classes. Its loss is the
reference's Loss: smooth L1 on positives + cross-entropy over positives and
the 3:1 hard negatives (two sorts for the ranks), per image / positives,
mean over the batch; SGD with momentum 0.9 and weight decay 5e-4 on every
tensor, at the reference's 2.5e-3 x batch / 32 (ours too, without warmup).

Targets, both sides alike: per image three random ground-truth boxes
(width and height uniform in 0.1-0.6 of the image, anywhere in it, a random
class of 80) matched to the default boxes (IoU > 0.5, and each box's best)
- ours in C in the trainer, PyTorch's by tests/object_detection/
ssd_reference.py, the suite's numpy oracle of the reference's matching. So
both see about the same number of positives (printed; ~0.25% of the boxes,
fewer than COCO's ~7 objects an image give, but both steps are dense over
all boxes, so the count hardly changes the work) and mine 3x as many
negatives. The offsets come encoded, as our loader gives them (the
reference encodes them in its loss: a few elementwise operations).

Each side: 10 warm-up steps (the trainer's), then --steps timed steps,
--repeats times (ours: as many trainer runs; PyTorch: as many timings of
one model); the table gives the medians and our images/s over PyTorch's.
Writes tests/bench/results/ssd_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_ssd.py [--build build] [--batch 32[,64]] [--steps 50]
        [--repeats 3] [--precisions fp32,tf32,bf16,fp16] [--compile bf16]
    python3 tests/bench/bench_ssd.py --build build --device cpu --smoke
        (the script's own logic on a CPU: batch 1, 1 step, 2 repeats, fp32,
        no results file)
"""
import os
import re
import statistics
import sys

import numpy as np

import benchlib
from benchlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "object_detection"))
import ssd_reference  # noqa: E402  (numpy: default boxes and matching)

NAME = "bench_ssd"
CLASSES = 81  # COCO's 80 and the background, as the trainer's synthetic run
OBJECTS = 3   # ground-truth boxes per image, as the trainer's synthetic run
WARMUP = 10   # the trainer's synthetic warm-up steps


def base_lr(batch):
    return 2.5e-3 * batch / 32


def run_ours(args, batch, precision, profile_steps=0):
    """images/s of one synthetic run of our trainer, its parameter and box
    counts, and with profile_steps the op-by-op table of as many more steps."""
    cmd = [os.path.join(args.build, "bin", "ssd"),
           "--config=" + os.path.join(ROOT, "object_detection", "configs", "full_1gpu.conf"),
           "--synthetic", f"--synthetic_steps={args.steps}", f"--batch_size={batch}",
           f"--precision={precision}", f"--device={args.device}", f"--base_lr={base_lr(batch)}",
           "--warmup_steps=1", f"--profile_steps={profile_steps}"]
    m, out = benchlib.trainer_throughput(NAME, cmd)
    counts = re.search(r"ssd: (\d+) parameters, (\d+) default boxes, (\d+) classes", out)
    if not counts:
        sys.exit(f"{NAME}: no 'ssd: N parameters, ...' line in the trainer's output:\n" + out[-2000:])
    return float(m.group(1)), tuple(int(g) for g in counts.groups()), benchlib.profile_block(out)


def run_ours_repeats(args, batch, precision, profile):
    """images/s of args.repeats synthetic runs, the counts, and with profile
    the first run's op-by-op table ("" without)."""
    rates, text = [], ""
    for r in range(args.repeats):
        rate, counts, t = run_ours(args, batch, precision, args.profile_steps if profile and r == 0 else 0)
        rates.append(rate)
        text = text or t
    return rates, counts, text


def ssd300(torch, classes):
    """The MLPerf reference's SSD300 (ResNet-34 backbone), untrained; its
    forward gives loc (N, boxes, 4) and logits (N, boxes, classes) as
    transposed views of the reference's (N, 4, boxes) and (N, classes, boxes)."""
    import torchvision
    nn = torch.nn

    class SSD300(nn.Module):
        def __init__(self):
            super().__init__()
            self.feature_extractor = nn.Sequential(*list(torchvision.models.resnet34().children())[:7])
            block = self.feature_extractor[-1][0]  # layer3's first block: stride 1
            block.conv1.stride = (1, 1)
            block.downsample[0].stride = (1, 1)
            channels = [256, 512, 512, 256, 256, 256]
            self.additional_blocks = nn.ModuleList()
            for k, (i, o, mid) in enumerate(zip(channels[:-1], channels[1:], [256, 256, 128, 128, 128])):
                last = nn.Conv2d(mid, o, 3, padding=1, stride=2) if k < 3 else nn.Conv2d(mid, o, 3)
                self.additional_blocks.append(nn.Sequential(nn.Conv2d(i, mid, 1), nn.ReLU(inplace=True),
                                                            last, nn.ReLU(inplace=True)))
            self.num_defaults = [4, 6, 6, 6, 4, 4]
            self.loc = nn.ModuleList(nn.Conv2d(c, nd * 4, 3, padding=1)
                                     for nd, c in zip(self.num_defaults, channels))
            self.conf = nn.ModuleList(nn.Conv2d(c, nd * classes, 3, padding=1)
                                      for nd, c in zip(self.num_defaults, channels))
            for part in (self.additional_blocks, self.loc, self.conf):  # the reference's _init_weights
                for p in part.parameters():
                    if p.dim() > 1:
                        nn.init.xavier_uniform_(p)

        def forward(self, x):
            maps = [self.feature_extractor(x)]
            for block in self.additional_blocks:
                maps.append(block(maps[-1]))
            n = x.shape[0]
            # The reference's bbox_view, with reshape where it has view: a
            # channels_last head output cannot be viewed as (N, 4, nbox*H*W).
            loc = torch.cat([head(m).reshape(n, 4, -1) for m, head in zip(maps, self.loc)], 2)
            conf = torch.cat([head(m).reshape(n, classes, -1) for m, head in zip(maps, self.conf)], 2)
            return loc.transpose(1, 2), conf.transpose(1, 2)

    return SSD300()


def ssd_loss(torch, ploc, plogits, gloc, glabel):
    """The reference's Loss.forward on offsets already encoded: ploc, gloc
    (N, boxes, 4), plogits (N, boxes, classes), glabel (N, boxes) int64."""
    F = torch.nn.functional
    ploc, plogits = ploc.float(), plogits.float()  # ours: fp32 head outputs in every precision
    mask = glabel > 0
    pos_num = mask.sum(dim=1)
    sl1 = (mask.float() * F.smooth_l1_loss(ploc, gloc, reduction="none").sum(dim=2)).sum(dim=1)
    con = F.cross_entropy(plogits.transpose(1, 2), glabel, reduction="none")  # (N, boxes)
    con_neg = con.masked_fill(mask, 0)
    _, con_idx = con_neg.sort(dim=1, descending=True)
    _, con_rank = con_idx.sort(dim=1)
    neg_mask = con_rank < torch.clamp(3 * pos_num, max=mask.size(1)).unsqueeze(-1)
    closs = (con * (mask.float() + neg_mask.float())).sum(dim=1)
    num_mask = (pos_num > 0).float()
    return ((sl1 + closs) * num_mask / pos_num.float().clamp(min=1e-6)).mean(dim=0)


def synthetic_targets(batch, seed):
    """(labels (batch, boxes) int64, offsets (batch, boxes, 4) float32): per
    image OBJECTS random boxes matched to SSD300's default boxes."""
    xywh, ltrb = ssd_reference.default_boxes(**ssd_reference.SSD300)
    rng = np.random.default_rng(seed)
    labels, offsets = [], []
    for _ in range(batch):
        w, h = 0.1 + 0.5 * rng.random(OBJECTS), 0.1 + 0.5 * rng.random(OBJECTS)
        left, top = rng.random(OBJECTS) * (1 - w), rng.random(OBJECTS) * (1 - h)
        gt = np.stack([left, top, left + w, top + h], axis=1).astype(np.float32)
        lab, off = ssd_reference.match(xywh, ltrb, gt, rng.integers(1, CLASSES, OBJECTS).astype(np.int32))
        labels.append(lab)
        offsets.append(off)
    return np.stack(labels).astype(np.int64), np.stack(offsets)


def check_model(torch, ours_counts):
    """The PyTorch model against ours: parameter count, boxes and classes,
    and its output shapes (on 2 images, on the CPU); returns the counts."""
    params, boxes, classes = ours_counts
    model = ssd300(torch, CLASSES)
    n_params = sum(p.numel() for p in model.parameters())
    n_boxes = len(ssd_reference.default_boxes(**ssd_reference.SSD300)[0])
    if (n_params, n_boxes, CLASSES) != ours_counts:
        sys.exit(f"{NAME}: PyTorch's SSD300 has {n_params:,} parameters, {n_boxes} default boxes, "
                 f"{CLASSES} classes; ours {params:,}, {boxes}, {classes}")
    with torch.no_grad():
        loc, logits = model(torch.zeros(2, 3, 300, 300))
    if tuple(loc.shape) != (2, n_boxes, 4) or tuple(logits.shape) != (2, n_boxes, CLASSES):
        sys.exit(f"{NAME}: PyTorch's SSD300 gives loc {tuple(loc.shape)} and logits "
                 f"{tuple(logits.shape)} for 2 images, not (2, {n_boxes}, 4) and (2, {n_boxes}, {CLASSES})")
    return n_params, n_boxes


def torch_images_per_s(torch, args, batch, precision, targets, compile_it=False):
    """Images/s of the PyTorch SSD300's training step, one per repeat."""
    dev = torch.device(args.device)
    torch.manual_seed(1)
    model = ssd300(torch, CLASSES).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=base_lr(batch), momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 300, 300, device=dev).contiguous(memory_format=torch.channels_last)
    glabel, gloc = (torch.from_numpy(a).to(dev) for a in targets)
    step = benchlib.torch_train_step(torch, args.device, precision,
                                     lambda: ssd_loss(torch, *model(x), gloc, glabel), opt)
    run = torch.compile(step) if compile_it else step
    rates = benchlib.images_per_s(torch, run, batch, args.steps, args.device, WARMUP, args.repeats)
    with torch.no_grad():
        loss = ssd_loss(torch, *model(x), gloc, glabel).item()
    if not np.isfinite(loss):
        sys.exit(f"{NAME}: PyTorch's {precision} loss is not finite, so its steps timed NaN arithmetic")
    return rates


def table(args, head, rows, profile):
    lines = [head, "", f"Synthetic data, {OBJECTS} random objects an image matched to the default boxes; "
             f"{args.steps} timed steps after {WARMUP} warm-up, median of {args.repeats} repeats; "
             "images/s:", "",
             "| batch | precision | positives | ours | PyTorch eager | ours / eager | "
             "torch.compile | ours / compile |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c = r["torch_compile"]
        lines.append(f"| {r['batch']} | {r['precision']} | {100 * r['positive_fraction']:.2f}% | "
                     f"{r['ours']:.1f} | {r['torch_eager']:.1f} | {r['ours'] / r['torch_eager']:.2f} | "
                     + (f"{c:.1f} | {r['ours'] / c:.2f} |" if c else "- | - |"))
    if profile:
        lines += ["", f"Where our {profile[0]} step goes at batch {profile[1]} (`ssd --profile_steps`; "
                  "each step synchronised, so a little slower than above):", "", "```", profile[2], "```"]
    return "\n".join(lines)


def int_list(text):
    return [int(v) for v in text.split(",")]


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--batch", type=int_list, default=[32], help="batch sizes, e.g. 32,64")
    p.add_argument("--steps", type=int, default=50, help="timed steps a repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    p.add_argument("--compile", default="", help="precisions also timed under torch.compile, e.g. bf16")
    p.add_argument("--profile_steps", type=int, default=10,
                   help="our op-by-op profile of this many steps (bf16, the first batch; 0: none)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--smoke", action="store_true",
                   help="batch 1, 1 step, 2 repeats, fp32, a 1-step profile: the script's logic, fast")
    args = p.parse_args()
    if args.steps < 1 or args.repeats < 1:
        p.error("--steps and --repeats must be at least 1")
    torch = benchlib.require_torch(NAME, cuda=args.device == "cuda", modules=("torchvision",),
                                   missing="PyTorch with torchvision is not installed")
    if not os.access(os.path.join(args.build, "bin", "ssd"), os.X_OK):
        benchlib.skip(NAME, f"{args.build}/bin/ssd is not built (run make)")
    if args.smoke:
        args.batch, args.steps, args.repeats, args.precisions, args.profile_steps = [1], 1, 2, "fp32", 1
    # Our CPU path computes in fp32 only.
    precisions = args.precisions.split(",") if args.device == "cuda" else ["fp32"]
    compiled = set(args.compile.split(",")) - {""}
    profile_prec = "bf16" if "bf16" in precisions else precisions[0]
    rows, profile = [], None
    for batch in args.batch:
        targets = synthetic_targets(batch, seed=batch)
        for prec in precisions:
            want_profile = profile is None and prec == profile_prec
            ours, counts, text = run_ours_repeats(args, batch, prec, want_profile)
            if text:
                profile = (prec, batch, text)
            if not rows:
                n_params, n_boxes = check_model(torch, counts)
                print(f"{NAME}: PyTorch's SSD300 and ours: {n_params:,} parameters, {n_boxes} boxes, "
                      f"{CLASSES} classes")
            eager = torch_images_per_s(torch, args, batch, prec, targets)
            comp = torch_images_per_s(torch, args, batch, prec, targets, True) if prec in compiled else None
            rows.append(dict(batch=batch, precision=prec, positive_fraction=float((targets[0] > 0).mean()),
                             ours=statistics.median(ours), torch_eager=statistics.median(eager),
                             torch_compile=statistics.median(comp) if comp else None,
                             ours_repeats=ours, torch_eager_repeats=eager, torch_compile_repeats=comp))
            print(f"{NAME}: batch {batch} {prec}: ours {rows[-1]['ours']:.1f}, PyTorch eager "
                  f"{rows[-1]['torch_eager']:.1f} images/s", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    versions = benchlib.torch_versions(torch)
    date = benchlib.utc_stamp()
    head = (f"SSD300-ResNet34 training images/s, 300x300, {CLASSES} classes, {device}, "
            + ", ".join(f"{k} {v}" for k, v in versions.items()) + f", {date}")
    text = table(args, head, rows, profile)
    print(text)
    if args.device == "cuda" and not args.smoke:
        benchlib.write_results("ssd", date, device,
                               dict(date=date, device=device, versions=versions, steps=args.steps,
                                    warmup=WARMUP, repeats=args.repeats, objects_per_image=OBJECTS,
                                    rows=rows, profile=profile[2] if profile else ""), text + "\n")


if __name__ == "__main__":
    main()
