#!/usr/bin/env bash
# Builds validation/bench/gpu_debs/prefix.tar.xz: the Debian 12 libraries, headers and tools that
# tessera needs to build with -DTESSERA_CUDA=ON and run on a machine that has a compiler, CUDA,
# CMake and ninja but no MPI, HDF5, Boost.Program_options, GoogleTest or OpenBLAS (the lent H200:
# /work/.library/device/KINDS.md). validation/bench/gpu.sh unpacks it there (see the README).
#
# usage: validation/bench/gpu_carry.sh          (here, on Debian 12, before a device session)
#   GPU_CARRY_MAX_MIB   size limit of the tarball (default 60; the device tool carries 64 MiB in all)
#   GPU_CARRY_KEEP=1    keep the staging folder (/tmp/tessera-gpu-carry.*) to look at
#
# How: `apt-get download` the packages named below into validation/bench/gpu_debs_cache/ (kept
# between runs), `dpkg -x` them into a staging root, drop what is not needed (docs, man pages,
# static libraries but GoogleTest's, Fortran and Java bindings, and every Open MPI / PMIx plugin
# that needs a network stack we do not carry: UCX, libfabric, verbs, PSM, PSM2, netlink),
# then add the shared libraries those files need (DT_NEEDED) until nothing is missing but the C
# and C++ runtimes that any machine with g++ has (BASE below). Those added libraries go into the
# prefix's deps/lib; gpu.sh sets aside the ones the machine already has (and takes them back if
# the machine's copies do not resolve).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=$here/gpu_debs_cache
outdir=$here/gpu_debs
tarball=$outdir/prefix.tar.xz
max_mib=${GPU_CARRY_MAX_MIB:-60}

