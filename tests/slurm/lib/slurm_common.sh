# What every Slurm test in tests/slurm shares (sourced, never run): the bound on the whole test,
# fail, the check of what Slurm needs here, a private munged, and the settings of slurm.conf that
# do not depend on the cluster's shape. Each test (or tests/slurm/lib/two_node_cluster.sh) adds
# its own lines: cluster name, host, ports, node and partition lines, timeouts, GRES.

fail() { echo "error: $*" >&2; exit 1; }

# bound_test_run NAME SECONDS SCRIPT ARGS...: reruns SCRIPT ARGS under `timeout` (the inner run
# cleans up on SIGTERM; -k kills it 15 s later if it does not) and exits with its status; in the
# inner run it returns at once. TESSERA_SLURM_TEST_TIMEOUT overrides SECONDS.
bound_test_run() {
  [ -z "${TESSERA_SLURM_TEST_INNER:-}" ] || return 0
  local name=$1 limit=${TESSERA_SLURM_TEST_TIMEOUT:-$2} script=$3 rc
  shift 3
  TESSERA_SLURM_TEST_INNER=1 timeout -k 15 "$limit" bash "$script" "$@" && rc=0 || rc=$?
  [ $rc -eq 124 ] && echo "error: the $name ran over $limit s" >&2
  exit $rc
}

# check_slurm_needs NAME [COMMAND...]: fails naming everything missing for the test NAME: Slurm's
# daemons and clients, munged, python3, the PMIx plugin and library, and the COMMANDs given.
# Sets plugdir (Slurm's plugin folder).
check_slurm_needs() {
  local name=$1 missing=() c
  shift
  for c in "$@" munged slurmctld slurmd sbatch sinfo scontrol scancel squeue python3; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  plugdir=$(dirname "$(ls /usr/lib/*/slurm-wlm/mpi_pmix.so /usr/lib/slurm/mpi_pmix.so 2>/dev/null | head -1)" 2>/dev/null || true)
  [ -n "$plugdir" ] && [ -f "$plugdir/mpi_pmix.so" ] || missing+=("mpi_pmix.so (slurm-wlm-basic-plugins)")
  grep -q 'libpmix\.so ' <<<"$(ldconfig -p)" || missing+=("libpmix.so (libpmix-dev)")
  [ ${#missing[@]} -eq 0 ] ||
    fail "missing for the $name: ${missing[*]} (install with: jobscripts/install_deps.sh test)"
}

# start_munged: a munged with its own key, socket and state in $tmp/munge, logging to
# $tmp/munged.log, in a process group of its own. Sets sock and munged_pid (to be killed on exit)
# and waits up to 5 s for the socket: the caller checks that it is there ([ -S "$sock" ]).
start_munged() {
  mkdir -p "$tmp/munge"
  chmod 700 "$tmp/munge"
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$tmp/munge/munge.key"
  sock=$tmp/munge/munge.socket
  setsid munged --foreground --force --socket="$sock" --key-file="$tmp/munge/munge.key" \
    --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed" \
    --log-file="$tmp/munged.log" >>"$tmp/munged.log" 2>&1 &
  munged_pid=$!
  local _
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  return 0
}

# write_slurm_conf FILE: the settings every test's cluster has (root daemons, munge on $sock,
# state, logs and TmpFS under $tmp, PMIx, no accounting, a random FirstJobId so that job ids, and
# so PMIx's /tmp-style names, differ between concurrent runs), then the caller's lines from stdin.
write_slurm_conf() {
  {
    cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
PluginDir=$plugdir
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
MinJobAge=600
FirstJobId=$(( 1000 + RANDOM % 60000 ))
TmpFS=$tmp/tmpfs
KillWait=5
InactiveLimit=0
EOF
    cat
  } > "$1"
}

# steps_of FILE: the logged training steps of a metrics file, one a line
steps_of() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "loss" in d: print(d["step"])' "$1"
}
