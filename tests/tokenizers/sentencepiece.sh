#!/usr/bin/env bash
# CTest `oracle`: data_prep's SentencePiece tokens against Debian's own SentencePiece tools: a BPE
# model trained with spm_train on the text; data_prep's ids equal spm_encode's, line by line with the
# EOS id after each line (spm_encode --extra_options=eos), and data_prep decode equals spm_decode,
# also once the model file is gone (the data set carries it).
# usage: sentencepiece.sh <build_dir> <source_dir> --text PATH/tinyshakespeare.txt
set -euo pipefail
if [[ $# -ne 4 || $3 != --text ]]; then
  echo "usage: $0 <build_dir> <source_dir> --text PATH/tinyshakespeare.txt" >&2
  exit 2
fi
build=$1 text=$4
data_prep=$build/apps/data_prep
[[ -f $text ]] || { echo "FAIL: the text $text is missing (configure with -DTESSERA_TINYSHAKESPEARE=PATH)" >&2; exit 1; }
[[ -x $data_prep ]] || { echo "FAIL: $data_prep not found (build it first)" >&2; exit 1; }
for tool in spm_train spm_encode spm_decode; do
  command -v $tool >/dev/null || { echo "FAIL: $tool not found (Debian: apt-get install sentencepiece)" >&2; exit 1; }
done
/usr/bin/python3 -c "import h5py" 2>/dev/null || { echo "FAIL: python3 cannot import h5py (Debian: python3-h5py)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

spm_train --input="$text" --model_prefix="$work/shakespeare" --vocab_size=2000 --model_type=bpe \
  --num_threads=2 --minloglevel=2 >"$work/train.log" 2>&1 || { cat "$work/train.log"; echo "FAIL: spm_train" >&2; exit 1; }
"$data_prep" text --input "$text" --tokenizer "$work/shakespeare.model" --output "$work/data.h5" --val-fraction 0
spm_encode --model="$work/shakespeare.model" --output_format=id --extra_options=eos <"$text" >"$work/spm_ids.txt"
/usr/bin/python3 - "$work/data.h5" "$work/spm_ids.txt" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    got = [int(x) for x in f["/train/tokens"][()]]
    vocab, kind = int(f.attrs["vocab_size"]), f.attrs["tokenizer"]
want = [int(t) for line in open(sys.argv[2]) for t in line.split()]
assert vocab == 2000, f"FAIL: vocab_size {vocab}, the model's 2000"
assert kind in ("sentencepiece", b"sentencepiece"), f"FAIL: tokenizer attribute {kind!r}"
if got != want:
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    sys.exit(f"FAIL: data_prep's ids differ from spm_encode's at {i} of {len(want)}: {got[i:i+8]} vs {want[i:i+8]}")
print(f"ok: {len(got)} ids equal spm_encode's on {sum(1 for _ in open(sys.argv[2]))} lines")
PY

# decode: spm_decode of each line's ids (EOS dropped), the lines joined by newlines.
sed 's/ *\b2$//; s/^2$//' "$work/spm_ids.txt" | spm_decode --model="$work/shakespeare.model" --input_format=id \
  >"$work/spm_text.txt"
rm "$work/shakespeare.model"
"$data_prep" decode --input "$work/data.h5" >"$work/decoded.txt"
cmp "$work/decoded.txt" "$work/spm_text.txt" ||
  { echo "FAIL: data_prep decode differs from spm_decode (the model file removed: decoded with the stored copy)" >&2; exit 1; }
echo "ok: data_prep decode, with the model stored in the data set, equals spm_decode ($(wc -c <"$work/decoded.txt") bytes)"
echo "PASS: data_prep's SentencePiece ids and text equal the SentencePiece tools'"
