#!/usr/bin/env bash
# Converts the real CIFAR-10 (binary version) with data_prep cifar10 and prints what the file holds:
# the datasets and shapes, images per class, channel statistics and the first labels of each split.
# usage: validation/cifar10/prepare.sh [--data DIR] [--out DIR] [--build DIR]
# Not part of CI (it reads 180 MB); takes a few seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$root/../shared/data/cifar-10-batches-bin
out=/tmp/tessera-cifar10
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -d "$data" ] || { echo "error: $data not found (pass --data PATH/cifar-10-batches-bin)" >&2; exit 1; }
mkdir -p "$out"
"$build/apps/data_prep" cifar10 --input "$data" --output "$out/cifar10.h5" --overwrite
# A dataset's values, one line: h5dump's subset ($2: start, $3: count) without its framing.
values() {
  h5dump -d "$1" -s "$2" -c "$3" -y -o "$out/values.txt" "$out/cifar10.h5" > /dev/null
  tr -s ', \n' ' ' < "$out/values.txt"
  echo
}
if command -v h5dump > /dev/null; then
  h5ls -r "$out/cifar10.h5"
  echo "first 10 train labels:$(values /train/labels 0 10)"
  echo "first 10 test labels: $(values /test/labels 0 10)"
  echo "train image 0, top-left two pixels (R G B):$(values /train/images 0,0,0,0 1,1,2,3)"
fi
