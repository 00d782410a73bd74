# tests/lib.sh: the shell helpers the test scripts share; `source` it.

# check NAME CONDITION...: "PASS NAME" when the condition holds, else
# "FAIL NAME: CONDITION".
check() {
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name: $*"; fi
}

# scratch_dir: $tmp, a fresh directory removed when the script exits.
scratch_dir() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# close A B TOL: both numbers given and |A - B| < TOL (an empty one fails).
close() { [[ -n $1 && -n $2 ]] && python3 -c "import sys; sys.exit(not abs($1 - $2) < $3)"; }

# epoch_field OUTPUT BENCHMARK EPOCH FIELD: a number of the epoch line every
# trainer prints (common/train/run.h), "<benchmark>: epoch N: <metric> X
# (target Y)[, <more>], mean train loss Z; train T s (R samples/s), eval E s";
# FIELD is the text before it ("top-1", "HR@10", "loss").
epoch_field() { grep -m1 "^$2: epoch $3:" "$1" | sed "s/.*$4 \([0-9.]*\).*/\1/"; }

# ncf_hr OUTPUT EPOCH: the HR@10 the NCF trainer printed for an epoch.
ncf_hr() { epoch_field "$1" ncf "$2" HR@10; }

# resume_check NAME DIR TRAINER FLAGS...: the trainer (its target out of
# reach) 2 epochs with a --checkpoint, then 1 epoch and a --resume for the
# second: "PASS NAME" when the resumed run says it continued after epoch 1
# and both runs end with the same checkpoint, bit for bit.
resume_check() {
  local name=$1 dir=$2
  shift 2
  "$@" --max_epochs=2 --checkpoint="$dir/whole.ckpt" --log_file="$dir/r1.log" >/dev/null 2>&1
  "$@" --max_epochs=1 --checkpoint="$dir/split.ckpt" --log_file="$dir/r2.log" >/dev/null 2>&1
  "$@" --max_epochs=2 --checkpoint="$dir/split.ckpt" --log_file="$dir/r3.log" --resume \
    >"$dir/resume.out" 2>&1
  if grep -q "resume: .*continuing after epoch 1" "$dir/resume.out" && [[ -f $dir/whole.ckpt ]] &&
    cmp -s "$dir/whole.ckpt" "$dir/split.ckpt"; then
    echo "PASS $name"
  else
    echo "FAIL $name: $(grep -E 'resume|^error' "$dir/resume.out" | head -n 2 | tr '\n' ' ')"
  fi
}

# expect_error NAME TEXT ARGS...: $trainer (set by the script) run with ARGS
# fails with a status below 128 (not a crash) and its first "error" line
# holds TEXT: "PASS NAME", else "FAIL NAME" with what it printed. Its log
# goes to $tmp/bad.log.
expect_error() {
  local name=$1 want=$2
  shift 2
  "$trainer" --device=cpu --log_file="$tmp/bad.log" "$@" >"$tmp/bad.out" 2>&1
  local rc=$?
  local err
  err=$(grep '^error' "$tmp/bad.out" | head -n 1)
  if [[ $rc != 0 && $rc -lt 128 && $err == *"$want"* ]]; then
    echo "PASS $name"
  else
    echo "FAIL $name: exit $rc, '$err' lacks '$want'"
  fi
}

# bench_dir BENCH: the task folder of a benchmark (the Makefile's
# BENCH_DIR_<bench>); nothing for another name.
bench_dir() {
  case $1 in
    resnet) echo image_classification ;;
    ssd) echo object_detection ;;
    transformer) echo translation ;;
    ncf) echo recommendation ;;
    bert) echo language ;;
  esac
}

# config_target CONF: the target_accuracy a config file states (its last).
config_target() {
  sed -n 's/^[[:space:]]*target_accuracy[[:space:]]*=[[:space:]]*\([0-9.]*\).*/\1/p' "$1" | tail -n 1
}

# has_mpi TRAINER: mpirun is on PATH and TRAINER was built with MPI.
has_mpi() { command -v mpirun >/dev/null && ldd "$1" | grep libmpi >/dev/null; }

