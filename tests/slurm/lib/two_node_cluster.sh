# A private two-node Slurm cluster on this machine, for the tests in tests/slurm (sourced, never run).
# Two network namespaces, each with an address of its own on a veth pair (10.x.y.1 and .2, used by
# nothing else) and a hostname of its own (a UTS namespace): node-a runs slurmctld and a slurmd,
# node-b a slurmd; slurm.conf names both by NodeName with NodeAddr inside the namespaces, so every
# daemon, job step and MPI connection uses those addresses only. One munged (its socket is a file,
# reached from both namespaces) with its own key. Clients run on node-a: `on_node a sbatch ...`.
# Optional: GPUS_PER_NODE=N before start_cluster declares N fake GPUs a node (gres/gpu over character
# devices in $tmp/dev, so Slurm allocates them and sets CUDA_VISIBLE_DEVICES; nothing uses a device).
# The caller sources tests/slurm/lib/slurm_common.sh first (fail, munged, the shared slurm.conf),
# sets `build` and `src`, calls make_cluster_tmp (tmp, and the traps that clean up on exit) and
# start_cluster; cleanup_cluster kills every process in both namespaces and deletes them.

# on_node a|b COMMAND...: COMMAND inside that node's network namespace, under its hostname, in a
# mount namespace where it finds what a node has of its own: $tmp/hosts as /etc/hosts (both names
# resolve), a fresh /dev/shm (Open MPI's shared-memory segments, named by host and job), and a
# node-local $tmp/tmpfs, its TMPDIR (Open MPI's session folders) and Slurm's TmpFS (PMIx's per-step
# folders). So nothing of a node, killed or not, is seen by the other or by another test's "node-b".
# nsenter, not `ip netns exec`, which would mount a /sys without /sys/fs/cgroup, which slurmd needs.
on_node() {
  local node=$1; shift
  nsenter --net="/run/netns/$(ns_of "$node")" unshare --uts --mount /bin/sh -c '
    hostname "$0" && mount --bind "$1/hosts" /etc/hosts && mount -t tmpfs -o size=512m,mode=1777 shm /dev/shm &&
    mount --bind "$1/tmpfs-$0" "$1/tmpfs" && export TMPDIR="$1/tmpfs" && shift && exec "$@"' "node-$node" "$tmp" "$@"
}

cluster_id=$$
ns_a=tss${cluster_id}a ns_b=tss${cluster_id}b
net=10.$((cluster_id % 200 + 20)).$((cluster_id / 200 % 250 + 1)).0
addr_a=${net%.0}.1 addr_b=${net%.0}.2
ns_of() { case $1 in a) echo "$ns_a" ;; b) echo "$ns_b" ;; esac; }
munged_pid=

cleanup_cluster() {
  set +e
  for ns in "$ns_a" "$ns_b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  [ -n "$munged_pid" ] && kill -9 "$munged_pid" 2>/dev/null
  for ns in "$ns_a" "$ns_b"; do ip netns del "$ns" 2>/dev/null; done
  return 0
}

