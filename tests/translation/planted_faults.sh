#!/usr/bin/env bash
# Planted faults: does the small Transformer run notice a broken trainer?
# Each fault is a realistic bug, listed in tests/faults/transformer.faults
# and applied as an exact text replacement to a scratch copy of the tree
# (never to the tree itself); the copy's trainer is built and trained with
# translation/configs/small.conf to its max_epochs.
# A fault passes when the run misses the target ("missed"); one that reaches
# it is a fault the small target cannot see. Prints one line a fault:
#   fault NAME: best BLEU B at epoch E of N, target T: missed|REACHED
# and exits non-zero when a fault reached the target or could not be applied.
# Long (each fault trains max_epochs): run by hand, not by make test.
# Usage: tests/translation/planted_faults.sh [BUILD_DIR] [FAULT...]
#   (default: every fault; SEED=N picks the seed, 1 by default;
#   DATA_DIR=DIR reuses a prepared small set; FLAGS adds trainer flags)
set -uo pipefail
build=${1:-build}
shift || true
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
conf=translation/configs/small.conf
seed=${SEED:-1}

list=tests/faults/transformer.faults  # name|file|text|replacement|what
wanted=("$@")

data=${DATA_DIR:-$tmp/data}
if [[ -z ${DATA_DIR:-} ]] && ! bash translation/prepare_data.sh small "$data" "$build" >"$tmp/prep.out" 2>&1; then
  echo "planted_faults: prepare_data.sh small failed: $(tail -n 1 "$tmp/prep.out")" >&2
  exit 2
fi

# The scratch tree: tracked and untracked (not ignored) files, and the build's
# objects with their times, so that make rebuilds only what a fault touches.
copy_tree() {
  local dst=$1
  mkdir -p "$dst"
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t "$dst" 2>/dev/null
  mkdir -p "$dst/$build"
  cp -a "$build/obj" "$build"/*.a "$build/flags.txt" "$dst/$build/" 2>/dev/null
}

status=0
while IFS='|' read -r name file text replacement what; do
  [[ -z $name || $name == \#* ]] && continue
  if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  tree=$tmp/tree-$name
  copy_tree "$tree"
  if ! python3 - "$tree/$file" "$text" "$replacement" <<'EOF'
import sys
path, text, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
src = open(path, encoding="utf-8").read()
if src.count(text) != 1:
    sys.exit(f"{path}: the fault's text occurs {src.count(text)} times, want once: {text}")
open(path, "w", encoding="utf-8").write(src.replace(text, new))
EOF
  then
    echo "fault $name: cannot be applied (the code changed): update $list"
    status=1
    continue
  fi
  if ! make -C "$tree" -j2 BUILD="$build" "$build/bin/transformer" </dev/null >"$tmp/make-$name.out" 2>&1; then
    echo "fault $name: the build failed: $(grep -m1 error "$tmp/make-$name.out")"
    status=1
    continue
  fi
  out=$tmp/run-$name.out
  "$tree/$build/bin/transformer" --config=$conf --data_dir="$data" --device=cpu --seed="$seed" \
    --log_file="$tmp/run-$name.log" ${FLAGS:-} </dev/null >"$out" 2>&1
  rc=$?
  best=$(grep '^transformer: epoch' "$out" | sed 's/^transformer: epoch \([0-9]*\):.*, BLEU \([0-9.]*\),.*/\2 \1/' |
    sort -k1,1g -k2,2nr | tail -n 1)
  epochs=$(grep -c '^transformer: epoch' "$out")
  if [[ $rc != 0 || -z $best ]]; then
    echo "fault $name: the run failed (exit $rc): $(grep -m1 -iE 'error|fatal' "$out")"
    status=1
    continue
  elif grep -q "transformer: target reached" "$out"; then
    verdict=REACHED
    status=1
  else
    verdict=missed
  fi
  target=$(grep -m1 '^transformer: epoch' "$out" | sed 's/.*(target \([0-9.]*\)).*/\1/')
  echo "fault $name: best BLEU ${best% *} at epoch ${best#* } of $epochs, target $(python3 -c "print(round($target * 100, 4))"): $verdict ($what)"
  rm -rf "$tree"
done <"$list"
exit $status
