#!/usr/bin/env bash
# Blended token data (--input 'a.h5:0.7,b.h5:0.3') under sequence and expert parallelism: gpt_train
# sp2 (ring and all_to_all) and moe_train ep2 give one rank's losses and each source's consumed
# tokens (blend_tokens.K, exactly) at every step. With --document-mask over sources of many short
# documents, sp2 ring and pp3 (its middle stage reads no token: its prefetcher cuts only the
# segments) equal one rank too. tests/parity/token_blend.sh covers dp, tp, pp and resumes.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py"
# Two sources of one vocabulary, documents of 5 and 7 tokens (several in each window of 17).
"$build/apps/data_prep" synth --vocab 61 --tokens 800 --seed 5 --document-tokens 5 --output "$tmp/a.h5" >/dev/null
"$build/apps/data_prep" synth --vocab 61 --tokens 300 --seed 6 --document-tokens 7 --output "$tmp/b.h5" >/dev/null
blend="$tmp/a.h5:0.7,$tmp/b.h5:0.3"
gpt=(--layers 3 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 8 --lr 3e-3 --warmup 2 --seed 11
     --threads 1 --log-every 1 --sampling epoch)
moe=("${gpt[@]}" --experts 4 --moe-every 2 --top-k 2 --capacity-factor 0)

run() {  # NAME RANKS APP options...
  local name=$1 ranks=$2 app=$3; shift 3
  mpirun -np "$ranks" "$build/apps/$app" --input "$blend" "$@" --metrics "$tmp/$name.jsonl" >/dev/null
}
same() {  # REF NAME: the losses (relative 1e-5) and each source's tokens (exactly) at every step
  echo -n "$2: losses: "
  $compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --rtol 1e-5
  for k in 0 1; do
    echo -n "    blend_tokens.$k: "
    $compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --key blend_tokens.$k --rtol 0
  done
}

run gpt-ref 1 gpt_train "${gpt[@]}" --micro-batch 8
for mode in ring all_to_all; do
  run gpt-sp2-$mode 2 gpt_train "${gpt[@]}" --micro-batch 8 --sp 2 --sp-mode $mode
  same gpt-ref gpt-sp2-$mode
done
# moe_train: the one-rank micro-batch is the ep group's (ep x --micro-batch), as in moe_parallel.sh.
run moe-ref 1 moe_train "${moe[@]}" --micro-batch 8
run moe-ep2 2 moe_train "${moe[@]}" --micro-batch 4 --ep 2
same moe-ref moe-ep2

run mask-ref 1 gpt_train "${gpt[@]}" --micro-batch 8 --document-mask
run mask-sp2-ring 2 gpt_train "${gpt[@]}" --micro-batch 8 --document-mask --sp 2 --sp-mode ring
same mask-ref mask-sp2-ring
run mask-pp3 3 gpt_train "${gpt[@]}" --micro-batch 4 --document-mask --pp 3
same mask-ref mask-pp3
if $compare "$tmp/gpt-ref.jsonl" "$tmp/mask-ref.jsonl" >/dev/null 2>&1; then
  echo "error: --document-mask left the blend's losses as they were: the documents are not in use"; exit 1
fi
python3 - "$tmp/gpt-ref.jsonl" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][-1]
a, b = last["blend_tokens.0"], last["blend_tokens.1"]
assert a + b == 8 * 8 * 16 and a > b > 0, (a, b)
print(f"blend tokens after 8 steps: {a:.0f} of a.h5 (weight 0.7), {b:.0f} of b.h5 (weight 0.3)")
PY
echo "token blend under sp2 ring, sp2 all_to_all, ep2 (and --document-mask under sp2 ring, pp3): equal to one rank"
