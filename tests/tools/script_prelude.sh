# Sourced by the test scripts called as `script.sh <build_dir> <source_dir>`: the checks each makes
# before it runs anything, failing (never skipping) with what to build or install.
#   script_args "$@"                      sets build and src (exit 2 with the usage otherwise)
#   need_apps data_prep gpt_train ...     each built under $build/apps
#   need_debian_python torch:python3-torch h5py:python3-h5py ...
#                                         sets py=/usr/bin/python3, which must import each module
#   make_scratch NAME                     sets tmp, a fresh folder removed at exit once the script
#                                         sets keep=0 (at its end), else kept and named for a look
#   run COMMAND ...                       echoes and runs it, its output in $tmp/log; on failure
#                                         prints that log and exits 1 naming the command

script_args() {
  if [[ $# -ne 2 ]]; then
    echo "usage: $0 <build_dir> <source_dir>" >&2
    exit 2
  fi
  build=$1
  src=$2
}

need_apps() {
  local exe
  for exe in "$@"; do
    [[ -x $build/apps/$exe ]] || { echo "FAIL: $build/apps/$exe not found (build the target '$exe' first)" >&2; exit 1; }
  done
}

need_debian_python() {
  py=/usr/bin/python3
  if [[ ! -x $py ]]; then
    echo "FAIL: $py not found (Debian: apt-get install python3 python3-torch python3-h5py python3-numpy)" >&2
    exit 1
  fi
  local pair missing=()
  for pair in "$@"; do
    "$py" -c "import ${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "FAIL: $py cannot import what this test needs; install the Debian package(s): ${missing[*]}" >&2
    echo "      (apt-get install ${missing[*]})" >&2
    exit 1
  fi
}

make_scratch() {
  scratch_name=$1
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-$1.XXXXXX")
  keep=1
  trap 'if [[ $keep -eq 0 ]]; then rm -rf "$tmp"; else echo "$scratch_name: files kept in $tmp" >&2; fi' EXIT
}

run() {
  echo "+ $*"
  local rc=0
  "$@" >"$tmp/log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    cat "$tmp/log"
    echo "FAIL: command exited with status $rc: $*" >&2
    exit 1
  fi
}
