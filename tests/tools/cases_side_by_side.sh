# Sourced by test scripts whose cases are independent runs that mostly wait (MPI start-up, ranks
# taking turns on few cores): `run_case NAME COMMAND...` starts COMMAND in the background, at most
# $max_jobs at a time (default 3), its output to $tmp/NAME.out; `finish_cases` waits for all, prints
# each case's output in the order started, and exits 1 naming every case that failed.
# Needs $tmp (the script's scratch folder).
max_jobs=${max_jobs:-3}
case_names=()
run_case() {
  local name=$1
  shift
  case_names+=("$name")
  while [[ $(jobs -rp | wc -l) -ge $max_jobs ]]; do wait -n || true; done
  { "$@" >"$tmp/$name.out" 2>&1 && echo 0 || echo $?; } >"$tmp/$name.rc" &
}
finish_cases() {
  wait
  local name failed=0
  for name in "${case_names[@]}"; do
    cat "$tmp/$name.out"
    [[ $(cat "$tmp/$name.rc") == 0 ]] || { echo "error: case $name failed (status $(cat "$tmp/$name.rc"))"; failed=1; }
  done
  [[ $failed -eq 0 ]] || exit 1
}
