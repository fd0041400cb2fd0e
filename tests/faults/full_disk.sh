#!/usr/bin/env bash
# A real full disk (a 1200 KiB tmpfs, mounted here: the test runs as root, as the Slurm test does)
# while checkpoints are written, on 1, 2, 3 and 4 ranks: the run ends with exit 1 and the
# "no space left" error, no rank crashes (no signal), no .tmp is left, and the checkpoints written
# before the disk filled are intact (ckpt_tool verify).
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
disk=$tmp/disk
cleanup() { umount "$disk" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "error: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "this test mounts a small tmpfs, which needs root"
mkdir -p "$disk"
mount -t tmpfs -o size=1200k tmpfs "$disk" || fail "cannot mount a tmpfs at $disk (the test needs mount rights)"
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 1 --output "$tmp/d.h5" >/dev/null || exit 1
for np in 1 2 3 4; do
  rm -rf "${disk:?}"/*
  echo -n "$np rank(s): "
  timeout -k 10 120 mpirun --oversubscribe -np "$np" "$build/apps/gpt_train" --input "$tmp/d.h5" --layers 2 --hidden 32 \
    --heads 2 --seq-len 8 --global-batch 12 --steps 6 --checkpoint-every 1 --threads 1 --checkpoint-dir "$disk/ck" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq 1 ] || { cat "$tmp/err"; fail "exit code $rc, expected 1"; }
  grep -q "error: writing checkpoint $disk/ck/step_3.h5: no space left on device" "$tmp/err" ||
    { cat "$tmp/err"; fail "no 'no space left' error for step_3.h5"; }
  ! grep -Eiq "segmentation|signal [0-9]+|core dumped|exited on signal" "$tmp/err" || { cat "$tmp/err"; fail "a rank crashed"; }
  [ -z "$(ls "$disk/ck" | grep '\.tmp')" ] || fail "a .tmp was left: $(ls "$disk/ck")"
  for s in 1 2; do
    "$build/apps/ckpt_tool" verify "$disk/ck/step_$s.h5" >/dev/null 2>&1 || fail "step_$s.h5 does not verify"
  done
  echo "exit 1 naming the full disk, step_1.h5 and step_2.h5 intact"
done
