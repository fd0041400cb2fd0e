#!/usr/bin/env bash
# jobscripts/gpt_train.sbatch with --nodes 2 on a real two-node Slurm made on this machine
# (tests/slurm/lib/two_node_cluster.sh: slurmctld and a slurmd per network namespace, each node an
# address and hostname of its own; only those addresses are used). Checks:
#   1. the node-local rank mapping (which GPU a rank takes) agrees with Slurm's (SLURM_LOCALID, tasks
#      per node) on both nodes, under srun;
#   2. a dp 2 x tp 2 job (2 ranks a node: a tp group per node, dp across them) completes with the
#      losses of one rank (to a relative 1e-5);
#   3. the same job preempted (SIGTERM to its ranks, as the single-node test does) checkpoints, exits 3,
#      is requeued by the script, resumes on both nodes and completes: the two attempts' losses
#      together equal one rank's;
#   4. node-b dies mid-run (every process in its namespace killed, slurmd included): the job ends by
#      itself within the watchdog, NODE_FAIL, srun's line in its log naming node-b, not requeued.
# usage: tests/slurm/two_nodes.sh BUILD SRC   (as root; needs what the single-node Slurm test needs,
#        plus iproute2 and util-linux's unshare/nsenter)
set -euo pipefail
source "$(dirname "$0")/lib/slurm_common.sh"
bound_test_run "two-node Slurm test" 240 "$0" "$@"
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
t_start=$(date +%s)
source "$src/tests/slurm/lib/two_node_cluster.sh"
check_cluster_needs
for exe in apps/gpt_train apps/data_prep tests/test_node_local_rank; do
  [ -x "$build/$exe" ] || fail "no $build/$exe: build first"
done

make_cluster_tmp tessera-slurm2

start_cluster
echo "two nodes up in $(( $(date +%s) - t_start )) s: node-a $addr_a (slurmctld, slurmd), node-b $addr_b (slurmd)"

export TESSERA_ROOT=$src BUILD_DIR=$build RUNS_DIR=$tmp/runs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# 4 ranks share 2 cores here while Slurm advertises 2 CPUs a node: ranks must yield while they wait
export OMPI_MCA_mpi_yield_when_idle=1
unset DATA LAUNCHER CONFIG RUN_NAME
cd "$tmp"
ini=$src/inputs/gpt_slurm_tiny.ini
submit() {  # submit SBATCH-ARGS...: two nodes, two ranks each; prints the job id
  local id
  id=$(on_node a timeout 30 sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 "$@") ||
    die "sbatch $* failed"
  echo "${id%%;*}"
}

# 1. the node-local rank mapping, through srun as the job script launches
t0=$(date +%s)
id=$(submit -J ranks -o "$tmp/ranks.out" --wrap "srun --mpi=pmix $build/tests/test_node_local_rank")
st=$(wait_job_end "$id" 60)
[ "$st" = COMPLETED ] || { cat "$tmp/ranks.out"; die "the node-local rank job $id is $st, not COMPLETED"; }
echo "node-local ranks under srun on two nodes agree with Slurm's ($(( $(date +%s) - t0 )) s)"

# 2. dp 2 x tp 2 over the two nodes equals one rank
t0=$(date +%s)
id=$(submit -J dp2tp2 "$src/jobscripts/gpt_train.sbatch" "$ini" --tp 2)
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || die "the dp 2 x tp 2 job $id is $st, not COMPLETED"
[ "$(job_field "$id" NodeList)" = "node-a,node-b" ] || die "job $id ran on $(job_field "$id" NodeList), not node-a,node-b"
"$build/apps/gpt_train" --config "$ini" --input "$tmp/runs/synth_v64.h5" --metrics "$tmp/one.jsonl" >/dev/null 2>&1 ||
  die "the one-rank reference run failed"
python3 "$src/tests/tools/compare_losses.py" "$tmp/one.jsonl" "$tmp/runs/dp2tp2-$id/metrics.0.jsonl" --rtol 1e-5 ||
  die "the two-node dp 2 x tp 2 job's losses differ from one rank's"
echo "dp 2 x tp 2 job $id on node-a,node-b: COMPLETED, losses equal one rank's ($(( $(date +%s) - t0 )) s)"

