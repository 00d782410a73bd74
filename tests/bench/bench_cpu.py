"""CPU steps of the small trainers beside PyTorch eager: the same model,
batch and thread count, interleaved, medians (`make bench-cpu`).

Rows, each at 1 and at 2 threads (--threads):
  resnet train   `resnet --synthetic` on small.conf (ResNet-14, 32x32, batch
                 128, SGD with momentum): images/s of the training step;
                 PyTorch: pytorch_reference.py's ResNet of the same config,
                 channels_last, SGD with momentum and weight decay, cross
                 entropy with the config's label smoothing
  resnet eval    the eval forward pass (running batch-norm statistics) of the
                 same batch: the trainer's "synthetic eval" line; PyTorch's
                 model.eval() under torch.no_grad()
  ncf train      `ncf --bench_steps` on the small generated set (sampling,
                 forward, backward, Adam): samples/s; PyTorch's NeuMF step
                 (pytorch_reference.py) over a pre-sampled epoch, its sampling
                 time spread over the steps (bench_ncf.py's like-for-like row)
  transformer    `transformer --bench_steps` on random pairs of --nmt_length
  train          tokens a side (small.conf's model, its max_tokens a batch):
                 tokens/s; PyTorch's nn.Transformer of the same size
                 (bench_transformer.py's model)
  ssd train      `ssd --synthetic` on small.conf (the small SSD, 128x128,
                 batch 16, 81 classes as the synthetic run has them): images/s;
                 PyTorch: object_detection/pytorch_reference.py's network and
                 loss on random images, targets matched from three random
                 boxes an image as the trainer's
  bert train     `bert --bench_steps` with the small set's checkpoint shape
                 (MiniLM, windows of 96, batch 16): sequences/s; PyTorch:
                 language/pytorch_reference.py's model on the same kind of
                 batch (full windows of random ids), torch's dropout, AdamW
                 with clipping
Each trainer's eval is timed in the time-to-target part: a whole eval of its
small val set, both sides.

Ours runs as a subprocess with --threads=N; PyTorch in this process with
torch.set_num_threads(N). Each repeat measures every row once, ours then
PyTorch, so slow phases of a busy machine hit both sides. fp32 throughout.

Then time to target (--ttt): each small config from one seed to its target,
our trainer then its folder's pytorch_reference.py (the same model, data,
augmentation, optimizer, schedule and eval cadence; the clock from run_start,
decoding included), at the largest --threads, the small data sets made
under data/ when missing; also the mean time of an eval of the val set.
These are tests/bench/ttt.py's runs and table (which also runs several
seeds, and the medium configs on a GPU). This part takes minutes per config.
Then (--smoke) each medium config, both sides, for one epoch and its eval
in fp32 on a few records of its data's kind (ttt.py --scale smoke, under
4 minutes for the five on two cores): that the configs and the references
run before a GPU call spends its minutes on them.

Prints the tables with ours / PyTorch and writes
tests/bench/results/cpu_<moment>_<machine>.{json,md}.

    python3 tests/bench/bench_cpu.py [--build build] [--threads 1,2] [--repeats 3]
        [--rows resnet,ncf,transformer,ssd,bert] [--data_dir data/ncf/small]
        [--bert_data data/bert/small] [--ttt resnet,ncf,transformer,ssd,bert|none]
        [--ttt_seed 1] [--smoke resnet,ncf,transformer,ssd,bert|none]
"""
import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile

import benchlib
import ttt
from benchlib import ROOT

NAME = "bench_cpu"


