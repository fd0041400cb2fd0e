#!/usr/bin/env bash
# CTest `oracle.hf_interop`: Hugging Face's own packages as the oracle of ckpt_tool import-hf and
# export-hf. Small random GPT-2, Llama (2 kv heads of 4) and Mistral models, saved by transformers
# (sharded and unsharded, f32 and bf16), import into tessera; gpt_train's step-1 loss on a batch
# equals transformers' (relative 1e-5) on one rank and under tp2 x pp2; export-hf writes a folder
# that safetensors reads back as the original bytes, and that from_pretrained loads with the same
# loss and greedy continuation; tessera re-imports its export bit for bit. A Mixtral does the same
# under moe_train (one rank and ep 2 x dp 2). Fine-tuning: a GPT-2 with
# a byte-level BPE tokenizer and 32 positions imports with its tokenizer; data tokenised by it
# trains under gpt_train --init-from (no model options, --seq-len 16: half the position table) with
# a step-1 loss equal to transformers' on that batch, on one rank and under tp2 x pp2; export-hf of
# the fine-tuned checkpoint writes the tokenizer files back byte for byte, and AutoTokenizer reads them.
# usage: hf_interop.sh <build_dir> <source_dir>   (environment: TESSERA_HF_VENV, default <build>/hf-venv)
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 <build_dir> <source_dir>" >&2
  exit 2
fi
build=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
for exe in data_prep gpt_train ckpt_tool; do
  [[ -x $build/apps/$exe ]] || { echo "FAIL: $build/apps/$exe not found (build it first)" >&2; exit 1; }
done
py=$(TESSERA_HF_VENV=${TESSERA_HF_VENV:-$build/hf-venv} "$src/tests/tools/hf_venv.sh") ||
  { echo "FAIL: the Hugging Face environment could not be made (above)" >&2; exit 1; }
mpirun=${TESSERA_MPIEXEC:-mpirun}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-hf.XXXXXX")
keep=1
cleanup() { if [[ $keep -eq 0 ]]; then rm -rf "$tmp"; else echo "hf_interop: files kept in $tmp" >&2; fi; }
trap cleanup EXIT

run() {
  echo "+ $*"
  local rc=0
  "$@" >"$tmp/log" 2>&1 || rc=$?
  grep -v "Loading checkpoint shards" "$tmp/log" | grep -E "^(ok|FAIL|export|wrote|error)" || true
  if [[ $rc -ne 0 ]]; then
    cat "$tmp/log"
    echo "FAIL: command exited with status $rc: $*" >&2
    exit 1
  fi
}

vocab=96
seq=16
run "$build/apps/data_prep" synth --vocab $vocab --tokens 20000 --seed 3 --output "$tmp/data.h5"
train=(--input "$tmp/data.h5" --seq-len $seq --global-batch 4 --micro-batch 4 --steps 1 --warmup 0 --threads 1)
llama_flags=(--arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --norm-eps 1e-5 --rope-theta 5000)
gpt2_flags=(--arch gpt2 --layers 2 --hidden 32 --heads 4)

