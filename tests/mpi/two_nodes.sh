#!/usr/bin/env bash
# Two nodes on this machine: two network namespaces, each with an address of its own on a veth pair
# (10.x.y.1 and .2, used by nothing else) and a hostname of its own (a UTS namespace), joined by
# Open MPI over TCP with a host file and an rsh agent that enters the right namespace. Checks:
#   1. the node-local rank mapping (which GPU a rank takes) agrees with the launcher on both nodes;
#   2. gpt_train at dp 2 x tp 2 (a tp group per node, dp across them) equals one rank's losses;
#   3. a node that dies mid-run (every process in its namespace killed) ends the job, non-zero and
#      within the time limit, naming the lost node (by its host-file name).
# Needs root (namespaces), iproute2 and util-linux's unshare.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "error: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "the two-node test makes network namespaces, which needs root"
command -v ip >/dev/null && command -v unshare >/dev/null || fail "the two-node test needs ip (iproute2) and unshare"
tmp=$(mktemp -d)
id=$$
ns_a=tsr${id}a ns_b=tsr${id}b
net=10.$((id % 200 + 20)).$((id / 200 % 250)).0
addr_a=${net%.0}.1 addr_b=${net%.0}.2
cleanup() {
  for ns in "$ns_a" "$ns_b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$ns_a" && ip netns add "$ns_b" || fail "cannot make network namespaces"
ip link add "tv${id}a" type veth peer name "tv${id}b" || fail "cannot make a veth pair"
ip link set "tv${id}a" netns "$ns_a" && ip link set "tv${id}b" netns "$ns_b" || exit 1
ip -n "$ns_a" addr add "$addr_a/24" dev "tv${id}a" && ip -n "$ns_b" addr add "$addr_b/24" dev "tv${id}b" || exit 1
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "tv${id}a" up && ip -n "$ns_b" link set "tv${id}b" up || exit 1

# What a node has of its own, set up in its mount namespace: a fresh /dev/shm and a TMPDIR in $tmp
# (Open MPI's shared-memory segments and session folders, named by host and job), so that a killed
# node leaves nothing behind and no other test's "node-a" or "node-b" is seen.
mkdir -p "$tmp/tmp-node-a" "$tmp/tmp-node-b"
shm='mount -t tmpfs -o size=512m,mode=1777 shm /dev/shm'
# The rsh agent: `agent HOST COMMAND...` runs COMMAND in HOST's namespace under its hostname.
cat >"$tmp/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in $addr_a) ns=$ns_a name=node-a ;; $addr_b) ns=$ns_b name=node-b ;; *) echo "unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts --mount /bin/sh -c "hostname \$name && $shm && export TMPDIR=$tmp/tmp-\$name && exec \$*"
AGENT
chmod +x "$tmp/agent.sh"
printf '%s slots=2\n%s slots=2\n' "$addr_a" "$addr_b" >"$tmp/hosts"
# two_nodes LIMIT COMMAND...: mpirun on node-a, two ranks a node, killed after LIMIT seconds.
two_nodes() {
  local limit=$1; shift
  timeout -k 10 "$limit" ip netns exec "$ns_a" unshare --uts --mount /bin/sh -c \
    'hostname node-a && mount -t tmpfs -o size=512m,mode=1777 shm /dev/shm && export TMPDIR="$0" && exec "$@"' "$tmp/tmp-node-a" \
    mpirun --hostfile "$tmp/hosts" -np 4 --mca plm_rsh_agent "$tmp/agent.sh" --mca oob_tcp_if_include "$net/24" \
    --mca btl_tcp_if_include "$net/24" --mca btl tcp,self "$@"
}

echo -n "node-local ranks on two nodes: "
two_nodes 120 "$build/tests/test_node_local_rank" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "the node-local rank test failed"; }
echo "agree with the launcher"

"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/d.h5" >/dev/null || exit 1
common=(--input "$tmp/d.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3
        --warmup 2 --seed 11 --threads 1)
"$build/apps/gpt_train" "${common[@]}" --steps 10 --metrics "$tmp/one.jsonl" >/dev/null 2>&1 || fail "the one-rank run failed"
echo -n "dp 2 x tp 2 over two nodes: "
two_nodes 180 "$build/apps/gpt_train" "${common[@]}" --steps 10 --tp 2 --metrics "$tmp/two.jsonl" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "the two-node run failed"; }
python3 "$src/tests/tools/compare_losses.py" "$tmp/one.jsonl" "$tmp/two.jsonl" --rtol 1e-5 || exit 1

echo -n "node-b dies mid-run: "
two_nodes 300 "$build/apps/gpt_train" "${common[@]}" --tp 2 --steps 1000000 --comm-timeout 30 >"$tmp/out" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "step 10/" "$tmp/out" 2>/dev/null && break; sleep 0.2; done
start=$SECONDS
ip netns pids "$ns_b" | xargs -r kill -9
timeout 90 tail --pid="$job" -f /dev/null || fail "the job still runs 90 s after node-b died"
wait "$job"; rc=$?
[ "$rc" -ne 0 ] || fail "the job exited 0 although node-b died"
grep -q "lost communication with a remote daemon" "$tmp/out" && grep -q "on node $addr_b" "$tmp/out" ||
  { cat "$tmp/out"; fail "the job's output does not name the lost node ($addr_b, as the host file names it)"; }
echo "the job ended in $((SECONDS - start)) s with exit code $rc, naming the lost node $addr_b"
