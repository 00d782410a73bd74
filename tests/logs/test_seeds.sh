#!/usr/bin/env bash
# make seeds (scripts/seeds.sh) on the small NCF config: 3 seeds written as
# results/<system>/ncf/result_<i>.txt with distinct seeds, each accepted by the
# compliance checker, the score printed by logs/summary.py, a PNG of the
# accuracy curves, and
# systems/<system>.json holding this machine's processor and accepted by the
# official mlperf_logging.system_desc_checker (which rejects the file with a
# required field removed); a folder that already holds results and a bad N
# are refused with one line.
# Usage: tests/logs/test_seeds.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
for bin in movielens_generate movielens_convert ncf; do
  if [[ ! -x $build/bin/$bin ]]; then
    echo "FAIL seeds: $build/bin/$bin is not built"
    exit 1
  fi
done

out=$tmp/sub
bash scripts/seeds.sh ncf recommendation small cpu "$build" 3 testsys "$out" 7 >"$tmp/seeds.out" 2>&1
rc=$?
dir=$out/results/testsys/ncf
seeds=$(for i in 0 1 2; do grep -ho '"key": "seed", "value": [0-9]*' "$dir/result_$i.txt" 2>/dev/null |
  sed 's/.* //'; done | tr '\n' ' ')
if [[ $rc == 0 && $seeds == "7 8 9 " ]] && [[ ! -e $dir/result_3.txt ]]; then
  echo "PASS seeds_write_result_files (seeds $seeds)"
else
  echo "FAIL seeds_write_result_files: exit $rc, seeds '$seeds': $(tail -n 3 "$tmp/seeds.out" | tr '\n' ' ')"
fi
check seeds_summary_score grep -qE '^score: [0-9.]+ min' "$tmp/seeds.out"
# A scaled config's target: the summary's RCP line says there is none.
check seeds_summary_rcp grep -q '^rcp: no RCP: a scaled target' "$tmp/seeds.out"
png=$out/plots/testsys/ncf_quality.png
size=$(python3 -c "from PIL import Image; import sys; print('%dx%d' % Image.open(sys.argv[1]).size)" "$png" 2>&1)
check seeds_accuracy_png [ "$size" = 800x500 ]
check seeds_all_comply [ "$(grep -cE '^result_[0-2]\.txt +[0-9]+ success .* SUCCESS$' "$tmp/seeds.out")" = 3 ]

# The system description: the official checker's verdict, and the machine's
# own facts in it.
json=$out/systems/testsys.json
(cd "$tmp" && python3 -m mlperf_logging.system_desc_checker "$json" training 4.1.0 \
  --log_output "$tmp/sdc.log") >"$tmp/sdc.out" 2>&1
check system_desc_checker_accepts grep -q "System description checker passed for testsys" "$tmp/sdc.out"
field() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$json" "$1"; }
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
gpus=0
if nvidia-smi -L >/dev/null 2>&1 && ldd "$build/bin/ncf" | grep -q libcudart; then gpus=$(nvidia-smi -L | wc -l); fi
if [[ $(field host_processor_vcpu_count) == $(nproc --all) && $(field host_processor_model_name) == "$model" &&
  $(field accelerators_per_node) == 0 && $(field operating_system) == *"$(uname -r)"* ]]; then
  echo "PASS system_desc_from_machine ($model, $(nproc --all) vCPUs)"
else
  echo "FAIL system_desc_from_machine: $(field host_processor_model_name) / $(field host_processor_vcpu_count) / $(field accelerators_per_node) GPUs, machine: $model / $(nproc --all) / ${gpus} GPUs (a CPU run lists none)"
fi
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); del d['host_memory_capacity']; json.dump(d, open(sys.argv[2], 'w'))" \
  "$json" "$tmp/broken.json"
(cd "$tmp" && python3 -m mlperf_logging.system_desc_checker "$tmp/broken.json" training 4.1.0 \
  --log_output "$tmp/sdc2.log") >"$tmp/sdc2.out" 2>&1
check system_desc_checker_rejects_missing_field grep -q "Missing field host_memory_capacity" "$tmp/sdc2.out"

# Bad requests: one line each, exit status 2, nothing overwritten.
before=$(md5sum "$dir/result_0.txt")
bash scripts/seeds.sh ncf recommendation small cpu "$build" 3 testsys "$out" 1 >"$tmp/again.out" 2>&1
rc=$?
if [[ $rc == 2 && $(wc -l <"$tmp/again.out") == 1 ]] && grep -q "$dir already holds result logs" "$tmp/again.out" &&
  [[ $(md5sum "$dir/result_0.txt") == "$before" ]]; then
  echo "PASS seeds_refuse_to_overwrite"
else
  echo "FAIL seeds_refuse_to_overwrite: exit $rc: $(head -n 2 "$tmp/again.out" | tr '\n' ' ')"
fi
bash scripts/seeds.sh ncf recommendation small cpu "$build" x other "$out" 1 >"$tmp/badn.out" 2>&1
rc=$?
if [[ $rc == 2 ]] && grep -qx "make seeds: N=x and SEED=1 must be whole numbers (N at least 1)" "$tmp/badn.out"; then
  echo "PASS seeds_bad_n"
else
  echo "FAIL seeds_bad_n: exit $rc: $(head -n 2 "$tmp/badn.out" | tr '\n' ' ')"
fi
