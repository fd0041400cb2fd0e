#!/usr/bin/env bash
# The time model against Megatron-LM's weak-scaling table (validation/auto_layout/megatron_table.sh):
# every one of the paper's ten GPT rows, 1.7B to 1T parameters, is predicted within 20% of its achieved
# TFLOP/s per GPU from the A100 machine file written from public specifications. A deterministic
# computation (parallel_plan search --explain), not a timing.
set -euo pipefail
source "$(dirname "$0")/script_prelude.sh"
script_args "$@"
need_apps parallel_plan
table=$(bash "$src/validation/auto_layout/megatron_table.sh" "$build")
echo "$table"
rows=$(grep -c '^| [0-9.]*B |' <<<"$table" || true)
[[ $rows -eq 10 ]] || { echo "FAIL: expected the paper's 10 rows, got $rows" >&2; exit 1; }
bad=$(awk -F'|' '/^\| [0-9.]*B \|/ { p = $12 + 0; q = $13 + 0; e = (q - p) / p; if (e < 0) e = -e;
                   if (e > 0.20) print $2 ": paper " p ", predicted " q }' <<<"$table")
[[ -z $bad ]] || { echo "FAIL: beyond 20% of the paper:" >&2; echo "$bad" >&2; exit 1; }
echo "PASS: all 10 rows within 20% of the paper's TFLOP/s per GPU"
