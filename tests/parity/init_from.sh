#!/usr/bin/env bash
# gpt_train / moe_train --init-from: a checkpoint saved under tp 2 at --seq-len 32 starts runs whose
# model options all come from it; at --seq-len 16 (half its learned position table) the one-rank
# run's initial weights are the checkpoint's bit for bit, and dp 2 and tp 2 x pp 2 reproduce it
# (losses, evaluation, step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh); so does
# moe_train --arch llama under ep 2 x dp 2. The rules, each refused naming the problem: a model option
# that contradicts the checkpoint, a --seq-len past its table, --resume FILE beside it, --resume auto
# into a folder of checkpoints, data with more ids than its vocabulary, the other trainer's model.
# Nothing is ever written into the source checkpoint's folder.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
mpirun -np 2 "$build/apps/gpt_train" --input "$data" --layers 2 --hidden 32 --heads 4 --seq-len 32 --global-batch 8 \
  --steps 3 --tp 2 --threads 1 --checkpoint-dir "$tmp/pre" >/dev/null
pre="$tmp/pre/step_3.h5"
snapshot() { (cd "$tmp/pre" && stat -c '%n %y' . ./* && md5sum ./*); }  # the folder's time changes with any file made in it
before=$(snapshot)

common=(--init-from "$pre" --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

# The weights are the checkpoint's, the position table whole (rows past 16 unused).
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 1 --dump "$tmp/dump.h5" >/dev/null
/usr/bin/python3 - "$pre" "$tmp/dump.h5" <<'EOF'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as ck, h5py.File(sys.argv[2], "r") as dump:
    names = sorted(ck["params"].keys())
    assert names == sorted(dump["init"].keys()), (names, sorted(dump["init"].keys()))
    for n in names:
        a, b = ck["params"][n][...], dump["init"][n][...]
        assert a.shape == b.shape and np.array_equal(a, b), f"{n}: initial weights are not the checkpoint's"
    print(f"--init-from: the {len(names)} initial tensors are the checkpoint's bit for bit "
          f"(positions {ck['params']['embed.positions.weight'].shape})")
EOF

parity_reference ref "$data" --micro-batch 8
parity_case dp2 2 ref "$data" --micro-batch 4
parity_case tp2-pp2 4 ref "$data" --tp 2 --pp 2 --micro-batch 2
/usr/bin/python3 - "$tmp/ref/step_10.h5" <<'EOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    assert a["step"] == 10 and a["optimizer_steps"] == 10 and a["model.max_seq"] == 32, dict(a)
print("the fine-tuned run counts its own steps (10, optimizer 10) and keeps the 32-position table")
EOF

# moe_train --arch llama: the same under ep 2 x dp 2.
moe=(--arch llama --layers 2 --hidden 16 --heads 2 --kv-heads 1 --ffn-hidden 32 --seq-len 8 --global-batch 8 --threads 1
     --experts 4 --moe-every 2 --expert-hidden 16 --top-k 2 --capacity-factor 0 --shared-experts 1 --router-norm softmax_topk)
mpirun -np 1 "$build/apps/moe_train" --input "$data" "${moe[@]}" --steps 2 --checkpoint-dir "$tmp/moe-pre" >/dev/null
app=moe_train
common=(--init-from "$tmp/moe-pre/step_2.h5" --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01
        --capacity-factor 0)
parity_reference moe-ref "$data" --micro-batch 4
parity_case moe-ep2-dp2 4 moe-ref "$data" --ep 2 --micro-batch 2
app=gpt_train

refused() {  # EXPECTED_MESSAGE APP RANKS options...
  local want=$1 exe=$2 ranks=$3; shift 3
  if mpirun -np "$ranks" "$build/apps/$exe" --steps 1 --threads 1 "$@" >"$tmp/out" 2>&1; then
    echo "error: accepted: $exe $*"; exit 1
  fi
  grep -qF -- "$want" "$tmp/out" || { echo "error: '$want' not in:"; cat "$tmp/out"; exit 1; }
  echo "refused as expected: $want"
}
refused "--layers 3 contradicts --init-from $pre, whose model has layers 2" gpt_train 1 --input "$data" --init-from "$pre" --layers 3
refused "--arch llama contradicts --init-from $pre, whose model has arch gpt2" gpt_train 1 --input "$data" --init-from "$pre" --arch llama
refused "--seq-len 64 is longer than the learned position table of --init-from $pre (32 positions)" gpt_train 1 \
  --input "$data" --init-from "$pre" --seq-len 64
refused "--init-from $pre and --resume $tmp/ref/step_10.h5 both name the weights to start from" gpt_train 1 \
  --input "$data" --init-from "$pre" --resume "$tmp/ref/step_10.h5"
refused "holds 10 checkpoint(s) that --resume auto would continue: drop --init-from" gpt_train 1 --input "$data" \
  --init-from "$pre" --resume auto --checkpoint-dir "$tmp/ref" --seq-len 16
"$build/apps/data_prep" synth --vocab 80 --tokens 5000 --seed 5 --output "$tmp/v80.h5" >/dev/null
refused "its model's vocabulary (61 ids) is smaller than the training data's vocab_size 80" gpt_train 1 \
  --input "$tmp/v80.h5" --init-from "$pre"
refused "holds a moe_llama model: train it with moe_train" gpt_train 1 --input "$data" --init-from "$tmp/moe-pre/step_2.h5"
refused "holds a gpt model: train it with gpt_train" moe_train 1 --input "$data" --init-from "$pre"
refused "--experts 8 contradicts" moe_train 1 --input "$data" --init-from "$tmp/moe-pre/step_2.h5" --experts 8
if "$build/apps/ckpt_tool" export-hf "$tmp/moe-pre/step_2.h5" --output "$tmp/mixtral" >"$tmp/out" 2>&1; then
  echo "error: export-hf accepted a moe_llama with shared experts"; exit 1
fi
grep -qF "is a moe_llama model Mixtral cannot express (moe_every 2, shared_experts 1" "$tmp/out" ||
  { echo "error: export-hf's refusal does not name the fields:"; cat "$tmp/out"; exit 1; }
echo "refused as expected: export-hf of a moe_llama Mixtral cannot express (moe_every 2, shared experts)"
refused "--init-from $tmp/nothing.h5: no such checkpoint file" gpt_train 1 --input "$data" --init-from "$tmp/nothing.h5"

# --resume auto beside --init-from into an empty folder starts from the weights.
mpirun -np 1 "$build/apps/gpt_train" --input "$data" --init-from "$pre" --resume auto --checkpoint-dir "$tmp/fresh" \
  --steps 1 --threads 1 >/dev/null
[ -f "$tmp/fresh/step_1.h5" ] || { echo "error: --init-from --resume auto into an empty folder wrote no checkpoint"; exit 1; }
echo "--init-from with --resume auto into an empty --checkpoint-dir: trained from the weights"

after=$(snapshot)
[ "$before" = "$after" ] || { echo "error: the source checkpoint's folder changed:"; diff <(echo "$before") <(echo "$after"); exit 1; }
echo "the source checkpoint's folder is as it was"
echo "init_from: all checks passed"
