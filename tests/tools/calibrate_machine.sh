#!/usr/bin/env bash
# The CTest fixture mpi.calibrate_machine: one 4-rank `parallel_plan calibrate` (about 30 s) whose
# machine file the three tests/mpi/auto_layout*.sh tests share (tests/tools/machine_file.sh) instead
# of each calibrating alike; tests/mpi/auto_layout.sh checks the file's structure as before.
# usage: calibrate_machine.sh <build_dir> <machine file to write>
set -euo pipefail
build=$1
out=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=${TESSERA_MPIEXEC:-mpirun}
command -v "$mpirun" >/dev/null || { echo "mpirun not found (set TESSERA_MPIEXEC)"; exit 1; }
[ -x "$build/apps/parallel_plan" ] || { echo "$build/apps/parallel_plan not built"; exit 1; }
mkdir -p "$(dirname "$out")"
rm -f "$out"  # calibrate never writes over a file
"$mpirun" --oversubscribe -np 4 "$build/apps/parallel_plan" calibrate --output "$out" >/dev/null
[ -s "$out" ] || { echo "calibrate wrote no $out"; exit 1; }
echo "machine file for the auto_layout tests: $out"