def load(path, name):
    """A project Python file as a module (the PyTorch references live beside
    their trainers, not on the path)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_ours(cmd, threads):
    """Runs one of our trainers' benchmark modes on the CPU with its team at
    threads; its stdout (a failure ends the run with the output's tail)."""
    with tempfile.TemporaryDirectory() as tmp:
        full = list(cmd) + ["--device=cpu", f"--threads={threads}",
                            f"--log_file={os.path.join(tmp, 'bench.log')}"]
        proc = subprocess.run(full, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{NAME}: {' '.join(full)} failed with status {proc.returncode}:\n"
                 + proc.stdout[-2000:] + proc.stderr[-2000:])
    return proc.stdout


def number(pattern, out, what):
    m = re.search(pattern, out, re.M)
    if not m:
        sys.exit(f"{NAME}: no {what} line in the trainer's output:\n" + out[-2000:])
    return float(m.group(1))


class ResNetRows:
    rows = ("resnet train", "resnet eval")
    unit = "images/s"

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        self.conf_path = "image_classification/configs/small.conf"
        self.conf = ttt.read_conf(self.conf_path)
        self.ref = load("image_classification/pytorch_reference.py", "resnet_reference")

    def ours(self, threads):
        out = run_ours([os.path.join(self.args.build, "bin", "resnet"), f"--config={self.conf_path}",
                        "--synthetic", f"--synthetic_steps={self.args.resnet_steps}"], threads)
        return {"resnet train": number(r"^synthetic: .*: ([0-9.]+) images/s", out, "synthetic"),
                "resnet eval": number(r"^synthetic eval: .*: ([0-9.]+) images/s", out, "synthetic eval")}

    def pytorch(self, threads):
        torch, conf = self.torch, self.conf
        torch.manual_seed(1)
        model = self.ref.ResNet(conf).to(memory_format=torch.channels_last)
        n, side = int(conf["batch_size"]), int(conf["image_size"])
        x = torch.randn(n, 3, side, side).to(memory_format=torch.channels_last)
        y = torch.randint(0, int(conf["num_classes"]), (n,))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=float(conf["momentum"]),
                              weight_decay=float(conf["weight_decay"]))
        smoothing = float(conf.get("label_smoothing", 0))

        def loss():
            return torch.nn.functional.cross_entropy(model(x), y, label_smoothing=smoothing)

        model.train()
        step = benchlib.torch_train_step(torch, "cpu", "fp32", loss, opt)
        train = benchlib.images_per_s(torch, step, n, self.args.resnet_steps, "cpu", warmup=10)[0]
        model.eval()

        def forward():
            with torch.no_grad():
                model(x)

        evaluate = benchlib.images_per_s(torch, forward, n, self.args.resnet_steps, "cpu", warmup=3)[0]
        return {"resnet train": train, "resnet eval": evaluate}


class NCFRows:
    rows = ("ncf train",)
    unit = "samples/s"

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        self.conf_path = "recommendation/configs/small.conf"
        self.conf = ttt.read_conf(self.conf_path)
        self.bench_ncf = load("tests/bench/bench_ncf.py", "bench_ncf")
        self.bench_ncf.ref = load("recommendation/pytorch_reference.py", "ncf_reference")
        if not os.path.exists(os.path.join(args.data_dir, "ncf.bin")):
            subprocess.run(["bash", os.path.join(ROOT, "recommendation/prepare_data.sh"), "small",
                            args.data_dir, args.build], check=True, stdout=subprocess.DEVNULL)
        self.data = self.bench_ncf.ref.load_ncf(os.path.join(args.data_dir, "ncf.bin"))

    def ours(self, threads):
        out = run_ours([os.path.join(self.args.build, "bin", "ncf"), f"--config={self.conf_path}",
                        f"--data_dir={self.args.data_dir}", f"--bench_steps={self.args.ncf_steps}"],
                       threads)
        return {"ncf train": number(r"ncf: bench: .*, ([0-9.]+) samples/s", out, "'ncf: bench:'")}

    def pytorch(self, threads):
        a = self.args
        ncf_args = type("A", (), dict(device="cpu", iters=a.ncf_steps))()
        step_ms, epoch_ms, samples = self.bench_ncf.torch_throughput(self.torch, ncf_args, self.conf,
                                                                     self.data, "off")
        batch = int(self.conf["batch_size"])
        return {"ncf train": batch / (step_ms + epoch_ms * batch / samples) * 1e3}


