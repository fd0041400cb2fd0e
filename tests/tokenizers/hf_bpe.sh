#!/usr/bin/env bash
# CTest `oracle`: data_prep's byte-level BPE (a Hugging Face tokenizer.json) against the `tokenizers`
# package from PyPI, GPT-2, Llama-3 and Qwen-2 (NFC) styles, trained on the text given (hf_bpe_oracle.py).
# usage: hf_bpe.sh <build_dir> <source_dir> --text PATH/tinyshakespeare.txt
#   the environment: ${TESSERA_HF_VENV:-<build_dir>/hf-venv}, made by tests/tools/hf_venv.sh
set -euo pipefail
if [[ $# -ne 4 || $3 != --text ]]; then
  echo "usage: $0 <build_dir> <source_dir> --text PATH/tinyshakespeare.txt" >&2
  exit 2
fi
build=$1 src=$2 text=$4
[[ -f $text ]] || { echo "FAIL: the text $text is missing (configure with -DTESSERA_TINYSHAKESPEARE=PATH)" >&2; exit 1; }
[[ -x $build/apps/data_prep ]] || { echo "FAIL: $build/apps/data_prep not found (build it first)" >&2; exit 1; }
py=$("$src/tests/tools/hf_venv.sh" "${TESSERA_HF_VENV:-$build/hf-venv}") ||
  { echo "FAIL: no Python environment with Hugging Face's tokenizers (see the error above)" >&2; exit 1; }
"$py" -c "import h5py" 2>/dev/null || { echo "FAIL: $py cannot import h5py (Debian: python3-h5py)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for style in gpt2 llama3 qwen2; do
  "$py" "$src/tests/tokenizers/hf_bpe_oracle.py" --data-prep "$build/apps/data_prep" --text "$text" --style $style \
    --work "$work/$style"
done
echo "PASS: data_prep's byte-level BPE gives the tokenizers package's ids, and decode gives the text back"
