#!/usr/bin/env bash
# Prepares the data set `make run BENCH=transformer` trains on, as
# DATA_DIR/lmdb/{train,eval} (LMDBs), DATA_DIR/lmdb/eval.ref and
# DATA_DIR/lmdb/vocab.subwords (datasets/wmt_to_lmdb; translation/wmt_data.h):
#   small   real English->German translations, the messages of the German
#           gettext catalogs of Debian packages (datasets/wmt_from_gettext.py:
#           3-20 words a side, cleaned of formats and markup; 8,268 train
#           pairs from 23 catalogs, 597 eval pairs from 6 others, so the
#           eval set is unseen text) into DATA_DIR/raw, with
#           DATA_DIR/raw/sources.txt naming each catalog's package and
#           version; then converted with a vocabulary of about 2,048 subwords
#           built from its training text: the shared embedding and the
#           softmax grow with the vocabulary, and at 4k they cost a
#           2+2-layer, 128-wide model as much as all its layers
#   medium  generated in WMT's raw layout from Debian's trans-de-en
#           (datasets/wmt_generate): every sentence pair of up to 16 words
#           and the phrases, 1,000 eval pairs, a vocabulary of about 8,192
#   full    WMT17 en-de as the MLPerf reference prepares it, which the user
#           brings: DATA_DIR/raw or $WMT_DIR holding
#             train.en, train.de         the training text, one sentence a line
#                                        (or the three corpora the reference's
#                                        data_download.py fetches, found anywhere
#                                        below: news-commentary-v12.de-en.*,
#                                        commoncrawl.de-en.*, europarl-v7.de-en.*,
#                                        concatenated here in that order)
#             newstest2014.en, .de       the eval set (3,003 lines)
#             vocab.ende.32768           the reference's vocabulary (its
#                                        process_data.py writes it)
# At small and medium, WMT_DIR names a folder holding the scale's raw files
# made elsewhere by this script (a machine without the Debian packages),
# used in place of making them.
# TRAIN_PAIRS, EVAL_PAIRS and VOCAB_SIZE in the environment override a
# generated scale's sizes (0 pairs: all), MAX_WORDS and PHRASES medium's. A
# finished data set of the same source and sizes is kept
# (DATA_DIR/lmdb/.complete holds them); one of others is rebuilt.
# Usage: prepare_data.sh SCALE DATA_DIR BUILD_DIR
set -euo pipefail
scale=$1 data=$2 build=${3:-build}
cd "$(dirname "$0")/.."
convert() {  # convert RAW_DIR TRAIN_PREFIX VOCAB_FLAG
  "$build/bin/wmt_to_lmdb" --train_src="$2.en" --train_tgt="$2.de" --eval_src="$1/newstest2014.en" \
    --eval_tgt="$1/newstest2014.de" --out="$data/lmdb" "$3"
}
case $scale in
  small) source=gettext train=0 eval=0 vocab=2048 ;;
  medium) source=trans-de-en train=0 eval=1000 words=16 phrases=true vocab=8192 ;;
  full*)
    src=${WMT_DIR:-$data/raw}
    if [[ -f $data/lmdb/.complete ]]; then
      echo "prepare_data: WMT LMDB found in $data/lmdb"
      exit 0
    fi
    for f in newstest2014.en newstest2014.de vocab.ende.32768; do
      if [[ ! -f $src/$f ]]; then
        echo "prepare_data: $src/$f is missing: bring WMT17 en-de as the MLPerf reference prepares it" \
          "(train.en/train.de or its three training corpora, newstest2014.en/.de, vocab.ende.32768) and set" \
          "WMT_DIR=<that folder> (see translation/prepare_data.sh)" >&2
        exit 2
      fi
    done
    train_prefix=$src/train
    if [[ ! -f $src/train.en ]]; then
      train_prefix=$data/train
      rm -f "$train_prefix.en" "$train_prefix.de"
      mkdir -p "$data"
      for corpus in news-commentary-v12.de-en commoncrawl.de-en europarl-v7.de-en; do
        for lang in en de; do
          f=$(find -L "$src" -name "$corpus.$lang" -print -quit)
          if [[ -z $f ]]; then
            echo "prepare_data: neither $src/train.en nor $corpus.$lang below $src" >&2
            exit 2
          fi
          cat "$f" >>"$train_prefix.$lang"
        done
      done
    fi
    rm -rf "$data/lmdb"
    convert "$src" "$train_prefix" --vocab="$src/vocab.ende.32768"
    echo "full" >"$data/lmdb/.complete"
    exit 0 ;;
  *) echo "prepare_data: unknown scale '$scale' (small, medium or full)" >&2; exit 2 ;;
esac
train=${TRAIN_PAIRS:-$train} eval=${EVAL_PAIRS:-$eval} vocab=${VOCAB_SIZE:-$vocab}
stamp="source=$source train=$train eval=$eval vocab=$vocab"
if [[ $source == trans-de-en ]]; then
  words=${MAX_WORDS:-$words} phrases=${PHRASES:-$phrases}
  stamp+=" max_words=$words phrases=$phrases"
fi
[[ -n ${WMT_DIR:-} ]] && stamp+=" from=$(realpath "$WMT_DIR")"
marker=$data/lmdb/.complete
if [[ -f $marker && $(cat "$marker") == "$stamp" ]]; then
  echo "prepare_data: $data is ready ($stamp)"
  exit 0
fi
rm -rf "$data/raw" "$data/lmdb"
mkdir -p "$data"
if [[ -n ${WMT_DIR:-} ]]; then
  # The same scale's raw files made on another machine (one without the
  # Debian packages they come from: tests/bench/prepare_carry.sh's CARRY_TTT=1).
  for f in train.en train.de newstest2014.en newstest2014.de; do
    if [[ ! -f $WMT_DIR/$f ]]; then
      echo "prepare_data: WMT_DIR=$WMT_DIR holds no $f" >&2
      exit 2
    fi
  done
  cp -r "$WMT_DIR" "$data/raw"
elif [[ $source == gettext ]]; then
  python3 datasets/wmt_from_gettext.py --out="$data/raw" --train_pairs="$train" --eval_pairs="$eval"
else
  "$build/bin/wmt_generate" --out="$data/raw" --train_pairs="$train" --eval_pairs="$eval" \
    --max_words="$words" --phrases="$phrases"
fi
convert "$data/raw" "$data/raw/train" --vocab_size="$vocab"
echo "$stamp" >"$marker"
