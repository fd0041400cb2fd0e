#!/usr/bin/env bash
# The tokenizer travels from the data set into every checkpoint gpt_train and moe_train write (a
# SentencePiece model made here with Debian's spm_train; byte-level data records "bytes"), in the
# data set's own layout, checksum and bytes identical, under one rank and under tp 2 x pp 2;
# ckpt_tool inspect shows it and verify covers it. Resuming or --init-from with data of another
# tokenizer is refused naming both checksums; data of the same tokenizer resumes.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v spm_train >/dev/null || { echo "FAIL: spm_train not found (Debian's sentencepiece: jobscripts/install_deps.sh)"; exit 1; }
/usr/bin/python3 -c "import h5py" 2>/dev/null || { echo "FAIL: Debian's python3-h5py is needed"; exit 1; }

cat "$src/README.md" "$src/docs/"*.md > "$tmp/text.txt"
for kind in bpe unigram; do
  spm_train --input "$tmp/text.txt" --model_prefix "$tmp/$kind" --vocab_size 300 --model_type $kind \
    --minloglevel 2 >/dev/null 2>&1 || { echo "FAIL: spm_train --model_type $kind failed"; exit 1; }
  "$build/apps/data_prep" text --input "$tmp/text.txt" --tokenizer "$tmp/$kind.model" --output "$tmp/$kind.h5" >/dev/null
done
"$build/apps/data_prep" text --input "$tmp/text.txt" --output "$tmp/bytes.h5" >/dev/null
model=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 4 --threads 1)

# The checkpoint's tokenizer attributes and /tokenizer_file equal the data set's.
same_tokenizer() {  # DATA.h5 CHECKPOINT.h5
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys
import h5py
data, ck = (h5py.File(p, "r") for p in sys.argv[1:3])
keys = [k for k in ("tokenizer", "tokenizer_file", "tokenizer_checksum") if k in data.attrs]
for k in keys:
    assert ck.attrs.get(k) == data.attrs[k], f"{sys.argv[2]}: {k} = {ck.attrs.get(k)!r}, data set {data.attrs[k]!r}"
if "tokenizer_file" in data:
    assert ck["tokenizer_file"][...].tobytes() == data["tokenizer_file"][...].tobytes(), "the stored bytes differ"
print(f"{sys.argv[2].split('/')[-2]}: carries the data set's tokenizer ({data.attrs['tokenizer']})")
EOF
}

"$build/apps/gpt_train" --input "$tmp/bpe.h5" "${model[@]}" --steps 2 --checkpoint-dir "$tmp/bpe-one" >/dev/null
same_tokenizer "$tmp/bpe.h5" "$tmp/bpe-one/step_2.h5"
mpirun -np 4 "$build/apps/gpt_train" --input "$tmp/bpe.h5" "${model[@]}" --steps 2 --tp 2 --pp 2 --micro-batch 2 \
  --checkpoint-dir "$tmp/bpe-tp2pp2" >/dev/null
same_tokenizer "$tmp/bpe.h5" "$tmp/bpe-tp2pp2/step_2.h5"
"$build/apps/moe_train" --input "$tmp/bpe.h5" "${model[@]}" --experts 2 --steps 1 --checkpoint-dir "$tmp/bpe-moe" >/dev/null
same_tokenizer "$tmp/bpe.h5" "$tmp/bpe-moe/step_1.h5"
"$build/apps/gpt_train" --input "$tmp/bytes.h5" "${model[@]}" --steps 1 --checkpoint-dir "$tmp/bytes-one" >/dev/null
same_tokenizer "$tmp/bytes.h5" "$tmp/bytes-one/step_1.h5"

"$build/apps/ckpt_tool" verify "$tmp/bpe-tp2pp2/step_2.h5"
sum=$(/usr/bin/python3 -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['tokenizer_checksum'])" "$tmp/bpe.h5")
other=$(/usr/bin/python3 -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['tokenizer_checksum'])" "$tmp/unigram.h5")
"$build/apps/ckpt_tool" inspect "$tmp/bpe-one/step_2.h5" > "$tmp/inspect.txt"
grep -qF "tokenizer: sentencepiece bpe.model (checksum $sum)" "$tmp/inspect.txt" ||
  { cat "$tmp/inspect.txt"; echo "FAIL: ckpt_tool inspect does not show the tokenizer"; exit 1; }
echo "ckpt_tool inspect: tokenizer: sentencepiece bpe.model (checksum $sum)"

refused() {  # EXPECTED... -- options...
  local want=()
  while [ "$1" != "--" ]; do want+=("$1"); shift; done
  shift
  if "$build/apps/gpt_train" "$@" >"$tmp/out" 2>&1; then echo "FAIL: accepted: $*"; exit 1; fi
  for w in "${want[@]}"; do grep -qF -- "$w" "$tmp/out" || { echo "FAIL: '$w' not in:"; cat "$tmp/out"; exit 1; }; done
  echo "refused as expected: ${want[*]}"
}
refused "was trained on ids of tokenizer sentencepiece bpe.model (checksum $sum)" "unigram.model (checksum $other)" -- \
  --input "$tmp/unigram.h5" "${model[@]}" --steps 3 --resume "$tmp/bpe-one/step_2.h5"
refused "checksum $sum" "checksum $other" -- --input "$tmp/unigram.h5" --init-from "$tmp/bpe-one/step_2.h5" --steps 1 --threads 1
# The same tokenizer resumes (the run's own data, and here another copy of it).
cp "$tmp/bpe.h5" "$tmp/bpe-copy.h5"
"$build/apps/gpt_train" --input "$tmp/bpe-copy.h5" "${model[@]}" --steps 3 --resume "$tmp/bpe-one/step_2.h5" \
  --checkpoint-dir "$tmp/bpe-one" >/dev/null
same_tokenizer "$tmp/bpe.h5" "$tmp/bpe-one/step_3.h5"
echo "checkpoint_tokenizer: all checks passed"
