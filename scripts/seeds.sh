#!/usr/bin/env bash
# `make seeds`: N runs of one benchmark's config with seeds SEED .. SEED+N-1,
# written in the MLPerf submission layout under OUT:
#   OUT/results/SYSTEM/BENCH/result_<i>.txt   each run's output (its MLLOG
#                                             lines among the trainer's own)
#   OUT/systems/SYSTEM.json                   this machine (logs/system_desc.py)
# then the MLPerf score of the folder and its RCP check (logs/summary.py: at
# a full config's official target, mlperf-logging's reference convergence
# points for resnet and ssd; "no RCP" for a scaled config's target) and a
# picture of the runs' accuracy against epoch,
# OUT/plots/SYSTEM/BENCH_quality.png (logs/plot.py).
# Usage: seeds.sh BENCH TASK_DIR SCALE DEVICE BUILD_DIR N SYSTEM OUT SEED [TRAINER_FLAG...]
#   SYSTEM empty: the host name and cpu or the GPU count; the flags after
#   SEED go to the trainer last (they override the config).
set -euo pipefail
bench=${1:-resnet} dir=${2:-} scale=${3:-} device=${4:-auto} build=${5:-build}
n=${6:-5} system=${7:-} out=${8:-logs/submission} seed0=${9:-1}
shift $(($# < 9 ? $# : 9))
cd "$(dirname "$0")/.."
who="make seeds"
source scripts/bench_setup.sh
if ! [[ $n =~ ^[1-9][0-9]*$ && $seed0 =~ ^[0-9]+$ ]]; then
  echo "$who: N=$n and SEED=$seed0 must be whole numbers (N at least 1)" >&2
  exit 2
fi
bench_setup "$bench" "$dir" "$scale" "$device" "$build"
run_device=$([[ $have_gpu == 1 ]] && echo cuda || echo cpu)
if [[ -z $system ]]; then
  gpus=$([[ $have_gpu == 1 ]] && nvidia-smi -L | wc -l || echo 0)
  system=$(hostname -s | tr -c 'A-Za-z0-9_.\n-' _)_$([[ $gpus -gt 0 ]] && echo "${gpus}xgpu" || echo cpu)
fi
if [[ ! $system =~ ^[A-Za-z0-9_.-]+$ ]]; then
  echo "$who: SYSTEM=$system: use letters, digits, '_', '.' and '-' (it names a file)" >&2
  exit 2
fi
results=$out/results/$system/$bench
if compgen -G "$results/result_*.txt" >/dev/null; then
  echo "$who: $results already holds result logs; move them away or choose another SYSTEM or OUT" >&2
  exit 2
fi
mkdir -p "$results" "logs/$bench" "$out/plots/$system"
python3 logs/system_desc.py --name "$system" --out "$out/systems/$system.json" --device "$run_device"
echo "$who: $n runs of $bench, scale $scale, device $device, config $conf, into $results"
stamp=$(date +%Y%m%d-%H%M%S)
for ((i = 0; i < n; i++)); do
  seed=$((seed0 + i))
  # A run that misses its target or fails still leaves its log: the
  # summary reports it as the rules count it.
  "$trainer" --config="$conf" --device="$device" --data_dir="$data" --seed="$seed" \
    --log_file="logs/$bench/$scale-seeds-$stamp-seed$seed.log" "$@" >"$results/result_$i.txt" 2>&1 || true
  echo "$who: result_$i.txt (seed $seed): $(grep -E "^$bench: target|^error" "$results/result_$i.txt" | tail -n 1)"
done
status=0
python3 logs/summary.py ${target:+--target "$target"} "$results" || status=$?
python3 logs/plot.py quality "$results" ${target:+--target "$target"} \
  --out "$out/plots/$system/${bench}_quality.png" || status=$?
exit $status
