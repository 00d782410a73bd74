#!/usr/bin/env bash
# Fills the folder a GPU session carries to the device machine (git-ignored
# .carry by default) with what that machine lacks, within the 64 MiB a call
# may carry:
#   build.tar.xz        the built programs (BUILD/bin, tests, bench; ~30 MB
#                       of CUDA fatbins that xz packs into about 1 MB)
#   libs.tar.xz         Debian's libraries the programs link that the GPU
#                       image may lack: liblmdb and libturbojpeg (it lacks
#                       them), OpenBLAS with libgfortran, oneDNN (~7 MB
#                       packed) with libOpenCL, libpng, zlib - all
#                       but glibc, the C++ runtime, CUDA's and Open MPI's
#                       (those must be the machine's own); ~6 MB packed
#                       from a DNNL=0 build, ~13 MB with oneDNN
#   bin/mdb_stat        lmdb-utils' tool, which a converter test counts entries with
#   mlperf_logging-*.whl              the compliance checker (logs/result.py;
#                                     its dependencies are on that machine)
#   fashion-mnist/      Debian's dataset-fashion-mnist IDX files (30 MB): the
#                       small and medium image data sets are made from them
#   opencv-photos/      opencv-doc's sample JPEGs and PNGs (10 MB): the
#                       detection data sets' backgrounds
#   transformer-small/  the small translation data set, prepared (1 MB): it
#                       is made from the German gettext catalogs of Debian
#                       packages that the GPU machine may lack
# With CARRY_BERT=1, for BERT's GPU checks, instead of fashion-mnist/ and
# opencv-photos/ (the three do not fit one call together):
#   bert-small/         the small SQuAD set's JSON, generated from Debian's
#                       wordnet-base (which the GPU machine lacks; converted
#                       there by squad_to_lmdb)
#   minilm-f16/         the pretrained MiniLM with its weights as F16 (44 MB;
#                       the F32 file is 91 MB), config.json and vocab.txt
# With CARRY_TTT=1, for the ttt part's Transformer and BERT pairs
# (gpu_session.sh ... ttt:transformer,bert), instead of fashion-mnist/,
# opencv-photos/ and transformer-small/:
#   minilm-f16/         as with CARRY_BERT=1
#   bert-medium.tar.xz  the medium SQuAD set's JSON (language/prepare_data.sh
#                       medium; about 1 MB packed), converted there
#   transformer-medium.tar.xz  the medium translation set's raw text
#                       (translation/prepare_data.sh medium, made from
#                       Debian's trans-de-en; about 1 MB packed), converted
#                       there
# tests/bench/gpu_session.sh unpacks and installs all of it there.
# Usage: [CARRY_BERT=1 | CARRY_TTT=1] tests/bench/prepare_carry.sh [BUILD_DIR] [DIR]
set -euo pipefail
build=${1:-build} dir=${2:-.carry}
cd "$(dirname "$0")/../.."
mkdir -p "$dir"
if ! git check-ignore -q "$dir"; then
  echo "prepare_carry: $dir is not git-ignored; it would travel as part of the tree" >&2
  exit 1
fi
if [[ ! -x $build/bin/resnet ]]; then
  echo "prepare_carry: $build/bin/resnet is not built (run make first)" >&2
  exit 1
