#!/usr/bin/env bash
# Decode + random-resized-crop + flip to 224x224, images per CPU-second (=
# images/s per core, steady under other load): this
# suite's pipeline (bench_decode) beside PIL (bench_decode_pil.py) in the same
# run, on the same real photos: the JPEGs of Debian's opencv-doc sample data
# and scikit-learn's two sample photos. Both are pinned to one core. Appends
# a dated row to tests/bench/results/bench_decode.md.
# Usage: tests/bench/bench_decode.sh [BUILD_DIR] [SECONDS_PER_VARIANT]
set -euo pipefail
build=${1:-build} seconds=${2:-10}
cd "$(dirname "$0")/../.."
list=$(mktemp)
trap 'rm -f "$list"' EXIT
bash tests/bench/sample_photos.sh >"$list"
if [[ ! -s $list ]]; then
  echo "SKIP bench_decode: no sample photos (apt-get install opencv-doc python3-sklearn)"
  exit 0
fi
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
ours=$("${pin[@]}" "$build/bench/bench_decode" --list="$list" --seconds="$seconds")
pil=$("${pin[@]}" python3 tests/bench/bench_decode_pil.py --list "$list" --seconds "$seconds")
echo "$ours"
echo "$pil"
field() { awk -v k="$1" '$1 == k {print $2}'; }
files=$(field files <<<"$ours") dct=$(field dct <<<"$ours") full=$(field full <<<"$ours")
p=$(field pil <<<"$pil") pd=$(field pil_draft <<<"$pil")
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
tj=$(dpkg-query -W -f='${Version}' libturbojpeg0 2>/dev/null || echo '?')
pilv=$(python3 -c 'import PIL; print(PIL.__version__)')
ratio=$(awk -v a="$dct" -v b="$p" 'BEGIN {printf "%.2f", a / b}')
out=tests/bench/results/bench_decode.md
if [[ ! -f $out ]]; then
  cat >"$out" <<'HEAD'
# bench_decode: decode + random-resized-crop + flip to 224x224, images/s per core

Written by tests/bench/bench_decode.sh; one row per run. Same photos, same
pipeline, same run, one pinned core, images per CPU-second. "ours" is
classify_augment_image (TurboJPEG with DCT scaling chosen from the crop, YCbCr
planes, bilinear crop-resize, only the crop converted to RGB); "ours full" a
full-size RGB decode and the same crop-resize; "PIL" torchvision's
RandomResizedCrop path on PIL; "PIL draft" PIL with its own DCT scaling
(Image.draft).

| date | machine | photos | ours | ours full | PIL | PIL draft | ours / PIL | libjpeg-turbo, Pillow |
|---|---|---|---|---|---|---|---|---|
HEAD
fi
echo "| $(date -u +%Y-%m-%d) | $cpu, $(nproc) cores | $files | $dct | $full | $p | $pd | ${ratio}x | $tj, $pilv |" >>"$out"
echo "bench_decode: ours $dct images/s, PIL $p images/s: ${ratio}x; row added to $out"