class TransformerRows:
    rows = ("transformer train",)
    unit = "tokens/s"

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        conf = ttt.read_conf("translation/configs/small.conf")
        self.bench = load("tests/bench/bench_transformer.py", "bench_transformer")
        self.dims = {k: int(conf[k]) for k in ("d_model", "d_ff", "heads", "enc_layers", "dec_layers")}
        self.dims["vocab"] = args.nmt_vocab
        self.length = args.nmt_length
        self.max_tokens = int(conf["max_tokens"])

    def ours(self, threads):
        d = self.dims
        cmd = [os.path.join(self.args.build, "bin", "transformer"), "--config=translation/configs/small.conf",
               f"--bench_steps={self.args.nmt_steps}", f"--bench_vocab={d['vocab']}",
               f"--max_length={self.length}", "--eval_batch=1"]
        out = run_ours(cmd, threads)
        return {"transformer train": number(r"transformer: bench: .*, ([0-9.]+) tokens/s", out,
                                            "'transformer: bench:'")}

    def pytorch(self, threads):
        b_args = type("A", (), dict(device="cpu", max_length=self.length, steps=self.args.nmt_steps,
                                    repeats=1))()
        batch = self.max_tokens // self.length
        rates, _ = self.bench.torch_tokens_per_s(self.torch, b_args, self.dims, "fp32", batch)
        return {"transformer train": rates[0]}


class SSDRows:
    rows = ("ssd train",)
    unit = "images/s"

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        self.conf_path = "object_detection/configs/small.conf"
        self.ref = load("object_detection/pytorch_reference.py", "ssd_reference")
        self.conf = self.ref.read_conf(os.path.join(ROOT, self.conf_path))  # over the trainer's defaults

    def ours(self, threads):
        out = run_ours([os.path.join(self.args.build, "bin", "ssd"), f"--config={self.conf_path}",
                        "--synthetic", f"--synthetic_steps={self.args.ssd_steps}"], threads)
        return {"ssd train": number(r"^synthetic: .*: ([0-9.]+) images/s", out, "synthetic")}

    def pytorch(self, threads):
        """The reference's network and loss on random images, with targets
        matched from three random boxes an image (80 classes and background,
        as the trainer's synthetic run)."""
        import numpy as np  # beside PyTorch

        torch, ref, conf = self.torch, self.ref, self.conf
        torch.manual_seed(1)
        model, db_xywh, db_ltrb, _ = ref.make_model(conf, 81, "cpu")
        n, side = int(conf["batch_size"]), int(conf["image_size"])
        rng = np.random.default_rng(1)
        labels, offsets = [], []
        for _ in range(n):
            u = rng.random((3, 4), dtype="float32")
            w, h = 0.1 + 0.5 * u[:, 0], 0.1 + 0.5 * u[:, 1]
            left, top = u[:, 2] * (1 - w), u[:, 3] * (1 - h)
            gt = np.stack([left, top, left + w, top + h], 1)
            lab, off = ref.match(db_xywh, db_ltrb, gt, rng.integers(1, 81, 3))
            labels.append(torch.from_numpy(lab)), offsets.append(torch.from_numpy(off))
        glabel, gloc = torch.stack(labels), torch.stack(offsets)
        x = torch.randn(n, 3, side, side)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=float(conf["momentum"]),
                              weight_decay=float(conf["weight_decay"]))

        def loss():
            loc, logits = model(x)
            return ref.ssd_loss(loc, logits, gloc, glabel)

        step = benchlib.torch_train_step(torch, "cpu", "fp32", loss, opt)
        return {"ssd train": benchlib.images_per_s(torch, step, n, self.args.ssd_steps, "cpu", warmup=10)[0]}