fi
tar -C "$build" -cJf "$dir/build.tar.xz" bin tests bench
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
ldd "$build"/bin/* "$build"/tests/test_* "$build"/bench/* 2>/dev/null | awk '/=> \// {print $3}' |
  sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+)\.so' |
  grep -Ev 'cuda|libcudnn|libcublas|libnccl|libcudart|libmpi|libopen-|libhwloc|libevent|libudev' |
  while read -r lib; do cp -L "$lib" "$libs/"; done
tar -C "$libs" -cJf "$dir/libs.tar.xz" .
rm -f "$dir"/lib*.so.*  # loose copies of an older layout
mkdir -p "$dir/bin"
cp "$(command -v mdb_stat)" "$dir/bin/"
version=$(python3 -c 'import importlib.metadata as m; print(m.version("mlperf-logging"))')
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 -d "$dir" "mlperf-logging==$version"
rm -rf "$dir/fashion-mnist" "$dir/opencv-photos" "$dir/bert-small" "$dir/minilm-f16" "$dir/transformer-small" \
  "$dir"/*-medium.tar.xz
if [[ ${CARRY_BERT:-0} == 1 || ${CARRY_TTT:-0} == 1 ]]; then
  mkdir -p "$dir/minilm-f16"
  scale=small
  [[ ${CARRY_TTT:-0} == 1 ]] && scale=medium
  bash language/prepare_data.sh $scale "$dir/bert-prep" "$build" >/dev/null
  if [[ $scale == small ]]; then
    mkdir -p "$dir/bert-small" && mv "$dir/bert-prep/raw/"*.json "$dir/bert-small/"
  else
    tar -C "$dir/bert-prep/raw" -cJf "$dir/bert-medium.tar.xz" train-v1.1.json dev-v1.1.json
  fi
  model=$(realpath "$dir/bert-prep/model")
  rm -rf "$dir/bert-prep"
  cp "$model/config.json" "$model/vocab.txt" "$dir/minilm-f16/"
  python3 - "$model/model.safetensors" "$dir/minilm-f16/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
sys.path.insert(0, "datasets")
from bert_to_safetensors import write_safetensors
src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header, body = json.loads(f.read(n)), f.read()
tensors = []
for name, t in header.items():
    if name == "__metadata__":
        continue
    begin, end = t["data_offsets"]
    raw = np.frombuffer(body[begin:end], dtype=np.uint8)
    if t["dtype"] == "F32":
        tensors.append((name, "F16", raw.view("<f4").astype("<f2").reshape(t["shape"])))
    else:  # integer (and 16-bit) tensors as they are, element by element
        width = {"I64": "<i8", "I32": "<i4", "F16": "<f2", "BF16": "<u2", "I8": "i1", "U8": "u1"}
        tensors.append((name, t["dtype"], raw.view(width[t["dtype"]]).reshape(t["shape"])))
write_safetensors(dst, tensors)
PY
else
  mkdir -p "$dir/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*.gz "$dir/fashion-mnist/"
  mkdir -p "$dir/opencv-photos"
  cp /usr/share/doc/opencv-doc/examples/data/*.{jpg,png} "$dir/opencv-photos/"
fi
if [[ ${CARRY_TTT:-0} == 1 ]]; then
  bash translation/prepare_data.sh medium "$dir/transformer-prep" "$build" >/dev/null
  tar -C "$dir/transformer-prep/raw" -cJf "$dir/transformer-medium.tar.xz" .
  rm -rf "$dir/transformer-prep"
else
  bash translation/prepare_data.sh small "$dir/transformer-small" "$build" >/dev/null
  rm -rf "$dir/transformer-small/raw"
fi
rm -rf "$dir/lib"  # what a local run of gpu_session.sh unpacked
tar -tJf "$dir/libs.tar.xz" | sed "s|^./||" | grep . | tr "\n" " "; echo
# A call carries at most 64 MiB: the working tree (tracked and untracked,
# not ignored) and this folder together.
tree=$({ git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 stat -c %s 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
carry=$(du -sb "$dir" | cut -f1)
echo "prepare_carry: $dir $((carry >> 20)) MiB and the working tree $((tree >> 20)) MiB:" \
  "$(((tree + carry) >> 20)) MiB of the 64 a call may carry"
if ((tree + carry > 64 << 20)); then
  echo "prepare_carry: over the 64 MiB a call may carry; a build without oneDNN (make DNNL=0, as the" \
    "GPU runs do not use it) carries about 6 MB less" >&2
  exit 1
fi
