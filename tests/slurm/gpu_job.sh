#!/usr/bin/env bash
# jobscripts/gpt_train_gpu.sbatch on the two-node Slurm of tests/slurm/lib/two_node_cluster.sh, with
# two fake GPUs a node (Slurm's gres/gpu over stand-in device files) and a fake nvidia-smi, running a
# CPU build with DEVICE=cpu: what is checked is the script, not a GPU. Checks:
#   1. a 2-node job, 2 ranks and 2 GPUs a node (srun): every rank gets the GPU of its node-local index
#      as its only visible device (rank 0 and 2: GPU 0, rank 1 and 3: GPU 1, on node-a and node-b),
#      every rank is given --comm-backend nccl, and the job completes; the same under mpirun;
#   2. without Slurm's GPU list (CUDA_VISIBLE_DEVICES unset) the ranks take nvidia-smi's GPUs by index;
#   3. more ranks than GPUs on a node (2 ranks, --gpus-per-node=1) fails naming the node and the rank,
#      not requeued.
# usage: tests/slurm/gpu_job.sh BUILD SRC   (as root; needs what tests/slurm/two_nodes.sh needs)
set -euo pipefail
source "$(dirname "$0")/lib/slurm_common.sh"
bound_test_run "GPU job script test" 180 "$0" "$@"
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
t_start=$(date +%s)
for f in jobscripts/gpt_train_gpu.sbatch jobscripts/lib/gpu_rank.sh jobscripts/lib/train_job.sh; do
  bash -n "$src/$f" || fail "$f does not parse (bash -n)"
done
source "$src/tests/slurm/lib/two_node_cluster.sh"
check_cluster_needs
for exe in apps/gpt_train apps/data_prep; do [ -x "$build/$exe" ] || fail "no $build/$exe: build first"; done

make_cluster_tmp tessera-slurmgpu

GPUS_PER_NODE=2 start_cluster
echo "two nodes with 2 fake GPUs each up in $(( $(date +%s) - t_start )) s"
# nvidia-smi as a node with four GPUs answers gpu_rank.sh's query
mkdir -p "$tmp/bin"
cat > "$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/sh
case "$*" in
  *--query-gpu=index*) printf '0\n1\n2\n3\n' ;;
  *) echo "fake nvidia-smi (tests/slurm/gpu_job.sh): $*" ;;
esac
SMI
chmod +x "$tmp/bin/nvidia-smi"
export PATH=$tmp/bin:$PATH
export TESSERA_ROOT=$src BUILD_DIR=$build RUNS_DIR=$tmp/runs DEVICE=cpu
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset DATA LAUNCHER CONFIG RUN_NAME TESSERA_CUDA_COMM COMM_BACKEND CUDA_VISIBLE_DEVICES
cd "$tmp"
ini=$src/inputs/gpt_slurm_tiny.ini
submit() {  # submit SBATCH-ARGS...: prints the job id
  local id
  id=$(on_node a timeout 30 sbatch --parsable --nodes=2 --cpus-per-task=1 --time=5 "$@") || die "sbatch $* failed"
  echo "${id%%;*}"
}
# mapping_of LOG: the "rank R NODE GPU COMM" of each rank's line, sorted by rank
mapping_of() {
  sed -n 's/^rank \([0-9]*\) on \(node-[ab]\) (local rank [0-9]*): CUDA_VISIBLE_DEVICES=\([^,]*\), of .*--comm-backend \(.*\)$/\1 \2 \3 \4/p' "$1" | sort -n
}
want=$'0 node-a 0 nccl\n1 node-a 1 nccl\n2 node-b 0 nccl\n3 node-b 1 nccl'

# 1. srun and mpirun, 2 ranks and 2 GPUs a node
for launcher in srun mpirun; do
  t0=$(date +%s)
  id=$(LAUNCHER=$launcher submit -J "gpu-$launcher" --ntasks-per-node=2 --gpus-per-node=2 \
       "$src/jobscripts/gpt_train_gpu.sbatch" "$ini" --steps 4 --tp 2)
  st=$(wait_job_end "$id" 90)
  log=$tmp/gpu-$launcher-$id.out
  [ "$st" = COMPLETED ] || { cat "$log"; die "the GPU script's job $id ($launcher) is $st, not COMPLETED"; }
  got=$(mapping_of "$log")
  [ "$got" = "$want" ] || { cat "$log"; die "job $id ($launcher): rank, node, GPU, --comm-backend are
$got
not
$want"; }
  grep -q -- "--device cpu" "$log" || die "job $id did not pass DEVICE=cpu on as --device cpu"
  [ "$(steps_of "$tmp/runs/gpu-$launcher-$id/metrics.0.jsonl" | tail -1)" = 4 ] || die "job $id did not train 4 steps"
  echo "GPU script under $launcher (job $id, 2 nodes x 2 GPUs): ranks 0-3 -> node-a GPU 0, 1, node-b GPU 0, 1, NCCL selected, COMPLETED ($(( $(date +%s) - t0 )) s)"
done

# 2. no GPU list from Slurm: nvidia-smi's (4 GPUs), by node-local index
id=$(submit -J smi --ntasks-per-node=2 -o "$tmp/smi.out" \
     --wrap "srun --mpi=none env -u CUDA_VISIBLE_DEVICES $src/jobscripts/lib/gpu_rank.sh true")
st=$(wait_job_end "$id" 60)
[ "$st" = COMPLETED ] || { cat "$tmp/smi.out"; die "the nvidia-smi mapping job $id is $st"; }
got=$(mapping_of "$tmp/smi.out" | cut -d' ' -f1-3)
[ "$got" = "$(cut -d' ' -f1-3 <<<"$want")" ] || { cat "$tmp/smi.out"; die "with nvidia-smi's list the mapping is '$got'"; }
grep -q "of 0,1,2,3 from nvidia-smi" "$tmp/smi.out" || die "the ranks did not take nvidia-smi's list"
echo "without Slurm's GPU list: each rank takes nvidia-smi's GPU of its node-local index"

# 3. more ranks than GPUs on a node: a clear error, FAILED, not requeued
id=$(submit -J toomany --ntasks-per-node=2 --gpus-per-node=1 "$src/jobscripts/gpt_train_gpu.sbatch" "$ini" --steps 4)
st=$(wait_job_end "$id" 60)
log=$tmp/toomany-$id.out
[ "$st" = FAILED ] || { cat "$log"; die "the job with 2 ranks on 1 GPU a node is $st, not FAILED"; }
[ "$(job_field "$id" Restarts)" = 0 ] || die "the job with 2 ranks on 1 GPU a node was requeued"
grep -Eq "error: gpu_rank.sh on node-[ab]: rank [13] has local rank 1, but this node has 1 GPU\(s\)" "$log" ||
  { cat "$log"; die "the job log lacks gpu_rank.sh's error naming the node and rank"; }
echo "2 ranks on 1 GPU a node: FAILED with '$(grep -m 1 -o 'error: gpu_rank.sh.*GPU(s)' "$log")'"
echo "GPU job script test passed in $(( $(date +%s) - t_start )) s (on CPUs: no GPU was used)"