class BertRows:
    rows = ("bert train",)
    unit = "sequences/s"

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        self.conf_path = "language/configs/small.conf"
        self.ref = load("language/pytorch_reference.py", "bert_reference")
        self.conf = self.ref.read_conf(os.path.join(ROOT, self.conf_path))  # over the trainer's defaults
        self.model_dir = os.path.join(args.bert_data, "model")
        subprocess.run(["bash", os.path.join(ROOT, "language/prepare_data.sh"), "small", args.bert_data,
                        args.build], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)

    def ours(self, threads):
        out = run_ours([os.path.join(self.args.build, "bin", "bert"), f"--config={self.conf_path}",
                        f"--init_checkpoint={self.model_dir}", f"--bench_steps={self.args.bert_steps}"],
                       threads)
        return {"bert train": number(r"bert: bench: .*, ([0-9.]+) sequences/s", out, "'bert: bench:'")}

    def pytorch(self, threads):
        """The reference's model (the small checkpoint's shape, random
        weights as a bench run's) on the trainer's bench batch: full windows
        of random ids, the first quarter the question, answers in the rest;
        torch's dropout, AdamW with clipping as the reference steps."""
        import json

        torch, ref, conf = self.torch, self.ref, self.conf
        torch.manual_seed(1)
        mcfg = json.load(open(os.path.join(self.model_dir, "config.json")))
        model = ref.BertQA(mcfg)
        b, t = int(conf["batch_size"]), int(conf["max_seq_length"])
        ids = torch.randint(1, int(mcfg["vocab_size"]), (b, t))
        types = (torch.arange(t) >= t // 4).long().expand(b, t).contiguous()
        lens = torch.full((b,), t)
        starts = torch.randint(t // 4, t, (b,))
        ends = torch.minimum(starts + torch.randint(0, 8, (b,)), torch.tensor(t - 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=False)
        clip = float(conf["max_grad_norm"])
        drop = ref.Dropout(model.dropout, model.attn_dropout, 1, 0, False)

        def loss():
            start_l, end_l = model(ids, types, lens, drop)
            return torch.nn.functional.cross_entropy(torch.cat([start_l, end_l]), torch.cat([starts, ends]))

        model.train()
        step = benchlib.torch_train_step(torch, "cpu", "fp32", loss, opt, clip_norm=clip if clip > 0 else None)
        return {"bert train": benchlib.images_per_s(torch, step, b, self.args.bert_steps, "cpu", warmup=5)[0]}


KINDS = {"resnet": ResNetRows, "ncf": NCFRows, "transformer": TransformerRows, "ssd": SSDRows,
         "bert": BertRows}

def ttt_runs(benches, args, threads, scale="small"):
    """Each small config from --ttt_seed to its target, ours then its
    PyTorch reference, at threads (tests/bench/ttt.py's runs); with scale
    smoke, each medium config's one-epoch check on a few records."""
    with tempfile.TemporaryDirectory() as logs:
        opts = argparse.Namespace(build=args.build, scale=scale, device="cpu", threads=threads,
                                  machine=machine(), seeds=[args.ttt_seed], benches=benches,
                                  sides=list(ttt.SIDES), budget=None, logs=logs)
        return ttt.plan_and_run(opts, lambda b, side, seed, timeout: ttt.run_side(b, side, seed, opts, timeout, logs),
                                lambda b, timeout: ttt.prepare(b, opts, timeout))


def machine():
    return benchlib.machine_name("cpu")


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", default=",".join(KINDS))
    p.add_argument("--data_dir", default="data/ncf/small", help="the small NCF set (made when missing)")
    p.add_argument("--resnet_steps", type=int, default=20)
    p.add_argument("--ncf_steps", type=int, default=40)
    p.add_argument("--nmt_steps", type=int, default=20)
    p.add_argument("--ssd_steps", type=int, default=20)
    p.add_argument("--bert_steps", type=int, default=10)
    p.add_argument("--bert_data", default="data/bert/small",
                   help="the small BERT set, whose model/ gives the shape (made when missing)")
    p.add_argument("--nmt_length", type=int, default=16,
                   help="tokens a side of the random pairs (the small set's sentences are short)")
    p.add_argument("--nmt_vocab", type=int, default=2048, help="the small set's vocabulary size")
    p.add_argument("--ttt", default=",".join(ttt.BENCHES),
                   help="small configs timed to their targets beside their PyTorch references, at the "
                        "largest --threads ('none': no such runs)")
    p.add_argument("--ttt_seed", type=int, default=1)
    p.add_argument("--smoke", default=",".join(ttt.BENCHES),
                   help="medium configs run for one epoch on a few records beside their PyTorch "
                        "references (tests/bench/ttt.py --scale smoke; 'none': no such runs)")
    p.add_argument("--no_write", action="store_true", help="print the table only")
    args = p.parse_args()
    ttt_benches = [] if args.ttt == "none" else args.ttt.split(",")
    smoke_benches = [] if args.smoke == "none" else args.smoke.split(",")
    for flag, benches in (("--ttt", ttt_benches), ("--smoke", smoke_benches)):
        for bench in benches:
            if bench not in ttt.BENCHES:
                p.error(f"{flag}: '{bench}' is none of {', '.join(ttt.BENCHES)} (or 'none')")
    torch = benchlib.require_torch(NAME, cuda=False)
    threads = [int(t) for t in args.threads.split(",")]
    kinds = [KINDS[k](torch, args) for k in args.rows.split(",")]
    torch.set_num_interop_threads(1)
    got = {}  # (row, threads, side) -> rates
    for rep in range(args.repeats):
        for t in threads:
            for kind in kinds:
                ours = kind.ours(t)
                torch.set_num_threads(t)
                theirs = kind.pytorch(t)
                for row in kind.rows:
                    got.setdefault((row, t, "ours"), []).append(ours[row])
                    got.setdefault((row, t, "pytorch"), []).append(theirs[row])
                    print(f"repeat {rep + 1}/{args.repeats}  {row:18s} {t} thread(s)  ours {ours[row]:12.1f}"
                          f"  PyTorch {theirs[row]:12.1f} {kind.unit}", flush=True)
    rows = []
    for kind in kinds:
        for row in kind.rows:
            for t in threads:
                o = statistics.median(got[(row, t, "ours")])
                th = statistics.median(got[(row, t, "pytorch")])
                rows.append(dict(row=row, threads=t, unit=kind.unit, ours=o, pytorch=th, ratio=o / th,
                                 ours_all=got[(row, t, "ours")], pytorch_all=got[(row, t, "pytorch")]))
    where = machine()
    md = [f"# CPU steps beside PyTorch eager, {benchlib.utc_stamp()}, {where}", "",
          f"Medians of {args.repeats} interleaved repeats, fp32, PyTorch {torch.__version__} "
          f"(`tests/bench/bench_cpu.py`).", "",
          "| step | threads | ours | PyTorch | unit | ours / PyTorch |", "|---|---:|---:|---:|---|---:|"]
    md += [f"| {r['row']} | {r['threads']} | {r['ours']:.1f} | {r['pytorch']:.1f} | {r['unit']} | "
           f"{r['ratio']:.2f} |" for r in rows]
    if 1 in threads and 2 in threads:
        ours_at = {(r["row"], r["threads"]): r["ours"] for r in rows}
        md += ["", "Ours on 2 threads over ours on 1:", ""]
        md += [f"- {kind_row}: {ours_at[(kind_row, 2)] / ours_at[(kind_row, 1)]:.2f}"
               for kind in kinds for kind_row in kind.rows]
    ttt_rows = ttt_runs(ttt_benches, args, max(threads)) if ttt_benches else []
    if ttt_rows:
        # The time-to-target tables without their title line.
        md += ["", f"Time to target from seed {args.ttt_seed} at {max(threads)} threads, one run a side:", ""]
        md += ttt.table(ttt_rows).splitlines()[2:]
    smoke_rows = ttt_runs(smoke_benches, args, max(threads), "smoke") if smoke_benches else []
    if smoke_rows:
        md += ["", f"The medium configs, one epoch and its eval in fp32 on a few records of their data's "
               f"kind (`ttt.py --scale smoke`: that both sides run, before a GPU call; no time to train), "
               f"seed {args.ttt_seed}, {max(threads)} threads:", "",
               "| benchmark | side | status | seconds | metric |", "|---|---|---|---:|---|"]
        md += [f"| {r['bench']} | {r['side']} | {r['status']} | {ttt.fmt(r.get('seconds'))} | "
               f"{r.get('metric') or '-'} |" for r in smoke_rows]
    text = "\n".join(md) + "\n"
    print(text)
    if not args.no_write:
        record = dict(machine=where, repeats=args.repeats, threads=threads, rows=rows, time_to_target=ttt_rows,
                      medium_smoke=smoke_rows,
                      versions=benchlib.torch_versions(torch), nmt_length=args.nmt_length,
                      nmt_vocab=args.nmt_vocab)
        # The moment, not the day: a second run the same day (other --rows)
        # keeps the first's files.
        benchlib.write_results("cpu", benchlib.utc_stamp(seconds=True), where, record, text)


if __name__ == "__main__":
    main()
