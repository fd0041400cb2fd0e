#!/bin/bash
# Makes (once) the Python environment of the tokenizer oracle tests: Debian's python3 with its own
# packages visible, plus Hugging Face's `tokenizers` from PyPI at a pinned version (the one that
# tests/tools/hf_venv.sh's transformers pin uses, so the two scripts share one environment).
# Prints the environment's python on stdout; any failure exits 1 naming what is missing.
# usage: tests/tools/tokenizers_venv.sh [DIR]   (default ${TESSERA_HF_VENV}, else ./hf-venv)
set -euo pipefail
dir=${1:-${TESSERA_HF_VENV:-$PWD/hf-venv}}
pin=tokenizers==0.19.1
py=$dir/bin/python
die() { echo "error: tokenizers_venv.sh: $*" >&2; exit 1; }
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"  # tests that run side by side make the environment once
flock 9
if ! "$py" -c "import tokenizers; assert tokenizers.__version__ == '${pin#*==}'" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$dir" >&2 ||
    die "cannot create the virtual environment $dir (Debian's python3-venv: jobscripts/install_deps.sh test)"
  "$py" -m pip install --quiet --disable-pip-version-check "$pin" >&2 ||
    die "pip could not install $pin into $dir (is PyPI reachable?)"
fi
"$py" -c "import tokenizers" 2>/dev/null || die "$dir lacks the tokenizers package"
echo "$py"
