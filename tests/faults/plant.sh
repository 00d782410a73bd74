#!/usr/bin/env bash
# Planted faults: does a benchmark's small target notice a broken trainer?
# Each fault is a realistic bug, listed in tests/faults/<bench>.faults as
#   name|file|text|replacement|what it is
# (the text occurs exactly once in the file; \n stands for a line break)
# and applied to a scratch copy of the tree, never to the tree itself: the
# tracked and untracked files, and the build's objects with their times, so
# that make rebuilds only what the fault touches. The copy's trainer trains
# the small config (<task>/configs/small.conf) to its max_epochs. A fault
# passes when the run misses the target; one that reaches it is a fault the
# small target cannot see. Prints one line a fault and seed:
#   fault NAME seed S: METRIC per epoch A B ..., target T: missed|REACHED (what)
# and exits 1 when a fault reached the target or could not be applied.
# The name `none` trains the copy unchanged first: the working run that the
# faults are read against, from the same tree, data and flags (a line
# "fault none ...: REACHED" is expected and is not a failure).
# Long (each fault trains the whole small run): run by hand, not by make test.
# With TESTS=1 nothing trains: each fault's copy builds and runs every C
# test program and the task's Python tests instead, and prints one line a
# fault:
#   fault NAME: caught by PROGRAM (its failing cases); ... | no test fails (what)
# exiting 1 when a fault fails no test: the unit tests' answer for the
# faults that a small target cannot see (the name `none` there checks
# that the unchanged copy fails none). TEST_PROGRAMS="PART ..." runs only
# the programs whose names hold one of the parts (all of them take minutes).
# Usage: tests/faults/plant.sh BENCH [BUILD_DIR] [none] [FAULT...]
#   SEEDS="1 2" (default 1); DATA_DIR=DIR reuses a prepared small set;
#   FLAGS adds trainer flags; OUT_DIR=DIR keeps the runs' outputs and logs.
set -uo pipefail
bench=${1:?usage: plant.sh BENCH [BUILD_DIR] [FAULT...]}
build=${2:-build}
shift 2 2>/dev/null || shift $#
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
task=$(bench_dir "$bench")
[[ -n $task ]] || { echo "plant: '$bench' is not a benchmark (resnet, ssd, transformer, ncf, bert)" >&2; exit 2; }
list=tests/faults/$bench.faults conf=$task/configs/small.conf
[[ -f $list ]] || { echo "plant: $list: no such file" >&2; exit 2; }
[[ -x $build/bin/$bench ]] || { echo "plant: $build/bin/$bench is not built (make all)" >&2; exit 2; }
out_dir=${OUT_DIR:-$tmp/out}
mkdir -p "$out_dir"
wanted=("$@")
for w in "${wanted[@]}"; do
  [[ $w == none ]] || grep -q "^$w|" "$list" || { echo "plant: $list has no fault '$w'" >&2; exit 2; }
done

