#!/usr/bin/env bash
# Transformer end to end on CPU, the path `make run BENCH=transformer` takes:
# the small set in WMT's layout (real translations from Debian's German
# gettext catalogs, datasets/wmt_from_gettext.py) through the real converter
# (translation/prepare_data.sh), training to translation/configs/small.conf's
# BLEU target, the official compliance checker on the log (closed_transformer
# rules of ruleset 0.7.0 with only the target changed), the written
# translations scored by the suite's bleu_score and by sacrebleu against the
# logged BLEU, resume, bad flags, a benchmark run, and 2 ranks under mpirun.
# Usage: tests/translation/test_transformer_e2e.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
conf=translation/configs/small.conf
target=$(config_target $conf)
export PROGRESS_INTERVAL_S=1000
trainer=$build/bin/transformer

for bin in transformer wmt_to_lmdb bleu_score; do
  if [[ ! -x $build/bin/$bin ]]; then
    echo "FAIL transformer_e2e: $build/bin/$bin is not built"
    exit 1
  fi
done

# 1. The data set, through the generator and the converter; and a small
# slice of it for the runs below that check mechanics, not the target.
if bash translation/prepare_data.sh small "$tmp/data" "$build" >"$tmp/prep.out" 2>&1 &&
  TRAIN_PAIRS=400 EVAL_PAIRS=40 bash translation/prepare_data.sh small "$tmp/mini" "$build" \
    >>"$tmp/prep.out" 2>&1; then
  echo "PASS transformer_prepare_small"
else
  echo "FAIL transformer_prepare_small: $(tail -n 1 "$tmp/prep.out")"
  exit 1
fi

# The target means something: copying the English source as the
# translation (names, numbers and loanwords are shared: BLEU 1.71 on
# 2026-11-29's catalogs) scores below two thirds of it.
copy=$("$build/bin/bleu_score" "$tmp/data/raw/newstest2014.en" "$tmp/data/lmdb/eval.ref" 2>&1 |
  sed -n 's/^bleu=\([0-9.e+-]*\).*/\1/p')
check transformer_target_above_copying_source python3 -c "import sys; sys.exit(not 1.5 * $copy / 100 < $target)"

# 2. Train to the target; the log complies; the translations of the last
# eval, scored by bleu_score (and by sacrebleu where it is installed), give
# the BLEU the log holds.
log=$tmp/run.log
"$trainer" --config=$conf --data_dir="$tmp/data" --device=cpu --log_file="$log" \
  --translations_out="$tmp/hyp.txt" >"$tmp/train.out" 2>&1
small_run_checks transformer "$target" "$log" $?
# The log's value is BLEU / 100 as a double; bleu_score prints %.10g of the
# same computation, and sacrebleu agrees with it to 1e-6 BLEU
# (test_bleu_sacrebleu.py) on such text.
logged=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$log" | tail -n 1 | sed 's/.*: //')
scored=$("$build/bin/bleu_score" "$tmp/hyp.txt" "$tmp/data/lmdb/eval.ref" 2>&1 | sed -n 's/^bleu=\([0-9.e+-]*\).*/\1/p')
if [[ -n $scored ]] && close "$logged" "$(python3 -c "print($scored / 100)")" 1e-9; then
  echo "PASS transformer_translations_out_scores_as_logged (BLEU $scored)"
else
  echo "FAIL transformer_translations_out_scores_as_logged: logged '$logged', bleu_score '$scored'"
fi
if python3 -c "import sacrebleu" 2>/dev/null; then
  sacre=$(python3 - "$tmp/hyp.txt" "$tmp/data/lmdb/eval.ref" <<'EOF'
import sys
import sacrebleu
hyps = open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]
refs = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
print(sacrebleu.corpus_bleu(hyps, [refs], tokenize="intl", lowercase=True).score / 100)
EOF
)
  if close "$logged" "$sacre" 1e-8; then
    echo "PASS transformer_sacrebleu_agrees (sacrebleu $sacre)"
  else
    echo "FAIL transformer_sacrebleu_agrees: logged '$logged', sacrebleu '$sacre'"
  fi
else
  echo "SKIP transformer_sacrebleu_agrees: sacrebleu is not installed"
