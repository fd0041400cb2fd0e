# Sourced by the tests/mpi/auto_layout*.sh scripts: the 4-rank machine file their searches read.
#   machine_file DEST   copies $TESSERA_MACHINE_FILE (written once by tests/tools/calibrate_machine.sh,
#                       the CTest fixture the three tests share) to DEST, failing if it is named but
#                       missing; without it (a script run by hand) calibrates on 4 ranks into DEST.
machine_file() {
  local dest=$1
  if [[ -n ${TESSERA_MACHINE_FILE:-} ]]; then
    [[ -s $TESSERA_MACHINE_FILE ]] ||
      { echo "error: TESSERA_MACHINE_FILE=$TESSERA_MACHINE_FILE is missing (the fixture mpi.calibrate_machine writes it)"; exit 1; }
    cp "$TESSERA_MACHINE_FILE" "$dest"
  else
    "${TESSERA_MPIEXEC:-mpirun}" --oversubscribe -np 4 "$build/apps/parallel_plan" calibrate --output "$dest" >/dev/null
  fi
}
