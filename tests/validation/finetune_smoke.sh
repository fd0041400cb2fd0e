#!/usr/bin/env bash
# validation/finetune/run.sh kept working, at a few steps: on tinyshakespeare the whole chain runs
# (spm_train, data_prep text --tokenizer, gpt_train pretraining under dp 2, export-hf, import-hf with
# the tensors bit-identical, generate --score equal for both, --init-from and from-scratch runs under
# tp 2, the plot) into a new folder with curves.png and results.md; config.json's floats are written
# as transformers writes them; the fine-tuned model ends below the from-scratch one on the held-apart
# eval split. A missing spm_train, text or build stops it before anything runs, each named.
# usage: finetune_smoke.sh BUILD_DIR SOURCE_DIR --text PATH/tinyshakespeare.txt
set -euo pipefail
if [[ $# -ne 4 || $3 != --text ]]; then
  echo "usage: $0 <build_dir> <source_dir> --text PATH/tinyshakespeare.txt" >&2
  exit 2
fi
build=$1; src=$2; text=$4
source "$src/tests/tools/script_prelude.sh"
[[ -f $text ]] || { echo "FAIL: $text not found (configure with -DTESSERA_TINYSHAKESPEARE=PATH)" >&2; exit 1; }
need_apps data_prep gpt_train ckpt_tool generate
make_scratch finetune_smoke
script=$src/validation/finetune/run.sh

expect_refusal() {  # TEXT COMMAND...: fails with status 1 and TEXT in its output
  local rc=0
  "${@:2}" >"$tmp/log" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] && grep -qF -- "$1" "$tmp/log" ||
    { cat "$tmp/log"; echo "FAIL: expected status 1 and '$1' from: ${*:2} (got status $rc)" >&2; exit 1; }
}
mkdir "$tmp/bin"
ln -s "$(command -v dirname)" "$tmp/bin/dirname"
expect_refusal "error: spm_train not found" env PATH="$tmp/bin" /bin/bash "$script" --data "$text" --build "$build" --out "$tmp/out"
expect_refusal "error: $tmp/none.txt not found" "$script" --data "$tmp/none.txt" --build "$build" --out "$tmp/out"
expect_refusal "$tmp/nobuild/apps/data_prep not found" "$script" --data "$text" --build "$tmp/nobuild" --out "$tmp/out"
[[ ! -e $tmp/out ]] || { echo "FAIL: a refused run made $tmp/out" >&2; exit 1; }

run "$script" --data "$text" --build "$build" --out "$tmp/out" --pretrain-steps 4 --finetune-steps 4
dirs=("$tmp"/out/run-*)
[[ ${#dirs[@]} -eq 1 && -d ${dirs[0]} ]] || { echo "FAIL: expected one run folder in $tmp/out, found: ${dirs[*]}" >&2; exit 1; }
d=${dirs[0]}
for f in curves.png results.md spm.model hf/config.json hf/model.safetensors hf/tokenizer.model imported.h5 \
  finetune/step_4.h5 scratch/step_4.h5; do
  [[ -s $d/$f ]] || { cat "$tmp/log"; echo "FAIL: the run wrote no $d/$f" >&2; exit 1; }
done
grep -q '^- export-hf then import-hf: all [0-9]* tensors of /params bit-identical (h5diff)$' "$d/results.md" ||
  { cat "$d/results.md"; echo "FAIL: results.md does not report the bit-identical round trip" >&2; exit 1; }
# export-hf writes gpt_train's float defaults as transformers does (1e-05, not 9.999999747378752e-06).
grep -q '"rms_norm_eps": 1e-05,$' "$d/hf/config.json" && grep -q '"rope_theta": 10000.0,$' "$d/hf/config.json" ||
  { cat "$d/hf/config.json"; echo "FAIL: config.json's rms_norm_eps or rope_theta is not 1e-05 / 10000.0" >&2; exit 1; }
# The fine-tuned and the from-scratch run's final eval loss on the held-apart split.
read -r tuned scratch < <(/usr/bin/python3 - "$d" <<'PY'
import json, sys
last = lambda name: [json.loads(l)["eval_loss"] for l in open(f"{sys.argv[1]}/{name}.jsonl") if "eval_loss" in l][-1]
print(last("finetune"), last("scratch"))
PY
)
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$tuned" "$scratch" ||
  { cat "$d/results.md"; echo "FAIL: fine-tuned eval loss $tuned is not below the from-scratch one, $scratch" >&2; exit 1; }
echo "finetune_smoke: chain ran in $d; round trip bit-identical; held-apart eval loss fine-tuned $tuned < scratch $scratch"
keep=0
