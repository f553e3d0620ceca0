#!/usr/bin/env bash
# Compiles one object of an extra instruction-set copy of the kernels and makes the code it
# inlined from headers private to that copy.
#
# Usage (CMake's compiler launcher of the tapegrad_isa_<isa> targets):
#   isa_object.sh <isa> [ccache] <compiler> ... -o <object> -c <source>
#
# Why: a kernel file compiled with -march=x86-64-v4 also emits the inline functions and
# template instances it uses from the standard library, Eigen and framework/ headers as weak
# symbols, under the same names as the baseline compile's. The linker keeps one of each, maybe
# the AVX-512 one, and baseline code would call it on a CPU without AVX-512. So every weak
# symbol the object defines outside its own namespace (isa_<isa>) gets the suffix .isa_<isa>
# (shown by c++filt as "[clone .isa_<isa>]"), which the copies of one instruction set share
# and nothing else uses; so do the signatures of the COMDAT groups that hold that code, or the
# linker would still drop one copy's group for the other's. Type names and type_info objects (_ZTS, _ZTI: data, no code) keep
# their names so exceptions and dynamic types stay one type across copies.
set -euo pipefail
isa=$1
shift
"$@"
object=""
previous=""
for arg in "$@"; do
  [[ $previous == -o ]] && object=$arg
  previous=$arg
done
[[ -n $object && -f $object ]] || exit 0
map=$(mktemp)
trap 'rm -f "$map"' EXIT
# The weak symbols it defines, its local functions (clones such as "f.isra.0" of inlined code,
# so that the code of every function of the copy carries the copy's name), and the signatures of its COMDAT groups (the names the linker
# deduplicates code by; a constructor's or destructor's group is named by a local "C5"/"D5"
# symbol), except its own namespace's and type names.
{
  nm --defined-only "$object" | awk '$2 ~ /^[WVut]$/ { print $3 }'
  readelf -gW "$object" | sed -n "s/^COMDAT group section .*\[\(.*\)\] contains.*/\1/p"
} | sort -u | awk -v isa="isa_$isa" 'index($1, isa) == 0 && $1 !~ /^_ZT[IS]/ {
  print $1, $1 "." isa }' >"$map"
if [[ -s $map ]]; then
  objcopy --redefine-syms="$map" "$object"
fi
