#!/usr/bin/env bash
# data_prep import-megatron round trip: Megatron indexed data sets written by an independent numpy
# writer (tests/tools/make_megatron_dataset.py), uint16 and int32 (several sequences a document, an
# empty document), import to exactly the expected tokens and /doc_offsets (read back with h5py),
# pass `data_prep verify`, split one document's tail into /val, carry a --tokenizer that decodes them,
# and gpt_train runs 2 steps on one.
set -euo pipefail
source "$(dirname "$0")/../tools/script_prelude.sh"
script_args "$@"
need_apps data_prep gpt_train
need_debian_python numpy:python3-numpy h5py:python3-h5py
make_scratch megatron_import
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_mg="$py $src/tests/tools/make_megatron_dataset.py"

# Four documents: two sequences, one, none (dropped), three; ids up to 999 (vocab 1000).
docs='[[[1, 2, 3], [4, 5]], [[999, 0, 7, 8]], [], [[10], [11, 12], [13, 14, 15]]]'
expect_train='[1, 2, 3, 4, 5, 999, 0, 7, 8, 10, 11, 12, 13, 14, 15]'
expect_offsets='[0, 5, 9]'

check() {  # FILE.h5 SPLIT TOKENS OFFSETS VOCAB
  "$py" - "$@" <<'EOF'
import json, sys
import h5py
path, split, tokens, offsets, vocab = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5])
with h5py.File(path, "r") as f:
    got = f[f"/{split}/tokens"][:].tolist()
    got_off = f[f"/{split}/doc_offsets"][:].tolist()
    if got != tokens: sys.exit(f"FAIL: {path} /{split}/tokens = {got}, expected {tokens}")
    if got_off != offsets: sys.exit(f"FAIL: {path} /{split}/doc_offsets = {got_off}, expected {offsets}")
    if int(f.attrs["vocab_size"]) != vocab: sys.exit(f"FAIL: {path} vocab_size = {f.attrs['vocab_size']}, expected {vocab}")
    want = "uint16" if vocab <= 65536 else "uint32"
    if f[f"/{split}/tokens"].dtype != want: sys.exit(f"FAIL: {path} tokens are {f[f'/{split}/tokens'].dtype}, expected {want}")
EOF
}

for dtype in uint16 int32; do
  $make_mg --prefix "$tmp/$dtype" --dtype $dtype --docs "$docs"
  out=$("$build/apps/data_prep" import-megatron --input "$tmp/$dtype" --vocab-size 1000 --output "$tmp/$dtype.h5")
  echo "$out"
  grep -q "15 train and 0 val tokens in 3 and 0 documents (from 6 sequences, $dtype, vocab 1000); 1 empty documents dropped" <<<"$out" \
    || { echo "FAIL: unexpected summary for $dtype: $out"; exit 1; }
  check "$tmp/$dtype.h5" train "$expect_train" "$expect_offsets" 1000
  "$build/apps/data_prep" verify "$tmp/$dtype.h5" >/dev/null || { echo "FAIL: data_prep verify of $dtype.h5"; exit 1; }
done

# A vocabulary past uint16 (ids stored as uint32), int32 ids above 65535.
$make_mg --prefix "$tmp/wide" --dtype int32 --docs '[[[70000, 1]], [[2, 99999]]]'
"$build/apps/data_prep" import-megatron --input "$tmp/wide" --vocab-size 100000 --output "$tmp/wide.h5" >/dev/null
check "$tmp/wide.h5" train '[70000, 1, 2, 99999]' '[0, 2]' 100000

# One document: its last quarter is /val (as data_prep text splits one file).
$make_mg --prefix "$tmp/one" --dtype uint16 --docs '[[[1, 2, 3, 4, 5], [6, 7, 8]]]'
"$build/apps/data_prep" import-megatron --input "$tmp/one" --vocab-size 16 --val-fraction 0.25 --output "$tmp/one.h5" >/dev/null
check "$tmp/one.h5" train '[1, 2, 3, 4, 5, 6]' '[0]' 16
check "$tmp/one.h5" val '[7, 8]' '[0]' 16

# --tokenizer: a SentencePiece model (Debian's spm_train) travels into the data set and decodes its
# ids; a --vocab-size below the tokenizer's is refused.
command -v spm_train >/dev/null || { echo "FAIL: spm_train not found (Debian's sentencepiece: jobscripts/install_deps.sh)"; exit 1; }
spm_train --input "$src/README.md" --model_prefix "$tmp/spm" --vocab_size 200 --model_type bpe --minloglevel 2 >/dev/null 2>&1 \
  || { echo "FAIL: spm_train failed"; exit 1; }
ids=$(printf 'hello world\n' | spm_encode --model "$tmp/spm.model" --output_format id | tr ' ' ',')
$make_mg --prefix "$tmp/spm_corpus" --dtype uint16 --docs "[[[${ids}]], [[${ids}]]]"
"$build/apps/data_prep" import-megatron --input "$tmp/spm_corpus" --vocab-size 200 --tokenizer "$tmp/spm.model" \
  --output "$tmp/spm.h5" >/dev/null
"$py" -c "import h5py, sys; a = h5py.File(sys.argv[1], 'r').attrs; sys.exit(0 if a['tokenizer'] == 'sentencepiece' and a['tokenizer_file'] == 'spm.model' else 'FAIL: tokenizer attributes ' + str(dict(a)))" "$tmp/spm.h5"
decoded=$("$build/apps/data_prep" decode --input "$tmp/spm.h5" --split train --start 0 --count "$(tr ',' '\n' <<<"$ids" | wc -l)")
[[ $decoded == "hello world" ]] || { echo "FAIL: decoded '$decoded', expected 'hello world'"; exit 1; }
if "$build/apps/data_prep" import-megatron --input "$tmp/spm_corpus" --vocab-size 100 --tokenizer "$tmp/spm.model" \
    --output "$tmp/small.h5" 2>"$tmp/small.err"; then echo "FAIL: --vocab-size 100 below the tokenizer's 200 accepted"; exit 1; fi
grep -q "smaller than the vocabulary of --tokenizer" "$tmp/small.err" || { cat "$tmp/small.err"; echo "FAIL: wrong error"; exit 1; }

# gpt_train trains 2 steps on an imported set of 2000 tokens in 20 documents.
"$py" - "$tmp/train_docs.json" <<'EOF'
import json, sys
docs = [[[(d * 7 + i) % 50 for i in range(60)], [(d + i) % 50 for i in range(40)]] for d in range(20)]
open(sys.argv[1], "w").write(json.dumps(docs))
EOF
$make_mg --prefix "$tmp/corpus" --dtype uint16 --docs "$(cat "$tmp/train_docs.json")"
"$build/apps/data_prep" import-megatron --input "$tmp/corpus" --vocab-size 50 --val-fraction 0.2 --output "$tmp/corpus.h5"
"$build/apps/gpt_train" --input "$tmp/corpus.h5" --layers 1 --hidden 16 --heads 2 --seq-len 16 --global-batch 2 \
  --threads 1 --steps 2 > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; echo "FAIL: gpt_train on the imported set"; exit 1; }
grep -q "step 2/2 .*loss [0-9]" "$tmp/train.log" || { cat "$tmp/train.log"; echo "FAIL: gpt_train did not report step 2"; exit 1; }

echo "PASS: megatron import round trip"
keep=0