# case NAME TYPE DTYPE SHARD TIED SEED FLAGS...: make, import, loss on one rank and tp2 x pp2, export,
# check the export with transformers and safetensors, re-import it bit for bit.
case_() {
  local name=$1 type=$2 dtype=$3 shard=$4 tied=$5 seed=$6
  shift 6
  local d=$tmp/$name
  echo "== $name: $type, $dtype, ${shard:-one file}${tied:+, tied head}"
  run "$py" "$src/tests/oracle/hf_oracle.py" make --type "$type" --out "$d/hf" --vocab $vocab --seq $seq --dtype "$dtype" \
      --seed "$seed" ${shard:+--shard "$shard"} $tied
  if [[ -n $shard && ! -f $d/hf/model.safetensors.index.json ]]; then
    echo "FAIL: $name: transformers did not shard the model (no index)" >&2
    exit 1
  fi
  run "$build/apps/ckpt_tool" import-hf "$d/hf" --output "$d/imported.h5"
  run "$build/apps/gpt_train" "$@" "${train[@]}" --init-from "$d/imported.h5" --metrics "$d/one.jsonl" --dump "$d/dump.h5"
  run "$mpirun" -np 4 "$build/apps/gpt_train" "$@" "${train[@]}" --init-from "$d/imported.h5" --tp 2 --pp 2 \
      --metrics "$d/tp2pp2.jsonl"
  run "$py" "$src/tests/oracle/hf_oracle.py" loss --model "$d/hf" --dump "$d/dump.h5" --metrics "$d/one.jsonl" "$d/tp2pp2.jsonl"
  run "$build/apps/ckpt_tool" export-hf "$d/imported.h5" --output "$d/exported" ${shard:+--max-shard-size "$shard"}
  run "$py" "$src/tests/oracle/hf_oracle.py" export --orig "$d/hf" --exported "$d/exported" --dump "$d/dump.h5" --same-bytes
  run "$build/apps/ckpt_tool" import-hf "$d/exported" --output "$d/reimported.h5"
  run "$py" "$src/tests/tools/compare_checkpoints.py" "$d/imported.h5" "$d/reimported.h5" --rtol 0 --atol 0
}

case_ gpt2_f32 gpt2 f32 "" "" 1 "${gpt2_flags[@]}"
case_ gpt2_bf16_sharded gpt2 bf16 20KB "" 2 "${gpt2_flags[@]}"
case_ llama_f32_sharded llama f32 20KB "" 3 "${llama_flags[@]}"
case_ llama_bf16_tied llama bf16 "" --tied 4 "${llama_flags[@]}" --tie-embeddings
case_ mistral_f32 mistral f32 "" "" 5 "${llama_flags[@]}"

# Resuming an imported llama (rotary base 5000) with gpt_train's default base is refused, naming both.
if "$build/apps/gpt_train" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 "${train[@]}" \
    --resume "$tmp/llama_f32_sharded/imported.h5" > "$tmp/log" 2>&1; then
  echo "FAIL: resuming an imported llama with another rotary base was accepted" >&2; exit 1
fi
grep -qF "records rope_theta 5000 (hf.rope_theta), but this run computes with 10000: pass --rope-theta 5000" "$tmp/log" ||
  { cat "$tmp/log"; echo "FAIL: the refusal does not name both rotary bases" >&2; exit 1; }
echo "ok: resuming an imported llama with another rotary base is refused, naming both"

# Mixtral: a moe_llama of moe_train (4 SwiGLU experts in every block, top-2 gates renormalised),
# no token dropped and no auxiliary loss in the reported loss; one rank and ep 2 x dp 2 (4 ranks).
d=$tmp/mixtral_f32_sharded
echo "== mixtral_f32_sharded: mixtral -> import-hf -> moe_train --init-from -> export-hf"
run "$py" "$src/tests/oracle/hf_oracle.py" make --type mixtral --out "$d/hf" --vocab $vocab --seq $seq --seed 7 --shard 40KB
run "$build/apps/ckpt_tool" import-hf "$d/hf" --output "$d/imported.h5"
moe=(--input "$tmp/data.h5" --seq-len $seq --global-batch 4 --steps 1 --warmup 0 --threads 1 --init-from "$d/imported.h5"
     --aux-loss-coef 0 --z-loss-coef 0 --capacity-factor 0)
run "$build/apps/moe_train" "${moe[@]}" --micro-batch 4 --metrics "$d/one.jsonl" --dump "$d/dump.h5"
run "$mpirun" -np 4 "$build/apps/moe_train" "${moe[@]}" --ep 2 --micro-batch 1 --metrics "$d/ep2dp2.jsonl"
run "$py" "$src/tests/oracle/hf_oracle.py" loss --model "$d/hf" --dump "$d/dump.h5" --metrics "$d/one.jsonl" "$d/ep2dp2.jsonl"
run "$build/apps/ckpt_tool" export-hf "$d/imported.h5" --output "$d/exported" --max-shard-size 40KB
run "$py" "$src/tests/oracle/hf_oracle.py" export --orig "$d/hf" --exported "$d/exported" --dump "$d/dump.h5" --same-bytes
run "$build/apps/ckpt_tool" import-hf "$d/exported" --output "$d/reimported.h5"
run "$py" "$src/tests/tools/compare_checkpoints.py" "$d/imported.h5" "$d/reimported.h5" --rtol 0 --atol 0

