#!/usr/bin/env bash
# NCF end to end on CPU: generate the small MovieLens-format set, convert it
# (a killed conversion leaves no ncf.bin), train to
# recommendation/configs/small.conf's target, and check the log with the
# official MLPerf compliance checker under the suite's NCF rules
# (recommendation/compliance/, target filled in from the config); a
# --bench_steps run logs as a benchmark.
# Usage: tests/recommendation/test_ncf_e2e.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
root=$PWD
scratch_dir
conf=recommendation/configs/small.conf
target=$(config_target $conf)

for bin in movielens_generate movielens_convert ncf; do
  if [[ ! -x $build/bin/$bin ]]; then
    echo "FAIL ncf_e2e: $build/bin/$bin is not built"
    exit 1
  fi
done

# 1. Generate: the file is in MovieLens's format and its ceiling is stated.
if ! "$build/bin/movielens_generate" --size=small --out="$tmp/data" >"$tmp/gen.out" 2>&1; then
  echo "FAIL ncf_generate: $(tail -n 1 "$tmp/gen.out")"
  exit 1
fi
header=$(head -n 1 "$tmp/data/ratings.csv")
ceiling=$(sed -n 's/^true_model hr10 \([0-9.]*\).*/\1/p' "$tmp/data/ceiling.txt")
bad_lines=$(tail -n +2 "$tmp/data/ratings.csv" |
  grep -cvE '^[0-9]+,[0-9]+,([0-4]\.[05]|5\.0),[0-9]+$')
if [[ $header == userId,movieId,rating,timestamp && $bad_lines == 0 && -n $ceiling ]] &&
  python3 -c "import sys; sys.exit(not (float('$ceiling') > float('$target') + 0.05))"; then
  echo "PASS ncf_generate (ceiling HR@10 $ceiling, target $target)"
else
  echo "FAIL ncf_generate: header '$header', $bad_lines malformed lines, ceiling '$ceiling' vs target $target"
fi

# 2. Convert.
if "$build/bin/movielens_convert" --input="$tmp/data/ratings.csv" --out="$tmp/data" >"$tmp/conv.out" 2>&1 &&
  grep -q '3000 users (>= 20 ratings), 3000 items' "$tmp/conv.out"; then
  echo "PASS ncf_convert"
else
  echo "FAIL ncf_convert: $(tail -n 1 "$tmp/conv.out")"
  exit 1
fi
# A malformed line is an error naming file:line.
{ head -n 3 "$tmp/data/ratings.csv"; echo "7,12,4.5"; } >"$tmp/bad.csv"
"$build/bin/movielens_convert" --input="$tmp/bad.csv" --out="$tmp/bad" >"$tmp/bad.out" 2>&1
rc=$?
if [[ $rc == 2 ]] && grep -q "$tmp/bad.csv:4: bad rating" "$tmp/bad.out"; then
  echo "PASS ncf_convert_bad_line"
else
  echo "FAIL ncf_convert_bad_line: exit $rc, $(head -n 1 "$tmp/bad.out")"
fi

# A conversion killed while writing (the file size limit: SIGXFSZ) leaves no
# ncf.bin - not the earlier one it replaces, nor its partial new one - and a
# stale ncf.bin.tmp is ignored by the trainer and replaced by the next run.
mkdir -p "$tmp/killed"
cp "$tmp/data/ncf.bin" "$tmp/killed/"
{ (ulimit -f 1000; exec "$build/bin/movielens_convert" --input="$tmp/data/ratings.csv" \
  --out="$tmp/killed"); } >/dev/null 2>&1
rc=$?
[[ -e $tmp/killed/ncf.bin.tmp ]] && partial=yes || partial=no
"$build/bin/ncf" --config=$conf --data_dir="$tmp/killed" --log_file="$tmp/killed.log" \
  >"$tmp/killed.out" 2>&1
