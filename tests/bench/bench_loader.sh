#!/usr/bin/env bash
# Loader throughput: LMDB -> decode -> random-resized-crop + flip 224x224 ->
# pinned batches (-> GPU copy where there is one), on ~500x375 JPEGs at
# quality 90 cut from real photos (opencv-doc and scikit-learn sample photos;
# patterned images when they are missing), with grain that brings them to
# ImageNet's ~110 KB a JPEG. Appends a dated row to
# tests/bench/results/bench_loader.md. The target is 5,000 images/s with 16
# threads on the GPU machine.
# Usage: tests/bench/bench_loader.sh [BUILD_DIR] [THREADS] [BATCHES]
set -euo pipefail
build=${1:-build} threads=${2:-$(nproc)} batches=${3:-40}
cd "$(dirname "$0")/../.."
list=$(mktemp)
trap 'rm -f "$list"' EXIT
bash tests/bench/sample_photos.sh >"$list"
res=$("$build/bench/bench_loader" --threads="$threads" --batches="$batches" --list="$list")
echo "$res"
field() { awk -v k="$1" '$1 == k {$1 = ""; sub(/^ /, ""); print}' <<<"$res"; }
out=tests/bench/results/bench_loader.md
if [[ ! -f $out ]]; then
  cat >"$out" <<'HEAD'
# bench_loader: classification loader throughput, images/s

Written by tests/bench/bench_loader.sh; one row per run. 224x224 random-resized-
crop + flip batches of 128 from an LMDB of 512 generated JPEGs, trainer taking
batches as fast as they come, so the loader is the limit and "trainer waiting"
(the share of the timed stretch spent blocked in loader_next) is near 1 by
design. "data" gives the mean JPEG size: the photos are smoother than
ImageNet's (~110 KB at ~400x350), so decode is cheaper here per image. Target:
5,000 images/s with 16 threads on the GPU machine.

| date | device | CPU cores | threads | data | images/s | trainer waiting |
|---|---|---|---|---|---|---|
HEAD
fi
echo "| $(date -u +%Y-%m-%d) | $(field device) | $(nproc) | $(field threads) | $(field data) | $(field images/s) | $(field wait_fraction) |" >>"$out"
echo "bench_loader: $(field images/s) images/s with $threads threads; row added to $out"
