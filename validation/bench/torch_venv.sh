#!/usr/bin/env bash
# Makes (or reuses) the virtual environment with a current PyTorch from PyPI that the benchmarks
# compare against beside Debian's python3-torch 1.13: prints its python's path.
# usage: validation/bench/torch_venv.sh [DIR]   (default $TESSERA_BENCH_VENV, else <repo>/.venv-bench)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${1:-${TESSERA_BENCH_VENV:-$repo/.venv-bench}}
if [[ ! -x $venv/bin/python ]]; then
  # Debian's interpreter needs python3-venv for this; another python3 on PATH may have it built in.
  py=python3
  if ! "$py" -m venv --help >/dev/null 2>&1; then
    "$repo/jobscripts/install_deps.sh" validation >&2
    py=/usr/bin/python3
  fi
  echo "creating $venv with PyTorch from PyPI (a few GB)" >&2
  "$py" -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  "$venv/bin/pip" install -q --index-url https://pypi.org/simple torch numpy >&2
fi
echo "$venv/bin/python"
