# tests/emu/test_emu_trainers.sh, part transformer: sourced in a subshell of its own with
# $tmp its own folder and the helpers of that script defined.
# 200 pairs of the small set (20 for eval) through the real converter; a
# one-layer, 32-wide Transformer (every key that shapes the run a flag), 2
# epochs of batches of 256 tokens with dropout, an eval (beam search with the
# key/value cache on the device) after each. Compared: each epoch's mean
# training loss (the BLEU of so small a model is near 0 in every run).
TRAIN_PAIRS=200 EVAL_PAIRS=20 bash translation/prepare_data.sh small "$tmp/wmt" "$build" >/dev/null 2>&1 ||
  { echo "FAIL emu_transformer_data: could not prepare the data set"; exit 1; }
transformer() {  # OUT_NAME FLAGS...
  local out=$1
  shift
  "${launch[@]}" "$build/bin/transformer" --config=translation/configs/small.conf --data_dir="$tmp/wmt" \
    --d_model=32 --d_ff=64 --heads=2 --enc_layers=1 --dec_layers=1 --max_tokens=256 --eval_batch=10 \
    --warmup_steps=10 --max_epochs=2 --target_accuracy=0.99 --seed="$seed" --log_file="$tmp/$out.log" "$@" \
    >"$tmp/$out.out" 2>&1
}
# Measured (seed 1, Haswell and Zen kernels): the emulated fp32 run equal to
# the CPU's to the printed 4 places, bf16 0.0003 and fp16 0.0002 from fp32
# (the losses are means over every target token of an epoch). Allowed:
# 0.002 and 0.02, as for ResNet. A low-precision weight copy never refreshed
# from the fp32 master weights gives inf (tests/translation/test_nmt_model.c).
transformer trf_cpu --device=cpu
for p in fp32 bf16 fp16; do transformer trf_$p --device=cuda --precision=$p; done
# unfused: attention and the linear layers' biases in separate passes.
transformer trf_bf16_unfused --device=cuda --precision=bf16 --fused_attention=false --linear_epilogues=false
compare_losses emu_transformer_fp32_matches_cpu transformer trf_cpu trf_fp32 0.002
compare_losses emu_transformer_bf16_near_fp32 transformer trf_fp32 trf_bf16 0.02
compare_losses emu_transformer_fp16_near_fp32 transformer trf_fp32 trf_fp16 0.02
compare_losses emu_transformer_bf16_unfused_near_fp32 transformer trf_fp32 trf_bf16_unfused 0.02
