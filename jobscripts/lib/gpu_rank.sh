#!/usr/bin/env bash
# One rank of a GPU job (jobscripts/gpt_train_gpu.sbatch runs it in front of the app): takes the GPU
# of this rank's index on its node, makes it the only one the app sees (CUDA_VISIBLE_DEVICES), says
# so on one line, and runs the app.
#   the node's GPUs: CUDA_VISIBLE_DEVICES as Slurm set it for the step (--gpus-per-node, --gres=gpu),
#                    else every GPU `nvidia-smi` lists (a cluster that gives whole nodes without GRES)
#   the rank's index on the node: OMPI_COMM_WORLD_LOCAL_RANK (mpirun), else SLURM_LOCALID (srun)
# usage: gpu_rank.sh APP [ARGS...]
set -euo pipefail
node=$(hostname)
die() { echo "error: gpu_rank.sh on $node: $*" >&2; exit 1; }
[ $# -gt 0 ] || die "no command to run (usage: gpu_rank.sh APP [ARGS...])"
# mpirun's values first: under mpirun in a Slurm job, SLURM_LOCALID and SLURM_PROCID are those of
# the Open MPI daemon's step (one task a node: 0 on every node), not the rank's.
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-}}
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-?}}
[ -n "$local_rank" ] || die "neither OMPI_COMM_WORLD_LOCAL_RANK nor SLURM_LOCALID is set: start it with srun or mpirun"

if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  gpus=$CUDA_VISIBLE_DEVICES from="the job step's CUDA_VISIBLE_DEVICES"
  # Slurm's value for GRES without device files: no GPU to bind to
  [ "$gpus" != NoDevFiles ] || die "CUDA_VISIBLE_DEVICES=NoDevFiles: the cluster's gres.conf names no GPU device files"
elif command -v nvidia-smi >/dev/null; then
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader) || die "nvidia-smi failed to list the GPUs"
  gpus=$(tr -d ' ' <<<"$gpus" | paste -sd, -) from="nvidia-smi"
else
  die "no GPU: CUDA_VISIBLE_DEVICES is unset (request GPUs: --gpus-per-node) and there is no nvidia-smi"
fi
IFS=, read -ra list <<<"$gpus"
[ "${#list[@]}" -gt 0 ] || die "no GPU listed by $from"
[ "$local_rank" -lt "${#list[@]}" ] ||
  die "rank $rank has local rank $local_rank, but this node has ${#list[@]} GPU(s) ($gpus, from $from): give --ntasks-per-node no more than --gpus-per-node"
export CUDA_VISIBLE_DEVICES=${list[$local_rank]}
backend=host  # the app's --comm-backend, as this rank was given it
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do [ "${args[i]}" = --comm-backend ] && backend=${args[i + 1]}; done
echo "rank $rank on $node (local rank $local_rank): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES, of $gpus from $from;" \
  "--comm-backend $backend"
exec "$@"
