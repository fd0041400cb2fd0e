# Shared by the layout benchmarks (parallel_modes.sh, tensor_modes.sh; sourced, not run): their
# options, a synthetic corpus, and one markdown table row per layout.
#   layout_bench_setup USAGE_LINES "$@"   parses [--build DIR] [--steps N] [--threads T] into
#                                         $build, $steps, $threads (defaults set before sourcing),
#                                         makes $tmp and $tmp/data.h5 (vocab 8192), prints nothing
#   layout_table_header                   the table's header
#   layout_row LABEL RANKS options...     trains gpt_train with "${model[@]}" and the options on
#                                         RANKS ranks; prints median tokens/s and comm MB/step (the
#                                         first step warms up), peak and state MB per rank, the last
#                                         loss; a layout that fails gets a row saying so and sets
#                                         $status = 1, the others still run
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
status=0

layout_bench_setup() {
  local usage_lines=$1; shift
  while [[ $# -gt 0 ]]; do
    case $1 in
      --build) build=$2; shift 2 ;;
      --steps) steps=$2; shift 2 ;;
      --threads) threads=$2; shift 2 ;;
      -h|--help) sed -n "2,${usage_lines}p" "$0"; exit 0 ;;
      *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
  done
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$build/apps/data_prep" synth --vocab 8192 --tokens 400000 --seed 3 --output "$tmp/data.h5" >/dev/null
}

layout_table_header() {
  echo "| layout | ranks | tokens/s (median) | comm MB/step (rank 0) | peak MB/rank | state MB/rank | loss at the last step |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
}

layout_row() {
  local label=$1 ranks=$2; shift 2
  rm -f "$tmp/m.jsonl"
  local rc=0
  mpirun -np "$ranks" "$build/apps/gpt_train" "${model[@]}" "$@" --metrics "$tmp/m.jsonl" >/dev/null || rc=$?
  if [[ $rc -ne 0 ]]; then echo "| $label | $ranks | failed (exit $rc) | | | | |"; status=1; return 0; fi
  /usr/bin/python3 - "$tmp/m.jsonl" "$label" "$ranks" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1:]  # the first step warms up
print(f"| {sys.argv[2]} | {sys.argv[3]} | {statistics.median(r['tokens_per_s'] for r in rows):.0f} | "
      f"{statistics.median(r['comm_bytes'] for r in rows) / 2**20:.2f} | {max(r['peak_mem_bytes'] for r in rows) / 2**20:.1f} | "
      f"{rows[-1]['state_bytes'] / 2**20:.1f} | {rows[-1]['loss']:.4f} |")
PY
}
