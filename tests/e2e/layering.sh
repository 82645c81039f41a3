#!/bin/sh
# The layers (docs/architecture.md) are enforced by the build: each folder
# is compiled with only the include paths it may use, and its library may
# only call down. This checks both halves of that promise:
#  - a runtime file that includes a compiler or lang header does not
#    compile; nor does a plan-layer file that includes a runtime header,
#    nor a lang file that includes a compiler header;
#  - no library references a symbol that only a layer above it defines
#    (which an extern declaration could sneak past the include paths).
#   sh tests/e2e/layering.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir layering; T=$W
fail=0
flags() { make -s --no-print-directory BUILD="$B" "print-$1"; }
INC_PLAN=$(flags INC_PLAN) INC_LANG=$(flags INC_LANG) INC_COMPILER=$(flags INC_COMPILER) INC_RT=$(flags INC_RT)
[ -n "$INC_RT" ] && [ -n "$INC_PLAN" ] || { echo "FAIL: make print-INC_RT gave nothing"; exit 1; }

# probe LAYER_FLAGS HEADER EXPECT(ok|refused)
probe() {
  printf '#include "%s"\nint probe_unused;\n' "$2" > "$T/probe.c"
  # shellcheck disable=SC2086
  if cc -std=c11 -D_GNU_SOURCE -fsyntax-only $1 "$T/probe.c" > "$T/out" 2>&1; then got=ok; else got=refused; fi
  if [ "$got" != "$3" ]; then
    echo "FAIL: including $2 with [$1]: $got, expected $3"; sed 's/^/    | /' "$T/out" | head -5; fail=1
  elif [ "$got" = refused ] && ! grep -q "No such file" "$T/out"; then
    echo "FAIL: including $2 was refused for another reason:"; sed 's/^/    | /' "$T/out" | head -5; fail=1
  fi
}
probe "$INC_RT" plan.h ok
probe "$INC_RT" exec.h ok
probe "$INC_RT" graph.h refused
probe "$INC_RT" sema.h refused
probe "$INC_RT" ast.h refused
probe "$INC_RT" diag.h refused
probe "$INC_PLAN" plan.h ok
probe "$INC_PLAN" exec.h refused
probe "$INC_PLAN" graph.h refused
probe "$INC_PLAN" ast.h refused
probe "$INC_LANG" ast.h ok
probe "$INC_LANG" graph.h refused
probe "$INC_LANG" exec.h refused
probe "$INC_COMPILER" graph.h ok
probe "$INC_COMPILER" exec.h refused
probe "$INC_COMPILER" hostk.h refused

# defined LIB...: the global symbols the libraries define
defined() { for l in "$@"; do nm -g --defined-only "$B/$l" 2>/dev/null; done | awk 'NF >= 3 { print $3 }' | sort -u; }
undefined() { nm -u "$B/$1" 2>/dev/null | awk '{ print $NF }' | sort -u; }
# below LIB ALLOWED... ; FORBIDDEN...: LIB may use ALLOWED, never what only FORBIDDEN defines
below() {
  lib=$1; shift
  allowed=""; forbidden=""; side=a
  for x in "$@"; do
    if [ "$x" = ";" ]; then side=f; continue; fi
    if [ $side = a ]; then allowed="$allowed $x"; else forbidden="$forbidden $x"; fi
  done
  # shellcheck disable=SC2086
  defined $forbidden > "$T/forbidden"
  # shellcheck disable=SC2086
  defined $lib $allowed > "$T/allowed"
  undefined "$lib" > "$T/undef"
  bad=$(comm -12 "$T/undef" "$T/forbidden" | comm -23 - "$T/allowed" | head -5)
  if [ -n "$bad" ]; then echo "FAIL: $lib uses symbols of a layer above it: $(echo $bad)"; fail=1; fi
}
for l in libzinfplan.a libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a; do
  [ -f "$B/$l" ] || { echo "FAIL: $B/$l missing (make first)"; exit 1; }
done
below libzinfplan.a ";" libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a
below libzinflang.a libzinfplan.a ";" libzinfcompiler.a libzinfrt.a libzinfref.a
below libzinfcompiler.a libzinflang.a libzinfplan.a ";" libzinfrt.a libzinfref.a
below libzinfrt.a libzinfplan.a ";" libzinflang.a libzinfcompiler.a libzinfref.a
# the runtime's programs link only the runtime and the plan layer
for prog in zinfrun zinfdump zinftok; do
  [ -x "$B/bin/$prog" ] || { echo "FAIL: $B/bin/$prog missing"; fail=1; continue; }
  for sym in sema_check planner_run graph_init ast_dump; do
    if nm "$B/bin/$prog" 2>/dev/null | grep -q " T $sym$"; then echo "FAIL: $prog contains $sym (compiler or lang code)"; fail=1; fi
  done
done
[ $fail -eq 0 ] && echo "layering: ok (16 include probes, 4 libraries checked against the layers above them, 3 runtime programs)"
exit $fail
