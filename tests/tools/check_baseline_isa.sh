#!/usr/bin/env bash
# The portable build (TESSERA_NATIVE=OFF) runs on any x86-64: no object of the libraries or apps
# holds an instruction beyond the baseline (SSE2) except the per-ISA kernel copies chosen at run
# time (kernels/cpu/isa.h: the tessera_kernels_avx2/avx512 objects; AdamW's adamw_avx2/avx512; the
# quantised matmuls' quant_dot_avx512; the bf16 weights' bf16_matmul_avx512 and
# quant_bf16_gemv_avx512; the f32 GEMV's f32_gemv_avx512; the int8-activation products'
# quant_w8a8_vnni; the int4 GEMV's quant_int4_gemv_vnni; the AMX products' bf16_matmul_amx).
# "Beyond" is read from the disassembly: a VEX/EVEX instruction (a mnemonic starting with v) or a
# ymm/zmm register.
set -euo pipefail
build=$1
command -v objdump >/dev/null || { echo "error: objdump (binutils) is needed"; exit 1; }
mapfile -t objects < <(find "$build/lib" "$build/kernels" "$build/apps" -name '*.o' \
  ! -path '*/tessera_kernels_avx2.dir/*' ! -path '*/tessera_kernels_avx512.dir/*' \
  ! -name 'adamw_avx2.cpp.o' ! -name 'adamw_avx512.cpp.o' ! -name 'quant_dot_avx512.cpp.o' ! -name 'bf16_matmul_avx512.cpp.o' \
  ! -name 'quant_bf16_gemv_avx512.cpp.o' ! -name 'f32_gemv_avx512.cpp.o' ! -name 'quant_w8a8_vnni.cpp.o' \
  ! -name 'quant_int4_gemv_vnni.cpp.o' ! -name 'bf16_matmul_amx.cpp.o' | sort)
[ ${#objects[@]} -gt 50 ] || { echo "error: only ${#objects[@]} objects under $build (not built?)"; exit 1; }
bad=0
for o in "${objects[@]}"; do
  # OpenMP `declare simd` clones for AVX, AVX2 and AVX-512 (_ZGVc, _ZGVd, _ZGVe: simd_exp) are only
  # called from code compiled for those sets, so they are skipped.
  hits=$(objdump -d --no-show-raw-insn "$o" |
         awk -F'\t' '/^[0-9a-f]+ <.*>:$/ {clone = ($0 ~ /<_ZGV[cde]/)}
                     !clone && NF >= 2 && ($2 ~ /^v[a-z]/ || $0 ~ /%[yz]mm/) {print $2}' |
         grep -v '^verw' | sort | uniq -c | sort -rn | head -3 || true)
  if [ -n "$hits" ]; then
    echo "beyond the baseline: ${o#$build/}: $(echo $hits)"; bad=1
  fi
done
zmm=$(find "$build/kernels" -path '*tessera_kernels_avx512.dir/*' -name 'attention_block.cpp.o' -exec objdump -d {} \; |
      grep -c '%zmm' || true)
[ "${zmm:-0}" -gt 0 ] || { echo "error: the AVX-512 copy of attention_block.cpp uses no zmm register"; exit 1; }
[ $bad = 0 ] || { echo "error: the objects above hold instructions beyond x86-64 (see kernels/CMakeLists.txt)"; exit 1; }
echo "${#objects[@]} objects: baseline x86-64 only; the AVX-512 copies use zmm"
