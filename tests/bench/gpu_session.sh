#!/usr/bin/env bash
# Everything that needs a GPU, for a machine that has one, in three parts
# (each fits one 10-minute call; PART all runs them in turn):
#   tests  every test (the CUDA op, runtime and trainer tests run instead of
#          skipping), and op_errors.md: every GPU-vs-CPU comparison's measured
#          error beside its tolerance (tests/ops/error_table.py)
#   bench  every benchmark (tables and tests/bench/results/ files; bench_ncf
#          includes NCF's medium time to target beside PyTorch); bench:A,B
#          runs only those (e.g. bench:conv,gemm,optim,loader,decode, then
#          bench:resnet, then bench:ssd, then bench:ncf, when all of them
#          would pass the 10-minute limit of one call)
#   ttt    the medium configs trained to their targets beside their PyTorch
#          references, seeds 1-3 in passes while TTT_SECONDS (default 500)
#          last (tests/bench/ttt.py; TTT_SEEDS, TTT_SIDES): ResNet, SSD and
#          NCF with the default carry, the Transformer and BERT with
#          CARRY_TTT=1's; ttt:A,B names the benchmarks
#   first  a first look inside one call (GPU_SESSION_SECONDS, default 430):
#          the C test programs (CUDA cases on the GPU; cuda-gdb's stack of
#          any that crashes), the small SSD, ResNet and NCF runs on the GPU,
#          the conv and GEMM benchmarks beside PyTorch, compute-sanitizer
#          memcheck of the CUDA test programs; each step capped by what is
#          left, in that order, and everything in at most 8 files under
#          OUT_DIR. first:tests,trainers,bench,san runs only the steps named;
#          GPU_SESSION_TESTS (program names), GPU_SESSION_SSD_PRECISIONS,
#          GPU_SESSION_RESNET_PRECISIONS, GPU_SESSION_TRANSFORMER_PRECISIONS
#          GPU_SESSION_BERT_PRECISIONS (with CARRY_BERT=1's carry)
#          (set empty: that trainer is not run), GPU_SESSION_NCF=0,
#          GPU_SESSION_SAN (program names; GPU_SESSION_SAN_SECONDS each, default
#          40) and GPU_SESSION_BENCH narrow them;
#          step extra runs the command GPU_SESSION_EXTRA (after bench; its
#          share GPU_SESSION_EXTRA_SECONDS, default 300)
#   setup  only the unpacking and checks every part starts with
# Usage: tests/bench/gpu_session.sh BUILD_DIR LIB_DIR OUT_DIR [PART]
#   LIB_DIR: what tests/bench/prepare_carry.sh put there - the programs
#   (build.tar.xz, unpacked into BUILD_DIR, over what a warm machine kept), the
#   libraries it lacks (libs.tar.xz, unpacked onto LD_LIBRARY_PATH; loose .so
#   files in LIB_DIR are on it too), tools in LIB_DIR/bin (on PATH), the
#   mlperf-logging wheel
#   (installed into /tmp for this run) and the Fashion-MNIST files (linked
#   to /usr/share/datasets/fashion-mnist)
set -uo pipefail
build=${1:-build} libs=${2:-.carry} out=${3:-gpu-session} part=${4:-all}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PROGRESS_INTERVAL_S=30 PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
# What tests/bench/prepare_carry.sh put in LIB_DIR: the programs, the
# Fashion-MNIST files where the converters look for them, and wheels.
if [[ -f $libs/build.tar.xz ]]; then
  mkdir -p "$build" && tar -C "$build" -xJf "$libs/build.tar.xz"
fi
[[ -d $libs/bin ]] && export PATH=$PWD/$libs/bin:$PATH
if [[ -f $libs/libs.tar.xz ]]; then
  mkdir -p "$libs/lib" && tar -C "$libs/lib" -xJf "$libs/libs.tar.xz"
  export LD_LIBRARY_PATH=$PWD/$libs/lib:$LD_LIBRARY_PATH
fi
fmnist=/usr/share/datasets/fashion-mnist
if [[ -d $libs/fashion-mnist && ! -d $fmnist ]]; then
  mkdir -p "$(dirname "$fmnist")" && ln -s "$PWD/$libs/fashion-mnist" "$fmnist" ||
    echo "warning: could not link $fmnist: the image data sets cannot be made"
fi
if compgen -G "$libs/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu_session_site "$libs"/*.whl &&
    export PYTHONPATH=/tmp/gpu_session_site${PYTHONPATH:+:$PYTHONPATH}
fi
photos=/usr/share/doc/opencv-doc/examples/data
if [[ -d $libs/opencv-photos && ! -d $photos ]]; then
  mkdir -p "$(dirname "$photos")" && ln -s "$PWD/$libs/opencv-photos" "$photos" ||
    echo "warning: could not link $photos: the detection data sets cannot be made"