# make_cluster_tmp NAME: tmp, an empty folder /tmp/NAME.XXXXXX, and the traps that on exit stop
# the cluster and delete tmp (kept, and its path printed, when TESSERA_KEEP_TMP is set).
make_cluster_tmp() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  trap cleanup_cluster_tmp EXIT
  trap 'exit 130' INT TERM
}
cleanup_cluster_tmp() {
  trap - EXIT INT TERM
  cleanup_cluster
  [ -n "${TESSERA_KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}

# die MESSAGE: the cluster's logs, then fail
die() { cluster_logs; fail "$*"; }

cluster_logs() {
  for f in "$tmp"/slurmctld.log "$tmp"/slurmd.node-a.log "$tmp"/slurmd.node-b.log "$tmp"/*.out; do
    [ -f "$f" ] && { echo "----- $f (last 30 lines)"; tail -30 "$f"; }
  done
  return 0
}

# What the cluster needs; fails naming everything missing.
check_cluster_needs() {
  [ "$(id -u)" -eq 0 ] || fail "the two-node Slurm test makes network namespaces and starts slurmd: it must run as root"
  check_slurm_needs "two-node Slurm test" ip unshare nsenter
  ip netns list >/dev/null 2>&1 || fail "'ip netns' does not work here (iproute2 without network namespace support?)"
}

start_cluster() {
  ip netns add "$ns_a" && ip netns add "$ns_b" || fail "cannot make network namespaces (ip netns add)"
  ip link add "ts${cluster_id}a" type veth peer name "ts${cluster_id}b" || fail "cannot make a veth pair"
  ip link set "ts${cluster_id}a" netns "$ns_a" && ip link set "ts${cluster_id}b" netns "$ns_b" || fail "cannot move the veth ends"
  ip -n "$ns_a" addr add "$addr_a/24" dev "ts${cluster_id}a" && ip -n "$ns_b" addr add "$addr_b/24" dev "ts${cluster_id}b" ||
    fail "cannot give the namespaces their addresses"
  local ns
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "cannot bring up lo in $ns"; done
  ip -n "$ns_a" link set "ts${cluster_id}a" up && ip -n "$ns_b" link set "ts${cluster_id}b" up || fail "cannot bring up the veth pair"
  printf '127.0.0.1 localhost\n%s node-a\n%s node-b\n' "$addr_a" "$addr_b" > "$tmp/hosts"
  mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/runs" "$tmp/tmpfs" "$tmp/dev" "$tmp/spool/node-a" "$tmp/spool/node-b" \
    "$tmp/tmpfs-node-a" "$tmp/tmpfs-node-b"
  on_node a true && on_node b true ||
    fail "cannot start a process on the nodes (nsenter into the namespace, unshare --uts --mount, bind mounts, a tmpfs on /dev/shm)"
  start_munged
  disown "$munged_pid"
  [ -S "$sock" ] || fail "munged did not start (no socket $sock)"

  local gres_node="" gres_conf=""
  if [ "${GPUS_PER_NODE:-0}" -gt 0 ]; then
    local i
    for i in $(seq 0 $((GPUS_PER_NODE - 1))); do   # character devices, as slurmd requires (/dev/null's numbers)
      mknod "$tmp/dev/nvidia$i" c 1 3 || fail "cannot make the fake GPU device $tmp/dev/nvidia$i (mknod)"
    done
    gres_node="Gres=gpu:$GPUS_PER_NODE"
    gres_conf="GresTypes=gpu"
    echo "Name=gpu File=$tmp/dev/nvidia[0-$((GPUS_PER_NODE - 1))]" > "$tmp/gres.conf"
  fi
  conf=$tmp/slurm.conf
  # Each daemon binds in its own namespace: the standard ports are free there.
  write_slurm_conf "$conf" <<EOF
ClusterName=tessera2
SlurmctldHost=node-a($addr_a)
SlurmdSpoolDir=$tmp/spool/%n
SlurmdPidFile=$tmp/slurmd.%n.pid
SlurmdLogFile=$tmp/slurmd.%n.log
SlurmdTimeout=10
MessageTimeout=5
$gres_conf
NodeName=node-a NodeAddr=$addr_a CPUs=2 RealMemory=1000 $gres_node State=UNKNOWN
NodeName=node-b NodeAddr=$addr_b CPUs=2 RealMemory=1000 $gres_node State=UNKNOWN
PartitionName=debug Nodes=node-a,node-b Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$conf
  on_node a setsid slurmctld -D -i -f "$conf" >>"$tmp/slurmctld.log" 2>&1 &
  on_node a setsid slurmd -D -N node-a -f "$conf" >>"$tmp/slurmd.node-a.log" 2>&1 &
  on_node b setsid slurmd -D -N node-b -f "$conf" >>"$tmp/slurmd.node-b.log" 2>&1 &
  local state= _
  for _ in $(seq 60); do
    state=$(on_node a timeout 5 sinfo -h -o %T -n node-a,node-b 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$state" = "idle " ] && break
    sleep 0.5
  done
  [ "$state" = "idle " ] || { cluster_logs; fail "the two nodes are not idle after 30 s (sinfo: '$state')"; }
}

# job_field JOBID Key: the value of Key= in `scontrol show job`
job_field() {
  on_node a timeout 10 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

# wait_job_end JOBID LIMIT: waits until the job has ended (polling scontrol); its last state on stdout
wait_job_end() {
  local st _
  for _ in $(seq $(($2 * 4))); do
    st=$(job_field "$1" JobState)
    case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;; esac
    sleep 0.25
  done
  echo "$st"
}
