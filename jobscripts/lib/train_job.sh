# Shared by the job scripts (gpt_train.sbatch, gpt_train_gpu.sbatch, moe_train.sbatch,
# vit_train.sbatch): sourced, never run. The caller sets APP (the executable), DEFAULT_CONFIG, a
# function make_default_data that prints the path of the data set to use when DATA is unset (making
# it if missing; the language models use make_synth_tokens below), and DATA_OPTION (--input); optionally RANK_WRAPPER (a script of the repository run per rank in front of the app:
# lib/gpu_rank.sh) and APP_DEVICE_ARGS (options before the extra ones: --device cuda). Then
# `run_training "$@"` launches the app with the config and extra options, forwards USR1/TERM to it,
# and on exit code 3 (preempted: checkpoint written) requeues the job.

die() { echo "error: $*" >&2; exit 1; }

# The language models' default data: a synthetic token corpus (vocabulary 64) in the runs folder.
# data_prep writes to a temporary name first so that concurrent jobs never read a partial file.
make_synth_tokens() {  # build runs job
  local data=$2/synth_v64.h5
  [ -f "$data" ] || { "$1/apps/data_prep" synth --vocab 64 --tokens 400000 --seed 1 --output "$data.$3.tmp" >&2 &&
                      mv -f "$data.$3.tmp" "$data"; } || return 1
  echo "$data"
}

run_training() {
  root=${TESSERA_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
  cd "$root" || { echo "error: cannot cd to the repository $root" >&2; exit 1; }
  build=${BUILD_DIR:-$root/build}
  runs=${RUNS_DIR:-$root/runs}
  config=${1:-${CONFIG:-$DEFAULT_CONFIG}}
  [ $# -gt 0 ] && shift
  launcher=${LAUNCHER:-srun}
  job=${SLURM_JOB_ID:-local$$}
  name=${SLURM_JOB_NAME:-$APP}
  restart=${SLURM_RESTART_COUNT:-0}

  [ -f "$config" ] || die "no config file $config"
  [ -x "$build/apps/$APP" ] || die "no $build/apps/$APP (build first: jobscripts/build.sh)"

  out=$runs/$name-$job
  mkdir -p "$out" || die "cannot create $out"

  data=${DATA:-$(make_default_data "$build" "$runs" "$job")} || die "could not make the default data set"
  [ -f "$data" ] || die "no data set $data"
  # The run's checkpoints live under its identity: RUN_NAME, or the job name and a digest of the
  # config file's contents and the data set's path, so that a requeue or a resubmission of the same
  # run (with more --steps, say) continues it and jobs of one name with other configs or data never
  # do. (Extra options that change the model share the folder: --resume auto then refuses its
  # checkpoints naming the fields; give such a run its own RUN_NAME.)
  run_id=${RUN_NAME:-$name-$( { cat "$config"; printf '%s\n' "$data"; } | sha1sum | cut -c1-10)}
  ckpt=$runs/$run_id/checkpoints
  mkdir -p "$ckpt" || die "cannot create $ckpt"

  args=(--config "$config" "$DATA_OPTION" "$data" --checkpoint-dir "$ckpt" --resume auto
        --metrics "$out/metrics.$restart.jsonl" ${APP_DEVICE_ARGS[@]+"${APP_DEVICE_ARGS[@]}"} "$@")
  local rank_cmd=("$build/apps/$APP")
  if [ -n "${RANK_WRAPPER:-}" ]; then
    [ -x "$root/$RANK_WRAPPER" ] || die "no executable $root/$RANK_WRAPPER"
    rank_cmd=("$root/$RANK_WRAPPER" "$build/apps/$APP")
  fi
  case $launcher in
    srun)   cmd=(srun --mpi=pmix --kill-on-bad-exit=1 "${rank_cmd[@]}" "${args[@]}") ;;
    mpirun) cmd=(mpirun "${rank_cmd[@]}" "${args[@]}") ;;
    *)      die "LAUNCHER must be srun or mpirun, not $launcher" ;;
  esac
  echo "job $job (restart $restart) on ${SLURM_JOB_NODELIST:-$(hostname)}: ${cmd[*]}"

  # With --signal=B:USR1 only this shell gets the signal: forward it to the launcher, which passes it
  # on to every rank (srun and mpirun both forward SIGUSR1). Signals to the steps reach ranks directly.
  pid=
  forward() { [ -n "$pid" ] && kill -s "$1" "$pid" 2>/dev/null; }
  trap 'echo "job $job: got SIGUSR1, asking $APP to checkpoint and stop"; forward USR1' USR1
  # mpirun does not pass SIGTERM on (it ends its ranks at once): it gets SIGUSR1 instead, which it
  # forwards and which the app treats alike (checkpoint at the next step boundary, exit 3).
  if [ "$launcher" = mpirun ]; then trap 'forward USR1' TERM; else trap 'forward TERM' TERM; fi
  # The app's output (both streams) also goes to $out/output.<restart>.log, which the exit-0 check
  # below reads.
  log=$out/output.$restart.log
  "${cmd[@]}" > >(tee -a "$log") 2> >(tee -a "$log" >&2) &
  pid=$!
  # `wait` returns early when a trapped signal arrives: wait again until the launcher has exited.
  while :; do
    wait "$pid"; code=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - USR1 TERM

  case $code in
    0) # srun can exit 0 when its tasks failed to launch: $APP creates its metrics file whenever it
       # trains, and says so when the run had already finished (a resubmitted job: nothing to do)
       if [ ! -f "$out/metrics.$restart.jsonl" ]; then
         for _ in $(seq 20); do grep -q "already finished at step" "$log" 2>/dev/null && break; sleep 0.1; done
         grep -q "already finished at step" "$log" 2>/dev/null ||
           die "$launcher exited 0 but $APP did not run (no metrics file)"
         echo "job $job: $APP had already finished in $ckpt; nothing to do"; exit 0
       fi
       echo "job $job: done"; exit 0 ;;
    3) echo "job $job: preempted (exit code 3), checkpoint in $ckpt; requeueing"
       if [ -n "${SLURM_JOB_ID:-}" ]; then
         # Let the step end first: slurmstepd can outlive srun by seconds, and the requeued job
         # reuses the step id, whose PMIx socket a lingering step daemon still holds (the new step
         # then fails to launch). Wait (30 s at most) until Slurm lists no step of this job but the
         # batch one and no step daemon of it runs on this node.
         for _ in $(seq 60); do
           if ! squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null | grep -qv -e '\.batch$' -e '\.extern$' &&
              ! pgrep -f "^slurmstepd: \[$SLURM_JOB_ID\.[0-9]+\]" >/dev/null; then
             break
           fi
           sleep 0.5
         done
         scontrol requeue "$SLURM_JOB_ID" || die "scontrol requeue $SLURM_JOB_ID failed"
       fi
       exit 0 ;;
    *) echo "job $job: $APP failed with exit code $code" >&2; exit "$code" ;;
  esac
}
