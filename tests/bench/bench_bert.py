"""BERT fine-tuning throughput: this suite's trainer (build/bin/bert
--bench_steps: random windows of max_seq_length tokens, no padding, the
first quarter of each window token type 0, answers at random positions,
random weights in BERT-large's shape; no data set read) beside Hugging Face
transformers' BertForQuestionAnswering of the same configuration on the same
GPU in the same run, at the same batch, precision by precision: fp32 (true
fp32 on both sides), tf32, bf16 (PyTorch: autocast) and fp16 (autocast with
a GradScaler; ours: dynamic loss scaling).

Both sides take the SQuAD fine-tuning step: span loss (CE(start) +
CE(end)) / 2, dropout 0.1 on the hidden states and attention probabilities,
gradients clipped to norm 1.0, AdamW (0.9, 0.999, 1e-6, weight decay 0.01
off biases and layer norms; PyTorch's fused AdamW). transformers runs its
default attention (scaled_dot_product_attention, which picks a fused
kernel) or, with --torch_attention eager, the probabilities materialised as
ours are; the results file names the implementation.

Each side: 5 warm-up steps (the trainer's), then --steps timed steps,
--repeats times; the table gives the medians in sequences/s and ours over
PyTorch's. Ours runs with its default attention (fused kernels on the GPU in
fp16 and bf16) and, where that was the fused one, again with
--fused_attention=false, in its own column; on the GPU also with
--linear_epilogues=false (the biases in passes of their own); then one more
run of ours (bf16 where it ran) timed op by op for --profile_steps steps,
whose table goes in the results file. Writes
tests/bench/results/bert_<date>_<gpu>.{json,md}.

    python3 tests/bench/bench_bert.py [--build build] [--batch 32]
        [--max_seq_length 384] [--steps 20] [--repeats 2]
        [--precisions fp32,tf32,bf16,fp16]
    python3 tests/bench/bench_bert.py --device cpu --smoke
        (the script's own logic on a CPU: a tiny model, fp32, no results file)
"""
import json
import os
import re
import statistics
import sys
import tempfile

import benchlib

NAME = "bench_bert"
WARMUP = 5  # the trainer's BERT_BENCH_WARMUP
LARGE = dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
             intermediate_size=4096, max_position_embeddings=512)
SMOKE = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=64, max_position_embeddings=64)


def write_config(folder, dims):
    """BERT's config.json (the keys our trainer reads) for dims."""
    cfg = dict(dims, model_type="bert", hidden_act="gelu", type_vocab_size=2, layer_norm_eps=1e-12,
               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, pad_token_id=0)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return cfg


def run_ours(args, folder, precision, flags):
    """sequences/s of one bench run of our trainer (extra flags), and its output."""
    cmd = [os.path.join(args.build, "bin", "bert"), f"--init_checkpoint={folder}",
           f"--bench_steps={args.steps}", f"--batch_size={args.batch}",
           f"--max_seq_length={args.max_seq_length}", f"--eval_batch={args.batch}",
           f"--precision={precision}", f"--device={args.device}"] + flags
    m, out = benchlib.trainer_throughput(NAME, cmd, r"bert: bench: .*, ([0-9.]+) sequences/s")
    return float(m.group(1)), out


def param_count(out):
    params = re.search(r"; (\d+) parameters ", out)
    if not params:
        sys.exit(f"{NAME}: no parameter count in the trainer's output:\n" + out[-2000:])
    return int(params.group(1))


def torch_sequences_per_s(torch, transformers, args, cfg, precision):
    dev = torch.device(args.device)
    torch.manual_seed(1)
    conf = transformers.BertConfig(**cfg, attn_implementation=args.torch_attention)
    model = transformers.BertForQuestionAnswering(conf).to(dev)
    model.train()
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias") and "LayerNorm" not in n]
    rest = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.01), dict(params=rest, weight_decay=0.0)],
                            lr=3e-5, betas=(0.9, 0.999), eps=1e-6, fused=args.device == "cuda")
    b, t, q = args.batch, args.max_seq_length, args.max_seq_length // 4
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, cfg["vocab_size"], (b, t), generator=g).to(dev)
    types = (torch.arange(t) >= q).long().expand(b, t).contiguous().to(dev)
    mask = torch.ones(b, t, dtype=torch.long, device=dev)
    start = torch.randint(q, t, (b,), generator=g)
    end = start + (torch.rand(b, generator=g) * (t - start)).long()
    start, end = start.to(dev), end.to(dev)

    def loss():
        return model(input_ids=ids, token_type_ids=types, attention_mask=mask,
                     start_positions=start, end_positions=end).loss

    step = benchlib.torch_train_step(torch, args.device, precision, loss, opt, clip_norm=1.0)
    rates = benchlib.images_per_s(torch, step, b, args.steps, args.device, WARMUP, args.repeats)
    attn = getattr(model.config, "_attn_implementation", "?")
    return rates, sum(p.numel() for p in model.parameters()), attn


