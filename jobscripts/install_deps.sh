#!/usr/bin/env bash
# Installs the Debian packages tessera needs, only those missing (quiet when all are there).
# usage: jobscripts/install_deps.sh [build|test|validation]
#   test = build + what the test suite uses (matplotlib: validation/plot_metrics.py's test; the
#          SentencePiece tools: the tokenizer tests; python3-venv: the environment of the Hugging
#          Face oracles, tests/tools/hf_venv.sh, with transformers, safetensors and tokenizers from PyPI;
#          ccache: build.sh compiles through it, so the suite's three trees and a CI clone reuse objects);
#   validation = test + BLIS and tcmalloc for validation/
set -euo pipefail
what=${1:-build}
pkgs=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
      libboost-program-options-dev libopenblas-dev libopenblas0-openmp libdnnl-dev libgtest-dev
      nlohmann-json3-dev libpcre2-dev libsentencepiece-dev libutf8proc-dev zlib1g-dev)
case $what in build|test|validation) ;; *) echo "error: unknown part '$what' (build, test or validation)" >&2; exit 2 ;; esac
if [ "$what" != build ]; then
  pkgs+=(python3-torch python3-h5py python3-numpy python3-matplotlib slurmd slurmctld slurm-client munge libpmix-dev
        iproute2 sentencepiece python3-venv ccache)
  # the sanitizer and fuzz trees (tests/fuzz): clang, its libFuzzer/ASan runtimes, its OpenMP
  pkgs+=(clang libclang-rt-14-dev libomp-14-dev)
fi
[ "$what" = validation ] && pkgs+=(libblis-openmp-dev libtcmalloc-minimal4)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing missing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