first_error=$(grep -m1 '^error' "$tmp/killed.out")
"$build/bin/movielens_convert" --input="$tmp/data/ratings.csv" --out="$tmp/killed" >/dev/null 2>&1
if [[ $rc -gt 128 && $partial == yes &&
  $first_error == "error: $tmp/killed/ncf.bin: cannot open: No such file or directory"* ]] &&
  cmp -s "$tmp/data/ncf.bin" "$tmp/killed/ncf.bin" && [[ ! -e $tmp/killed/ncf.bin.tmp ]]; then
  echo "PASS ncf_convert_killed_leaves_no_output"
else
  echo "FAIL ncf_convert_killed_leaves_no_output: exit $rc, partial file: $partial, then: $first_error"
fi

# 3. Train on CPU to the config's target; the log goes under logs/ncf/.
mkdir -p logs/ncf
log=logs/ncf/e2e-small-$(date +%Y%m%d-%H%M%S).log
"$build/bin/ncf" --config=$conf --device=cpu --data_dir="$tmp/data" --log_file="$log" \
  >"$tmp/train.out" 2>&1
rc=$?
result=$(grep -E '^ncf: (target|epoch)' "$tmp/train.out" | tail -n 2 | tr '\n' ' ')
if [[ $rc == 0 ]] && grep -q '^ncf: target reached' "$tmp/train.out"; then
  echo "PASS ncf_train_small_cpu ($result)"
else
  echo "FAIL ncf_train_small_cpu: exit $rc: $result"
  exit 1
fi

# 4. The official checker under the suite's NCF rules with the config's target,
# and the same rules with an unmet target must reject the log.
check() {  # check TARGET DIR: logs/result.py fills the rules in and runs the checker
  mkdir -p "$2"
  python3 logs/result.py --target "$1" "$root/$log" >"$2/out" 2>&1
}
if check "$target" "$tmp/rules" && grep -q SUCCESS "$tmp/rules/out"; then
  echo "PASS ncf_compliance"
else
  echo "FAIL ncf_compliance: $(grep -v '^$' "$tmp/rules/out" | tail -n 3 | tr '\n' ' ')"
fi
if ! check 0.99 "$tmp/rules_high"; then
  echo "PASS ncf_compliance_rejects_unmet_target"
else
  echo "FAIL ncf_compliance_rejects_unmet_target: the checker accepted HR@10 >= 0.99"
fi

# A throughput run says what it is: benchmark_start / benchmark_stop with its
# samples/s in the log, no run_start or run_stop, no target line.
"$build/bin/ncf" --config=$conf --data_dir="$tmp/data" --log_file="$tmp/bench.log" --bench_steps=3 \
  >"$tmp/bench.out" 2>&1
bench_run_checks ncf $? '^ncf: bench: 3 steps of'

one=$(ncf_hr "$tmp/train.out" 1)

# Resume: 1 epoch, then --resume for the second, gives the same final
# checkpoint, bit for bit, as 2 epochs uninterrupted (each epoch's batches
# are a function of the seed and the epoch).
mkdir -p "$tmp/resume"
resume_check ncf_resume_matches_uninterrupted "$tmp/resume" "$build/bin/ncf" --config=$conf \
  --device=cpu --data_dir="$tmp/data" --target_accuracy=0.99

# 5. Two MPI ranks on CPU (each a half of every global batch and of the eval
# users): epoch 1 scores what one rank scored, to rounding of the gradient
# averaging (a different summation order, not different data). The ranks
# draw the test negatives again after run_start (draw_test_negatives, as the
# full configs): the same negatives the converter wrote (test_ncf_data), so
# the same score; the draw is said after run_start.
if ! has_mpi "$build/bin/ncf"; then
  echo "SKIP ncf_two_ranks: no MPI in this build"
