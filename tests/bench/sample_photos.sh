#!/usr/bin/env bash
# Prints the paths of the sample photos the input benchmarks decode, one a
# line, sorted: the JPEGs of Debian's opencv-doc sample data and of
# scikit-learn's sample images (Debian's python3-sklearn or pip's). Prints
# nothing when neither is installed.
# Usage: tests/bench/sample_photos.sh
set -uo pipefail
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
for dir in /usr/share/doc/opencv-doc/examples/data /usr/lib/python3/dist-packages/sklearn/datasets/images \
  /usr/local/lib/python3*/dist-packages/sklearn/datasets/images "$site/sklearn/datasets/images"; do
  [[ -d $dir ]] || continue
  find "$dir" -maxdepth 1 -name '*.jpg'
done | sort -u
