#!/usr/bin/env bash
# BERT end to end on CPU, the path `make run BENCH=bert` takes: the
# pretrained MiniLM and the generated SQuAD set through the real converter
# (language/prepare_data.sh), fine-tuning to language/configs/small.conf's F1
# target, the official compliance checker on the log (the suite's rules,
# language/compliance/, with the config's target), the written predictions
# scored by squad_score against the logged F1, resume, a benchmark run, and
# 2 ranks under mpirun. (The trainer's bad inputs are rows of
# tests/bad_input/.)
# Usage: tests/language/test_bert_e2e.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
conf=language/configs/small.conf
target=$(config_target $conf)
export PROGRESS_INTERVAL_S=1000
trainer=$build/bin/bert

for bin in bert squad_generate squad_to_lmdb squad_score; do
  if [[ ! -x $build/bin/$bin ]]; then
    echo "FAIL bert_e2e: $build/bin/$bin is not built"
    exit 1
  fi
done

# 1. The model and the data set, as make run prepares them; and a small
# slice for the runs below that check mechanics, not the target.
if bash language/prepare_data.sh small "$tmp/data" "$build" >"$tmp/prep.out" 2>&1 &&
  TRAIN_QUESTIONS=48 DEV_QUESTIONS=12 bash language/prepare_data.sh small "$tmp/mini" "$build" \
    >>"$tmp/prep.out" 2>&1; then
  echo "PASS bert_prepare_small"
else
  echo "FAIL bert_prepare_small: $(tail -n 1 "$tmp/prep.out")"
  exit 1
fi
# Kept when ready: the second call converts nothing.
if bash language/prepare_data.sh small "$tmp/data" "$build" 2>&1 | grep -q "is ready"; then
  echo "PASS bert_prepare_keeps_a_ready_set"
else
  echo "FAIL bert_prepare_keeps_a_ready_set: a ready data set was made again"
fi

# 2. Fine-tune to the target; the log complies; the predictions of the last
# eval, scored by squad_score (the official v1.1 evaluation), give the F1
# the log holds, and answer every dev question.
log=$tmp/run.log
"$trainer" --config=$conf --data_dir="$tmp/data" --device=cpu --log_file="$log" \
  --predictions_out="$tmp/predictions.json" >"$tmp/train.out" 2>&1
small_run_checks bert "$target" "$log" $?
# The log's value is F1 / 100 as a double; squad_score prints the same sums'
# F1 the shortest way that reads back.
logged=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$log" | tail -n 1 | sed 's/.*: //')
scored=$("$build/bin/squad_score" --data="$tmp/data/raw/dev-v1.1.json" --predictions="$tmp/predictions.json" \
  2>"$tmp/score.err" | python3 -c 'import json, sys; print(json.load(sys.stdin)["f1"] / 100)')
if [[ -n $scored ]] && close "$logged" "$scored" 1e-9 && [[ ! -s $tmp/score.err ]]; then
  echo "PASS bert_predictions_out_scores_as_logged (F1 $scored)"
else
  echo "FAIL bert_predictions_out_scores_as_logged: logged '$logged', squad_score '$scored' $(head -c 300 "$tmp/score.err")"
fi

# The ops' team (GEMMs included) has a thread per core this process may use
# (OMP_NUM_THREADS wins); two ranks below share them.
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
team_threads() {  # the thread count the setup line of output $1 reports
  grep -o ', [0-9]* threads' "$1" | head -n 1 | sed 's/, \([0-9]*\) threads/\1/'
}
if [[ $(team_threads "$tmp/train.out") == "${OMP_NUM_THREADS:-$cores}" ]]; then
  echo "PASS bert_thread_per_core ($(team_threads "$tmp/train.out") of $cores cores)"
else
  echo "FAIL bert_thread_per_core: '$(team_threads "$tmp/train.out")' threads, expected" \
    "${OMP_NUM_THREADS:-$cores} ($cores cores)"
fi

# 3. Resume: 1 epoch, then --resume for the second, gives the same final
# checkpoint, bit for bit, as 2 epochs uninterrupted (each epoch's order and
# dropout masks are functions of the seed, the epoch and the step; the
# schedule's length, decay_epochs, is the same in all three runs).
mkdir -p "$tmp/resume"
resume_check bert_resume_matches_uninterrupted "$tmp/resume" "$trainer" --config=$conf \
  --data_dir="$tmp/mini" --device=cpu --target_accuracy=0.99 --decay_epochs=2

# 4. A throughput run says what it is: benchmark_start / benchmark_stop with
# its sequences/s in the log, no run_start or run_stop, no target line.
"$trainer" --config=$conf --device=cpu --init_checkpoint="$tmp/data/model" --bench_steps=2 --batch_size=2 \
  --max_seq_length=32 --eval_batch=2 --log_file="$tmp/bench.log" >"$tmp/bench.out" 2>&1
bench_run_checks bert $? '^bert: bench: 2 steps of 2 windows x 32 tokens'

# 5. Two MPI ranks on CPU: each takes half of every batch and half of the
# dev questions, and at most half the cores' threads; the EM/F1 sums are added, so the log holds one F1 over all
# 12 questions, and the log complies.
if ! has_mpi "$trainer"; then
  echo "SKIP bert_two_ranks: no MPI in this build"
else
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$trainer" --config=$conf \
    --device=cpu --data_dir="$tmp/mini" --log_file="$tmp/two.log" --max_epochs=1 >"$tmp/two.out" 2>&1
  rc=$?
  got=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$tmp/two.log" | sed 's/.*: //')
  # Two ranks' teams fit the cores: half each, or the cores mpirun binds a
  # rank to.
  two=$(team_threads "$tmp/two.out") most=${OMP_NUM_THREADS:-$((cores / 2 > 0 ? cores / 2 : 1))}
  if [[ $rc == 0 && -n $got ]] && grep -q '"key": "global_batch_size", "value": 16' "$tmp/two.log" &&
    [[ -n $two ]] && ((two >= 1 && two <= most)) &&
    grep -q '"key": "eval_samples", "value": 12' "$tmp/two.log" &&
    python3 logs/result.py --target "$got" "$tmp/two.log" >/dev/null 2>&1; then
    echo "PASS bert_two_ranks ($(grep '^bert: epoch' "$tmp/two.out" | cut -d, -f1))"
  else
    echo "FAIL bert_two_ranks: exit $rc; threads '$two' (1 to $most);" \
      "$(grep -E '^error|^bert: epoch|time to train' "$tmp/two.out" | head -n 3 | tr '\n' ' ')"
  fi
fi

# 6. The GPU: the small run to its target in each precision.
cuda_reaches_target bert "$trainer" "$target" --config=$conf --data_dir="$tmp/data"
