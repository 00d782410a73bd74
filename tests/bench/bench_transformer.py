"""Transformer training throughput: this suite's trainer (build/bin/transformer
--bench_steps: random pairs of max_length tokens a side, max_tokens /
max_length pairs a batch, no padding, no data set read) beside PyTorch's
nn.Transformer of the same size on the same GPU in the same run, at the
same batch, precision by precision: fp32 (true fp32 on both sides), tf32,
bf16 (PyTorch: autocast) and fp16 (autocast with a GradScaler; ours: dynamic
loss scaling).

The PyTorch model: one nn.Embedding shared by both inputs and the output
projection (scaled by sqrt(d_model)), the same sinusoid positions added,
nn.Transformer(norm_first=True, batch_first=True, ReLU, dropout 0.1) - pre-norm
layers with a final layer norm per stack, as ours - and cross-entropy with
label smoothing 0.1 ignoring pad id 0; fused Adam (0.9, 0.997, 1e-9). One
difference: nn.MultiheadAttention's projections carry biases, the
reference's (and ours) do not: 4 d_model more parameters per attention
block, a vector add each, nothing next to the GEMMs.

Each side: 5 warm-up steps (the trainer's), then --steps timed steps,
--repeats times; the table gives the medians in tokens/s (source and target
tokens) and ours over PyTorch's. Ours runs with its default attention (fused
kernels on the GPU in fp16 and bf16) and, where that was the fused one,
again with --fused_attention=false, in its own column; on the GPU also
with --linear_epilogues=false (the biases in passes of their own); then one
more run of ours (bf16 where it ran) timed op by op for --profile_steps
steps, whose table goes in the results file. Writes
tests/bench/results/transformer_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_transformer.py [--build build] [--config full]
        [--max_tokens 5120] [--max_length 64] [--steps 30] [--repeats 3]
        [--precisions fp32,tf32,bf16,fp16]
    python3 tests/bench/bench_transformer.py --device cpu --smoke
        (the script's own logic on a CPU: a tiny model, fp32, no results file)
"""
import math
import os
import re
import statistics
import sys
import warnings

import benchlib
from benchlib import ROOT

NAME = "bench_transformer"
WARMUP = 5  # the trainer's NMT_BENCH_WARMUP
FULL = dict(d_model=1024, d_ff=4096, heads=16, enc_layers=6, dec_layers=6, vocab=33708)
SMOKE = dict(d_model=32, d_ff=64, heads=2, enc_layers=1, dec_layers=1, vocab=100)


def run_ours(args, dims, precision, flags):
    """tokens/s of one bench run of our trainer (extra flags), and its output."""
    cmd = [os.path.join(args.build, "bin", "transformer"),
           f"--bench_steps={args.steps}", f"--bench_vocab={dims['vocab']}",
           f"--max_tokens={args.max_tokens}", f"--max_length={args.max_length}",
           f"--precision={precision}", f"--device={args.device}", "--eval_batch=1"] + \
        [f"--{k}={v}" for k, v in dims.items() if k != "vocab"] + flags
    m, out = benchlib.trainer_throughput(NAME, cmd, r"transformer: bench: .*, ([0-9.]+) tokens/s")
    return float(m.group(1)), out


def param_count(out):
    params = re.search(r"; (\d+) parameters;", out)
    if not params:
        sys.exit(f"{NAME}: no parameter count in the trainer's output:\n" + out[-2000:])
    return int(params.group(1))


def torch_model(torch, dims):
    nn = torch.nn
    # Pre-norm layers cannot take PyTorch's nested-tensor fast path; it says so.
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
    d = dims["d_model"]

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(dims["vocab"], d)
            nn.init.normal_(self.emb.weight, 0.0, d ** -0.5)
            self.core = nn.Transformer(d_model=d, nhead=dims["heads"],
                                       num_encoder_layers=dims["enc_layers"],
                                       num_decoder_layers=dims["dec_layers"],
                                       dim_feedforward=dims["d_ff"], dropout=0.1,
                                       batch_first=True, norm_first=True)

        def positions(self, length, device):
            half = d // 2
            pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
            freq = torch.exp(-torch.arange(half, device=device) * math.log(10000.0) / (half - 1))
            return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)

        def forward(self, src, tgt_in):
            p = self.positions(src.shape[1], src.device)
            x = self.emb(src) * d ** 0.5 + p
            y = self.emb(tgt_in) * d ** 0.5 + p
            mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
            h = self.core(x, y, tgt_mask=mask, tgt_is_causal=True)
            return h @ self.emb.weight.t()

    return Seq2Seq()