fi
# Every eval sentence has its line, and translations are German-looking text,
# not ids or markup.
if [[ $(wc -l <"$tmp/hyp.txt") == $(wc -l <"$tmp/data/lmdb/eval.ref") ]] &&
  ! grep -qE '<pad>|<EOS>|\\[0-9]+;' "$tmp/hyp.txt"; then
  echo "PASS transformer_translations_out_lines"
else
  echo "FAIL transformer_translations_out_lines: $(wc -l <"$tmp/hyp.txt") lines; $(head -n 2 "$tmp/hyp.txt" | tr '\n' '|')"
fi

# 3. Resume: 1 epoch, then --resume for the second, gives the same final
# checkpoint, bit for bit, as 2 epochs uninterrupted (each epoch's batches
# and dropout masks are functions of the seed, the epoch and the step).
mkdir -p "$tmp/resume"
resume_check transformer_resume_matches_uninterrupted "$tmp/resume" "$trainer" --config=$conf \
  --data_dir="$tmp/mini" --device=cpu --target_accuracy=0.99

# 4. Bad input: one line naming the flag or the file.
expect_error transformer_no_data_dir "error: --data_dir: no data set given" --config=$conf
expect_error transformer_missing_data "$tmp/nowhere/lmdb" --config=$conf --data_dir="$tmp/nowhere"
expect_error transformer_length_method "error: --length_method: want discard or truncate" \
  --config=$conf --data_dir="$tmp/mini" --length_method=cut
expect_error transformer_max_tokens_below_length "error: --max_tokens: " --config=$conf \
  --data_dir="$tmp/mini" --max_tokens=64 --max_length=64
expect_error transformer_length_beyond_positions "error: --max_length: " --config=$conf \
  --data_dir="$tmp/mini" --max_length=100 --max_positions=64
expect_error transformer_heads "error: --d_model: 130 is not an even multiple of the 4 heads" \
  --config=$conf --data_dir="$tmp/mini" --d_model=130
expect_error transformer_lowp_on_cpu "error: --precision: 'bf16' needs a GPU" --config=$conf \
  --data_dir="$tmp/mini" --precision=bf16
expect_error transformer_profile_without_bench "error: --profile_steps: " --config=$conf \
  --data_dir="$tmp/mini" --profile_steps=3
cp -r "$tmp/mini" "$tmp/badref"
head -n 5 "$tmp/mini/lmdb/eval.ref" >"$tmp/badref/lmdb/eval.ref"
expect_error transformer_short_eval_ref "$tmp/badref/lmdb/eval.ref" --config=$conf --data_dir="$tmp/badref"

# 5. A throughput run says what it is: benchmark_start / benchmark_stop with
# its tokens/s in the log, no run_start or run_stop, no target line.
"$trainer" --config=$conf --device=cpu --bench_steps=2 --bench_vocab=500 --max_tokens=256 \
  --max_length=16 --log_file="$tmp/bench.log" >"$tmp/bench.out" 2>&1
bench_run_checks transformer $? '^transformer: bench: 2 steps of 16 pairs x 16 tokens a side'

# 6. Two MPI ranks on CPU: each takes every other batch of an epoch and half
# of the eval sentences; the n-gram counts are summed, so the log holds one
# BLEU over all 40 sentences, and the log complies.
if ! has_mpi "$trainer"; then
  echo "SKIP transformer_two_ranks: no MPI in this build"
else
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$trainer" --config=$conf \
    --device=cpu --data_dir="$tmp/mini" --log_file="$tmp/two.log" --max_epochs=1 >"$tmp/two.out" 2>&1
  rc=$?
  got=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$tmp/two.log" | sed 's/.*: //')
  if [[ $rc == 0 && -n $got ]] && grep -q '"key": "global_batch_size", "value": 1024' "$tmp/two.log" &&
    python3 logs/result.py --target "$got" "$tmp/two.log" >/dev/null 2>&1; then
    echo "PASS transformer_two_ranks ($(grep '^transformer: epoch' "$tmp/two.out" | cut -d, -f1))"
  else
    echo "FAIL transformer_two_ranks: exit $rc; $(grep -E '^error|^transformer: epoch|time to train' "$tmp/two.out" | head -n 3 | tr '\n' ' ')"
  fi
fi

# 7. The GPU: the small run to its target in each precision.
cuda_reaches_target transformer "$trainer" "$target" --config=$conf --data_dir="$tmp/data"