tests_only=$([[ ${TESTS:-0} == 1 ]] && echo 1 || echo 0)
test_bins=()
for t in "$build"/tests/test_*; do [[ -x $t ]] && test_bins+=("$t"); done
((tests_only == 0 || ${#test_bins[@]})) || { echo "plant: $build/tests holds no test programs (make all)" >&2; exit 2; }

data=${DATA_DIR:-$tmp/data}
if ((tests_only == 0)) && [[ -z ${DATA_DIR:-} ]] && ! bash $task/prepare_data.sh small "$data" "$build" >"$tmp/prep.out" 2>&1; then
  echo "plant: $task/prepare_data.sh small failed: $(tail -n 1 "$tmp/prep.out")" >&2
  exit 2
fi

copy_tree() {
  local dst=$1
  mkdir -p "$dst/$build"
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t "$dst" 2>/dev/null
  cp -a "$build/obj" "$build"/*.a "$build/flags.txt" "$dst/$build/" 2>/dev/null
}
metric_per_epoch() {  # OUT: each epoch line's metric, "F1 0.5476 0.5791"
  sed -n "s/^$bench: epoch [0-9]*: \([^ ]*\) \([0-9.]*\) (target.*/\1 \2/p" "$1" |
    awk '{m = $1; v = v " " $2} END {print m v}'
}

# selected PROGRAM: TEST_PROGRAMS is empty or PROGRAM's name holds one of
# its parts.
selected() {
  local part
  [[ -z ${TEST_PROGRAMS:-} ]] && return 0
  for part in $TEST_PROGRAMS; do [[ $1 == *"$part"* ]] && return 0; done
  return 1
}

# run_tests_in TREE NAME WHAT (TESTS=1): builds the selected test programs
# in TREE (make all when a Python test is among them: those run the tools
# and trainers), runs them there and says which fail (a program that exits
# non-zero without a FAIL line fails as a whole); sets status=1 when none
# fails, or, for `none`, when any does.
run_tests_in() {
  local tree=$1 name=$2 what=$3 caught=() targets=() t prog rc first
  for t in "${test_bins[@]}" tests/$task/test_*.py; do
    selected "$(basename "$t")" || continue
    [[ $t == *.py ]] && targets=(all) && break
    targets+=("$t")
  done
  if ((${#targets[@]} == 0)); then
    echo "plant: TEST_PROGRAMS='${TEST_PROGRAMS:-}' names no test program" >&2
    exit 2
  fi
  if ! make -C "$tree" -j2 BUILD="$build" "${targets[@]}" >"$tmp/make-$name.out" 2>&1; then
    echo "fault $name: the build failed: $(grep -m1 error "$tmp/make-$name.out")"
    status=1
    return
  fi
  for t in "${test_bins[@]}" tests/$task/test_*.py; do
    [[ -e $tree/$t ]] || continue
    prog=$(basename "$t")
    selected "$prog" || continue
    case $t in  # TEST_ONLY would pick a program's cases (tests/harness): unset
      *.py) (cd "$tree" && env -u TEST_ONLY python3 "$t" "$build") >"$tmp/test.out" 2>&1 ;;
      *) (cd "$tree" && env -u TEST_ONLY "$t") >"$tmp/test.out" 2>&1 ;;
    esac
    rc=$?
    first=$(grep '^FAIL ' "$tmp/test.out" | sed 's/^FAIL \([^:]*\).*/\1/' | sort -u | paste -sd' ')
    [[ -z $first && $rc != 0 ]] && first="exit status $rc, no FAIL line"
    [[ -n $first ]] && caught+=("$prog ($first)")
  done
  if [[ $name == none ]]; then
    if ((${#caught[@]})); then
      echo "fault none: the unchanged copy fails tests, so the faults' verdicts say nothing: ${caught[*]}"
      status=1
    else
      echo "fault none: no test fails (the unchanged copy)"
    fi
  elif ((${#caught[@]})); then
    echo "fault $name: caught by $(printf '%s; ' "${caught[@]}" | sed 's/; $//')"
  else
    echo "fault $name: no test fails${TEST_PROGRAMS:+ of those named by '$TEST_PROGRAMS'} ($what)"
    status=1
  fi
}

# plant NAME FILE TEXT REPLACEMENT WHAT: one fault (none: no change) built
# and trained in a scratch copy; sets status=1 when it was not seen.
status=0
plant() {
  local name=$1 file=$2 text=$3 replacement=$4 what=$5
  local tree=$tmp/tree-$name
  copy_tree "$tree"
  if [[ $name != none ]] && ! python3 - "$tree/$file" "$text" "$replacement" <<'PY'
import sys
path, text, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
src = open(path, encoding="utf-8").read()
if src.count(text) != 1:
    sys.exit(f"{path}: the fault's text occurs {src.count(text)} times, want once: {text}")
open(path, "w", encoding="utf-8").write(src.replace(text, new))
PY
  then
    echo "fault $name: cannot be applied (the code changed): update $list"
    status=1
    return
  fi
  if ((tests_only)); then
    run_tests_in "$tree" "$name" "$what"
    rm -rf "$tree"
    return
  fi
  if ! make -C "$tree" -j2 BUILD="$build" "$build/bin/$bench" >"$tmp/make-$name.out" 2>&1; then
    echo "fault $name: the build failed: $(grep -m1 error "$tmp/make-$name.out")"
    status=1
    return
  fi
  for seed in ${SEEDS:-1}; do
    run=$out_dir/$name-seed$seed
    # shellcheck disable=SC2086
    "$tree/$build/bin/$bench" --config=$conf --data_dir="$data" --device=cpu --seed="$seed" \
      --log_file="$run.log" ${FLAGS:-} >"$run.out" 2>&1
    rc=$?
    metric=$(metric_per_epoch "$run.out")
    target=$(grep -m1 "^$bench: epoch" "$run.out" | sed 's/.*(target \([0-9.]*\)).*/\1/')
    if grep -q "^$bench: target reached" "$run.out"; then
      verdict=REACHED
      [[ $name == none ]] || status=1
    elif grep -q "^$bench: target NOT reached" "$run.out"; then
      verdict=missed
      [[ $name == none ]] && verdict="missed: the working trainer misses, so the faults' verdicts say nothing" status=1
    else
      echo "fault $name seed $seed: the run failed (exit $rc): $(grep -m1 -iE '^error|fatal' "$run.out")"
      status=1
      continue
    fi
    echo "fault $name seed $seed: $metric per epoch, target $target: $verdict ($what)"
  done
  rm -rf "$tree"
}

if [[ " ${wanted[*]} " == *" none "* ]]; then
  plant none "" "" "" "the working trainer, unchanged"
fi
while IFS='|' read -r name file text replacement what; do
  [[ -z $name || $name == \#* ]] && continue
  if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  plant "$name" "$file" "$text" "$replacement" "$what"
done <"$list"
exit $status
