#!/bin/bash
# Makes (once) the Python environment of the Hugging Face oracle tests (tests/oracle/hf_interop.sh,
# tests/tokenizers/hf_bpe.sh): Debian's python3 with its torch 1.13, numpy and h5py visible, plus
# pinned transformers, safetensors and tokenizers from PyPI, versions that still run on torch 1.13.
# Tests that run side by side make it once (a lock). Prints the environment's python on stdout; any
# failure exits 1 naming what is missing (never a silent pass).
# usage: tests/tools/hf_venv.sh [DIR]   (default ${TESSERA_HF_VENV}, else ./hf-venv)
set -euo pipefail
dir=${1:-${TESSERA_HF_VENV:-$PWD/hf-venv}}
pins=(transformers==4.40.2 safetensors==0.4.3 tokenizers==0.19.1)
py=$dir/bin/python
die() { echo "error: hf_venv.sh: $*" >&2; exit 1; }
/usr/bin/python3 -c "import torch, numpy, h5py" 2>/dev/null ||
  die "Debian's python3-torch, python3-numpy and python3-h5py are needed (jobscripts/install_deps.sh test)"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
installed="import transformers, safetensors, tokenizers, torch
assert (transformers.__version__, safetensors.__version__, tokenizers.__version__) == ('4.40.2', '0.4.3', '0.19.1')"
if ! "$py" -c "$installed" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$dir" >&2 ||
    die "cannot create the virtual environment $dir (python3-venv: jobscripts/install_deps.sh test)"
  "$py" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2 ||
    die "pip could not install ${pins[*]} into $dir (is PyPI reachable?)"
fi
"$py" -c "$installed" 2>/dev/null || die "$dir lacks ${pins[*]} (or torch)"
echo "$py"
