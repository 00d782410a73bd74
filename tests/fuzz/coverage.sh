#!/usr/bin/env bash
# tests/fuzz/coverage.sh BUILD "TARGETS": replays each target's inputs (the
# corpus it grew under BUILD/corpus/<target>/ and its seeds) once through the
# coverage build BUILD/cov/bin/fuzz_<target> and prints the share of lines
# they reached: of whole files where the file is the parser, else of the
# parser's functions (a file that also holds writers, loaders or a main).
set -euo pipefail

build=$1 targets=$2
out=$build/cov/profiles
mkdir -p "$out"

# FILE, or FILE:FUNCTION,FUNCTION...
declare -A parts=(
  [record]="common/data/record.c"
  [config]="common/core/config.c"
  [image]="common/data/image.c common/data/augment.c image_classification/classify_data.c:classify_augment_image"
  [lmdb_record]="common/data/lmdb_store.c common/data/record.c:record_decode,record_parse
                 image_classification/classify_data.c:classify_augment_image"
  [ckpt]="common/train/ckpt.c:ckpt_read,get_meta,get_table,move_data,get
          common/core/config.c:config_check_snapshot"
  [movielens_csv]="recommendation/movielens.h:ml_ratings_read,ml_parse_line,ml_parse_uint,ml_parse_rating,ml_split,ml_user_keys,ml_data_validate"
  [ncf_bin]="recommendation/movielens.h:ml_data_map,ml_check_header,ml_check_rows,ml_check_user,ml_check_ids,ml_check_seed
             recommendation/ncf_data.c recommendation/ncf_batch.h:ncf_train_sample"
  [imagenet_val_csv]="datasets/imagenet_to_lmdb.c:read_val_csv,add_flat_val"
  [coco_json]="object_detection/coco_json.c:coco_gt_load_json,coco_gt_read_images,coco_gt_read_categories,coco_gt_read_annotations,coco_json_number,coco_json_int,coco_json_bbox,coco_json_list,coco_json_item
               object_detection/coco_eval.c:coco_gt_index common/core/json.c"
  [coco_results]="object_detection/coco_json.c:coco_dets_load_json,coco_json_bbox
                  object_detection/coco_eval.c:coco_eval_images,coco_eval_accumulate,coco_eval_matches_unpack"
  [squad_json]="language/squad_features.c"
  [safetensors]="common/train/safetensors.c language/bert_model.c:bert_model_load,load_one,safetensors_source"
  [wordpiece]="language/wordpiece.c"
  [subword]="translation/subword.c:subword_load,load_entry,check_reserved,subword_finish,subword_encode,subword_decode,escape_token,longest_match,unescape_next,unescape_number"
  [wmt_text]="datasets/wmt_to_lmdb.c:text_read,check_line,split_read,blank,encode_line"
  [ckpt_named]="common/train/ckpt.c:ckpt_read_named,get_meta,get_table,get_data,get_checksum"
)

printf '%-17s %-48s %7s\n' target 'file or function' lines
for t in $targets; do
  bin=$build/cov/bin/fuzz_$t
  inputs=()
  for d in "$build/corpus/$t" "$build/seeds/$t" "tests/fuzz/corpus/$t"; do
    [[ -d $d ]] && inputs+=("$d")
  done
  rm -f "$out/$t".prof*
  LLVM_PROFILE_FILE="$out/$t.profraw" "$bin" -runs=0 "${inputs[@]}" >"$out/$t.log" 2>&1
  llvm-profdata merge -sparse "$out/$t.profraw" -o "$out/$t.profdata"
  for part in ${parts[$t]}; do
    file=${part%%:*}
    if [[ $part == "$file" ]]; then
      # A file row: name, regions (3 columns), functions (3), lines (3), ...
      llvm-cov report "$bin" -instr-profile="$out/$t.profdata" "$file" |
        awk -v t="$t" -v f="$file" '$1 ~ /\.(c|h)$/ { printf "%-17s %-48s %7s\n", t, f, $10 }'
    else
      # A function row: name (static ones as FILE:name), regions (3), lines (3), ...
      # A header's function compiled into two files is listed twice: the
      # better of the two counts.
      llvm-cov report --show-functions "$bin" -instr-profile="$out/$t.profdata" "$file" |
        awk -v t="$t" -v f="$file" -v names="${part#*:}" '
          BEGIN { n = split(names, want, ","); for (i = 1; i <= n; i++) best[want[i]] = -1 }
          { name = $1; sub(/^.*:/, "", name); cover = $7; sub(/%$/, "", cover) }
          name in best && cover + 0 > best[name] { best[name] = cover + 0 }
          END { for (i = 1; i <= n; i++) if (best[want[i]] >= 0)
                  printf "%-17s %-48s %6.2f%%\n", t, f ": " want[i] "()", best[want[i]] }'
    fi
  done
done
