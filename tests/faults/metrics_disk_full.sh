#!/usr/bin/env bash
# A metrics write that fails stops the run with an error naming the file: /dev/full (every write
# fails with ENOSPC) on one rank and on two, where the job ends on both ranks; and a write that
# fails mid-run stops the run at that step.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --threads 1)

expect_failure() {  # what, log, words
  local what=$1 log=$2 words=$3 line
  line=$(grep -m1 "error:" "$log" || true)
  [[ $line == *"$words"* ]] || { cat "$log"; echo "error: $what: no error naming '$words'"; exit 1; }
  echo "$what: ${line#*error: }"
}
for ranks in 1 2; do
  if timeout -k 10 60 mpirun -np $ranks "$build/apps/gpt_train" "${common[@]}" --steps 3 --metrics /dev/full \
       >"$tmp/full$ranks.log" 2>&1; then
    cat "$tmp/full$ranks.log"; echo "error: $ranks rank(s): a run whose metrics went to /dev/full exited 0"; exit 1
  fi
  expect_failure "/dev/full, $ranks rank(s)" "$tmp/full$ranks.log" "cannot write metrics file /dev/full: No space left on device"
done

# Mid-run: the metrics go to a pipe whose reader leaves after 4000 bytes (the run line and a few
# steps); the next write fails (EPIPE, SIGPIPE ignored) and the run stops there, naming the pipe.
mkfifo "$tmp/pipe"
head -c 4000 "$tmp/pipe" > "$tmp/read.jsonl" &
if (trap '' PIPE; exec "$build/apps/gpt_train" "${common[@]}" --steps 40 --metrics "$tmp/pipe") >"$tmp/pipe.log" 2>&1; then
  echo "error: a run whose metrics pipe was closed exited 0"; exit 1
fi
wait
expect_failure "closed pipe" "$tmp/pipe.log" "cannot write metrics file $tmp/pipe: Broken pipe"
if grep -q "step 40/40" "$tmp/pipe.log"; then
  echo "error: the run went on to its last step after its metrics could not be written"; exit 1
fi
