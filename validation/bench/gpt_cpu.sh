#!/usr/bin/env bash
# CPU benchmark: gpt_train against the same GPT in PyTorch (torch_gpt_bench.py), back to back,
# fp32, AdamW, 2 threads, synthetic tokens, under the inherited and a tuned environment; with the
# machine's sgemm rate measured in the same run. Not a test: never registered with CTest.
#
# usage: gpt_cpu.sh [--build DIR] [--config a|b|all] [--steps N] [--rounds R] [--only tessera|pytorch]
#                   [--precision fp32|bf16]
#   a: GPT-2 124M (12 layers, hidden 768, 12 heads, seq 64, batch 4, vocab 50257)
#   b: 6 layers, hidden 384, 6 heads, seq 128, batch 8, vocab 8192
#   --rounds R: R runs of each program, alternating (tessera, PyTorch, tessera, ...), their timed
#   steps pooled: a shared machine's drift then falls on both sides alike (default 1).
#   --precision bf16: gpt_train --precision bf16 against PyTorch under torch.autocast(bfloat16).
# Results: printed, and written to $OUT_DIR/gpt_cpu_results.txt (OUT_DIR default /tmp/tessera-bench).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build
which=all
steps=13
rounds=1
only=""
precision=fp32
warmup=3
threads=2
py=/usr/bin/python3

while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --config) which=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if (( steps - warmup < 10 )); then
  echo "error: --steps $steps leaves fewer than 10 timed steps after $warmup warm-up steps" >&2
  exit 2
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "error: --rounds must be a positive integer, not '$rounds'" >&2; exit 2; }
case $which in
  a) configs=("a:12:768:12:64:4:50257") ;;
  b) configs=("b:6:384:6:128:8:8192") ;;
  all) configs=("a:12:768:12:64:4:50257" "b:6:384:6:128:8:8192") ;;
  *) echo "error: --config must be a, b or all" >&2; exit 2 ;;
esac
case $precision in
  fp32|bf16) ;;
  *) echo "error: --precision must be fp32 or bf16" >&2; exit 2 ;;
esac
case $only in
  ""|tessera|pytorch) ;;
  *) echo "error: --only must be tessera or pytorch" >&2; exit 2 ;;
esac
run_tessera=1; run_pytorch=1
[[ $only == pytorch ]] && run_tessera=0
[[ $only == tessera ]] && run_pytorch=0

if (( run_pytorch )) && ! "$py" -c 'import torch' 2>/dev/null; then
  echo "error: $py cannot import torch (Debian: python3-torch)" >&2
  exit 1
fi
if (( run_tessera )); then
  for exe in data_prep gpt_train; do
    [[ -x $build/apps/$exe ]] || { echo "error: $build/apps/$exe not found (--build DIR)" >&2; exit 1; }
  done
fi

