#!/usr/bin/env bash
# Preemption through the job script's LAUNCHER=mpirun path (outside Slurm): SIGTERM to the script
# while gpt_train trains makes it checkpoint and exit 3 as under srun (the script forwards it to
# mpirun as SIGUSR1, which mpirun passes on; SIGTERM itself mpirun turns into killing its ranks),
# the script reports the preemption and exits 0, and a rerun resumes from that checkpoint.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "error: $*"; exit 1; }
export TESSERA_ROOT=$src BUILD_DIR=$build RUNS_DIR=$tmp/runs LAUNCHER=mpirun
unset DATA CONFIG SLURM_JOB_ID SLURM_JOB_NAME SLURM_RESTART_COUNT
cd "$tmp"
bash "$src/jobscripts/gpt_train.sbatch" "$src/inputs/gpt_slurm_tiny.ini" --steps 100000 >"$tmp/out" 2>"$tmp/err" &
script=$!
metrics=$(ls "$tmp"/runs/gpt_train-local*/metrics.0.jsonl 2>/dev/null)
for _ in $(seq 300); do
  metrics=$(ls "$tmp"/runs/gpt_train-local*/metrics.0.jsonl 2>/dev/null)
  [ -n "$metrics" ] && [ "$(grep -c '"loss"' "$metrics")" -ge 3 ] && break
  sleep 0.1
done
[ -n "$metrics" ] || { cat "$tmp/out" "$tmp/err"; fail "the job did not start training"; }
kill -TERM "$script"
timeout 60 tail --pid="$script" -f /dev/null || fail "the script did not end within 60 s of SIGTERM"
wait "$script"; rc=$?
[ "$rc" -eq 0 ] || { cat "$tmp/out" "$tmp/err"; fail "the script exited $rc, expected 0 after a preemption"; }
grep -q "preempted (exit code 3)" "$tmp/out" || { cat "$tmp/out" "$tmp/err"; fail "the script does not report exit code 3"; }
ck=$(ls "$tmp"/runs/gpt_train-*/checkpoints/step_*.h5 2>/dev/null | head -1)
[ -n "$ck" ] || fail "no checkpoint was written on SIGTERM"
step=${ck##*step_}; step=${step%.h5}
echo "SIGTERM through mpirun: checkpoint of step $step, exit 3, the script exits 0"
bash "$src/jobscripts/gpt_train.sbatch" "$src/inputs/gpt_slurm_tiny.ini" --steps $((step + 2)) >"$tmp/out2" 2>"$tmp/err2" ||
  { cat "$tmp/out2" "$tmp/err2"; fail "the rerun failed"; }
grep -q "resumed from .*step_$step.h5" "$tmp/out2" || { cat "$tmp/out2"; fail "the rerun did not resume from step_$step.h5"; }
echo "the rerun resumed from step_$step.h5 and finished"