# A checkpoint gpt_train trained (not imported) exports in bf16, sharded, with the rotary base and
# norm epsilon it does not record given as flags; transformers computes tessera's loss on it.
d=$tmp/trained
echo "== trained: gpt_train llama -> export-hf --dtype bf16 --max-shard-size 10KB -> transformers"
run "$build/apps/gpt_train" "${llama_flags[@]}" --input "$tmp/data.h5" --seq-len $seq --global-batch 4 --micro-batch 4 \
    --steps 2 --warmup 0 --lr 1e-2 --threads 1 --checkpoint-dir "$d/ck"
run "$build/apps/ckpt_tool" export-hf "$d/ck/step_2.h5" --output "$d/exported" --dtype bf16 --max-shard-size 10KB \
    --norm-eps 1e-5 --rope-theta 5000
[[ -f $d/exported/model.safetensors.index.json ]] || { echo "FAIL: export-hf did not shard past 10KB" >&2; exit 1; }
run "$build/apps/ckpt_tool" import-hf "$d/exported" --output "$d/reimported.h5"
run "$build/apps/gpt_train" "${llama_flags[@]}" "${train[@]}" --resume "$d/reimported.h5" --metrics "$d/one.jsonl" --dump "$d/dump.h5"
run "$py" "$src/tests/oracle/hf_oracle.py" loss --model "$d/exported" --dump "$d/dump.h5" --metrics "$d/one.jsonl"
run "$build/apps/ckpt_tool" export-hf "$d/reimported.h5" --output "$d/exported2"
run "$py" "$src/tests/oracle/hf_oracle.py" export --orig "$d/exported" --exported "$d/exported2" --dump "$d/dump.h5" --same-bytes

d=$tmp/finetune
echo "== finetune: gpt2 with a tokenizer -> import-hf -> gpt_train --init-from -> export-hf"
cat "$src/README.md" "$src/docs/"*.md > "$tmp/text.txt"
run "$py" "$src/tests/oracle/hf_oracle.py" make --type gpt2 --out "$d/hf" --vocab 320 --seq $seq --positions 32 --seed 6 \
    --tokenizer-text "$tmp/text.txt"
run "$build/apps/ckpt_tool" import-hf "$d/hf" --output "$d/imported.h5"
"$build/apps/ckpt_tool" inspect "$d/imported.h5" > "$d/inspect.txt"
grep -q "^tokenizer: hf-byte-level-bpe tokenizer.json (checksum " "$d/inspect.txt" ||
  { cat "$d/inspect.txt"; echo "FAIL: ckpt_tool inspect does not show the imported tokenizer" >&2; exit 1; }
run "$build/apps/data_prep" text --input "$tmp/text.txt" --tokenizer "$d/hf/tokenizer.json" --output "$d/data.h5"
ft=(--input "$d/data.h5" --seq-len $seq --global-batch 4 --micro-batch 4 --steps 2 --warmup 0 --threads 1)
run "$build/apps/gpt_train" "${ft[@]}" --init-from "$d/imported.h5" --metrics "$d/one.jsonl" --dump "$d/dump.h5" \
    --checkpoint-dir "$d/ck"
run "$mpirun" -np 4 "$build/apps/gpt_train" "${ft[@]}" --init-from "$d/imported.h5" --tp 2 --pp 2 --metrics "$d/tp2pp2.jsonl"
run "$py" "$src/tests/oracle/hf_oracle.py" loss --model "$d/hf" --dump "$d/dump.h5" --metrics "$d/one.jsonl" "$d/tp2pp2.jsonl"
run "$build/apps/ckpt_tool" export-hf "$d/ck/step_2.h5" --output "$d/exported"
run "$py" "$src/tests/oracle/hf_oracle.py" tokenizer --orig "$d/hf" --exported "$d/exported" --text "$tmp/text.txt"

keep=0
echo "hf_interop: all cases agree"