die() { echo "gpu_carry.sh: error: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg readelf od xz tar awk; do
  command -v "$tool" >/dev/null || die "'$tool' not found: run this on Debian 12 (apt, dpkg, binutils, xz-utils)"
done
[ "$(dpkg --print-architecture)" = amd64 ] || die "this machine is $(dpkg --print-architecture); the H200 machine is amd64"
grep -q '^12' /etc/debian_version 2>/dev/null || echo "gpu_carry.sh: warning: not Debian 12 ($(cat /etc/debian_version 2>/dev/null)); the package names below are Debian 12's" >&2

# Packages carried whole (less the pruning below): they are what the build compiles against and what
# gpu.sh always puts first on the library path.
main_pkgs=(
  libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libpmix2
  libhdf5-openmpi-103-1 libhdf5-openmpi-dev
  libboost-program-options1.74.0 libboost-program-options1.74-dev libboost1.74-dev
  libgtest-dev nlohmann-json3-dev
  libopenblas0-openmp libopenblas-openmp-dev
)
# Sonames assumed on the target: glibc and the runtimes of the g++ that nvcc needs there.
BASE='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libgomp\.so\.1)$'
# Sonames not carried: files that need one of them are dropped (plugins for the fabrics
# a one-GPU machine does not have; the Fortran and Java bindings).
DROP='^lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|psm_infinipath|psm2|nl-3|nl-route-3|jvm|mca_common_(ucx|ofi|verbs))\.so'

mkdir -p "$cache" "$outdir"
work=$(mktemp -d /tmp/tessera-gpu-carry.XXXXXX)
[ "${GPU_CARRY_KEEP:-0}" = 1 ] && echo "staging kept in $work" || trap 'rm -rf "$work"' EXIT
stage=$work/root        # becomes the tarball's top: usr/..., etc/..., deps/lib, MANIFEST.txt
mkdir -p "$stage/deps/lib"

# download PKG...: into the cache, the candidate version (the one installed here when installed).
download() {
  local need=()
  for p in "$@"; do
    local v; v=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/{print $2}')
    [ -n "$v" ] && [ "$v" != "(none)" ] || die "package '$p' unknown to apt here (apt-get update?)"
    # file names carry the version with ':' escaped as %3a
    ls "$cache/${p}_${v//:/%3a}_"*.deb >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "downloading: ${need[*]}"
    (cd "$cache" && apt-get download "${need[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    for p in "${need[@]}"; do
      ls "$cache/${p}_"*.deb >/dev/null 2>&1 || die "apt-get download $p failed (network? apt-get update?)"
    done
  fi
}
debfile() {  # debfile PKG: the cached .deb of the candidate version
  local v; v=$(apt-cache policy "$1" | awk '/Candidate:/{print $2}')
  ls "$cache/${1}_${v//:/%3a}_"*.deb | head -1
}

elf_files() {  # every ELF file (executables, libraries, plugins) under $1
  find "$1" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) ! -name '*.h' ! -name '*.hpp' -print0 |
    while IFS= read -r -d '' f; do
      [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && printf '%s\n' "$f"
    done
}
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

echo "== main packages"
download "${main_pkgs[@]}"
manifest=$stage/MANIFEST.txt
{
  echo "tessera GPU prefix, made by validation/bench/gpu_carry.sh on $(date -u +%Y-%m-%dT%H:%MZ) ($(. /etc/os-release; echo "$PRETTY_NAME"))"
  echo "main packages (always used):"
} >"$manifest"
for p in "${main_pkgs[@]}"; do
  f=$(debfile "$p"); dpkg -x "$f" "$stage"
  echo "  $(basename "$f")" >>"$manifest"
done

echo "== pruning"
rm -rf "$stage"/usr/share/{doc,man,info,lintian,bug} "$stage"/usr/src \
       "$stage"/usr/lib/x86_64-linux-gnu/fortran "$stage"/usr/share/java
find "$stage" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
find "$stage" -name '*.jar' -delete
# Fortran and Java MPI bindings, the OpenSHMEM layer, and the reference BLAS/LAPACK shims next to
# OpenBLAS (tessera links libopenblas.so.0 itself).
find "$stage" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' -o -name 'liboshmem*' \
                 -o -name 'libhdf5_openmpi_fortran*' -o -name 'libhdf5_openmpihl_fortran*' \
                 -o -path '*/openblas-openmp/libblas.so*' -o -path '*/openblas-openmp/liblapack.so*' \) -delete
# Drop, until nothing changes, every ELF file that needs a dropped soname (or a file removed above).
dropped_log=$work/dropped.txt; : >"$dropped_log"
while :; do
  provided=$(find "$stage" \( -type f -o -type l \) -name 'lib*.so*' -printf '%f\n' | sort -u)
  changed=0
  while IFS= read -r f; do
    for n in $(needed "$f"); do
      if [[ $n =~ $DROP ]] || { [[ $n =~ ^libmca_common_|^liboshmem|^libmpi_(mpifh|usempi|java) ]] && ! grep -qxF "$n" <<<"$provided"; }; then
        echo "${f#$stage/} (needs $n)" >>"$dropped_log"; rm -f "$f"; changed=1; break
      fi
    done
  done < <(elf_files "$stage")
  [ $changed = 0 ] && break
done
find "$stage" -xtype l -name 'lib*.so*' -path '*openmpi*' -delete   # links to dropped plugins
echo "  dropped $(wc -l <"$dropped_log") files needing fabrics/bindings not carried (MANIFEST.txt lists them)"

echo "== closure of shared-library needs"
deps_pkgs=()
for round in 1 2 3 4 5 6 7 8 9 10; do
  provided=$(find "$stage" \( -type f -o -type l \) -name 'lib*.so*' -printf '%f\n' | sort -u)
  missing=$(elf_files "$stage" | while IFS= read -r f; do needed "$f"; done | sort -u |
            grep -Ev "$BASE" | grep -vxF -f <(printf '%s\n' $provided) || true)
  [ -z "$missing" ] && break
  new=()
  for so in $missing; do
    [[ $so =~ $DROP ]] && die "internal: $so is both dropped and needed"
    pkg=$(dpkg -S "*/$so" 2>/dev/null | grep -E ':[^:]*/(usr/)?lib/x86_64-linux-gnu/[^/]+$' | head -1 | cut -d: -f1 || true)
    [ -n "$pkg" ] || die "no installed package here provides $so (needed by the carried files); install it (apt-get install) and rerun"
    [[ " ${deps_pkgs[*]} ${new[*]} " == *" $pkg "* ]] || new+=("$pkg")
  done
  [ ${#new[@]} -gt 0 ] || die "internal: missing $missing but no new package"
  echo "  round $round: ${new[*]}"
  download "${new[@]}"
  for p in "${new[@]}"; do
    d=$work/dep-$p; mkdir -p "$d"; dpkg -x "$(debfile "$p")" "$d"
    # only the shared libraries of the library folders; anything else (plugins, tools) stays out
    find "$d"/usr/lib/x86_64-linux-gnu "$d"/lib/x86_64-linux-gnu -maxdepth 1 \( -type f -o -type l \) \
         -name 'lib*.so.*' -exec mv -f -t "$stage/deps/lib" {} + 2>/dev/null || true
    rm -rf "$d"
  done
  deps_pkgs+=("${new[@]}")
done
[ -z "${missing:-}" ] || die "the closure did not settle after 10 rounds; still missing: $missing"
{
  echo "dependency packages (deps/lib; gpu.sh sets aside each library the target already has):"
  for p in "${deps_pkgs[@]}"; do echo "  $(basename "$(debfile "$p")")"; done
  echo "dropped files (they need what is not carried):"
  sed 's/^/  /' "$dropped_log"
} >>"$manifest"

# Conveniences gpu.sh relies on: the unsuffixed wrapper names (Debian makes them with
# update-alternatives, which dpkg -x does not run).
for w in mpicc mpicxx mpic++ mpirun mpiexec; do
  [ -e "$stage/usr/bin/$w.openmpi" ] && ln -sf "$w.openmpi" "$stage/usr/bin/$w"
done
ln -sf h5pcc.openmpi "$stage/usr/bin/h5pcc"
for f in usr/bin/orted usr/bin/mpicc.openmpi usr/bin/h5pcc.openmpi usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so \
         usr/lib/x86_64-linux-gnu/hdf5/openmpi/libhdf5.so usr/include/hdf5/openmpi/hdf5.h \
         usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h \
         usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake usr/lib/x86_64-linux-gnu/libgtest.a \
         usr/lib/x86_64-linux-gnu/cmake/boost_program_options-1.74.0/boost_program_options-config.cmake \
         usr/include/boost/program_options.hpp usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2; do
  [ -e "$stage/$f" ] || die "internal: $f missing from the staged prefix"
done

echo "== packing"
unpacked=$(du -sb "$stage" | cut -f1)
rm -f "$tarball"
XZ_OPT="-6 -T2" tar -C "$stage" -cJf "$tarball" .
cp "$manifest" "$outdir/MANIFEST.txt"
size=$(stat -c %s "$tarball")
awk -v t="$tarball" -v s="$size" -v u="$unpacked" -v m=${#main_pkgs[@]} -v d=${#deps_pkgs[@]} 'BEGIN {
  printf "%s: %.1f MiB (unpacked %.1f MiB; %d main packages, %d dependency packages)\n", t, s / 1048576, u / 1048576, m, d }'
if [ "$size" -gt $((max_mib * 1048576)) ]; then
  die "the tarball is over ${max_mib} MiB: the device tool carries 64 MiB with the working tree; prune more above"
fi
echo "next: the device tool's run with carry=[\"validation/bench/gpu_debs\"] and command 'bash validation/bench/gpu.sh'"
