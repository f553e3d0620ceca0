#!/usr/bin/env bash
# Checks a linked program of the portable build: only the instruction-set copies of the
# kernels (functions in an isa_avx2 / isa_avx512 / isa_avx512bf16 namespace (the last matches
# isa_avx512 below), or renamed "[clone .isa_...]" by
# cmake/isa_object.sh) may use instructions beyond x86-64-v2 (VEX/EVEX encodings, ymm/zmm and
# mask registers, BMI, LZCNT, MOVBE; not TZCNT, which GCC also emits for the baseline as
# "rep bsf", the same bytes, where BSF's result would do). Anything else would crash with an illegal instruction on
# an older CPU. Also checks that the AVX-512 copy uses 512-bit registers and the AVX2 copy
# 256-bit ones, whatever the compiler's tuning, and that the AVX512-BF16 kernels, when built,
# use vdpbf16ps.
#
# Usage: check_isa_symbols.sh <program>
set -euo pipefail
program=$1
objdump -d --no-show-raw-insn "$program" | awk '
  function flush() {
    if (name != "" && bad != "" && name !~ /isa_avx2|isa_avx512/) {
      printf "%s uses %s\n", name, bad; failures++
    }
  }
  /^[0-9a-f]+ <.*>:$/ {
    flush(); name = substr($2, 2, length($2) - 3); bad = ""; next
  }
  /^ +[0-9a-f]+:\t/ {
    split($0, part, "\t"); insn = part[2]; split(insn, word, " "); op = word[1]
    if (op ~ /^v/ || insn ~ /%[yz]mm|%k[0-7]/ ||
        op ~ /^(andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|movbe)[lqw]?$/) {
      if (bad == "") bad = insn
    }
    if (name ~ /isa_avx512/ && insn ~ /%zmm/) zmm512++
    if (name ~ /isa_avx512bf16/) { bf16fn = 1; if (op ~ /^vdpbf16ps/) dpbf16++ }
    if (name ~ /isa_avx2/ && name !~ /isa_avx512/ && insn ~ /%ymm/) ymm2++
    next
  }
  END {
    flush()
    if (failures > 0) { printf "%d functions outside the ISA copies use instructions beyond x86-64-v2\n", failures; exit 1 }
    if (zmm512 == 0) { print "no 512-bit instruction in the AVX-512 copy"; exit 1 }
    if (ymm2 == 0) { print "no 256-bit instruction in the AVX2 copy"; exit 1 }
    if (bf16fn && dpbf16 == 0) { print "no vdpbf16ps in the AVX512-BF16 kernels"; exit 1 }
    printf "ok: baseline code is x86-64-v2 only; %d zmm instructions in the AVX-512 copies, %d ymm in the AVX2 copy, %d vdpbf16ps in the AVX512-BF16 kernels\n", zmm512, ymm2, dpbf16
  }'
