#!/usr/bin/env bash
# Writes the fuzz seed corpora with the project's own tools (nothing binary is committed):
# usage: tests/fuzz/make_seeds.sh BUILD_DIR SRC_DIR OUT_DIR  ->  OUT_DIR/{token_dataset,checkpoint,config,safetensors,tokenizer_json}/
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); out=$3
rm -rf "$out"; mkdir -p "$out"/{token_dataset,checkpoint,config,safetensors,tokenizer_json}
out=$(cd "$out" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The tools are sanitized too: leaks of MPI's singleton start-up are not what the seeds are about.
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dp="$build/apps/data_prep"; gt="$build/apps/gpt_train"

# Token data sets: /train + /val splits (synth, u16), a train-only split, byte-level text.
"$dp" synth --vocab 16 --tokens 64 --val-tokens 16 --seed 1 --output "$out/token_dataset/synth.h5" >/dev/null
"$dp" synth --vocab 300 --tokens 32 --val-tokens 0 --seed 2 --output "$out/token_dataset/synth_train_only.h5" >/dev/null
printf 'to be or not to be, that is the question\n' >"$tmp/text.txt"
"$dp" text --input "$tmp/text.txt" --output "$out/token_dataset/text.h5" --val-fraction 0.25 >/dev/null

# A checkpoint of a 1-layer model after one step.
"$gt" --input "$out/token_dataset/synth.h5" --layers 1 --hidden 8 --heads 1 --seq-len 4 \
  --global-batch 1 --steps 1 --warmup 0 --threads 1 --peak-tflops 1 --log-every 1 \
  --checkpoint-dir "$tmp/ck" >/dev/null
cp "$tmp/ck/step_1.h5" "$out/checkpoint/step_1.h5"

# safetensors: that checkpoint exported by ckpt_tool export-hf in f32, bf16 and f16.
for dtype in f32 bf16 f16; do
  "$build/apps/ckpt_tool" export-hf "$tmp/ck/step_1.h5" --output "$tmp/hf_$dtype" --dtype $dtype >/dev/null
  cp "$tmp/hf_$dtype/model.safetensors" "$out/safetensors/$dtype.safetensors"
done

# Config files: the repository's examples and a few hand-written ones.
cp "$src"/inputs/*.ini "$out/config/"
printf 'input = data.h5\nlayers = 2\nlr = 3e-4\nseed = 7\nbeta1 = 0.8\ndevice = cpu\nverbose = true\n' >"$out/config/plain.ini"
printf '# comment\n[section]\nsteps = 10\n\ninput=x.h5\nresume = auto\nmetrics = m.jsonl\nval-input = v.h5\n' >"$out/config/section.ini"
printf 'input = a.h5\ninput = b.h5\ngrad-clip = 0\nbucket-mb = 1.5\nzero = 3\ndp = 2\n' >"$out/config/repeat.ini"

# tokenizer.json: small byte-level BPEs in the GPT-2 and Llama-3 forms (merges "a b" and ["a", "b"]).
alphabet='"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5'
added='"added_tokens": [{"id": 6, "content": "<s>", "special": true}]'
printf '{"model": {"type": "BPE", "vocab": {%s}, "merges": ["a b", "ab c"]}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, "decoder": {"type": "ByteLevel"}, %s}\n' \
  "$alphabet" "$added" >"$out/tokenizer_json/gpt2_style.json"
printf '{"model": {"type": "BPE", "ignore_merges": true, "vocab": {%s}, "merges": [["a", "b"], ["ab", "c"]]}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\\\p{L}+|\\\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}, "decoder": {"type": "ByteLevel"}, %s}\n' \
  "$alphabet" "$added" >"$out/tokenizer_json/llama3_style.json"