OUT_DIR=${OUT_DIR:-/tmp/tessera-bench}
work=$OUT_DIR/gpt_cpu
mkdir -p "$work" "$OUT_DIR/data"
rm -f "$work"/*.json "$work"/*.jsonl "$work"/*.load "$work"/*.log

# The two environments. Both pin the thread count; "tuned" drops OpenBLAS core-type overrides,
# makes idle OpenMP threads sleep instead of spinning and preloads tcmalloc, as CPU tuning guides
# for PyTorch advise: PyTorch frees and reallocates its gradients and temporaries every step, and
# with glibc's malloc the big ones go back to the kernel and fault in again (on a 2-core AMD EPYC
# VM, 2.5 million page faults and 2.8-6.3 s per GPT-2 step; with tcmalloc 1.0-1.1 s). tessera
# allocates nothing inside a step, so the allocator does not matter to it.
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
if [[ ! -e $tcmalloc ]]; then
  if [[ $only != tessera ]]; then
    echo "error: $tcmalloc not found (Debian: libtcmalloc-minimal4; jobscripts/install_deps.sh validation)" >&2
    exit 1
  fi
  tcmalloc=""  # tessera alone: the allocator does not matter to it
fi
threads_env=(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads)
env_inherited=(env "${threads_env[@]}")
env_tuned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE ${tcmalloc:+LD_PRELOAD=$tcmalloc}
           "${threads_env[@]}")
envs=(inherited tuned)

describe_env() {  # the variables that matter, as the given environment sets them
  "$@" bash -c 'for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE OMP_WAIT_POLICY LD_PRELOAD OMP_NUM_THREADS OPENBLAS_NUM_THREADS; do
      printf "%s=%s " "$v" "${!v-<unset>}"; done; echo'
}

{
  echo "gpt_cpu benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus; threads $threads"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the figures mean little if other jobs share the cpus)"
  echo "steps $steps ($warmup warm-up, $((steps - warmup)) timed) per run, $rounds round(s), precision $precision; build $build"
  for e in "${envs[@]}"; do
    ref="env_$e[@]"
    echo "env $e: $(describe_env "${!ref}")"
  done
} | tee "$work/header.txt"

# --- sgemm: a tiny C program on the BLAS that gpt_train links (OpenBLAS, OpenMP build) ---------
# (The awk scripts below read all of ldd's output: one that exits early kills ldd with SIGPIPE,
# which pipefail makes this script's exit.)
blas_lib=""
if (( run_tessera )); then
  blas_lib=$(ldd "$build/apps/gpt_train" 2>/dev/null | awk '/libopenblas|libblas|libmkl_rt|libblis/ && !found {print $3; found = 1}')
fi
if [[ -z $blas_lib ]]; then
  blas_lib=/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
  [[ -e $blas_lib ]] || blas_lib=$(ldconfig -p | awk '/libopenblas.so.0/ && !found {print $NF; found = 1}')
fi
cat > "$work/sgemm.c" <<'EOF'
/* Best-of-5 time of a 2048^3 float32 sgemm: cblas_sgemm, or oneDNN's dnnl_sgemm with -DONEDNN. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef ONEDNN
int dnnl_sgemm(char, char, long, long, long, float, const float *, long, const float *, long, float, float *, long);
#define SGEMM(n, a, b, c) dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n)
#define NAME "dnnl_sgemm"
#else
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
#define SGEMM(n, a, b, c) cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n)
#define NAME "cblas_sgemm"
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
  int n = 2048; const char *lib = argc > 1 ? argv[1] : "?";
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; ++i) { a[i] = (float)((i * 7 % 13) - 6) / 8; b[i] = (float)((i * 5 % 11) - 5) / 8; }
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {  /* the first is warm-up */
    double t0 = now();
    SGEMM(n, a, b, c);  /* row-major, no transpose */
    double t = now() - t0;
    if (r > 0 && t < best) best = t;
  }
  printf("{\"what\": \"" NAME " float32 %dx%dx%d (%s)\", \"best_s\": %g, \"gflops\": %g, \"check\": %g}\n",
         n, n, n, lib, best, 2.0 * n * n * (double)n / best / 1e9, (double)c[12345]);
  return 0;
}
EOF
have_cblas=0
if cc -O2 -o "$work/sgemm" "$work/sgemm.c" "$blas_lib" -Wl,-rpath,"$(dirname "$blas_lib")" 2>"$work/sgemm_cc.log"; then
  have_cblas=1
else
  echo "warning: could not build the sgemm probe against $blas_lib (see $work/sgemm_cc.log)" >&2
fi
# The same product through oneDNN's sgemm, when gpt_train runs its GEMMs there (kernels/cpu/gemm.cpp).
have_onednn=0
dnnl_lib=""
if (( run_tessera )); then
  dnnl_lib=$(ldd "$build/apps/gpt_train" 2>/dev/null | awk '/libdnnl/ && !found {print $3; found = 1}')
