"""NCF (NeuMF) on the generated ml-20m-shaped set: this suite's trainer
(build/bin/ncf) beside a PyTorch NeuMF (recommendation/pytorch_reference.py)
on the same data, model and hyperparameters, in one run.

Two parts:
  throughput  our training step (sampling, forward, backward, Adam) at the
              config's batch (1,048,576), `ncf --bench_steps`, beside the
              PyTorch step at the same batch on the same data, precision by
              precision: bf16 (ours: precision = bf16; PyTorch: AMP bf16
              autocast) and fp32/TF32, each PyTorch run with fused Adam;
              CUDA events, the same warm-up and steps
  ttt         time to the HR@10 target: `ncf --config` against
              pytorch_reference.py with the same config (its precision:
              bf16 autocast for medium.conf; fused Adam)

Prints one table with the ratios and writes
tests/bench/results/ncf_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_ncf.py [--build build] [--data_dir data/ncf/medium]
        [--config recommendation/configs/medium.conf] [--iters 20] [--parts throughput,ttt]
    python3 tests/bench/bench_ncf.py --device cpu --data_dir data/ncf/small \\
        --config recommendation/configs/small.conf --iters 5
        (a smoke run of the script's own logic, no results file)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import benchlib

ref = None  # recommendation/pytorch_reference.py, imported after the skip checks (it needs torch)
WARMUP = 5  # the trainer's NCF_BENCH_WARMUP
# (our precision, PyTorch's --amp, PyTorch's row name); CPU runs fp32 only.
MODES = (("bf16", "bf16", "PyTorch NeuMF, AMP bf16, fused Adam"),
         ("tf32", "off", "PyTorch NeuMF, fp32/TF32, fused Adam"))


def run_trainer(args, extra):
    """build/bin/ncf on the config and data with extra flags; its stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [os.path.join(args.build, "bin", "ncf"), f"--config={args.config}",
               f"--data_dir={args.data_dir}", f"--device={args.device}",
               f"--log_file={os.path.join(tmp, 'ncf.log')}"] + extra
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        sys.exit("bench_ncf: %s failed with status %d" % (cmd[0], proc.returncode))
    return proc.stdout


def ours_throughput(args, precision, profile=False):
    """ms per step of our trainer, and with profile the op-by-op table of 10
    more steps ("" without)."""
    extra = ["--profile_steps=10"] if profile else []
    out = run_trainer(args, [f"--bench_steps={args.iters}", f"--precision={precision}"] + extra)
    m = re.search(r"ncf: bench: .*: ([0-9.]+) ms/step, ([0-9.]+) samples/s", out)
    if not m:
        sys.exit("bench_ncf: no 'ncf: bench:' line in the trainer's output:\n" + out[-2000:])
    return float(m.group(1)), benchlib.profile_block(out)


def torch_throughput(torch, args, conf, data, amp):
    """Milliseconds of one PyTorch step at the config's batch over batches of
    one epoch built on the device, and of building that epoch."""
    sampler = ref.Sampler(data, int(conf["train_negatives"]), args.device)
    model = ref.build_model(conf, data, args.device)
    step = ref.make_step(model, ref.make_optimizer(model, conf, args.device), amp)
    gen = torch.Generator(device=args.device)
    gen.manual_seed(1)
    users, items, labels = sampler.epoch(gen)
    batch, full = int(conf["batch_size"]), len(users) // int(conf["batch_size"])
    position = [0]

    def next_step():
        s0 = (position[0] % full) * batch
        position[0] += 1
        step(users[s0:s0 + batch], items[s0:s0 + batch], labels[s0:s0 + batch])

    step_ms = benchlib.time_ms(torch, next_step, WARMUP, args.iters, args.device)
    epoch_ms = benchlib.time_ms(torch, lambda: sampler.epoch(gen), 1, 2, args.device)
    return step_ms, epoch_ms, sampler.samples()


def throughput_rows(torch, args, conf):
    data = ref.load_ncf(os.path.join(args.data_dir, "ncf.bin"))
    batch = int(conf["batch_size"])
    modes = MODES if args.device == "cuda" else (("fp32", "off", "PyTorch NeuMF, fp32"),)
    rows = []
    for k, (prec, amp, name) in enumerate(modes):
        ours_ms, profile = ours_throughput(args, prec, profile=k == 0)
        if profile:
            args.profile = f"Where our {prec} step goes (`ncf --profile_steps`):\n\n```\n{profile}\n```"
        rows.append(dict(run=f"mlsuite ncf, {prec} (sampling in the step)", ms=ours_ms, ours_ms=ours_ms))
        step_ms, epoch_ms, samples = torch_throughput(torch, args, conf, data, amp)
        rows.append(dict(run=name, ms=step_ms, ours_ms=ours_ms))
        # The epoch's sampling and shuffle, spread over its steps: our step
        # samples its own batch, so this is the like-for-like figure.
        rows.append(dict(run=name + ", + epoch sampling", ms=step_ms + epoch_ms * batch / samples,
                         ours_ms=ours_ms))
        if args.device == "cuda":
            torch.cuda.empty_cache()
    for r in rows:
        r["samples_per_s"] = batch / r["ms"] * 1e3
    return rows


