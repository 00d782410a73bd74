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
#   ttt    the medium ResNet run to its target, beside PyTorch (ttt:ours and
#          ttt:torch run one side each, when both would not fit one call)
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
python3 -c 'import mlperf_logging' 2>/dev/null ||
  echo "warning: no mlperf_logging here: the compliance checks will fail (tests/bench/prepare_carry.sh)"
# A library the binaries need and this machine lacks ends the session at once.
missing=$(ldd "$build"/bin/* "$build"/tests/test_* "$build"/bench/* 2>/dev/null | grep 'not found' | sort -u)
if [[ -n $missing ]]; then
  echo "gpu_session: libraries not found here (carry them in $libs):"
  echo "$missing"
  exit 1
fi
echo "carried libraries in use: $(ldd "$build/bin/resnet" | grep -o "$libs/lib/[^ ]*" | xargs -rn1 basename | tr '\n' ' ')"

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
  echo "== resnet medium: time to train, beside PyTorch"
  data=data/resnet/medium
  bash image_classification/prepare_data.sh medium "$data" "$build" >"$out/prepare_resnet.txt" 2>&1 ||
    { tail -n 3 "$out/prepare_resnet.txt"; exit 1; }
  if [[ $part != ttt:torch ]]; then
    "$build/bin/resnet" --config=image_classification/configs/medium.conf --data_dir="$data" \
      --device=cuda --log_file="$out/resnet_medium.log" 2>&1 | grep -v ':::MLLOG' |
      tee "$out/resnet_medium.txt" | tail -n 5
    python3 logs/result.py --target 0.93 "$out/resnet_medium.log" 2>&1 | tail -n 3
  fi
  if [[ $part != ttt:ours ]]; then
    python3 image_classification/pytorch_reference.py --config=image_classification/configs/medium.conf \
      --raw="$data/raw" --device=cuda 2>&1 | tee "$out/resnet_medium_pytorch.txt" | tail -n 3
  fi
fi
