#!/usr/bin/env bash
# Issue 12's GPU check, for the lent one-H200 machine (/work/.library/device/): builds tessera with
# CUDA against the Debian libraries carried in validation/bench/gpu_debs/prefix.tar.xz (made by
# validation/bench/gpu_carry.sh), runs the CUDA tests (`ctest -L cuda`) and a GPT-2-medium-class
# training benchmark in bf16 on the GPU, and reports its MFU against the H200's dense bf16 peak.
# Everything it writes that matters goes to $OUT (the device tool brings that folder back).
#
# usage: bash validation/bench/gpu.sh [--no-gpu] [--keep-deps] [--budget S] [--jobs N]
#          [--prefix DIR] [--build DIR] [--steps N] [--batch B] [--peak-tflops P] [--cuda-archs A]
#   --no-gpu      test everything but the GPU here: no nvidia-smi needed, CUDA compiled when nvcc is
#                 found, `ctest -L cuda` skipped, the benchmark run on the CPU with a tiny model
#   --keep-deps   use every carried dependency library, even those the machine has (a test here)
#   --budget S    seconds for the whole script (default 450: the device call gets 8 minutes)
#   --jobs N      build jobs (default: the number of CPUs)
#   --prefix DIR  where the tarball is unpacked (default /tmp/tessera-gpu-prefix)
#   --build DIR   the build tree (default /tmp/tessera-gpu-build)
#   --steps N     benchmark steps, the first 3 being warm-up (default 13)
#   --batch B     benchmark sequences per step (default 8, of 1024 tokens)
#   --peak-tflops the peak MFU is relative to (default 989: H200 SXM dense bf16)
#   --cuda-archs  CMAKE_CUDA_ARCHITECTURES (default 90: Hopper)
# Results: $OUT/summary.txt (also printed), configure.log, build.log, smoke.log, ctest.log,
# bench.log, bench_metrics.jsonl; OUT defaults to /tmp/tessera-gpu-out where the tool sets none.
set -euo pipefail

t_start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tarball=$repo/validation/bench/gpu_debs/prefix.tar.xz
no_gpu=0 keep_deps=0 budget=450 jobs=$(nproc) prefix=/tmp/tessera-gpu-prefix build=/tmp/tessera-gpu-build
steps=13 batch=8 peak=989 archs=90
while [ $# -gt 0 ]; do
  case $1 in
    --no-gpu) no_gpu=1 ;;
    --keep-deps) keep_deps=1 ;;
    --budget) budget=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --prefix) prefix=$2; shift ;;
    --build) build=$2; shift ;;
    --steps) steps=$2; shift ;;
    --batch) batch=$2; shift ;;
    --peak-tflops) peak=$2; shift ;;
    --cuda-archs) archs=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "gpu.sh: error: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
[ "$steps" -ge 4 ] || { echo "gpu.sh: error: --steps must be at least 4 (3 warm-up + 1 timed)" >&2; exit 2; }
OUT=${OUT:-/tmp/tessera-gpu-out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
stage=start

elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget - $(elapsed))); }
say() { echo "[gpu.sh ${stage} +$(elapsed)s] $*" | tee -a "$summary"; }
die() {
  say "error: $*"
  say "FAILED in stage '$stage' after $(elapsed)s (logs in $OUT)"
  exit 1
}
# stage_budget WANT RESERVE: WANT seconds, less whatever would eat into RESERVE kept for later
# stages (0 when nothing is left).
stage_budget() {
  local b=$(($(left) - $2))
  [ "$b" -gt "$1" ] && b=$1
  [ "$b" -gt 0 ] || b=0
  echo "$b"
}
# run_logged LOG SECONDS CMD...: runs CMD with a time limit, output to LOG; returns its status
# (124: the time limit).
run_logged() {
  local log=$1 secs=$2; shift 2
  [ "$secs" -ge 5 ] || { echo "no time left (budget ${budget}s)" >>"$log"; return 124; }
  echo "+ $* (limit ${secs}s)" >>"$log"
  local rc=0
  timeout --kill-after=10 "$secs" "$@" >>"$log" 2>&1 || rc=$?
  return $rc
}
trap 'rc=$?; [ $rc -ne 0 ] && [ $rc -ne 2 ] && ! grep -q "FAILED in stage" "$summary" 2>/dev/null && say "FAILED (exit $rc) in stage $stage after $(elapsed)s"; exit $rc' EXIT