# 3. preempted on two nodes, requeued, resumed, completed: the losses of one rank
t0=$(date +%s)
# Enough steps that the signal lands mid-run on a fast machine too: about 4 s of the dp 2 x tp 2
# job's step time (at least 300 steps).
nsteps=$(python3 -c 'import json, math, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] > 1]
print(max(300, min(20000, math.ceil(4000 / max(statistics.median(ms), 0.1)))))' "$tmp/runs/dp2tp2-$id/metrics.0.jsonl") ||
  die "cannot read the step time of job $id"
long=(--steps "$nsteps" --log-every 1)
id=$(submit -J preempt "$src/jobscripts/gpt_train.sbatch" "$ini" --tp 2 "${long[@]}")
m0=$tmp/runs/preempt-$id/metrics.0.jsonl m1=$tmp/runs/preempt-$id/metrics.1.jsonl
ok=
for _ in $(seq 300); do   # 30 s
  if [ -s "$m0" ] && [ "$(wc -l < "$m0")" -ge 5 ]; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || die "the preempt job $id logged no steps within 30 s (state $(job_field "$id" JobState))"
on_node a timeout 10 scancel --signal=TERM "$id" || die "scancel --signal=TERM $id failed"
st=; restarts=0; kicked=
for _ in $(seq 240); do   # 60 s
  st=$(job_field "$id" JobState); restarts=$(job_field "$id" Restarts)
  case $st in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;;
    PENDING)  # a requeued job waits for its BeginTime: start it now (not in the second of the requeue,
              # whose revoked credential slurmd would still refuse)
      if [ "${restarts:-0}" -ge 1 ] && [ -z "$kicked" ]; then
        sleep 2
        on_node a timeout 10 scontrol update JobId="$id" StartTime=now >/dev/null 2>&1 || true
        kicked=1
      fi ;;
  esac
  sleep 0.25
done
[ "$st" = COMPLETED ] || die "the preempted job $id ended $st (restarts ${restarts:-?}), not COMPLETED"
[ "${restarts:-0}" -ge 1 ] || die "job $id completed without being requeued (Restarts=$restarts): the signal came too late?"
grep -q "preempted (exit code 3)" "$tmp/preempt-$id.out" || die "the job log does not show exit code 3"
first=$(steps_of "$m0"); second=$(steps_of "$m1")
stopped=${first##*$'\n'}; resumed=${second%%$'\n'*}
[ "$stopped" -lt "$nsteps" ] || die "the first attempt reached the last step: not preempted"
[ "$resumed" -eq $((stopped + 1)) ] || die "the requeued job started at step $resumed, not $((stopped + 1))"
grep -q "resumed from .*/step_$stopped.h5" "$tmp/preempt-$id.out" || die "the requeued job did not resume from step_$stopped.h5"
grep -c "^job $id (restart [01]) on node-a,node-b:" "$tmp/preempt-$id.out" | grep -qx 2 ||
  die "the two attempts of job $id did not both run on node-a,node-b"
"$build/apps/gpt_train" --config "$ini" --input "$tmp/runs/synth_v64.h5" "${long[@]}" --metrics "$tmp/one_long.jsonl" \
  >/dev/null 2>&1 || die "the one-rank reference run of $nsteps steps failed"
cat "$m0" "$m1" > "$tmp/preempted.jsonl"
python3 "$src/tests/tools/compare_losses.py" "$tmp/one_long.jsonl" "$tmp/preempted.jsonl" --rtol 1e-5 ||
  die "the preempted and requeued two-node job's losses differ from one rank's"
echo "preempted job $id: stopped at step $stopped (exit 3), requeued, resumed at step $resumed on node-a,node-b, COMPLETED ($(( $(date +%s) - t0 )) s)"

# 4. node-b dies mid-run: the job ends by itself, naming node-b (not requeued: one node is left).
#    slurmctld marks node-b down after SlurmdTimeout (10 s here) and ends the job NODE_FAIL, srun
#    saying "Node failure on node-b", well before the ranks' --comm-timeout of 30 s.
t0=$(date +%s)
id=$(submit -J killed --no-requeue "$src/jobscripts/gpt_train.sbatch" "$ini" --tp 2 --steps 1000000 --log-every 1 \
     --comm-timeout 30)
m=$tmp/runs/killed-$id/metrics.0.jsonl
ok=
for _ in $(seq 300); do [ -s "$m" ] && { ok=1; break; }; sleep 0.1; done
[ -n "$ok" ] || die "the job $id to be killed logged no step within 30 s"
ip netns pids "$ns_b" | xargs -r kill -9
killed=$(date +%s)
st=$(wait_job_end "$id" 90)
[ "$st" = NODE_FAIL ] || { cat "$tmp/killed-$id.out"; die "job $id is '$st' 90 s after node-b died, not NODE_FAIL"; }
grep -q "srun: error: Node failure on node-b" "$tmp/killed-$id.out" ||
  { cat "$tmp/killed-$id.out"; die "the log of job $id does not name node-b ('Node failure on node-b')"; }
[ "$(job_field "$id" Restarts)" = 0 ] || die "job $id was requeued despite --no-requeue"
echo "node-b killed: job $id ended NODE_FAIL $(( $(date +%s) - killed )) s later, by itself, its log saying" \
     "'$(grep -m 1 -o "Node failure on node-b" "$tmp/killed-$id.out")'"
echo "two-node Slurm test passed in $(( $(date +%s) - t_start )) s"
