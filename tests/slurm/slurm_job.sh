#!/usr/bin/env bash
# jobscripts/gpt_train.sbatch on a real one-node Slurm (Debian's slurmctld/slurmd, munge), started
# here as root in a temporary folder (own munge socket and key, own ports, no systemd, no accounting):
#   1. a 4-rank (srun), 20-step gpt_train job completes: the job is COMPLETED, the metrics have
#      steps 1..20 and step_20.h5 exists; submitted again, it completes saying it had already
#      finished, and writes nothing; a job with --cpus-per-task=2 runs 2 threads per rank;
#   2. a longer job gets SIGTERM from `scancel --signal=TERM` (every step of the job, as a
#      preemption sends it) while it trains: gpt_train
#      checkpoints and exits 3, the script requeues it, the requeued job resumes from the checkpoint
#      (its first step is the one after it) and completes; steps 1..N are each logged exactly once,
#      and the loss curve equals an uninterrupted run's (mpirun, outside Slurm) to a relative 1e-5;
#   3. jobscripts/vit_train.sbatch launched by mpirun on 4 ranks completes with its evaluation, and
#      each script completes under the other launcher too (gpt_train by mpirun, vit_train by srun);
#      jobscripts/moe_train.sbatch completes under srun with expert parallelism (ep 2 x dp 2) and under
#      mpirun (dp 4);
#   4. a job with options that do not fit (--tp 3 on 4 ranks) FAILS with gpt_train's error line and
#      a non-zero exit code other than 3, and is not requeued.
# Everything runs under `timeout`; the daemons and any job processes are stopped on exit.
# usage: tests/slurm/slurm_job.sh BUILD SRC   (as root; needs: slurmctld slurmd slurm-client munge libpmix-dev)
set -euo pipefail
source "$(dirname "$0")/lib/slurm_common.sh"
bound_test_run "Slurm test" 170 "$0" "$@"
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
t_start=$(date +%s)

[ "$(id -u)" -eq 0 ] || fail "the Slurm test starts slurmd, which must run as root"
check_slurm_needs "Slurm test"
[ -x "$build/apps/gpt_train" ] && [ -x "$build/apps/data_prep" ] || fail "no gpt_train/data_prep in $build/apps"

