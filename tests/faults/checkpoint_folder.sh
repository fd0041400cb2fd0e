#!/usr/bin/env bash
# A checkpoint folder belongs to one run:
#   1. a lock: a second job on a folder in use stops naming the first (host, process, Slurm job),
#      a real one and a lock file naming a live process; a lock left by a process that is gone, or
#      by this same Slurm job (a requeue), is taken over; one of another host is not;
#   2. a fresh run into a folder of checkpoints is refused (nothing changed) unless --overwrite,
#      which moves them into a set_aside_<time> folder (nothing deleted);
#   3. --resume auto continues only the same run: another seed or other training data is refused
#      naming both; an explicit --resume FILE may change them (a warning);
#   4. resuming an earlier step moves the later checkpoints aside, byte for byte, instead of
#      replacing them (and keeps the metrics lines it cuts beside the file); --keep-checkpoints
#      prunes only older ones, and a run resumed from a file elsewhere into a folder of another
#      run's checkpoints is refused without --overwrite;
#   5. names that merely look like checkpoints (step_0010.h5, step_7.h5.bak, a folder step_9.h5)
#      never take part in the choice.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "error: $*"; exit 1; }
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 1 --output "$tmp/d.h5" >/dev/null || exit 1
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 2 --output "$tmp/e.h5" >/dev/null || exit 1
gpt=("$build/apps/gpt_train" --layers 1 --hidden 16 --heads 2 --seq-len 8 --global-batch 4 --threads 1)
train() { timeout -k 5 120 "${gpt[@]}" "$@" >"$tmp/out" 2>"$tmp/err"; }
refused() {  # WORDS command...: a non-zero exit naming WORDS
  local words=$1; shift
  "$@"
  local rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$tmp/err"; fail "expected a refusal naming '$words' (exit $rc)"; }
  grep -qF -- "$words" "$tmp/err" || { cat "$tmp/err"; fail "stderr lacks '$words'"; }
}
ck=$tmp/ck
lock=$ck/.tessera.lock

# 1. A real second job while the first trains.
"${gpt[@]}" --input "$tmp/d.h5" --steps 100000 --checkpoint-dir "$ck" >/dev/null 2>&1 &
first=$!
for _ in $(seq 100); do [ -s "$lock" ] && break; sleep 0.1; done
[ -s "$lock" ] || fail "the running job holds no lock file"
echo -n "second job on a folder in use: "
refused "in use by another job (host $(hostname), process $first" train --input "$tmp/d.h5" --steps 2 --checkpoint-dir "$ck"
kill -9 "$first"; wait "$first" 2>/dev/null
echo "refused naming the first"
echo -n "the killed job's lock: "
train --input "$tmp/d.h5" --steps 2 --checkpoint-dir "$ck" --resume auto || { cat "$tmp/err"; fail "a stale lock blocked the run"; }
grep -q "taking over the lock" "$tmp/err" || fail "no word on the stale lock taken over"
[ ! -e "$lock" ] || fail "the lock outlived its run"
echo "taken over (its process is gone), removed at the end"
sleep 300 & alive=$!
printf 'host %s\npid %s\nslurm_job \nsince then\n' "$(hostname)" "$alive" >"$lock"
echo -n "a lock naming a live process: "
refused "process $alive" train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" --resume auto
[ "$(sed -n 2p "$lock")" = "pid $alive" ] || fail "the lock file was changed"
echo "refused, lock kept"
printf 'host elsewhere\npid 1\nslurm_job 77\nsince then\n' >"$lock"
echo -n "another host's lock: "
refused "host elsewhere, process 1, Slurm job 77" train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" --resume auto
echo "refused"
echo -n "the same Slurm job's lock (requeued): "
SLURM_JOB_ID=77 train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" --resume auto ||
  { cat "$tmp/err"; fail "a requeued job could not take its own lock"; }
echo "taken over"
kill "$alive"

# 2. A fresh run into the folder (it holds step_2 and step_4 now).
sum=$(md5sum "$ck/step_4.h5" | cut -d' ' -f1)
echo -n "a fresh run into a folder of checkpoints: "
refused "holds 2 checkpoint(s) of an earlier run" train --input "$tmp/d.h5" --steps 2 --checkpoint-dir "$ck"
[ "$(md5sum "$ck/step_4.h5" | cut -d' ' -f1)" = "$sum" ] || fail "a refused run changed step_4.h5"
train --input "$tmp/d.h5" --steps 2 --checkpoint-dir "$ck" --overwrite || { cat "$tmp/err"; fail "--overwrite failed"; }
aside=$(ls -d "$ck"/set_aside_* | head -1)
[ "$(md5sum "$aside/step_4.h5" | cut -d' ' -f1)" = "$sum" ] || fail "--overwrite did not keep step_4.h5 in $aside"
[ -f "$ck/step_2.h5" ] && [ ! -e "$ck/step_4.h5" ] || fail "the folder does not hold the new run's step_2.h5 alone"
echo "refused; --overwrite set the old ones aside ($(basename "$aside"))"
rm -rf "$aside"

