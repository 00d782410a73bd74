# tests/emu/test_emu_trainers.sh, part resnet: sourced in a subshell of its own with
# $tmp its own folder and the helpers of that script defined.
# 1,024 train and 512 val Fashion-MNIST images through the real converter; a
# ResNet-8 of width 8 (every key that shapes the run is a flag here, so that
# the measured spreads below hold whatever small.conf becomes), batch 32 at
# learning rate 0.05 (the small config's 0.2
# scaled to the batch: a calmer path than 0.2, so runs that differ only in
# rounding stay close), 2 epochs of 32 steps, eval after each. The target is
# out of reach, so every run trains both epochs.
"$build/bin/fmnist_to_imagenet" --out="$tmp/fm/raw" --train_count=1024 --val_count=512 >/dev/null 2>&1 &&
  "$build/bin/imagenet_to_lmdb" --root="$tmp/fm/raw" --out="$tmp/fm/lmdb" >/dev/null 2>&1 ||
  { echo "FAIL emu_resnet_data: could not prepare the data set"; exit 1; }
launch=()  # what runs the trainer: nothing, or mpirun and its flags
resnet() {  # OUT_NAME FLAGS... (later flags override earlier ones)
  local out=$1
  shift
  "${launch[@]}" "$build/bin/resnet" --config=image_classification/configs/small.conf --data_dir="$tmp/fm" \
    --stages=1,1,1 --width=8 --crop_scale_min=0.8 --batch_size=32 --base_lr=0.05 --decay_epochs=6 \
    --max_epochs=2 --eval_every=1 --target_accuracy=0.99 \
    --seed="$seed" --log_file="$tmp/$out.log" "$@" >"$tmp/$out.out" 2>&1
}
resnet cpu --device=cpu --checkpoint="$tmp/cpu.ckpt"
resnet fp32 --device=cuda --precision=fp32 --checkpoint="$tmp/fp32.ckpt"
# Measured over Haswell, Zen, SkylakeX and Sandybridge kernels, 1 and 2
# threads, seeds 1-3: the mean losses equal to the printed 4 places, top-1
# apart by at most 4 images in 512 (0.0078). Allowed: 0.002 and 10 images
# (0.02). A running mean that batch norm's CUDA kernel never updates (eval
# only) moves top-1 by 0.15-0.31 and fails it.
compare_epochs emu_resnet_fp32_matches_cpu cpu fp32 "emulated GPU" 0.02 0.002
# A run on the emulated GPU to a target within reach (top-1 0.26-0.31 after
# the first epoch in every run measured) stops there, and its log complies.
resnet target --device=cuda --precision=fp32 --target_accuracy=0.2
if python3 logs/result.py --target 0.2 --require-success "$tmp/target.log" >"$tmp/check.out" 2>&1; then
  echo "PASS emu_resnet_cuda_log_complies"
else
  echo "FAIL emu_resnet_cuda_log_complies: $(tr '\n' ' ' <"$tmp/check.out" | tail -c 400)"
fi

# bf16 and fp16 (with loss scaling) against fp32 on the same emulated GPU:
# every activation rounded to 8 (bf16) or 11 (fp16) bits, so the runs part
# a little more with each step. Measured as above: mean losses apart by up to
# 0.017 (bf16) and 0.005 (fp16); top-1 by up to 0.066 (bf16) and 0.039
# (fp16), as a net still learning fast moves many val images across class
# borders. Allowed: 0.05 and 0.15. Faults planted by hand: a weight copy cast
# once and never again (loss 2.31 and 2.30 against 2.15 and 1.70), gradients
# never divided by fp16's loss scale (NaN), both fail it. fp16 without loss
# scaling (loss_scale_init=1) passes, rightly: this net's gradients do not
# underflow (losses within 0.01 of fp32).
for p in bf16 fp16; do
  resnet $p --device=cuda --precision=$p
  compare_epochs emu_resnet_${p}_near_fp32 fp32 $p $p 0.15 0.05
done

# LARS (the full configs' optimizer, fused on the GPU) with two micro-batches
# a step (gradients summed on the device, batch norm per micro-batch), set
# against the same on the CPU.
resnet lars_cpu --device=cpu --optimizer=lars --base_lr=2.0 --grad_accumulation=2
resnet lars_cuda --device=cuda --precision=fp32 --optimizer=lars --base_lr=2.0 --grad_accumulation=2
compare_epochs emu_resnet_lars_accumulation_matches_cpu lars_cpu lars_cuda "emulated GPU" 0.02 0.002

# Resume on the GPU: 1 epoch, then --resume for the second, writes the same
# final checkpoint, bit for bit, as the uninterrupted run.
resnet split1 --device=cuda --precision=fp32 --checkpoint="$tmp/split.ckpt" --max_epochs=1
resnet split2 --device=cuda --precision=fp32 --checkpoint="$tmp/split.ckpt" --resume
if grep -q "resume: .*continuing after epoch 1" "$tmp/split2.out" && cmp -s "$tmp/fp32.ckpt" "$tmp/split.ckpt"; then
  echo "PASS emu_resnet_cuda_resume_matches_uninterrupted"
else
  echo "FAIL emu_resnet_cuda_resume_matches_uninterrupted: $(grep -E 'resume|^error' "$tmp/split2.out" | head -n 2 | tr '\n' ' ')"
fi

# Two ranks (MPI; NCCL through MPI in the emulation): the gradient buckets
# averaged during the backward, the initial broadcast, the eval counts
# summed. Set against two CPU ranks, which split every batch the same way.
if command -v mpirun >/dev/null && ldd "$build/bin/resnet" | grep libmpi >/dev/null; then
  launch=(timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2)
  for dev in cpu cuda; do
    resnet two_$dev --device=$dev --precision=fp32 --target_accuracy=1
  done
  # Again with the streams' work (loader copies, gradient averages, the
  # compute stream) run newest first where their waits allow, and blocks
  # and threads in reverse (tests/emu/README.md).
  launch+=(-x EMU_REVERSE=1)
  resnet two_cuda_reverse --device=cuda --precision=fp32 --target_accuracy=1
  launch=()
  compare_epochs emu_resnet_two_ranks_cuda_matches_cpu two_cpu two_cuda "emulated GPUs" 0.02 0.002
  compare_epochs emu_resnet_two_ranks_cuda_reverse_matches_cpu two_cpu two_cuda_reverse \
    "emulated GPUs, EMU_REVERSE=1" 0.02 0.002
else
  echo "SKIP emu_resnet_two_ranks_cuda_matches_cpu: no MPI in this build"
  echo "SKIP emu_resnet_two_ranks_cuda_reverse_matches_cpu: no MPI in this build"
fi
