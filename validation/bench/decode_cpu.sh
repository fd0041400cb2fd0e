#!/usr/bin/env bash
# Decode benchmark of issue 34 on CPU: tessera's generate on a GPT-2 124M-shaped checkpoint (random
# weights from one gpt_train step: 12 layers, hidden 768, 12 heads, vocabulary 50257, 1024 positions)
# in f32, in bf16 (the same file under generate --weights bf16) and quantised to int8 and int4
# (ckpt_tool quantize --group-size 64 --quantize-head; and those under --weights bf16: bf16 products,
# and under --activations int8: int8 activations, integer products from 4 rows),
# against Hugging Face transformers' generate (KV cache, greedy, float32, a current PyTorch from
# PyPI) on the same weights written by ckpt_tool export-hf; side by side, 1 thread per process.
# Decode tokens/s at batch 1 and batch 32 (16-token prompts, --new-tokens greedy tokens), and
# batch 1 against the copy-bandwidth limit measured in the same run (bytes of the weights and KV
# cache read per token / bandwidth). Each run works in a new folder $OUT_DIR/decode_cpu.XXXXXX (nothing
# of an earlier run is touched); the table is results.txt there. Not a test.
#
# usage: decode_cpu.sh [--build DIR] [--new-tokens N] [--rounds R] [--venv DIR]
#   --build: default <repo>/build (apps/{data_prep,gpt_train,ckpt_tool,generate}, kernels/bench_quant_gemv)
#   --venv: the PyPI PyTorch environment (validation/bench/torch_venv.sh; transformers is added to it)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build; new_tokens=64; rounds=1; venv=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --new-tokens) new_tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $new_tokens =~ ^[0-9]+$ && $rounds =~ ^[0-9]+$ ]] || { echo "error: --new-tokens and --rounds take whole numbers" >&2; exit 2; }
(( new_tokens >= 8 )) || { echo "error: --new-tokens $new_tokens: at least 8" >&2; exit 2; }
(( rounds >= 1 )) || { echo "error: --rounds $rounds: at least 1" >&2; exit 2; }
for exe in apps/data_prep apps/gpt_train apps/ckpt_tool apps/generate kernels/bench_quant_gemv; do
  [[ -x $build/$exe ]] || { echo "error: $build/$exe not found (--build DIR)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import h5py' 2>/dev/null || { echo "error: /usr/bin/python3 cannot import h5py (python3-h5py)" >&2; exit 1; }
py=$("$here/torch_venv.sh" ${venv:+"$venv"})
if ! "$py" -c 'import transformers, safetensors' 2>/dev/null; then
  "$py" -m pip install -q --index-url https://pypi.org/simple transformers safetensors >&2 ||
    { echo "error: pip could not install transformers into $(dirname "$(dirname "$py")")" >&2; exit 1; }
fi

OUT_DIR=${OUT_DIR:-/tmp/tessera-bench}
mkdir -p "$OUT_DIR"
work=$(mktemp -d "$OUT_DIR/decode_cpu.XXXXXX")
mkdir -p "$work/runs"
one=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false)
L=12 C=768 H=12 T=1024 V=50257 prompt_len=16

# The model: one training step of batch 1 on synthetic tokens writes a checkpoint of the full shape.
"$build/apps/data_prep" synth --vocab $V --tokens 20000 --seed 1 --output "$work/data.h5" --overwrite >/dev/null
"${one[@]}" "$build/apps/gpt_train" --layers $L --hidden $C --heads $H --seq-len $T --input "$work/data.h5" \
  --global-batch 1 --micro-batch 1 --steps 1 --warmup 0 --threads 1 --peak-tflops 1 \
  --checkpoint-dir "$work/ck" --quiet >"$work/runs/train.log" 2>&1 || { tail -5 "$work/runs/train.log"; exit 1; }
ckpt=$work/ck/step_1.h5
for bits in 8 4; do
  "$build/apps/ckpt_tool" quantize "$ckpt" --bits $bits --group-size 64 --quantize-head --output "$work/int$bits.h5" \
    >"$work/runs/quantize_int$bits.log"
done
"$build/apps/ckpt_tool" export-hf "$ckpt" --output "$work/hf" >"$work/runs/export.log"

# Prompts: 32 of 16 random token ids (batch 1 takes the first).
/usr/bin/python3 - "$work" $V $prompt_len <<'EOF'
import json, random, sys
work, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
rows = [[rng.randrange(vocab) for _ in range(n)] for _ in range(32)]
for batch in (1, 32):
    with open(f"{work}/prompts_b{batch}.jsonl", "w") as f:
        f.writelines(json.dumps({"ids": r}) + "\n" for r in rows[:batch])
EOF

{
  echo "decode_cpu benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), $(nproc) cpus, 1 thread per process"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); L=$L C=$C H=$H V=$V positions=$T" \
       "prompt $prompt_len tokens, $new_tokens new tokens, rounds $rounds; build $build"
  echo "transformers $("$py" -c 'import transformers; print(transformers.__version__)')," \
       "torch $("$py" -c 'import torch; print(torch.__version__)')"
} | tee "$work/header.txt"
"${one[@]}" "$build/kernels/bench_quant_gemv" --reps 5 | tee "$work/runs/bandwidth.txt"

for ((r = 1; r <= rounds; ++r)); do
  for batch in 1 32; do
    for precision in f32 bf16 int8 int8-bf16 int8-a8 int4 int4-bf16 int4-a8; do  # each old path, then its new ones
      # bf16: the f32 file under --weights bf16; intN-bf16: the quantised file under it (bf16 products);
      # intN-a8: the quantised file under --activations int8 (integer products from 4 rows).
      weights=f32 activations=f32 file=$work/${precision%%-*}.h5
      [[ $precision == *bf16 ]] && weights=bf16
      [[ $precision == *-a8 ]] && activations=int8
      [[ $precision == f32 || $precision == bf16 ]] && file=$ckpt
      echo "+ [round $r] tessera $precision batch $batch"
      "${one[@]}" "$build/apps/generate" --checkpoint "$file" --weights $weights --activations $activations --prompts "$work/prompts_b$batch.jsonl" \
        --max-batch $batch --max-len $((prompt_len + new_tokens)) --max-new-tokens $new_tokens \
        --output "$work/runs/r${r}_b${batch}_$precision.jsonl" >"$work/runs/r${r}_b${batch}_$precision.log" 2>&1 ||
        { tail -3 "$work/runs/r${r}_b${batch}_$precision.log"; exit 1; }
      grep -m1 '^generate: decode:' "$work/runs/r${r}_b${batch}_$precision.log" ||
        { echo "error: generate printed no 'decode:' line ($work/runs/r${r}_b${batch}_$precision.log)" >&2; exit 1; }
    done
    echo "+ [round $r] transformers batch $batch"
    "${one[@]}" "$py" "$here/hf_decode_bench.py" --model "$work/hf" --prompts "$work/prompts_b$batch.jsonl" \
      --new-tokens $new_tokens --threads 1 --json "$work/runs/r${r}_b${batch}_hf.json" \
      >"$work/runs/r${r}_b${batch}_hf.log" 2>&1 || { tail -5 "$work/runs/r${r}_b${batch}_hf.log"; exit 1; }
  done
done
{ cat "$work/header.txt"; /usr/bin/python3 "$here/decode_cpu_report.py" "$work" $prompt_len $new_tokens; } \
  | tee "$work/results.txt"
echo "results: $work/results.txt"