# --- 0. what the machine has --------------------------------------------------------------------
stage=check
say "tessera GPU check: repo $repo, budget ${budget}s, $(nproc) CPUs, mode $([ $no_gpu = 1 ] && echo no-gpu || echo gpu)"
[ -f "$tarball" ] || die "$tarball not found: run validation/bench/gpu_carry.sh on the Debian 12 machine first, and carry validation/bench/gpu_debs"
for tool in cmake ninja g++ gcc tar python3 timeout readelf ldd; do
  command -v "$tool" >/dev/null || die "'$tool' not found on this machine (PATH=$PATH)"
done
cmake_version=$(cmake --version | awk 'NR==1{print $3}')
say "cmake $cmake_version, ninja $(ninja --version), $(g++ --version | head -1)"
gpu_name=""
if [ $no_gpu = 0 ]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver here (use --no-gpu to test the build without a GPU)"
  nvidia-smi -L >"$OUT/gpus.tmp" 2>&1 || { cat "$OUT/gpus.tmp" >&2; die "nvidia-smi -L failed: no usable GPU (use --no-gpu to test the build without one)"; }
  grep -q '^GPU ' "$OUT/gpus.tmp" || die "nvidia-smi -L lists no GPU"
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -1)"
  rm -f "$OUT/gpus.tmp"
fi
nvcc=""
for c in "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc /opt/nvidia/cuda/bin/nvcc; do
  [ -n "$c" ] && [ -x "$c" ] && "$c" --version >/dev/null 2>&1 && { nvcc=$c; break; }
done
if [ -z "$nvcc" ]; then  # CUDA from pip wheels (nvidia/cu13/bin/nvcc) as a last resort
  nvcc=$(python3 -c 'import glob, site, sys; print(next(iter(sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/*/bin/nvcc"))), ""))' 2>/dev/null || true)
fi
if [ -n "$nvcc" ]; then
  # the toolkit's root as nvcc itself sees it (a wrapper script or link may sit elsewhere)
  cuda_root=$("$nvcc" -v --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  cuda_root=$(cd "${cuda_root:-$(dirname "$(readlink -f "$nvcc")")/..}" && pwd)
  say "nvcc: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); toolkit $cuda_root)"
  cuda=ON
elif [ $no_gpu = 1 ]; then
  say "no nvcc: building without CUDA (--no-gpu)"
  cuda=OFF
else
  die "nvcc not found (PATH, /usr/local/cuda/bin, python's nvidia packages): the CUDA build needs it"
fi

# --- 1. the prefix --------------------------------------------------------------------------------
stage=unpack
stamp="$(stat -c '%s %Y' "$tarball") $(cksum <"${BASH_SOURCE[0]}") keep_deps=$keep_deps"
if [ "$(cat "$prefix/.unpacked" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$prefix"; mkdir -p "$prefix"
  secs=$(stage_budget 90 200)
  [ "$secs" -ge 5 ] || die "the budget (${budget}s) leaves no time to unpack the prefix"
  if command -v xz >/dev/null && [ "${GPU_SH_NO_XZ:-0}" != 1 ]; then
    timeout "$secs" tar -C "$prefix" -xJf "$tarball" || die "unpacking $tarball into $prefix failed"
  else  # no xz-utils: Python's lzma
    say "no xz: unpacking with python3's tarfile"
    timeout "$secs" python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1], "r:xz")