else
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$build/bin/ncf" --config=$conf \
    --device=cpu --data_dir="$tmp/data" --log_file="$tmp/two.log" --max_epochs=1 \
    --draw_test_negatives >"$tmp/two.out" 2>&1
  rc=$?
  two=$(ncf_hr "$tmp/two.out" 1)
  if close "$one" "$two" 0.01; then
    echo "PASS ncf_two_ranks (epoch 1 HR@10: one rank $one, two ranks $two)"
  else
    echo "FAIL ncf_two_ranks: mpirun exit $rc, epoch 1 HR@10 one rank '$one', two ranks '$two'"
  fi
  drawn=$(grep -n '^ncf: test negatives drawn after run_start: 3000 users x 999' "$tmp/two.out" | cut -d: -f1)
  started=$(grep -n '"key": "run_start"' "$tmp/two.out" | cut -d: -f1)
  if [[ -n $drawn && -n $started ]] && ((started < drawn)); then
    echo "PASS ncf_test_negatives_drawn_after_run_start"
  else
    echo "FAIL ncf_test_negatives_drawn_after_run_start: run_start at line '$started', the draw at '$drawn'"
  fi
fi

# 5b. Micro-batches (--grad_accumulation=3: each step's rows in three pieces,
# the gradients summed): the same batches, so epoch 1 scores what the whole
# batches scored, to the rounding of the split sums, as with two ranks; the
# log says 3 accumulation steps.
"$build/bin/ncf" --config=$conf --device=cpu --data_dir="$tmp/data" --log_file="$tmp/accum.log" \
  --max_epochs=1 --grad_accumulation=3 >"$tmp/accum.out" 2>&1
rc=$?
accum=$(ncf_hr "$tmp/accum.out" 1)
if close "$one" "$accum" 0.01 && grep -q '"key": "gradient_accumulation_steps", "value": 3,' "$tmp/accum.log"; then
  echo "PASS ncf_micro_batches (epoch 1 HR@10: whole batches $one, three micro-batches $accum)"
else
  echo "FAIL ncf_micro_batches: exit $rc, epoch 1 HR@10 whole '$one', micro-batched '$accum'"
fi

# 6. The GPU path (sampling kernel, cuBLAS MLP, fused Adam, metric kernel):
# the same batches as the CPU, so epochs 1 and 2 score the CPU's HR@10 to the
# rounding of different GEMM summation orders (0.01: 30 of 3,000 users).
if ! nvidia-smi -L >/dev/null 2>&1 || ! ldd "$build/bin/ncf" | grep libcudart >/dev/null; then
  echo "SKIP ncf_cuda_matches_cpu: no GPU"
  echo "SKIP ncf_cuda_bf16_trains: no GPU"
else
  "$build/bin/ncf" --config=$conf --device=cuda --data_dir="$tmp/data" --log_file="$tmp/gpu.log" \
    --max_epochs=2 --target_accuracy=1 >"$tmp/gpu.out" 2>&1
  rc=$?
  g1=$(ncf_hr "$tmp/gpu.out" 1) g2=$(ncf_hr "$tmp/gpu.out" 2) c2=$(ncf_hr "$tmp/train.out" 2)
  if close "$one" "$g1" 0.01 && close "$c2" "$g2" 0.01; then
    echo "PASS ncf_cuda_matches_cpu (HR@10 epochs 1, 2: CPU $one $c2, GPU $g1 $g2)"
  else
    echo "FAIL ncf_cuda_matches_cpu: exit $rc; HR@10 epochs 1, 2: CPU $one $c2, GPU '$g1' '$g2'"
  fi
  # bf16 linear layers (precision = bf16): the same batches, so epoch 2 lands
  # near the fp32 CPU run's HR@10; 0.03 (90 of 3,000 users) allows for the
  # rounding of every MLP activation to 8 significant bits.
  "$build/bin/ncf" --config=$conf --device=cuda --precision=bf16 --data_dir="$tmp/data" \
    --log_file="$tmp/bf16.log" --max_epochs=2 --target_accuracy=1 >"$tmp/bf16.out" 2>&1
  rc=$?
  b2=$(ncf_hr "$tmp/bf16.out" 2)
  if close "$c2" "$b2" 0.03; then
    echo "PASS ncf_cuda_bf16_trains (HR@10 epoch 2: CPU fp32 $c2, GPU bf16 $b2)"
  else
    echo "FAIL ncf_cuda_bf16_trains: exit $rc; HR@10 epoch 2: CPU fp32 $c2, GPU bf16 '$b2'"
  fi
fi