def main():
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max_seq_length", type=int, default=384)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    p.add_argument("--torch_attention", default="sdpa", choices=["sdpa", "eager"],
                   help="transformers' attention: fused scaled_dot_product_attention, or eager "
                        "(the probabilities materialised, as ours)")
    p.add_argument("--profile_steps", type=int, default=5,
                   help="steps of one more run of ours, timed op by op, for the results file (0: none)")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    torch = benchlib.require_torch(NAME, cuda=args.device == "cuda", modules=("transformers",),
                                   missing="PyTorch or transformers is not installed")
    import transformers
    dims = SMOKE if args.smoke else LARGE
    precisions = ["fp32"] if args.smoke else args.precisions.split(",")
    if args.smoke:
        args.steps, args.repeats, args.batch, args.max_seq_length = 2, 1, 4, 16
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        cfg = write_config(folder, dims)
        for prec in precisions:
            v = benchlib.ours_variants(
                NAME, lambda flags: run_ours(args, folder, prec, flags), args.repeats,
                args.device == "cuda")
            o, out = v["ours"], v["out"]
            theirs, torch_params, attn = torch_sequences_per_s(torch, transformers, args, cfg, prec)
            t = statistics.median(theirs)
            rows.append(dict(precision=prec, ours=o, ours_attention=v["attention"],
                             ours_unfused=v["unfused"], ours_separate_bias=v["separate_bias"],
                             pytorch=t, ratio=o / t, ours_params=param_count(out),
                             torch_params=torch_params, torch_attention=attn))
            both = "".join(f" ({what} {v[key]:.1f})" for what, key in
                           (("unfused", "unfused"), ("separate bias", "separate_bias")) if v[key])
            print(f"{prec:5s}  ours {o:9.1f} sequences/s{both}, {v['attention']} attention  transformers "
                  f"{t:9.1f} sequences/s  ours/torch {o / t:.2f}  (parameters {param_count(out)} / "
                  f"{torch_params}; attention {attn})", flush=True)
        if args.smoke:
            return
        profile_prec, profile = benchlib.profile_run(
            lambda pr, flags: run_ours(args, folder, pr, flags), precisions, args.profile_steps)
    device = torch.cuda.get_device_name(0)
    md = [f"# BERT fine-tuning throughput, {benchlib.utc_stamp()}, {device}", "",
          f"BERT-large (24 layers, 1024 wide, 16 heads), batch {args.batch} windows x "
          f"{args.max_seq_length} tokens, span loss, AdamW, clipping at 1.0; {args.steps} steps x "
          f"{args.repeats} repeats (medians). PyTorch side: transformers {transformers.__version__} "
          f"BertForQuestionAnswering, attention '{rows[0]['torch_attention']}'.", "",
          "Ours: the trainer's default attention (fused on the GPU in fp16/bf16), and beside it "
          "the same run with --fused_attention=false where the default was the fused one, and "
          "with --linear_epilogues=false (the linear layers' biases and their gradients in "
          "passes of their own, not in cuBLASLt's GEMM epilogues).", "",
          "| precision | ours sequences/s | ours attention | ours unfused sequences/s | "
          "ours separate bias sequences/s | "
          "transformers sequences/s | ours / PyTorch |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['precision']} | {r['ours']:.1f} | {r['ours_attention']} | "
           f"{benchlib.rate_cell(r['ours_unfused'], '%.1f')} | "
           f"{benchlib.rate_cell(r['ours_separate_bias'], '%.1f')} | {r['pytorch']:.1f} | "
           f"{r['ratio']:.2f} |" for r in rows]
    md += benchlib.profile_lines("bert", profile_prec, profile)
    versions = dict(benchlib.torch_versions(torch), transformers=transformers.__version__)
    record = dict(device=device, batch=args.batch, max_seq_length=args.max_seq_length, steps=args.steps,
                  repeats=args.repeats, rows=rows, versions=versions, profile=profile)
    benchlib.write_results("bert", benchlib.utc_stamp(), device, record, "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