t.extractall(sys.argv[2], **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))' \
      "$tarball" "$prefix" || die "unpacking $tarball into $prefix with python3 failed"
  fi
  P=$prefix/usr
  # h5pcc: its prefix is /usr; it links the static libraries (not carried) by default; it names
  # curl, crypto, sz and z for static links, which a shared link does not need (libhdf5.so records
  # its own needs), and the high-level library (not carried either).
  sed -i -e "s|^prefix=\"/usr\"|prefix=\"$P\"|" -e 's|^H5BLD_LIBS=.*|H5BLD_LIBS=" -ldl -lm"|' -e 's|^HL="hl"|HL=""|' \
         -e 's|^STATIC_AVAILABLE="yes"|STATIC_AVAILABLE="no"|' \
         -e "s|^CCBASE=\"mpicc.openmpi\"|CCBASE=\"$P/bin/mpicc.openmpi\"|" \
         -e "s|^CLINKERBASE=\"mpicc.openmpi\"|CLINKERBASE=\"$P/bin/mpicc.openmpi\"|" "$P/bin/h5pcc.openmpi"
  # PMIx looks for its plugins where Debian put them; point its parameter file at the prefix.
  sed -i "s|/usr/lib/x86_64-linux-gnu/pmix2|$P/lib/x86_64-linux-gnu/pmix2|" "$P/lib/x86_64-linux-gnu/pmix2/share/pmix-mca-params.conf"
  # Dependency libraries the machine already has: use its own (same soname, usually newer); they
  # wait in deps/pruned in case the machine's copy turns out too old (below).
  kept=() dropped=0
  ldconfig=$(command -v ldconfig || ls /sbin/ldconfig /usr/sbin/ldconfig 2>/dev/null | head -1 || true)
  [ -n "$ldconfig" ] || { keep_deps=1; say "no ldconfig: every carried dependency library is used"; }
  if [ $keep_deps = 0 ]; then
    sys_sonames=$("$ldconfig" -p 2>/dev/null | awk '/x86-64/ {print $1}' | sort -u)
    mkdir -p "$prefix/deps/pruned"
    for f in "$prefix"/deps/lib/lib*.so.*; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      so=$(readelf -d "$f" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
      if [ -n "$so" ] && grep -qxF "$so" <<<"$sys_sonames"; then
        mv -f "$f" "$prefix/deps/pruned/"; dropped=$((dropped + 1))
        [ -L "$prefix/deps/lib/$so" ] && mv -f "$prefix/deps/lib/$so" "$prefix/deps/pruned/"
      else
        kept+=("${so:-$(basename "$f")}")
      fi
    done
    find "$prefix/deps/lib" -xtype l -exec mv -f -t "$prefix/deps/pruned" {} +
    say "dependency libraries: $dropped found on this machine, ${#kept[@]} carried: ${kept[*]:-none}"
  else
    say "dependency libraries: all carried ones used (--keep-deps)"
  fi
  echo "$stamp" >"$prefix/.unpacked"
else
  say "prefix already unpacked in $prefix"
fi
P=$prefix/usr
L=$P/lib/x86_64-linux-gnu
export OPAL_PREFIX=$P                               # Open MPI relocated: wrappers, orted, plugins
export PMIX_PREFIX=$L/pmix2 PMIX_INSTALL_PREFIX=$L/pmix2 PMIX_MCA_mca_base_component_path=$L/pmix2/lib/pmix
export PATH=$P/bin:$PATH
export LD_LIBRARY_PATH=$L/openmpi/lib:$L:$L/hdf5/openmpi:$L/openblas-openmp:$L/pmix2/lib:$prefix/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One machine, no fabric: shared memory and loopback only (Debian's /etc/openmpi settings, which a
# relocated Open MPI does not read, plus no binding: a VM's CPU set may refuse it).
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_mtl='^ofi' OMPI_MCA_pml=ob1 \
       OMPI_MCA_btl=self,vader,tcp OMPI_MCA_osc='^ucx,pt2pt' OMPI_MCA_hwloc_base_binding_policy=none \
       OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none \
       PMIX_MCA_gds=hash   # the usual container settings: no cross-process memory copies, no shared-memory PMIx store
# every carried library and tool resolves (a missing one is named here, not in the middle of a build)
unresolved() {
  for f in "$L"/openmpi/lib/libmpi.so "$L"/hdf5/openmpi/libhdf5.so "$L"/openblas-openmp/libopenblas.so.0 \
                      "$L"/libboost_program_options.so "$P"/bin/orted "$P"/bin/opal_wrapper "$L"/pmix2/lib/libpmix.so.2; do
    ldd "$f" 2>&1 | grep -E 'not found|error|too short' | sed "s|^|$(basename "$f"): |" || true
  done | sort -u
}
unresolved=$(unresolved)
if [ -n "$unresolved" ] && [ -n "$(ls -A "$prefix/deps/pruned" 2>/dev/null)" ]; then
  say "warning: with this machine's own copies of the dependency libraries:"$'\n'"$unresolved"
  say "using the carried copies of all of them instead"
  mv -f "$prefix"/deps/pruned/* "$prefix/deps/lib/"
  unresolved=$(unresolved)
fi
[ -z "$unresolved" ] || die "carried libraries that do not resolve here:"$'\n'"$unresolved"
say "prefix ready: $prefix ($(du -sm "$prefix" | cut -f1) MiB)"

# --- 2. configure -----------------------------------------------------------------------------
stage=configure
cuda_args=()
if [ $cuda = ON ]; then
  cuda_args=(-DTESSERA_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs")
  # CUDA from wheels has versioned libraries only (libcublas.so.13): name them for FindCUDAToolkit.
  if ! ls "$cuda_root"/lib64/libcublas.so "$cuda_root"/lib/libcublas.so "$cuda_root"/targets/x86_64-linux/lib/libcublas.so >/dev/null 2>&1; then
    for lib in cudart cublas cublasLt; do
      f=$(find "$cuda_root" "$(dirname "$cuda_root")" -maxdepth 4 -name "lib$lib.so*" 2>/dev/null | sort | head -1 || true)
      [ -n "$f" ] && cuda_args+=(-DCUDA_${lib}_LIBRARY="$f") && say "CUDA library lib$lib: $f"
    done
  fi
else
  cuda_args=(-DTESSERA_CUDA=OFF)
fi
log=$OUT/configure.log; : >"$log"
rc=0; run_logged "$log" "$(stage_budget 120 250)" cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMPI_C_COMPILER="$P/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" \
  -DMPIEXEC_EXECUTABLE="$P/bin/mpirun.openmpi" \
  -DHDF5_C_COMPILER_EXECUTABLE="$P/bin/h5pcc.openmpi" \
  -DBoost_DIR="$L/cmake/Boost-1.74.0" -Dboost_program_options_DIR="$L/cmake/boost_program_options-1.74.0" \
  -DBoost_NO_SYSTEM_PATHS=ON -DGTest_DIR="$L/cmake/GTest" \
  -DTESSERA_OPENBLAS_OMP="$L/openblas-openmp/libopenblas.so.0" \
  -DTESSERA_CBLAS_INCLUDE="$P/include/x86_64-linux-gnu/openblas-openmp" \
  -DTESSERA_ONEDNN=OFF "${cuda_args[@]}" || rc=$?
if [ $rc != 0 ]; then
  tail -30 "$log"
  [ $rc = 124 ] && die "cmake did not finish in its time (budget ${budget}s; configure.log)"
  grep -q 'CUDA::cublas' "$log" && say "hint: CMake did not find cuBLAS next to $nvcc"
  die "cmake failed (configure.log)"
fi
# the libraries CMake chose: all from the prefix
cache=$build/CMakeCache.txt
chosen=$(grep -E '^(MPI_mpi_LIBRARY|MPI_mpi_cxx_LIBRARY|HDF5_C_LIBRARY_hdf5|Boost_DIR|boost_program_options_DIR|GTest_DIR|TESSERA_OPENBLAS_OMP|TESSERA_CBLAS_INCLUDE|MPI_C_HEADER_DIR|HDF5_C_COMPILER_EXECUTABLE|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES):' "$cache" || true)
echo "$chosen" | sed 's/^/    /' | tee -a "$summary"
outside=$(echo "$chosen" | grep -E '^(MPI_mpi|HDF5_C_LIBRARY_hdf5|Boost_DIR|boost_program|GTest_DIR|TESSERA_OPENBLAS|TESSERA_CBLAS|MPI_C_HEADER)' | grep -v "=$prefix/" || true)
[ -z "$outside" ] || die "CMake chose libraries outside the prefix:"$'\n'"$outside"
grep -E 'tessera (BLAS|CUDA)|CUDA tests are built but not registered' "$log" | sed 's/^-- /    /' | tee -a "$summary" || true

# --- 3. build ----------------------------------------------------------------------------------
stage=build
targets=(gpt_train vit_train data_prep)
if [ $cuda = ON ]; then
  for t in "$repo"/tests/cuda/test_cuda_*.cpp; do targets+=("$(basename "$t" .cpp)"); done
fi
log=$OUT/build.log; : >"$log"
t0=$(date +%s)
rc=0; run_logged "$log" "$(stage_budget 330 140)" ninja -C "$build" -j "$jobs" "${targets[@]}" || rc=$?
if [ $rc -ne 0 ]; then
  grep -E 'error|FAILED' "$log" | head -20
  [ $rc = 124 ] && die "the build did not finish in its time (${#targets[@]} targets, -j$jobs; build.log)"
  die "the build failed (build.log)"
fi
say "built ${#targets[@]} targets in $(($(date +%s) - t0))s (-j$jobs)"
ldd_out=$(ldd "$build/apps/gpt_train")
echo "$ldd_out" | grep -E 'not found' && die "gpt_train has unresolved libraries (above)"
echo "$ldd_out" | grep -E 'libmpi|libhdf5|libopenblas|libboost|libpmix|libcudart|libcublas' | awk '{print "    " $1 " => " $3}' | tee -a "$summary"
leak=$(echo "$ldd_out" | grep -E 'libmpi|libhdf5|libopenblas|libboost_program|libpmix|libopen-(pal|rte)' | grep -v "=> $prefix/" || true)
[ -z "$leak" ] || die "gpt_train loads these from outside the prefix:"$'\n'"$leak"

# --- 4. smoke: MPI init, HDF5 read and write, a few CPU steps (seconds) -----------------------------
stage=smoke
log=$OUT/smoke.log; : >"$log"
work=$build/gpu-check; mkdir -p "$work"
run_logged "$log" 30 "$build/apps/data_prep" synth --vocab 256 --tokens 20000 --seed 1 --output "$work/tiny.h5" --overwrite ||
  { tail -20 "$log"; die "data_prep synth failed (smoke.log)"; }
tiny=(--input "$work/tiny.h5" --layers 2 --hidden 64 --heads 2 --seq-len 32 --global-batch 4 --steps 3 --log-every 1)
if ! run_logged "$log" "$(stage_budget 40 120)" "$build/apps/gpt_train" "${tiny[@]}" --threads 2; then
  tail -20 "$log"
  # a VM that refuses Open MPI's shared-memory transport: one rank needs only 'self'
  say "warning: gpt_train on the CPU failed; again with OMPI_MCA_btl=self,tcp"
  export OMPI_MCA_btl=self,tcp
  run_logged "$log" "$(stage_budget 40 120)" "$build/apps/gpt_train" "${tiny[@]}" --threads 2 ||
    { tail -20 "$log"; die "gpt_train on the CPU failed (smoke.log: MPI singleton start, HDF5 or the model)"; }
fi
rc=0; run_logged "$log" "$(stage_budget 40 110)" "$P/bin/mpirun.openmpi" -np 2 "$build/apps/gpt_train" "${tiny[@]}" --threads 1 || rc=$?
if [ $rc = 0 ]; then say "smoke: data_prep, gpt_train (1 rank, and 2 under mpirun) ran on the CPU"
else tail -10 "$log"; say "warning: mpirun -np 2 failed ($rc; smoke.log); one rank is all the benchmark needs"; fi

# --- 5. the CUDA tests -------------------------------------------------------------------------------
stage=ctest
ctest_result="skipped (--no-gpu)"
if [ $no_gpu = 0 ]; then
  log=$OUT/ctest.log; : >"$log"
  n=$(cd "$build" && ctest -N -L cuda | awk '/Total Tests:/ {print $3}')
  [ "${n:-0}" -gt 0 ] || die "ctest -L cuda lists no test: CMake saw no GPU through nvidia-smi at configure time (configure.log)"
  # (cuda.multi_rank_parity, a dozen small multi-rank runs sharing the GPU, has a timeout of its own)
  rc=0; run_logged "$log" "$(stage_budget 240 150)" ctest --test-dir "$build" -L cuda --output-on-failure --timeout 60 -j 8 || rc=$?
  ctest_result=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
  [ $rc = 124 ] && ctest_result="stopped at its time limit; $(grep -c 'Passed' "$log") passed so far"
  say "ctest -L cuda ($n tests): ${ctest_result:-exit $rc}"
  grep -E '^\s*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$log" | head -20 | sed 's/^/    /' | tee -a "$summary" || true
  # the multi-rank parity's figures (each case's worst relative difference), passed or not
  say "multi-rank CUDA parity (tests/cuda/multi_rank_parity.sh):"
  grep -E '^(dp|tp|pp|sp|vit|resume|error)[^ ]*[: ]|^    gradient norms' "$build/Testing/Temporary/LastTest.log" 2>/dev/null |
    sed 's/^/    /' | tee -a "$summary" || true
fi

# --- 6. the benchmark -------------------------------------------------------------------------------
stage=bench
log=$OUT/bench.log; : >"$log"
metrics=$OUT/bench_metrics.jsonl; rm -f "$metrics"
export TESSERA_OP_PROFILE=1  # gpt_train prints its per-op table (rank 0, stderr) into bench.log at the end
if [ $no_gpu = 0 ]; then
  vocab=50257 shape=(--layers 24 --hidden 1024 --heads 16 --seq-len 1024) device=cuda
else  # the same path on the CPU, a model small enough for seconds
  vocab=50257 shape=(--layers 2 --hidden 128 --heads 4 --seq-len 128) device=cpu
fi
run_logged "$log" 60 "$build/apps/data_prep" synth --vocab "$vocab" --tokens 1000000 --seed 1 --output "$work/synth.h5" --overwrite ||
  { tail -20 "$log"; die "data_prep synth --vocab $vocab failed (bench.log)"; }
# bench_run PRECISION METRICS: one gpt_train run; its status
bench_run() {
  local secs; secs=$(stage_budget 600 10)
  say "gpt_train ${shape[*]} vocab $vocab, batch $batch, $steps steps, $1 on $device (limit ${secs}s)"
  local rc=0
  run_logged "$log" "$secs" "$build/apps/gpt_train" --input "$work/synth.h5" "${shape[@]}" \
    --global-batch "$batch" --micro-batch "$batch" --steps "$steps" --lr 3e-4 --warmup 2 \
    --precision "$1" --device "$device" --peak-tflops "$peak" --metrics "$2" --overwrite --log-every 1 || rc=$?
  [ $rc = 0 ] || { tail -15 "$log"; say "warning: gpt_train ($1) exited with $rc ($([ $rc = 124 ] && echo 'its time limit' || echo 'bench.log')); reporting the steps it logged"; }
  return $rc
}
# report METRICS LABEL: the figures of the steps after the 3 warm-up steps (or of what there is)
report() {
  python3 - "$1" "$peak" "$batch" "$device" "${gpu_name:-none}" "$2" <<'EOF'
import json, statistics, sys
path, peak, batch, device, gpu, label = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if "step_ms" in r]
timed = [r for r in rows if r["step"] > 3]
note = f"{len(timed)} timed steps after 3 warm-up"
if not timed:
    timed = [r for r in rows if r["step"] > 1]
    note = f"only {len(rows)} step(s) logged: steps 2.. used, warm-up NOT excluded"
if not timed:
    print(f"benchmark {label} ({device}): {len(rows)} step(s) logged: no figure")
    sys.exit(0)
med = lambda k: statistics.median(r[k] for r in timed)
tflops = med("tflops")
print(f"benchmark {label} ({device}, {gpu}): {note}, batch {batch}")
print(f"  step_ms median {med('step_ms'):.1f} (min {min(r['step_ms'] for r in timed):.1f}), tokens/s {med('tokens_per_s'):.0f}")
print(f"  model TFLOP/s {tflops:.2f}; MFU {100 * tflops / peak:.2f}% of {peak:g} TFLOP/s"
      f" (gpt_train's own mfu: {100 * med('mfu'):.2f}%)")
print(f"  peak memory {max(r.get('peak_mem_bytes', 0) for r in rows) / 2**30:.2f} GiB; losses {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
keys = ["gemm_ms", "attention_ms", "other_kernels_ms", "optimizer_ms", "comm_ms", "data_ms"]
if all(k in timed[0] for k in keys):  # device time per kind (CUDA events), medians
    split = {k: med(k) for k in keys}
    idle = med("step_ms") - sum(split[k] for k in keys)
    print("  split ms: " + ", ".join(f"{k[:-3]} {v:.1f}" for k, v in split.items()) +
          f", rest (host gaps, syncs) {idle:.1f}")
EOF
}
precision=${GPU_SH_PRECISION:-bf16}   # a test knob: a bad value exercises the fp32 fallback
rc=0; bench_run "$precision" "$metrics" || rc=$?
[ -s "$metrics" ] && report "$metrics" "$precision" | tee -a "$summary"
sed -n '/^op profile (TESSERA_OP_PROFILE=1)/,/^  total /p' "$log" | tee -a "$summary"
logged=$(cat "$metrics" 2>/dev/null | grep -c '"step_ms"' || true)
if [ $rc != 0 ] && [ $rc != 124 ] && [ "${logged:-0}" -lt 2 ] && [ "$(left)" -gt 90 ]; then
  say "$precision failed early: the same run in fp32, for a figure"
  bench_run fp32 "$OUT/bench_fp32_metrics.jsonl" || true
  [ -s "$OUT/bench_fp32_metrics.jsonl" ] && report "$OUT/bench_fp32_metrics.jsonl" fp32 | tee -a "$summary"
fi
[ -s "$metrics" ] || [ -s "$OUT/bench_fp32_metrics.jsonl" ] || die "the benchmark wrote no metrics (bench.log)"
# A/B in the same script: the same bf16 run with the fp32 attention kernel (TESSERA_CUDA_TC_ATTENTION=0).
if [ $no_gpu = 0 ] && [ "$precision" = bf16 ] && [ $rc = 0 ] && [ "$(left)" -gt 60 ]; then
  say "A/B: the same run with TESSERA_CUDA_TC_ATTENTION=0 (fp32 attention kernel)"
  ab=$OUT/bench_fp32_attention_metrics.jsonl
  TESSERA_CUDA_TC_ATTENTION=0 bench_run bf16 "$ab" || true
  [ -s "$ab" ] && report "$ab" "bf16, fp32 attention" | tee -a "$summary"
  [ -s "$ab" ] && python3 - "$metrics" "$ab" <<'EOF_AB' | tee -a "$summary" || true
import json, statistics, sys
def step_ms(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    steps = [r for r in rows if "step_ms" in r]
    return statistics.median(r["step_ms"] for r in ([r for r in steps if r["step"] > 3] or steps))
tc, fp32 = step_ms(sys.argv[1]), step_ms(sys.argv[2])
print(f"  tensor-core attention: step {tc:.1f} ms against {fp32:.1f} ms with the fp32 kernel: {fp32 / tc:.2f}x")
EOF_AB
fi
stage=done
say "done in $(elapsed)s: ctest: $ctest_result"
