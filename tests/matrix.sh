#!/usr/bin/env bash
# The CI matrix, run on this machine: the tests whose results depend on the
# order of floating-point sums (op tests, the trainers end to end, the
# trainers on the emulated GPU) under each OpenBLAS kernel set and thread
# count that CI machines may use. OpenBLAS picks its kernels by CPU, so a
# tolerance tighter than what changes between them passes on one machine and
# fails on the next; OPENBLAS_CORETYPE forces a kernel set here. oneDNN (the
# CPU convolutions) picks its kernels by CPU too: DNNL_MAX_CPU_ISA caps it at
# the instruction set of that kernel set's CPUs (AVX2 for Haswell and Zen,
# AVX-512 for SkylakeX, AVX for Sandybridge).
#
#   make test-matrix                       every configuration (about 10 minutes each)
#   MATRIX_SEEDS=5 make test-matrix        also the small ResNet and SSD to their
#                                          targets from seeds 1..5 in every configuration
#                                          (MATRIX_SEED_BENCHES="ssd": only SSD;
#                                          "bert" adds BERT's small fine-tune)
#   MATRIX_CORES="Haswell" MATRIX_THREADS=2 tests/matrix.sh   a part of it
#   MATRIX_EMU=0 tests/matrix.sh           the CPU tests alone (the emulated GPU's
#                                          take about 15 of each configuration's minutes)
#
# A configuration this CPU cannot run (SkylakeX needs AVX-512) is reported as
# skipped. Logs: BUILD/matrix/. The last line is "N configurations passed,
# N failed, N skipped"; the exit status is non-zero when any failed.
# Usage: tests/matrix.sh [BUILD_DIR] [EMU_BUILD_DIR]
set -uo pipefail
build=${1:-build} emu_build=${2:-build-emu}
cd "$(dirname "$0")/.."
source tests/lib.sh  # bench_dir
cores=${MATRIX_CORES:-Haswell Zen SkylakeX Sandybridge}
threads=${MATRIX_THREADS:-1 2}
seeds=${MATRIX_SEEDS:-0}
run_emu=${MATRIX_EMU:-1}
# Test programs (parts of names, as tests/run_tests.sh takes them).
tests="test_ops_ test_optim test_amp test_dist test_resnet test_ncf_model test_ssd_model test_bert_model test_ncf_e2e"
emu_tests="test_ops_ test_optim test_amp test_dist test_resnet test_ncf_model test_ssd_model test_bert_model test_emu_trainers"
logs=$build/matrix
mkdir -p "$logs"

for bin in "$build/tests/test_harness" $( ((run_emu)) && echo "$emu_build/tests/test_harness"); do
  if [[ ! -x $bin ]]; then
    echo "matrix: $bin is not built; run make all and make EMU=1 BUILD=$emu_build all (make test-matrix does both)" >&2
    exit 2
  fi
done

# The CPU flags a kernel set needs.
needs() {
  case $1 in
    SkylakeX) echo "avx512f avx512bw avx512dq avx512vl" ;;
    Haswell|Zen) echo "avx2 fma" ;;
    Sandybridge) echo "avx" ;;
    *) echo "unknown" ;;
  esac
}
dnnl_isa() {
  case $1 in
    SkylakeX) echo AVX512_CORE ;;
    Haswell|Zen) echo AVX2 ;;
    Sandybridge) echo AVX ;;
  esac
}
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "

# The small run of BENCH from SEED on THREADS threads: "epochs-to-target
# seconds" or "- seconds". It runs as on a CI machine with that many cores:
# THREADS is the ops' team (--threads), and
# OPENBLAS_NUM_THREADS is unset, so that the trainer runs each GEMM on one
# BLAS thread as it does by default (set, it would put that many BLAS threads
# inside each of the team's threads: other sums, and cores oversubscribed).
seed_benches=${MATRIX_SEED_BENCHES:-resnet ssd}
bench_seed() {
  local bench=$1 seed=$2 threads=$3 out=$logs/seed.out start
  start=$(date +%s)
  env -u OPENBLAS_NUM_THREADS PROGRESS_INTERVAL_S=1000 "$build/bin/$bench" \
    --config="$(bench_dir "$bench")/configs/small.conf" --threads="$threads" \
    --data_dir="$logs/data-$bench" --device=cpu --seed="$seed" --log_file="$logs/seed.log" >"$out" 2>&1
  local epochs="-"
  grep -q "$bench: target reached" "$out" && epochs=$(grep -c "^$bench: epoch" "$out")
  echo "$epochs $(( $(date +%s) - start ))"
}
if ((seeds > 0)); then
  for bench in $seed_benches; do
    bash "$(bench_dir "$bench")/prepare_data.sh" small "$logs/data-$bench" "$build" >"$logs/prepare.out" 2>&1 ||
      { echo "matrix: could not prepare the small $bench data set: $(tail -n 1 "$logs/prepare.out")" >&2; exit 2; }
  done
fi

passed=0 failed=0 skipped=0
printf '%-12s %7s  %-26s %-26s %s\n' kernels threads "tests (pass/fail/skip, s)" "emulated GPU (same)" \
  "$( ((seeds > 0)) && echo "small runs ($seed_benches): epochs to target per seed (time)")"
for core in $cores; do
  missing=""
  for f in $(needs "$core"); do [[ $flags == *" $f "* ]] || missing+=" $f"; done
  for t in $threads; do
    name=$core-$t
    if [[ -n $missing ]]; then
      printf '%-12s %7s  skipped: this CPU lacks%s\n' "$core" "$t" "$missing"
      skipped=$((skipped + 1))
      continue
    fi
    export OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=$t DNNL_MAX_CPU_ISA=$(dnnl_isa "$core")
    # OpenBLAS ignores a kernel set it does not know: make sure it took this one.
    got=$(OPENBLAS_VERBOSE=2 "$build/tests/test_harness" 2>&1 | grep -m1 '^Core' || true)
    if [[ $got != "Core: $core" ]]; then
      printf '%-12s %7s  FAILED: OpenBLAS says "%s"\n' "$core" "$t" "$got"
      failed=$((failed + 1))
      continue
    fi
    start=$(date +%s)
    bash tests/run_tests.sh "$build" "$tests" >"$logs/$name.log" 2>&1
    rc=$?
    cpu=$(tail -n 1 "$logs/$name.log" | awk '{print $1 "/" $3 "/" $5}')", $(( $(date +%s) - start ))s"
    rc_emu=0 emu="not run (MATRIX_EMU=0)"
    if ((run_emu)); then
      start=$(date +%s)
      EMU=1 bash tests/run_tests.sh "$emu_build" "$emu_tests" >"$logs/$name-emu.log" 2>&1
      rc_emu=$?
      emu=$(tail -n 1 "$logs/$name-emu.log" | awk '{print $1 "/" $3 "/" $5}')", $(( $(date +%s) - start ))s"
    fi
    ok=$((rc == 0 && rc_emu == 0))
    runs=""
    for bench in $( ((seeds > 0)) && echo "$seed_benches"); do
      reached=0
      runs+="$bench: "
      for ((s = 1; s <= seeds; s++)); do
        read -r epochs secs < <(bench_seed "$bench" "$s" "$t")
        runs+="$epochs ($secs s) "
        [[ $epochs != - ]] && reached=$((reached + 1))
      done
      runs+="[$reached of $seeds] "
      ((reached * 5 < seeds * 4)) && ok=0  # at least 4 of 5 seeds
    done
    printf '%-12s %7s  %-26s %-26s %s\n' "$core" "$t" "$cpu" "$emu" "$runs"
    if ((ok)); then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      grep -h -E '^ *(FAIL|  also) ' "$logs/$name.log" $( ((run_emu)) && echo "$logs/$name-emu.log") |
        sed 's/^ */    /'
    fi
  done
done
echo "$passed configurations passed, $failed failed, $skipped skipped (logs: $logs)"
((failed == 0))
