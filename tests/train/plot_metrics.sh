#!/usr/bin/env bash
# validation/plot_metrics.py on the metrics of tiny training runs: a gpt_train run with evaluations,
# the same run stopped and resumed (run, resume and eval lines in one file) and a vit_train run
# (samples_per_s, eval_acc) drawn together into one PNG; a non-JSON line and a missing matplotlib
# stop it with a message naming the problem. Never skipped: without matplotlib it fails
# (jobscripts/install_deps.sh test installs python3-matplotlib).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plot=("/usr/bin/python3" "$src/validation/plot_metrics.py")
fail() { [ -f "$tmp/log" ] && cat "$tmp/log"; echo "error: $*"; exit 1; }
/usr/bin/python3 -c "import matplotlib" 2>/dev/null ||
  fail "matplotlib is missing: install python3-matplotlib (jobscripts/install_deps.sh test)"

"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
gpt=("$build/apps/gpt_train" --input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16
     --global-batch 8 --steps 6 --threads 1 --eval-every 3 --eval-batches 1 --quiet)
"${gpt[@]}" --metrics "$tmp/a.jsonl" >"$tmp/log" 2>&1 || fail "gpt_train failed"
"${gpt[@]}" --metrics "$tmp/b.jsonl" --checkpoint-dir "$tmp/ck" --checkpoint-every 3 \
  --lr 2e-3 >"$tmp/log" 2>&1 || fail "gpt_train (b) failed"
# b: cut back to step 3 by resuming from its checkpoint of step 3
rm "$tmp/ck/step_6.h5"
"${gpt[@]}" --metrics "$tmp/b.jsonl" --checkpoint-dir "$tmp/ck" --resume auto --lr 2e-3 >"$tmp/log" 2>&1 ||
  fail "gpt_train --resume auto failed"
grep -q '"resume"' "$tmp/b.jsonl" || fail "b.jsonl has no resume line"
"$build/apps/data_prep" synth-images --classes 4 --train 64 --test 32 --size 8 --seed 4 --output "$tmp/img.h5" >/dev/null
"$build/apps/vit_train" --input "$tmp/img.h5" --layers 1 --hidden 16 --heads 2 --patch 4 --global-batch 8 --steps 4 \
  --eval-every 2 --threads 1 --quiet --metrics "$tmp/v.jsonl" >"$tmp/log" 2>&1 || fail "vit_train failed"
grep -q '"eval_acc"' "$tmp/v.jsonl" || fail "v.jsonl has no eval_acc"

"${plot[@]}" -o "$tmp/plot.png" --label a --label "b (resumed)" --label vit "$tmp/a.jsonl" "$tmp/b.jsonl" \
  "$tmp/v.jsonl" >"$tmp/log" 2>&1 || fail "plot_metrics.py failed"
grep -q "wrote $tmp/plot.png: 3 metrics file(s), 16 step lines" "$tmp/log" || fail "unexpected summary"
[ -s "$tmp/plot.png" ] || fail "no PNG written"
[ "$(head -c 8 "$tmp/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "plot.png is not a PNG"
/usr/bin/python3 - "$tmp/plot.png" <<'PY' || fail "the PNG is blank or too small"
import sys
import matplotlib.image as mpimg
img = mpimg.imread(sys.argv[1])
assert img.shape[0] >= 1000 and img.shape[1] >= 800, img.shape
assert img[..., :3].std() > 0.05, "a blank image"  # lines and text, not one colour
PY

# Bad input: a line that is not JSON names the file and line; no step lines; missing matplotlib.
printf '{"run": {}}\n{"step": 1, "loss": \n' > "$tmp/bad.jsonl"
! "${plot[@]}" -o "$tmp/x.png" "$tmp/bad.jsonl" >"$tmp/log" 2>&1 || fail "a non-JSON line was accepted"
grep -q "error: $tmp/bad.jsonl:2: not a JSON line" "$tmp/log" || fail "no message naming bad.jsonl:2"
printf '{"run": {}}\n' > "$tmp/empty.jsonl"
! "${plot[@]}" -o "$tmp/x.png" "$tmp/empty.jsonl" >"$tmp/log" 2>&1 || fail "a file without steps was accepted"
grep -q "no step or evaluation lines" "$tmp/log" || fail "no message for a file without steps"
mkdir -p "$tmp/nompl/matplotlib"; echo 'raise ImportError("hidden by the test")' > "$tmp/nompl/matplotlib/__init__.py"
! PYTHONPATH="$tmp/nompl" "${plot[@]}" -o "$tmp/x.png" "$tmp/a.jsonl" >"$tmp/log" 2>&1 || fail "ran without matplotlib"
grep -q "error: .*needs matplotlib.*python3-matplotlib" "$tmp/log" || fail "no message naming python3-matplotlib"
[ ! -e "$tmp/x.png" ] || fail "a failed plot wrote a PNG"
echo "plot_metrics.py: 3 files (one resumed, one ViT), $(stat -c %s "$tmp/plot.png") bytes of PNG; bad input refused"
