#!/usr/bin/env bash
# CPU benchmark of the Llama family: gpt_train --arch llama against the same model in PyTorch
# (torch_gpt_bench.py --arch llama), side by side: Debian's PyTorch 1.13 (eager) and a current
# PyTorch from PyPI (eager, and under torch.compile where it runs; validation/bench/torch_venv.sh
# makes its environment). A Llama of GPT-2-small size: 12 layers, hidden 768, 12 heads, 4 kv heads,
# vocabulary 32000, sequence 256, SwiGLU 2048. Each program runs --rounds times, alternating, its
# timed steps pooled; tokens/s, MFU against the sgemm rate of the machine, and tessera's ratio to
# the fastest PyTorch are printed and written to $OUT_DIR/llama_cpu_results.txt. Not a test.
#
# usage: llama_cpu.sh [--build DIR] [--precision fp32|bf16|all] [--steps N] [--rounds R] [--batch B]
#                     [--layers L] [--venv DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build; precisions=(fp32 bf16); steps=8; rounds=2; batch=2; layers=12; venv=""; warmup=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --precision) [[ $2 == all ]] && precisions=(fp32 bf16) || precisions=("$2"); shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
(( steps - warmup >= 3 )) || { echo "error: --steps $steps leaves fewer than 3 timed steps" >&2; exit 2; }
for exe in data_prep gpt_train; do
  [[ -x $build/apps/$exe ]] || { echo "error: $build/apps/$exe not found (--build DIR)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "error: /usr/bin/python3 cannot import torch (python3-torch)" >&2; exit 1; }
current_py=$("$here/torch_venv.sh" ${venv:+"$venv"})
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[[ -e $tcmalloc ]] || { echo "error: $tcmalloc not found (jobscripts/install_deps.sh validation)" >&2; exit 1; }
# The tuned environment of gpt_cpu.sh for every program: 2 threads, passive OpenMP waits, tcmalloc
# (PyTorch reallocates its temporaries every step).
run_env=(env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE LD_PRELOAD=$tcmalloc)

OUT_DIR=${OUT_DIR:-/tmp/tessera-bench}
work=$OUT_DIR/llama_cpu
mkdir -p "$work" "$OUT_DIR/data"
rm -f "$work"/*.json "$work"/*.jsonl "$work"/*.log
L=$layers C=768 H=12 K=4 T=256 V=32000 F=2048
data=$OUT_DIR/data/v$V.h5
if [[ ! -s $data ]]; then
  "$build/apps/data_prep" synth --vocab $V --tokens 2000000 --seed 1 --output "$data.tmp" --overwrite >/dev/null
  mv "$data.tmp" "$data"
fi
"${run_env[@]}" "$current_py" "$here/torch_gpt_bench.py" --sgemm 2048 --threads 2 --json "$work/sgemm.json" >/dev/null
model=(--layers $L --hidden $C --heads $H --kv-heads $K --ffn-hidden $F --seq-len $T)
{
  echo "llama_cpu benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), $(nproc) cpus, 2 threads"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); L=$L C=$C H=$H K=$K T=$T B=$batch V=$V F=$F"
  echo "steps $steps ($warmup warm-up) x $rounds rounds per program; build $build"
} | tee "$work/header.txt"
for precision in "${precisions[@]}"; do
  for ((r = 1; r <= rounds; ++r)); do
    echo "+ [$precision round $r] tessera"
    "${run_env[@]}" "$build/apps/gpt_train" --arch llama "${model[@]}" --input "$data" --global-batch $batch \
      --micro-batch $batch --steps $steps --lr 3e-4 --warmup 0 --threads 2 --precision $precision \
      --metrics "$work/${precision}_r${r}_tessera.jsonl" >"$work/${precision}_r${r}_tessera.log" 2>&1 ||
      { tail -3 "$work/${precision}_r${r}_tessera.log"; echo "warning: gpt_train failed" >&2; }
    for variant in torch113:/usr/bin/python3: torch-current:$current_py: torch-compile:$current_py:--compile; do
      IFS=: read -r name py flag <<<"$variant"
      echo "+ [$precision round $r] $name"
      "${run_env[@]}" "$py" "$here/torch_gpt_bench.py" --arch llama "${model[@]}" --batch $batch --vocab $V \
        --steps $steps --warmup $warmup --threads 2 --precision $precision $flag \
        --json "$work/${precision}_r${r}_$name.json" >"$work/${precision}_r${r}_$name.log" 2>&1 ||
        { tail -3 "$work/${precision}_r${r}_$name.log"; echo "warning: $name did not run ($precision)" >&2; }
    done
  done
done
{ cat "$work/header.txt"; /usr/bin/python3 "$here/llama_cpu_report.py" "$work" $warmup $batch $T; } \
  | tee "$OUT_DIR/llama_cpu_results.txt"
echo "results: $OUT_DIR/llama_cpu_results.txt (runs in $work)"
