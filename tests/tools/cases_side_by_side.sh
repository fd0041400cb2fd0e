# Sourced by test scripts whose cases are independent launches that mostly wait (MPI start-up, ranks
# taking turns on few cores): it owns starting them side by side, waiting for them, each case's exit
# status and failing with a failed case's output. A script runs them in rounds: start some, wait,
# check their outputs, start more.
#   run_case NAME COMMAND...  starts COMMAND in the background, at most $max_jobs at a time (default
#                             3; 0: no limit), its stdout in $tmp/NAME.out and its stderr there too
#                             or, with stderr_apart=1, in $tmp/NAME.err
#   wait_cases                waits for the round's cases; case_status[NAME] holds each exit status
#   finish_cases              wait_cases, then prints each case's output in the order started (with
#                             quiet_cases=1 only a failed case's) and exits 1 naming every failed case
# Needs $tmp (the script's scratch folder).
max_jobs=${max_jobs:-3} stderr_apart=${stderr_apart:-0} quiet_cases=${quiet_cases:-0}
declare -gA case_status=()
cases_started=() cases_waited=()
run_case() {
  local name=$1
  shift
  cases_started+=("$name")
  while [[ $max_jobs -gt 0 && $(jobs -rp | wc -l) -ge $max_jobs ]]; do wait -n || true; done
  {
    exec </dev/null >"$tmp/$name.out"
    if [[ $stderr_apart == 1 ]]; then exec 2>"$tmp/$name.err"; else exec 2>&1; fi
    local status=0
    "$@" || status=$?
    echo "$status" >"$tmp/$name.rc"
  } &
}
wait_cases() {
  wait
  local name
  cases_waited=("${cases_started[@]}") cases_started=()
  for name in "${cases_waited[@]}"; do case_status[$name]=$(<"$tmp/$name.rc"); done
}
print_case() {
  cat "$tmp/$1.out"
  [[ $stderr_apart != 1 ]] || cat "$tmp/$1.err"
}
finish_cases() {
  wait_cases
  local name failed=0
  for name in "${cases_waited[@]}"; do
    if [[ ${case_status[$name]} != 0 ]]; then
      print_case "$name"
      echo "error: case $name failed (status ${case_status[$name]})"
      failed=1
    elif [[ $quiet_cases != 1 ]]; then
      print_case "$name"
    fi
  done
  [[ $failed -eq 0 ]] || exit 1
}