# small_run_checks BENCH TARGET LOG RC: after a CPU run of the small config
# (its output in $tmp/train.out, exit status RC, its MLPerf log LOG), three
# lines: BENCH_small_reaches_target (exit 0 and "BENCH: target reached"),
# BENCH_log_complies (logs/result.py, the official checker with TARGET) and
# BENCH_checker_rejects_unreached_target (the same log against 0.999 must
# fail the checker).
small_run_checks() {
  local bench=$1 target=$2 log=$3 rc=$4 out=$tmp/train.out
  if [[ $rc == 0 ]] && grep -q "$bench: target reached" "$out"; then
    echo "PASS ${bench}_small_reaches_target ($(grep -o 'time to train [0-9.]* s' "$out"), $(grep "^$bench: epoch" "$out" | tail -n 1 | cut -d, -f1))"
  else
    echo "FAIL ${bench}_small_reaches_target: exit $rc; $(grep -E "^$bench: epoch|^error|time to train" "$out" | tail -n 3 | tr '\n' ' ')"
  fi
  if python3 logs/result.py --target "$target" --require-success "$log" >"$tmp/check.out" 2>&1; then
    echo "PASS ${bench}_log_complies"
  else
    echo "FAIL ${bench}_log_complies: $(tr '\n' ' ' <"$tmp/check.out" | tail -c 600)"
  fi
  if python3 logs/result.py --target 0.999 "$log" >/dev/null 2>&1; then
    echo "FAIL ${bench}_checker_rejects_unreached_target: accepted at 0.999"
  else
    echo "PASS ${bench}_checker_rejects_unreached_target"
  fi
}

# bench_run_checks BENCH RC PATTERN: after a throughput run (--bench_steps;
# output in $tmp/bench.out, log $tmp/bench.log, exit status RC), one line,
# BENCH_bench_is_a_benchmark_run: it exited 0, printed PATTERN (its "bench:"
# line) and "benchmark of ... (not a training run", logged benchmark_stop
# with its throughput, and has no run_start, run_stop or target line.
bench_run_checks() {
  local bench=$1 rc=$2 pattern=$3 out=$tmp/bench.out log=$tmp/bench.log
  if [[ $rc == 0 ]] && grep -q "$pattern" "$out" &&
    grep -q "^$bench: benchmark of .*(not a training run" "$out" &&
    grep -q '"key": "benchmark_stop".*"throughput": [0-9]' "$log" &&
    ! grep -qE '"key": "run_(start|stop)"' "$log" &&
    ! grep -qE "^$bench: target (reached|NOT reached)" "$out"; then
    echo "PASS ${bench}_bench_is_a_benchmark_run"
  else
    echo "FAIL ${bench}_bench_is_a_benchmark_run: exit $rc: $(grep -E "^($bench|error)" "$out" | tail -n 2 | tr '\n' ' ')"
  fi
}

# cuda_reaches_target BENCH TRAINER TARGET FLAGS...: on a machine with a GPU
# and a CUDA build, the trainer (with FLAGS: its config and data) run on
# the GPU in fp32, bf16 and fp16 must reach its target and write a log the
# checker accepts: "PASS BENCH_cuda_P_reaches_target" per precision; SKIP
# lines without a GPU. Logs go to $tmp/cuda_P.{log,out}.
cuda_reaches_target() {
  local bench=$1 trainer=$2 target=$3 p rc
  shift 3
  if ! nvidia-smi -L >/dev/null 2>&1 || ! ldd "$trainer" | grep libcudart >/dev/null; then
    for p in fp32 bf16 fp16; do echo "SKIP ${bench}_cuda_${p}_reaches_target: no GPU"; done
    return
  fi
  for p in fp32 bf16 fp16; do
    "$trainer" "$@" --device=cuda --precision=$p --log_file="$tmp/cuda_$p.log" >"$tmp/cuda_$p.out" 2>&1
    rc=$?
    if [[ $rc == 0 ]] && grep -q "$bench: target reached" "$tmp/cuda_$p.out" &&
      python3 logs/result.py --target "$target" --require-success "$tmp/cuda_$p.log" >/dev/null 2>&1; then
      echo "PASS ${bench}_cuda_${p}_reaches_target ($(grep -o 'time to train [0-9.]* s' "$tmp/cuda_$p.out"), $(grep "^$bench: epoch" "$tmp/cuda_$p.out" | tail -n 1 | cut -d, -f1))"
    else
      echo "FAIL ${bench}_cuda_${p}_reaches_target: exit $rc; $(grep -E "^error|^$bench: epoch|time to train|amp:" "$tmp/cuda_$p.out" | tail -n 4 | tr '\n' ' ')"
    fi
  done
}