tmp=$(mktemp -d /tmp/tessera-slurm.XXXXXX)
conf=$tmp/slurm.conf
pids=()
cleanup() {
  set +e
  trap - EXIT INT TERM
  if [ -f "$conf" ] && [ ${#pids[@]} -gt 0 ]; then
    timeout 5 scancel --full --quiet --user=root >/dev/null 2>&1
  fi
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  # anything still running with this cluster's SLURM_CONF (slurmstepd, job tasks) is ours
  for i in 1 2 3 4 5 6 7 8 9 10; do
    left=()
    for e in /proc/[0-9]*/environ; do
      p=${e#/proc/}; p=${p%/environ}
      [ "$p" = $$ ] && continue
      { tr '\0' '\n' < "$e"; } 2>/dev/null | grep -qx "SLURM_CONF=$conf" && left+=("$p")
    done
    [ ${#left[@]} -eq 0 ] && break
    if [ "$i" -lt 10 ]; then kill -TERM "${left[@]}" 2>/dev/null; sleep 0.5; else kill -KILL "${left[@]}" 2>/dev/null; fi
  done
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  [ -n "${TESSERA_KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

logs() {
  for f in "$tmp"/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/*.out; do
    [ -f "$f" ] && { echo "----- $f (last 40 lines)"; tail -40 "$f"; }
  done
  return 0
}
die() { logs; fail "$*"; }

# --- munge: own key, socket and state, in $tmp ---------------------------------------------------
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/runs" "$tmp/tmpfs"
start_munged
pids+=("$munged_pid")
[ -S "$sock" ] || die "munged did not start (no socket $sock)"

# --- slurm.conf: free loopback ports, everything under $tmp --------------------------------------
# Two free ports below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so that no
# outgoing connection (an MPI job of a test running beside this one) takes them before the daemons
# bind them.
read -r port_ctld port_d < <(python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
ports = []
for p in random.sample(range(10000, low), 200):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        ports.append(p)
    except OSError:
        pass
    finally:
        s.close()
    if len(ports) == 2:
        break
print(*ports)')
[ -n "$port_d" ] || die "no two free ports below the ephemeral range"

write_slurm_conf "$conf" <<EOF
ClusterName=tessera
SlurmctldHost=localhost
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
SlurmdSpoolDir=$tmp/spool
SlurmdPidFile=$tmp/slurmd.pid
SlurmdLogFile=$tmp/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$conf
setsid slurmctld -D -i -f "$conf" >>"$tmp/slurmctld.log" 2>&1 &
pids+=($!)
setsid slurmd -D -N localhost -f "$conf" >>"$tmp/slurmd.log" 2>&1 &
pids+=($!)

state=
for _ in $(seq 60); do
  state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || die "the node is not idle after 30 s (sinfo: '${state}')"
echo "slurm up in $(( $(date +%s) - t_start )) s: slurmctld :$port_ctld, slurmd :$port_d"

# --- the jobs --------------------------------------------------------------------------------------
export TESSERA_ROOT=$src BUILD_DIR=$build RUNS_DIR=$tmp/runs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# 4 ranks share 2 cores here while Slurm advertises 4 CPUs: ranks must yield while they wait
export OMPI_MCA_mpi_yield_when_idle=1
unset DATA LAUNCHER CONFIG
cd "$tmp"
job_field() {  # job_field JOBID Key -> the value of Key= in `scontrol show job`
  timeout 10 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
sbatch_args=(--parsable --ntasks=2 --nodes=1 --cpus-per-task=1 --time=5)
# Submits a job and waits until it has ended (sbatch --wait polls at growing intervals, up to
# half a minute late: poll scontrol instead); prints the job id; fails after $1 seconds.
run_job() {  # run_job TIMEOUT sbatch-arguments...
  local limit=$1 id st; shift
  id=$(timeout 30 sbatch "${sbatch_args[@]}" "$@") || return 1
  id=${id%%;*}
  for _ in $(seq $((limit * 5))); do
    st=$(job_field "$id" JobState)
    case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;; esac
    sleep 0.2
  done
  echo "$id"
}

# 1. a short job to the end
t0=$(date +%s)
id1=$(run_job 60 --ntasks=4 --ntasks-per-node=4 -J short "$src/jobscripts/gpt_train.sbatch" \
      "$src/inputs/gpt_slurm_tiny.ini") || die "sbatch of the short job failed"
st=$(job_field "$id1" JobState)
[ "$st" = COMPLETED ] || die "short job $id1 is $st, not COMPLETED"
m=$tmp/runs/short-$id1/metrics.0.jsonl
[ -f "$m" ] || die "no metrics file $m"
got=$(steps_of "$m" | tr '\n' ' ')
[ "$got" = "$(seq -s ' ' 1 20) " ] || die "short job logged steps '$got', not 1..20"
short_ck=$(ls -d "$tmp"/runs/short-*/checkpoints)  # the run's folder: job name and digest
[ -f "$short_ck/step_20.h5" ] || die "no checkpoint step_20.h5 of the short job"
[ -f "$tmp/runs/synth_v64.h5" ] || die "the job did not make the synthetic data set"
echo "short job $id1: COMPLETED, steps 1..20 logged, step_20.h5 written ($(( $(date +%s) - t0 )) s)"
# ... and submitted again: it has nothing to do, says so, completes, and changes nothing.
sum=$(md5sum "$short_ck/step_20.h5")
id1b=$(run_job 60 --ntasks=4 --ntasks-per-node=4 -J short "$src/jobscripts/gpt_train.sbatch" \
       "$src/inputs/gpt_slurm_tiny.ini") || die "sbatch of the finished job again failed"
st=$(job_field "$id1b" JobState)
[ "$st" = COMPLETED ] || die "the finished job submitted again ($id1b) is $st, not COMPLETED"
grep -q "already finished at step 20" "$tmp/runs/short-$id1b/output.0.log" || die "job $id1b does not say it had finished"
[ ! -e "$tmp/runs/short-$id1b/metrics.0.jsonl" ] || die "job $id1b wrote metrics although nothing was trained"
[ "$(md5sum "$short_ck/step_20.h5")" = "$sum" ] || die "job $id1b changed step_20.h5"
echo "the finished job submitted again ($id1b): COMPLETED, 'already finished at step 20', nothing written"

# 1b. threads per rank from Slurm's --cpus-per-task (no --threads, no OMP_NUM_THREADS)
id1c=$( (unset OMP_NUM_THREADS; run_job 60 --ntasks=2 --cpus-per-task=2 -J threads "$src/jobscripts/gpt_train.sbatch" \
        "$src/inputs/gpt_slurm_tiny.ini" --steps 2 --threads 0) ) || die "sbatch of the threads job failed"
[ "$(job_field "$id1c" JobState)" = COMPLETED ] || die "the threads job $id1c did not complete"
grep -q "2 rank(s), .* with 2 threads" "$tmp/runs/threads-$id1c/output.0.log" ||
  die "--cpus-per-task=2 did not give 2 threads per rank: $(grep -o 'rank(s).*threads' "$tmp/runs/threads-$id1c/output.0.log")"
echo "job $id1c with --cpus-per-task=2: 2 threads per rank"

# 2. preemption: SIGTERM to every step while it trains -> the ranks checkpoint and exit 3 ->
#    requeue -> resume -> done. (SIGTERM to the batch shell alone, `--batch`, makes Slurm cancel
#    the job; the scripts' own notice is USR1 to the shell, 120 s before the time limit.)
t0=$(date +%s)
nsteps=1000
id2=$(timeout 30 sbatch "${sbatch_args[@]}" -J preempt "$src/jobscripts/gpt_train.sbatch" \
      "$src/inputs/gpt_slurm_tiny.ini" --steps "$nsteps" --layers 4 --hidden 64 --log-every 100)
id2=${id2%%;*}
m0=$tmp/runs/preempt-$id2/metrics.0.jsonl
m1=$tmp/runs/preempt-$id2/metrics.1.jsonl
ok=
for _ in $(seq 300); do   # 30 s
  if [ -s "$m0" ] && [ "$(wc -l < "$m0")" -ge 3 ]; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || die "the preempt job $id2 logged no steps within 30 s (state $(job_field "$id2" JobState))"
timeout 10 scancel --signal=TERM "$id2" || die "scancel --signal=TERM $id2 failed"
echo "sent SIGTERM to job $id2 after step $(tail -1 "$m0" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')"

st=; restarts=0
for _ in $(seq 120); do   # 60 s
  st=$(job_field "$id2" JobState); restarts=$(job_field "$id2" Restarts)
  case $st in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;;
    PENDING)  # a requeued job waits for its BeginTime (Slurm holds it a little): start it soon; not in
              # the second of the requeue, whose revoked job credential slurmd would still refuse
      if [ "${restarts:-0}" -ge 1 ] && [ -z "${kicked:-}" ]; then
        sleep 2  # past the second of the requeue
        timeout 10 scontrol update JobId="$id2" StartTime=now >/dev/null 2>&1 || true
        kicked=1
      fi ;;
  esac
  sleep 0.5
done
[ "$st" = COMPLETED ] || die "preempted job $id2 ended $st (restarts ${restarts:-?}), not COMPLETED"
[ "${restarts:-0}" -ge 1 ] || die "job $id2 completed without being requeued (Restarts=$restarts): the signal came too late?"
[ -f "$m1" ] || die "the requeued job wrote no $m1"
grep -q "preempted (exit code 3)" "$tmp/preempt-$id2.out" || die "the job log does not show exit code 3"
first=$(steps_of "$m0"); second=$(steps_of "$m1")
stopped=${first##*$'\n'}; resumed=${second%%$'\n'*}  # last and first lines, no pipe
[ "$stopped" -lt "$nsteps" ] || die "the first run reached the last step $stopped: not preempted"
[ "$resumed" -eq $((stopped + 1)) ] || die "the requeued job started at step $resumed, not at $((stopped + 1)) (resume)"
[ -f "$(ls -d "$tmp"/runs/preempt-*/checkpoints)/step_$stopped.h5" ] || die "no checkpoint step_$stopped.h5"
grep -q "resumed from .*/step_$stopped.h5" "$tmp/preempt-$id2.out" || die "the requeued job did not resume from step_$stopped.h5"
[ -f "$(ls -d "$tmp"/runs/preempt-*/checkpoints)/step_$nsteps.h5" ] || die "no final checkpoint step_$nsteps.h5"
got=$(printf '%s\n%s\n' "$first" "$second" | tr '\n' ' ')
[ "$got" = "$(seq -s ' ' 1 "$nsteps") " ] || die "the two runs together did not log steps 1..$nsteps once each"
python3 - "$m0" "$m1" <<'EOF' || die "the loss curve does not continue across the requeue"
import json, sys
la = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
lb = [r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r]
print(f"losses: first {la[0]:.3f}, at the stop {la[-1]:.3f}, after the requeue {lb[0]:.3f}, last {lb[-1]:.3f}")
# a job restarted from scratch would repeat the first loss exactly (same seed, same data order)
assert lb[0] < la[0] - 0.05, "the requeued job starts from the initial loss: not resumed"
assert lb[-1] < la[0] - 1.0, "the run did not train"
EOF
# The same run without interruption (2 ranks, mpirun, outside Slurm): the same losses.
mpirun -np 2 "$build/apps/gpt_train" --config "$src/inputs/gpt_slurm_tiny.ini" --input "$tmp/runs/synth_v64.h5" \
  --steps "$nsteps" --layers 4 --hidden 64 --log-every 100 --metrics "$tmp/uninterrupted.jsonl" >/dev/null 2>&1 ||
  die "the uninterrupted reference run failed"
cat "$m0" "$m1" > "$tmp/preempted.jsonl"
python3 "$src/tests/tools/compare_losses.py" "$tmp/uninterrupted.jsonl" "$tmp/preempted.jsonl" --rtol 1e-5 ||
  die "the preempted and requeued job's losses differ from the uninterrupted run's"
echo "preempted job $id2: stopped at step $stopped (exit 3), requeued (Restarts=$restarts), resumed at step $resumed, COMPLETED ($(( $(date +%s) - t0 )) s)"
# 3. vit_train.sbatch, the mpirun launcher inside the allocation, 4 ranks
t0=$(date +%s)
id3=$(LAUNCHER=mpirun run_job 60 --ntasks=4 --ntasks-per-node=4 -J vit "$src/jobscripts/vit_train.sbatch" \
      "$src/inputs/vit_tiny.ini" --steps 20 --eval-every 20) || die "sbatch of the vit_train job failed"
st=$(job_field "$id3" JobState)
[ "$st" = COMPLETED ] || die "vit_train job $id3 is $st, not COMPLETED"
m=$tmp/runs/vit-$id3/metrics.0.jsonl
[ "$(steps_of "$m" | tail -1)" = 20 ] || die "the vit_train job did not log step 20"
grep -q '"eval_acc"' "$m" || die "the vit_train job logged no evaluation"
[ -f "$(ls -d "$tmp"/runs/vit-*/checkpoints)/step_20.h5" ] || die "no checkpoint step_20.h5 of the vit_train job"
echo "vit_train job $id3 (mpirun, 4 ranks): COMPLETED, 20 steps, evaluated, step_20.h5 written ($(( $(date +%s) - t0 )) s)"

# 3b. each script under its other launcher
for combo in gpt_train:mpirun:gpt_slurm_tiny.ini:20 vit_train:srun:vit_tiny.ini:20 moe_train:mpirun:moe_tiny.ini:20; do
  IFS=: read -r app launcher ini n <<< "$combo"
  t0=$(date +%s)
  id=$(LAUNCHER=$launcher run_job 60 --ntasks=4 --ntasks-per-node=4 -J "$app-$launcher" \
       "$src/jobscripts/$app.sbatch" "$src/inputs/$ini" --steps "$n") || die "sbatch of $app ($launcher) failed"
  st=$(job_field "$id" JobState)
  [ "$st" = COMPLETED ] || die "$app job $id under $launcher is $st, not COMPLETED"
  [ "$(steps_of "$tmp/runs/$app-$launcher-$id/metrics.0.jsonl" | tail -1)" = "$n" ] ||
    die "the $app job under $launcher did not log step $n"
  echo "$app job $id ($launcher, 4 ranks): COMPLETED, $n steps ($(( $(date +%s) - t0 )) s)"
done

# 3c. moe_train.sbatch with expert parallelism (ep 2 x dp 2) under srun
t0=$(date +%s)
id=$(run_job 60 --ntasks=4 --ntasks-per-node=4 -J moe "$src/jobscripts/moe_train.sbatch" "$src/inputs/moe_tiny.ini" \
     --steps 20 --ep 2 --eval-every 20) || die "sbatch of the moe_train job failed"
st=$(job_field "$id" JobState)
[ "$st" = COMPLETED ] || die "moe_train job $id is $st, not COMPLETED"
m="$tmp/runs/moe-$id/metrics.0.jsonl"
[ "$(steps_of "$m" | tail -1)" = 20 ] || die "the moe_train job did not log step 20"
grep -q '"dropped_tokens"' "$m" || die "the moe_train job logged no expert statistics"
echo "moe_train job $id (srun, ep 2 x dp 2): COMPLETED, 20 steps with expert statistics ($(( $(date +%s) - t0 )) s)"

# 4. options that do not fit the job: a clear error, a non-zero exit code, no requeue
id4=$(run_job 60 --ntasks=4 --ntasks-per-node=4 -J badopts "$src/jobscripts/gpt_train.sbatch" \
      "$src/inputs/gpt_slurm_tiny.ini" --tp 3) || die "sbatch of the job with bad options failed"
st=$(job_field "$id4" JobState); restarts=$(job_field "$id4" Restarts)
[ "$st" = FAILED ] || die "the job with bad options is $st, not FAILED"
[ "${restarts:-0}" -eq 0 ] || die "the job with bad options was requeued"
grep -q "error: the layout does not fit 4 ranks" "$tmp/badopts-$id4.out" || die "the job log lacks gpt_train's error line"
grep -Eq "failed with exit code [12]$" "$tmp/badopts-$id4.out" || die "the job log does not show exit code 1 or 2"
echo "job $id4 with --tp 3 on 4 ranks: FAILED with the layout error (exit code 1), not requeued"
echo "slurm test passed in $(( $(date +%s) - t_start )) s"
