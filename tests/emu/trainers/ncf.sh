# tests/emu/test_emu_trainers.sh, part ncf: sourced in a subshell of its own with
# $tmp its own folder and the helpers of that script defined.
# The small generated set (3,000 users), one epoch: sampling on the GPU
# takes the CPU's negatives, so HR@10 agrees to the rounding of different
# GEMM orders (0.01: 30 users), and to 0.03 with bf16 or fp16 (loss-scaled)
# linear layers.
"$build/bin/movielens_generate" --size=small --out="$tmp/ml" >/dev/null 2>&1 &&
  "$build/bin/movielens_convert" --input="$tmp/ml/ratings.csv" --out="$tmp/ml" >/dev/null 2>&1 ||
  { echo "FAIL emu_ncf_data: could not prepare the data set"; exit 1; }
ncf() {  # OUT_NAME FLAGS...
  local out=$1
  shift
  "${launch[@]}" "$build/bin/ncf" --config=recommendation/configs/small.conf --data_dir="$tmp/ml" --max_epochs=1 \
    --target_accuracy=1 --log_file="$tmp/$out.log" "$@" >"$tmp/$out.out" 2>&1
}
ncf ncf_cpu --device=cpu
cpu_hr=$(ncf_hr "$tmp/ncf_cpu.out" 1)
for p in fp32 bf16 fp16; do
  ncf ncf_$p --device=cuda --precision=$p
  hr=$(ncf_hr "$tmp/ncf_$p.out" 1)
  tol=$([[ $p == fp32 ]] && echo 0.01 || echo 0.03)
  if close "$cpu_hr" "$hr" $tol; then
    echo "PASS emu_ncf_${p}_matches_cpu (HR@10 epoch 1: CPU $cpu_hr, emulated GPU $hr)"
  else
    echo "FAIL emu_ncf_${p}_matches_cpu: HR@10 epoch 1: CPU '$cpu_hr', emulated GPU '$hr'; $(grep -m1 '^error' "$tmp/ncf_$p.out")"
  fi
done

# Two ranks on two emulated GPUs (NCCL averages of the embedding and MLP
# gradients, eval users split between the ranks) against two CPU ranks.
if command -v mpirun >/dev/null && ldd "$build/bin/ncf" | grep libmpi >/dev/null; then
  launch=(timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2)
  for dev in cpu cuda; do
    ncf ncf_two_$dev --device=$dev --precision=fp32
  done
  launch=()
  a=$(ncf_hr "$tmp/ncf_two_cpu.out" 1) b=$(ncf_hr "$tmp/ncf_two_cuda.out" 1)
  if close "$a" "$b" 0.01; then
    echo "PASS emu_ncf_two_ranks_cuda_matches_cpu (HR@10 epoch 1: CPU ranks $a, emulated GPUs $b)"
  else
    echo "FAIL emu_ncf_two_ranks_cuda_matches_cpu: HR@10 epoch 1: CPU ranks '$a', emulated GPUs '$b'; $(grep -m1 -i 'error' "$tmp/ncf_two_cuda.out")"
  fi
else
  echo "SKIP emu_ncf_two_ranks_cuda_matches_cpu: no MPI in this build"
fi