def ours_ttt(args):
    out = run_trainer(args, [])
    epochs = [dict(epoch=int(m.group(1)), hr=float(m.group(2)))
              for m in re.finditer(r"ncf: epoch (\d+): HR@10 ([0-9.]+)", out)]
    m = re.search(r"ncf: (target reached|target NOT reached).*time to train ([0-9.]+) s", out)
    if not m:
        sys.exit("bench_ncf: no time to train in the trainer's output:\n" + out[-2000:])
    return dict(run="mlsuite ncf", reached=m.group(1) == "target reached",
                seconds=float(m.group(2)), epochs=epochs)


def torch_ttt(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "torch.json")
        cmd = [sys.executable, os.path.join(benchlib.ROOT, "recommendation", "pytorch_reference.py"),
               f"--config={args.config}", f"--data_dir={args.data_dir}",
               f"--device={args.device}", f"--json={path}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(path):
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            sys.exit("bench_ncf: pytorch_reference.py failed with status %d" % proc.returncode)
        with open(path) as f:
            r = json.load(f)
    recipe = f"amp {r['amp']}, fused Adam" if args.device == "cuda" else "fp32, CPU"
    return dict(run="PyTorch NeuMF (pytorch_reference.py), " + recipe,
                reached=r["reached"], seconds=r["seconds"],
                epochs=[dict(epoch=e["epoch"], hr=e["hr"]) for e in r["epochs"]])


def table(args, conf, device, torch_version, thr, ttt):
    lines = [f"NCF (NeuMF {conf['mf_dim']} + {conf['mlp_layers']}) on {args.data_dir}, "
             f"{os.path.basename(args.config)}, batch {int(conf['batch_size']):,}, {device}, "
             f"torch {torch_version}, {benchlib.utc_stamp()}"]
    if thr:
        lines += ["", f"Training step, {args.iters} timed steps after {WARMUP} warm-up:", "",
                  "| run | ms/step | samples/s | ours (same precision) / this |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {r['run']} | {r['ms']:.2f} | {r['samples_per_s'] / 1e6:.2f}M | "
                  f"{r['ms'] / r['ours_ms']:.2f} |" for r in thr]
        if getattr(args, "profile", ""):
            lines += ["", args.profile]
    if ttt:
        lines += ["", f"Time to HR@10 {float(conf['target_accuracy']):.3f} (run_start to "
                  "run_stop: data load, training, every epoch's eval):", "",
                  "| run | reached | epochs | last HR@10 | seconds | this / ours time |",
                  "|---|---|---:|---:|---:|---:|"]
        ours = ttt[0]["seconds"]
        lines += [f"| {r['run']} | {'yes' if r['reached'] else 'no'} | {len(r['epochs'])} | "
                  f"{r['epochs'][-1]['hr'] if r['epochs'] else float('nan'):.4f} | "
                  f"{r['seconds']:.1f} | {r['seconds'] / ours:.2f} |" for r in ttt]
    return "\n".join(lines)


def main():
    p = benchlib.arg_parser(__doc__, iters=20)
    p.add_argument("--data_dir", default="data/ncf/medium")
    p.add_argument("--config", default="recommendation/configs/medium.conf")
    p.add_argument("--parts", default="throughput,ttt")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    torch = benchlib.require_torch("bench_ncf", cuda=args.device == "cuda")
    global ref
    sys.path.insert(0, os.path.join(benchlib.ROOT, "recommendation"))
    import pytorch_reference as ref
    exe = os.path.join(args.build, "bin", "ncf")
    if not os.access(exe, os.X_OK):
        benchlib.skip("bench_ncf", exe + " is not built (run make)")
    if not os.path.exists(os.path.join(args.data_dir, "ncf.bin")):
        benchlib.skip("bench_ncf", f"{args.data_dir}/ncf.bin is missing "
                      "(recommendation/prepare_data.sh medium DIR BUILD makes it)")
    conf = ref.read_conf(args.config)
    # The fp32 PyTorch rows compare with our tf32 runs.
    torch.backends.cuda.matmul.allow_tf32 = args.device == "cuda"
    parts = args.parts.split(",")
    thr = throughput_rows(torch, args, conf) if "throughput" in parts else []
    ttt = [ours_ttt(args), torch_ttt(args)] if "ttt" in parts else []
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    text = table(args, conf, device, torch.__version__, thr, ttt)
    print(text)
    if args.device == "cuda":
        stamp = benchlib.utc_stamp()
        benchlib.write_results("ncf", stamp, device,
                               dict(date=stamp, device=device, torch=torch.__version__,
                                    config=args.config, data_dir=args.data_dir,
                                    iters=args.iters, warmup=WARMUP, throughput=thr,
                                    time_to_target=ttt), text + "\n")


if __name__ == "__main__":
    main()