# 3. The run's identity.
echo -n "--resume auto with another seed: "
refused "belongs to another run (seed 1234 there, 5 here)" train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" --resume auto --seed 5
echo -n "refused; with other training data: "
refused "belongs to another run (training data of" train --input "$tmp/e.h5" --steps 4 --checkpoint-dir "$ck" --resume auto
echo -n "refused; --resume FILE with another seed: "
train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" --resume "$ck/step_2.h5" --seed 5 ||
  { cat "$tmp/err"; fail "an explicit --resume FILE of another seed was refused"; }
grep -q "of another run: seed 1234 there, 5 here" "$tmp/err" || fail "no warning on the other seed"
echo "continued, with a warning"
mkdir "$tmp/other"
cp "$ck/step_2.h5" "$tmp/other/step_2.h5"
echo -n "a run resumed from a file elsewhere into a folder of checkpoints: "
refused "holds 2 checkpoint(s) of an earlier run" train --input "$tmp/d.h5" --steps 4 --checkpoint-dir "$ck" \
  --resume "$tmp/other/step_2.h5" --keep-checkpoints 1
[ -f "$ck/step_2.h5" ] && [ -f "$ck/step_4.h5" ] || fail "a refused run removed checkpoints"
echo "refused, nothing pruned"

# 4. Later checkpoints are set aside when an earlier one is resumed; pruning keeps them.
rm -rf "$ck"
train --input "$tmp/d.h5" --steps 6 --checkpoint-dir "$ck" --checkpoint-every 2 --metrics "$tmp/m.jsonl" ||
  { cat "$tmp/err"; fail "training failed"; }
sum4=$(md5sum "$ck/step_4.h5" | cut -d' ' -f1); sum6=$(md5sum "$ck/step_6.h5" | cut -d' ' -f1)
echo -n "resuming step 2 of 2, 4, 6 with --keep-checkpoints 1: "
train --input "$tmp/d.h5" --steps 6 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 1 \
  --resume "$ck/step_2.h5" --metrics "$tmp/m.jsonl" || { cat "$tmp/err"; fail "the resume failed"; }
[ "$(grep -c '"loss"' "$tmp/m.jsonl.after_step_2")" -eq 4 ] || fail "the metrics lines of steps 3-6 were not kept beside the file"
aside=$(ls -d "$ck"/set_aside_* | head -1)
[ "$(md5sum "$aside/step_4.h5" | cut -d' ' -f1)" = "$sum4" ] && [ "$(md5sum "$aside/step_6.h5" | cut -d' ' -f1)" = "$sum6" ] ||
  fail "the later checkpoints were not kept byte for byte in $aside"
[ "$(cd "$ck" && ls step_*.h5)" = "step_6.h5" ] || fail "the folder holds $(cd "$ck" && ls step_*.h5 | tr '\n' ' '), not step_6.h5 alone"
echo "4 and 6 set aside unchanged, the new run's step_6.h5 kept alone, the old metrics lines kept"

# 5. Look-alike names.
rm -rf "$ck"
train --input "$tmp/d.h5" --steps 2 --checkpoint-dir "$ck" || { cat "$tmp/err"; fail "training failed"; }
cp "$ck/step_2.h5" "$ck/step_0010.h5"; cp "$ck/step_2.h5" "$ck/step_7.h5.bak"; mkdir "$ck/step_9.h5"
echo -n "look-alikes beside step_2.h5: "
train --input "$tmp/d.h5" --steps 3 --checkpoint-dir "$ck" --resume auto || { cat "$tmp/err"; fail "the resume failed"; }
grep -q "resumed from $ck/step_2.h5" "$tmp/out" "$tmp/err" || { cat "$tmp/out" "$tmp/err"; fail "not resumed from step_2.h5"; }
! grep -q "skipping checkpoint" "$tmp/err" || fail "a look-alike was considered: $(grep skipping "$tmp/err")"
[ -f "$ck/step_0010.h5" ] && [ -f "$ck/step_7.h5.bak" ] && [ -d "$ck/step_9.h5" ] || fail "a look-alike was moved"
echo "resumed from step_2.h5, the look-alikes ignored and untouched"