def torch_tokens_per_s(torch, args, dims, precision, batch):
    dev = torch.device(args.device)
    torch.manual_seed(1)
    model = torch_model(torch, dims).to(dev)
    fused = args.device == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.997), eps=1e-9, fused=fused)
    length, vocab = args.max_length, dims["vocab"]
    src = torch.randint(2, vocab, (batch, length), device=dev)
    tgt = torch.randint(2, vocab, (batch, length), device=dev)
    tgt_in = torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], dim=1)

    def loss():
        logits = model(src, tgt_in)
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), tgt.reshape(-1),
                                                 ignore_index=0, label_smoothing=0.1)

    step = benchlib.torch_train_step(torch, args.device, precision, loss, opt)
    rates = benchlib.images_per_s(torch, step, 2 * batch * length, args.steps, args.device,
                                  WARMUP, args.repeats)
    return rates, sum(p.numel() for p in model.parameters())


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--max_tokens", type=int, default=5120)
    p.add_argument("--max_length", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    p.add_argument("--profile_steps", type=int, default=5,
                   help="steps of one more run of ours, timed op by op, for the results file (0: none)")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    torch = benchlib.require_torch(NAME, cuda=args.device == "cuda")
    dims = SMOKE if args.smoke else FULL
    precisions = ["fp32"] if args.smoke else args.precisions.split(",")
    if args.smoke:
        args.steps, args.repeats, args.max_tokens, args.max_length = 2, 1, 64, 8
    batch = args.max_tokens // args.max_length
    rows = []
    for prec in precisions:
        v = benchlib.ours_variants(
            NAME, lambda flags: run_ours(args, dims, prec, flags), args.repeats,
            args.device == "cuda")
        o, out = v["ours"], v["out"]
        theirs, torch_params = torch_tokens_per_s(torch, args, dims, prec, batch)
        t = statistics.median(theirs)
        rows.append(dict(precision=prec, ours=o, ours_attention=v["attention"],
                         ours_unfused=v["unfused"], ours_separate_bias=v["separate_bias"],
                         pytorch=t, ratio=o / t, ours_params=param_count(out), torch_params=torch_params))
        both = "".join(f" ({what} {v[key]:.0f})" for what, key in
                       (("unfused", "unfused"), ("separate bias", "separate_bias")) if v[key])
        print(f"{prec:5s}  ours {o:12.0f} tokens/s{both}, {v['attention']} attention  PyTorch {t:12.0f} "
              f"tokens/s  ratio {o / t:.2f}")
    if args.smoke:
        return
    profile_prec, profile = benchlib.profile_run(
        lambda pr, flags: run_ours(args, dims, pr, flags), precisions, args.profile_steps)
    device = torch.cuda.get_device_name(0)
    md = [f"# Transformer training throughput, {benchlib.utc_stamp()}, {device}", "",
          f"Batch {batch} pairs x {args.max_length} tokens a side ({args.max_tokens} tokens), "
          f"Transformer-big, {args.steps} steps x {args.repeats} repeats (medians).", "",
          "Ours: the trainer's default attention (fused on the GPU in fp16/bf16), and beside it "
          "the same run with --fused_attention=false where the default was the fused one, and "
          "with --linear_epilogues=false (the linear layers' biases and their gradients in "
          "passes of their own, not in cuBLASLt's GEMM epilogues).", "",
          "| precision | ours tokens/s | ours attention | ours unfused tokens/s | "
          "ours separate bias tokens/s | PyTorch tokens/s | "
          "ours / PyTorch |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['precision']} | {r['ours']:.0f} | {r['ours_attention']} | "
           f"{benchlib.rate_cell(r['ours_unfused'], '%.0f')} | "
           f"{benchlib.rate_cell(r['ours_separate_bias'], '%.0f')} | {r['pytorch']:.0f} | "
           f"{r['ratio']:.2f} |" for r in rows]
    md += benchlib.profile_lines("transformer", profile_prec, profile)
    record = dict(device=device, batch=batch, max_length=args.max_length, steps=args.steps,
                  repeats=args.repeats, rows=rows, versions=benchlib.torch_versions(torch),
                  profile=profile)
    benchlib.write_results("transformer", benchlib.utc_stamp(), device, record, "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