fi
python3 -c 'import mlperf_logging' 2>/dev/null ||
  echo "warning: no mlperf_logging here: the compliance checks will fail (tests/bench/prepare_carry.sh)"
# CUDA's libraries where this machine keeps them: the toolkit's folder, and
# the nvidia-* wheels beside PyTorch (cuDNN and NCCL may be only there).
for d in /usr/local/cuda/lib64 $(python3 -c 'import glob, site
for s in site.getsitepackages(): print(*glob.glob(s + "/nvidia/*/lib"))' 2>/dev/null); do
  [[ -d $d ]] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
missing_libs() {
  ldd "$build"/bin/* "$build"/tests/test_* "$build"/bench/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u
}
# Any still missing: looked for anywhere on the machine before giving up.
for lib in $(missing_libs); do
  found=$(find / -xdev -name "$lib" -not -path '/proc/*' 2>/dev/null | head -n 1)
  [[ -n $found ]] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found") && echo "found $found"
done
export LD_LIBRARY_PATH
# A library the binaries need and this machine lacks ends the session at once.
missing=$(missing_libs)
if [[ -n $missing ]]; then
  echo "gpu_session: libraries not found here (carry them in $libs):"
  echo "$missing"
  exit 1
fi
echo "carried libraries in use: $(ldd "$build/bin/resnet" | grep -o "$libs/lib/[^ ]*" | xargs -rn1 basename | tr '\n' ' ')"

if [[ $part == first || $part == first:* ]]; then
  steps=tests,trainers,bench,san
  [[ $part == first:* ]] && steps=${part#first:}
  step() { [[ ",$steps," == *",$1,"* ]]; }
  t0=$SECONDS
  # A step's cap: its share, or what is left of the whole when that is less.
  cap_of() {
    local left=$((${GPU_SESSION_SECONDS:-430} - (SECONDS - t0)))
    ((left > $1)) && left=$1
    ((left > 5)) && echo "$left" || echo 0
  }
  capped() {  # capped SHARE COMMAND...: runs it under its cap, says if cut
    local cap rc
    cap=$(cap_of "$1"); shift
    if ((cap == 0)); then echo "NOT RUN (no time left): $*"; return 124; fi
    timeout -k 5 "$cap" "$@"; rc=$?
    ((rc == 124 || rc == 137)) && echo "CUT after ${cap}s: $*"
    return $rc
  }
  export PATH=$PATH:/usr/local/cuda/bin
  logs=$out/logs && mkdir -p "$logs"
  # GPU_SESSION_TESTS: only the C test programs named (default all).
  tests=()
  for t in "$build"/tests/test_*; do
    name=$(basename "$t")
    [[ -z ${GPU_SESSION_TESTS:-} || " $GPU_SESSION_TESTS " == *" $name "* ]] && tests+=("$name")
  done
  crashed=()
  if step tests; then
    echo "== C test programs, CUDA cases on the GPU"
    rm -f "$out/errors.tsv" "$out/tests_c.txt"
    export TEST_ERROR_TABLE=$(realpath "$out")/errors.tsv
    for name in "${tests[@]}"; do
      capped 60 "$build/tests/$name" >"$logs/$name.txt" 2>&1; rc=$?
      printf '%-22s rc=%-3d %3d passed %3d failed %3d skipped %4ds\n' "$name" $rc \
        "$(grep -c '^PASS ' "$logs/$name.txt")" "$(grep -c '^FAIL ' "$logs/$name.txt")" \
        "$(grep -c '^SKIP ' "$logs/$name.txt")" $((SECONDS - t0)) | tee -a "$out/tests_c.txt"
      grep -E '^(FAIL|SKIP|CUT)' "$logs/$name.txt" | sed 's/^/    /' | tee -a "$out/tests_c.txt"
      ((rc != 0)) && tail -n 15 "$logs/$name.txt" | sed 's/^/  | /' >>"$out/tests_c.txt"
      ((rc > 128 && rc != 137)) && crashed+=("$name")
    done
    unset TEST_ERROR_TABLE
    [[ -s $out/errors.tsv ]] && python3 tests/ops/error_table.py "$out/errors.tsv" \
      --out "$out/op_errors.md" >/dev/null && grep -E '^[0-9]+ comparisons' "$out/op_errors.md"
    # Where a program crashed: its stack, from cuda-gdb (which also debugs host code).
    for name in "${crashed[@]}"; do
      echo "== $name crashed: its stack" | tee -a "$out/tests_c.txt"
      capped 90 cuda-gdb -batch -ex run -ex bt -ex 'info threads' --args "$build/tests/$name" \
        2>&1 | grep -vE '^(PASS|\[New Thread|\[Thread)' | tail -n 40 | tee -a "$out/tests_c.txt"
    done
  fi

  if step trainers; then
    echo "== trainers on the GPU (small configs)"
    data=$(mktemp -d)
    trainer() {  # trainer SHARE NAME PROGRAM FLAGS...: one run, its last lines
      local share=$1 name=$2; shift 2
      capped "$share" "$@" --device=cuda --log_file="$logs/$name.log" >"$logs/$name.txt" 2>&1
      echo "$name: exit $? after $((SECONDS - t0))s; $(grep -E '^error|epoch|target|time to train|amp:' \
        "$logs/$name.txt" | grep -v MLLOG | tail -n 4 | tr '\n' ' ')"
    }
    {
      ssd_precisions=${GPU_SESSION_SSD_PRECISIONS-fp32 bf16 fp16}
      [[ -n $ssd_precisions ]] && { capped 60 bash object_detection/prepare_data.sh small "$data/ssd" \
        "$build" >"$logs/prep_ssd.txt" 2>&1 || tail -n 2 "$logs/prep_ssd.txt"; }
      for p in $ssd_precisions; do
        trainer 110 ssd_$p "$build/bin/ssd" --config=object_detection/configs/small.conf \
          --data_dir="$data/ssd" --loader_threads=8 --precision=$p
      done
      resnet_precisions=${GPU_SESSION_RESNET_PRECISIONS-fp32 bf16 fp16}
      [[ -n $resnet_precisions ]] && { capped 40 bash image_classification/prepare_data.sh small \
        "$data/resnet" "$build" >"$logs/prep_resnet.txt" 2>&1 || tail -n 2 "$logs/prep_resnet.txt"; }
      for p in $resnet_precisions; do
        trainer 70 resnet_$p "$build/bin/resnet" --config=image_classification/configs/small.conf \
          --data_dir="$data/resnet" --loader_threads=8 --precision=$p
      done
      [[ ${GPU_SESSION_NCF-1} == 1 ]] &&
        capped 30 "$build/bin/movielens_generate" --size=small --out="$data/ncf" >"$logs/prep_ncf.txt" 2>&1 &&
        capped 30 "$build/bin/movielens_convert" --input="$data/ncf/ratings.csv" --out="$data/ncf" \
          >>"$logs/prep_ncf.txt" 2>&1 &&
        trainer 50 ncf_fp32 "$build/bin/ncf" --config=recommendation/configs/small.conf --data_dir="$data/ncf"
      # The small translation set comes prepared (prepare_carry.sh): the GPU
      # machine may lack the Debian packages whose catalogs it is made from.
      for p in ${GPU_SESSION_TRANSFORMER_PRECISIONS-fp32 bf16}; do
        [[ -d $libs/transformer-small ]] || { echo "transformer: no $libs/transformer-small"; break; }
        trainer 60 transformer_$p "$build/bin/transformer" --config=translation/configs/small.conf \
          --data_dir="$libs/transformer-small" --precision=$p
      done
      # BERT's small set and model come only with CARRY_BERT=1 (prepare_carry.sh):
      # the JSON converted here, the model's weights as F16.
      bert_precisions=${GPU_SESSION_BERT_PRECISIONS-fp32 bf16 fp16}
      if [[ -n $bert_precisions && -d $libs/minilm-f16 ]]; then
        mkdir -p "$data/bert" && ln -sfn "$PWD/$libs/minilm-f16" "$data/bert/model"
        capped 30 "$build/bin/squad_to_lmdb" --train="$libs/bert-small/train-v1.1.json" \
          --dev="$libs/bert-small/dev-v1.1.json" --vocab="$libs/minilm-f16/vocab.txt" --out="$data/bert/lmdb" \
          --max_seq_length=96 --doc_stride=48 >"$logs/prep_bert.txt" 2>&1 || tail -n 2 "$logs/prep_bert.txt"
        for p in $bert_precisions; do
          trainer 45 bert_$p "$build/bin/bert" --config=language/configs/small.conf --data_dir="$data/bert" \
            --precision=$p
        done
      elif [[ -n $bert_precisions ]]; then
        echo "bert: no $libs/minilm-f16 (CARRY_BERT=1 tests/bench/prepare_carry.sh)"
      fi
    } 2>&1 | tee "$out/trainers.txt"
    rm -rf "$data"
  fi

  if step bench; then
    echo "== benchmarks beside PyTorch: ${GPU_SESSION_BENCH:-conv,gemm}"
    capped 150 bash tests/bench/run_all.sh "$build" "${GPU_SESSION_BENCH:-conv,gemm}" >"$out/bench.txt" 2>&1
    grep -E 'ours/torch|^(SKIP|FAIL|error|CUT)|^== ' "$out/bench.txt" | tail -n 30
    cp tests/bench/results/* "$logs/" 2>/dev/null
  fi

  if step extra && [[ -n ${GPU_SESSION_EXTRA:-} ]]; then
    echo "== $GPU_SESSION_EXTRA"
    capped "${GPU_SESSION_EXTRA_SECONDS:-300}" bash -c "$GPU_SESSION_EXTRA" 2>&1 | tee "$out/extra.txt" | tail -n 40
    cp tests/bench/results/* "$logs/" 2>/dev/null
  fi

  if step san; then
    echo "== compute-sanitizer memcheck"
    # application-only: the bad-input cases fork children that die on
    # purpose; with those tracked too (the default, "all"), test_ckpt ended
    # in "malloc(): unaligned fastbin chunk detected" after every case passed
    # with 0 errors, and without its forking cases, or with this, it is clean;
    # its case that forks without ever using CUDA aborts alone too (2026-11-27).
    # GPU_SESSION_SAN_SECONDS: each program's cap (test_bert_model's CUDA cases alone take about 130 s).
    for name in ${GPU_SESSION_SAN-test_ops_table test_ops_async test_device test_amp test_optim test_rng \
      test_ssd_boxes_cuda test_ncf_model test_ckpt test_loader test_ssd_model test_resnet test_nmt_model}; do
      [[ -x $build/tests/$name ]] || continue
      capped "${GPU_SESSION_SAN_SECONDS:-40}" compute-sanitizer --tool memcheck --error-exitcode 99 \
        --target-processes application-only "$build/tests/$name" \
        >"$logs/san_$name.txt" 2>&1
      echo "$name: exit $? $(grep -c '^PASS ' "$logs/san_$name.txt") passed, $(grep -c '^FAIL ' \
        "$logs/san_$name.txt") failed; $(grep -m1 -E 'ERROR SUMMARY|Invalid|CUT' "$logs/san_$name.txt")"
    done 2>&1 | tee "$out/sanitizer.txt"
  fi
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  echo "first: done in $((SECONDS - t0))s"
fi

if [[ $part == all || $part == tests ]]; then
  echo "== tests"
  rm -f "$out/errors.tsv"
  TEST_ERROR_TABLE=$(realpath "$out")/errors.tsv bash tests/run_tests.sh "$build" 2>&1 |
    tee "$out/tests.txt" | tail -n 40
  # Every GPU-vs-CPU comparison's measured error beside its tolerance.
  python3 tests/ops/error_table.py "$out/errors.tsv" --out "$out/op_errors.md" >/dev/null
  grep -E '^[0-9]+ comparisons' "$out/op_errors.md"
fi

if [[ $part == all || $part == bench || $part == bench:* ]]; then
  echo "== benchmarks"
  only=""
  [[ $part == bench:* ]] && only=${part#bench:}
  bash tests/bench/run_all.sh "$build" "$only" 2>&1 | tee "$out/bench.txt"
  cp tests/bench/results/* "$out/" 2>/dev/null
fi

if [[ $part == all || $part == ttt || $part == ttt:* ]]; then
  echo "== time to train: the medium configs beside their PyTorch references (tests/bench/ttt.py)"
  # The benchmarks whose data this call can make: ResNet, SSD and NCF from
  # the default carry, the Transformer and BERT from CARRY_TTT=1's.
  benches=resnet,ssd,ncf
  if [[ -f $libs/bert-medium.tar.xz ]]; then
    benches=transformer,bert
    mkdir -p "$libs/bert-medium" && tar -C "$libs/bert-medium" -xJf "$libs/bert-medium.tar.xz"
    export SQUAD_DIR=$PWD/$libs/bert-medium BERT_DIR=$PWD/$libs/minilm-f16
  fi
  if [[ -f $libs/transformer-medium.tar.xz ]]; then
    mkdir -p "$libs/transformer-medium" && tar -C "$libs/transformer-medium" -xJf "$libs/transformer-medium.tar.xz"
    export WMT_DIR=$PWD/$libs/transformer-medium
  fi
  [[ $part == ttt:* ]] && benches=${part#ttt:}
  # TTT_DEVICE=cpu (TTT_SCALE=small): the same steps on a machine without a
  # GPU. Our logs stay on the machine (a call brings back 8 files); each
  # one's compliance verdict is in the .jsonl and the table.
  python3 tests/bench/ttt.py --build "$build" --scale "${TTT_SCALE:-medium}" --device "${TTT_DEVICE:-cuda}" \
    --benches "$benches" \
    --seeds "${TTT_SEEDS:-1,2,3}" --sides "${TTT_SIDES:-ours,pytorch}" --budget "${TTT_SECONDS:-500}" \
    --out "$out" --logs /tmp/ttt_logs 2>&1 | tee "$out/ttt.txt"
fi