fi
if [[ -n $dnnl_lib ]]; then
  if cc -O2 -DONEDNN -o "$work/sgemm_onednn" "$work/sgemm.c" "$dnnl_lib" 2>"$work/sgemm_onednn_cc.log"; then
    have_onednn=1
  else
    echo "warning: could not build the oneDNN sgemm probe against $dnnl_lib (see $work/sgemm_onednn_cc.log)" >&2
  fi
fi
for e in "${envs[@]}"; do
  ref="env_$e[@]"
  if (( have_cblas )); then
    "${!ref}" "$work/sgemm" "$blas_lib" > "$work/sgemm_cblas_$e.json"
  fi
  if (( have_onednn )); then
    "${!ref}" "$work/sgemm_onednn" "$dnnl_lib" > "$work/sgemm_onednn_$e.json"
  fi
  if (( run_pytorch )); then
    "${!ref}" "$py" "$here/torch_gpt_bench.py" --sgemm 2048 --threads $threads --json "$work/sgemm_torch_$e.json" >/dev/null
  fi
done

# --- the runs -------------------------------------------------------------------------------
names=()
for spec in "${configs[@]}"; do
  IFS=: read -r name L C H T B V <<<"$spec"
  names+=("$spec")
  data=$OUT_DIR/data/v$V.h5
  if (( run_tessera )) && [[ ! -s $data ]]; then
    echo "+ data_prep synth --vocab $V"
    "$build/apps/data_prep" synth --vocab "$V" --tokens 2000000 --seed 1 --output "$data.tmp" --overwrite > "$work/data_prep_v$V.log" 2>&1 \
      || { cat "$work/data_prep_v$V.log"; echo "error: data_prep failed" >&2; exit 1; }
    mv "$data.tmp" "$data"
  fi
  for e in "${envs[@]}"; do
    ref="env_$e[@]"
    for ((r = 1; r <= rounds; ++r)); do
      run=${name}_${e}_r$r  # the files of one round: <config>_<env>_r<round>_<program>.*
      if (( run_tessera )); then
        echo "+ [$name/$e/round $r] gpt_train L=$L C=$C H=$H T=$T B=$B V=$V"
        cut -d' ' -f1 /proc/loadavg > "$work/${run}_tessera.load"
        rc=0
        "${!ref}" "$build/apps/gpt_train" --input "$data" --layers "$L" --hidden "$C" --heads "$H" \
            --seq-len "$T" --global-batch "$B" --micro-batch "$B" --steps "$steps" --lr 3e-4 --warmup 0 \
            --threads "$threads" --precision "$precision" --metrics "$work/${run}_tessera.jsonl" \
            > "$work/${run}_tessera.log" 2>&1 || rc=$?
        if (( rc != 0 )); then
          tail -5 "$work/${run}_tessera.log"
          echo "warning: gpt_train exited with $rc ($name, $e, round $r)" >&2
        fi
      fi
      if (( run_pytorch )); then
        echo "+ [$name/$e/round $r] pytorch  L=$L C=$C H=$H T=$T B=$B V=$V"
        cut -d' ' -f1 /proc/loadavg > "$work/${run}_pytorch.load"
        "${!ref}" "$py" "$here/torch_gpt_bench.py" --layers "$L" --hidden "$C" --heads "$H" \
            --seq-len "$T" --batch "$B" --vocab "$V" --steps "$steps" --warmup "$warmup" \
            --threads "$threads" --precision "$precision" --json "$work/${run}_pytorch.json" \
            > "$work/${run}_pytorch.log" 2>&1 \
          || { tail -5 "$work/${run}_pytorch.log"; echo "warning: PyTorch run failed ($name, $e, round $r)" >&2; }
      fi
    done
  done
done

echo
{
  cat "$work/header.txt"
  echo
  "$py" "$here/gpt_cpu_report.py" "$work" "${names[@]}"
} > "$OUT_DIR/gpt_cpu_results.txt"
"$py" "$here/gpt_cpu_report.py" "$work" "${names[@]}"
echo
echo "results: $OUT_DIR/gpt_cpu_results.txt (runs in $work)"
