#!/usr/bin/env bash
# The per-ISA kernel copies of the portable build (kernels/cpu/isa.h) train alike: a short GPT
# run in fp32 and in bf16 under TESSERA_CPU_ISA=base, avx2 and avx512 (those this CPU runs) gives
# the losses of the default run (the widest copy) to a relative 1e-4, the copies differing only in
# rounding (fused multiply-adds, lane order); forcing the widest copy reproduces the default run
# exactly; the run's first line names the copy; and a bad TESSERA_CPU_ISA is refused by name.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset TESSERA_CPU_ISA
compare_losses="python3 $src/tests/tools/compare_losses.py"
data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
common=(--input "$data" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 12 --lr 3e-3
        --warmup 2 --seed 11 --threads 2)
train() {  # NAME ISA(or "") options...
  local name=$1 isa=$2; shift 2
  TESSERA_CPU_ISA=$isa "$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "error: run $name failed"; exit 1; }
}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
isas=(base)
has avx2 fma f16c && isas+=(avx2)
has avx2 fma f16c avx512f avx512bw avx512dq avx512vl && isas+=(avx512)
widest=${isas[-1]}
echo "this CPU runs the copies: ${isas[*]}"
[ ${#isas[@]} -ge 2 ] || { echo "error: this CPU runs only the base copy: nothing to compare (needs AVX2)"; exit 1; }

for precision in fp32 bf16; do
  train "$precision-default" "" --precision "$precision"
  grep -q "kernels: $widest)" "$tmp/$precision-default.log" ||
    { head -3 "$tmp/$precision-default.log"; echo "error: the default run does not name the copy $widest"; exit 1; }
  for isa in "${isas[@]}"; do
    train "$precision-$isa" "$isa" --precision "$precision"
    grep -q "kernels: $isa)" "$tmp/$precision-$isa.log" ||
      { head -3 "$tmp/$precision-$isa.log"; echo "error: TESSERA_CPU_ISA=$isa: the run does not name that copy"; exit 1; }
    rtol=$([ "$isa" = "$widest" ] && echo 0 || echo 1e-4)
    echo -n "$precision, TESSERA_CPU_ISA=$isa vs the default (rtol $rtol): "
    $compare_losses "$tmp/$precision-default.jsonl" "$tmp/$precision-$isa.jsonl" --rtol "$rtol"
  done
done

# A value that is not a copy's name is refused before training, naming the variable.
rc=0
TESSERA_CPU_ISA=sse9 "$build/apps/gpt_train" "${common[@]}" >"$tmp/bad.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "TESSERA_CPU_ISA must be base, avx2 or avx512, not 'sse9'" "$tmp/bad.log" ||
  { cat "$tmp/bad.log"; echo "error: TESSERA_CPU_ISA=sse9 was not refused by name (exit $rc)"; exit 1; }
echo "TESSERA_CPU_ISA=sse9 refused: $(grep -m1 error "$tmp/bad.log")"
