#!/usr/bin/env bash
# Fills the folder a GPU session carries to the device machine (git-ignored
# .carry by default) with what that machine lacks, within the 64 MiB a call
# may carry:
#   build.tar.xz        the built programs (BUILD/bin, tests, bench; ~30 MB
#                       of CUDA fatbins that xz packs into about 1 MB)
#   libs.tar.xz         Debian's libraries the programs link that the GPU
#                       image may lack: liblmdb and libturbojpeg (it lacks
#                       them), OpenBLAS with libgfortran, libpng, zlib - all
#                       but glibc, the C++ runtime, CUDA's and Open MPI's
#                       (those must be the machine's own); ~5 MB packed
#   bin/mdb_stat        lmdb-utils' tool, which a converter test counts entries with
#   mlperf_logging-*.whl              the compliance checker (logs/result.py;
#                                     its dependencies are on that machine)
#   fashion-mnist/      Debian's dataset-fashion-mnist IDX files (30 MB): the
#                       small and medium image data sets are made from them
#   opencv-photos/      opencv-doc's sample JPEGs and PNGs (10 MB): the
#                       detection data sets' backgrounds
#   transformer-small/  the small translation data set, prepared (1 MB): it
#                       is made from Debian's trans-de-en (25 MB), which the
#                       GPU machine lacks
# tests/bench/gpu_session.sh unpacks and installs all of it there.
# Usage: tests/bench/prepare_carry.sh [BUILD_DIR] [DIR]
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
mkdir -p "$dir/fashion-mnist"
cp /usr/share/datasets/fashion-mnist/*.gz "$dir/fashion-mnist/"
mkdir -p "$dir/opencv-photos"
cp /usr/share/doc/opencv-doc/examples/data/*.{jpg,png} "$dir/opencv-photos/"
rm -rf "$dir/transformer-small"
bash translation/prepare_data.sh small "$dir/transformer-small" "$build" >/dev/null
rm -rf "$dir/transformer-small/raw"
rm -rf "$dir/lib"  # what a local run of gpu_session.sh unpacked
tar -tJf "$dir/libs.tar.xz" | sed "s|^./||" | grep . | tr "\n" " "; echo
du -sh "$dir"
