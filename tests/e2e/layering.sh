#!/bin/sh
# The layers (docs/architecture.md) are enforced by the build: each folder
# is compiled with only the include paths it may use, and its library may
# only call down. This checks both halves of that promise:
#  - a runtime file that includes a compiler or lang header does not
#    compile; nor does a plan-layer file that includes a runtime header,
#    nor a base file a plan header, nor a lang file a compiler header, nor a
#    runtime room a header of a room above it (Makefile ROOM_SEES_*);
#  - no library references a symbol that only a layer above it defines,
#    and no room's objects one that only a room it may not see defines
#    (which an extern declaration could sneak past the include paths);
#  - no library reads a ZINF_* environment variable: the programs read them
#    and pass them in (runtime/main_env.h, docs/environment.md).
#   sh tests/e2e/layering.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir layering; T=$W
fail=0
flags() { make -s --no-print-directory BUILD="$B" "print-$1"; }
INC_BASE=$(flags INC_BASE) INC_PLAN=$(flags INC_PLAN) INC_LANG=$(flags INC_LANG) INC_COMPILER=$(flags INC_COMPILER) INC_RT=$(flags INC_RT)
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
probe "$INC_BASE" arena.h ok
probe "$INC_BASE" plan.h refused
probe "$INC_PLAN" plan.h ok
probe "$INC_PLAN" json.h ok
probe "$INC_PLAN" exec.h refused
probe "$INC_PLAN" graph.h refused
probe "$INC_PLAN" ast.h refused
probe "$INC_LANG" ast.h ok
probe "$INC_LANG" graph.h refused
probe "$INC_LANG" exec.h refused
probe "$INC_COMPILER" graph.h ok
probe "$INC_COMPILER" exec.h refused
probe "$INC_COMPILER" hostk.h refused
# each room sees its own headers and those of the rooms below it only
room() { make -s --no-print-directory BUILD="$B" "print-room-$1"; }
ROOMS=$(flags RT_ROOMS)
[ -n "$ROOMS" ] || { echo "FAIL: make print-RT_ROOMS gave nothing"; exit 1; }
probe "$(room hostk)" hostk.h ok
probe "$(room hostk)" exec.h refused
probe "$(room hostk)" nvme.h refused
probe "$(room io)" exec.h refused
probe "$(room io)" hostk.h refused
probe "$(room tok)" tokens.h refused
probe "$(room data)" hftok.h ok
probe "$(room data)" chattmpl.h ok
probe "$(room data)" exec.h refused
probe "$(room gpu)" comm.h ok
probe "$(room gpu)" exec.h refused
probe "$(room exec)" ckpt.h ok
probe "$(room exec)" hfio.h refused
probe "$(room exec)" decode.h refused
probe "$(room exec)" probe.h refused
probe "$(room hf)" exec.h ok
probe "$(room hf)" decode.h refused
probe "$(room decode)" hfio.h ok
probe "$(room decode)" tokens.h refused
probe "$(room report)" exec.h refused
nprobe=$(grep -c '^probe "' "$0")

# defined LIB...: the global symbols the libraries (or objects) define
defined() { for l in "$@"; do nm -g --defined-only "$B/$l" 2>/dev/null; done | awk 'NF >= 3 { print $3 }' | sort -u; }
undefined() { for l in $1; do nm -u "$B/$l" 2>/dev/null; done | awk '{ print $NF }' | sort -u; }
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
  if [ -n "$bad" ]; then echo "FAIL: ${label:-$lib} uses symbols of a layer above it: $(echo $bad)"; fail=1; fi
}
for l in libzinfbase.a libzinfplan.a libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a; do
  [ -f "$B/$l" ] || { echo "FAIL: $B/$l missing (make first)"; exit 1; }
done
below libzinfbase.a ";" libzinfplan.a libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a
below libzinfplan.a libzinfbase.a ";" libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a
below libzinflang.a libzinfplan.a libzinfbase.a ";" libzinfcompiler.a libzinfrt.a libzinfref.a
below libzinfcompiler.a libzinflang.a libzinfplan.a libzinfbase.a ";" libzinfrt.a libzinfref.a
below libzinfrt.a libzinfplan.a libzinfbase.a ";" libzinflang.a libzinfcompiler.a libzinfref.a
# each room's objects use only its own, the rooms it sees, and the layers below
objs() { (cd "$B" && for r in "$@"; do ls obj/runtime/"$r"/*.o; done); }
for r in $ROOMS; do
  sees=$(make -s --no-print-directory BUILD="$B" "print-ROOM_SEES_$r")
  others=""
  for o in $ROOMS; do case " $r $sees " in *" $o "*) ;; *) others="$others $o" ;; esac; done
  label="the runtime room $r"
  # shellcheck disable=SC2046,SC2086
  below "$(objs $r)" $(objs $sees) libzinfplan.a libzinfbase.a ";" $(objs $others) libzinflang.a libzinfcompiler.a libzinfref.a
done
label=""
nrooms=$(echo $ROOMS | wc -w)
# the runtime's programs link only the runtime and the plan layer
for prog in zinfrun zinfdump zinftok; do
  [ -x "$B/bin/$prog" ] || { echo "FAIL: $B/bin/$prog missing"; fail=1; continue; }
  for sym in sema_check planner_run graph_init ast_dump; do
    if nm "$B/bin/$prog" 2>/dev/null | grep -q " T $sym$"; then echo "FAIL: $prog contains $sym (compiler or lang code)"; fail=1; fi
  done
done
# no library object that calls getenv holds a string that is a ZINF_*
# variable's whole name (a message that mentions one is fine), and no
# library source passes one to getenv
nenv=0
for l in libzinfbase.a libzinfplan.a libzinflang.a libzinfcompiler.a libzinfrt.a libzinfref.a; do
  for m in $(nm -A "$B/$l" 2>/dev/null | awk '$NF == "getenv" || $NF == "secure_getenv" { n = split($1, p, ":"); print p[n - 1] }' | sort -u); do
    nenv=$((nenv + 1))
    names=$(ar p "$B/$l" "$m" | strings -a | grep -E '^ZINF_[A-Z0-9_]+$' | sort -u)
    [ -z "$names" ] || { echo "FAIL: $l($m) reads the environment and names $(echo $names): only the programs read ZINF_* variables"; fail=1; }
  done
done
[ "$nenv" -gt 0 ] || { echo "FAIL: no library object calls getenv: the check above looks at nothing"; fail=1; }
srcs=$(make -s --no-print-directory BUILD="$B" print-LIB_SRC)
# shellcheck disable=SC2086
bad=$(grep -lE 'getenv *\( *"ZINF_' $srcs 2>/dev/null)
[ -z "$bad" ] || { echo "FAIL: library sources read ZINF_* variables: $(echo $bad)"; fail=1; }
[ $fail -eq 0 ] && echo "layering: ok ($nprobe include probes, 5 libraries checked against the layers above them, $nrooms runtime rooms against the rooms they may not see, 3 runtime programs, $nenv library objects that read the environment read no ZINF_* variable)"
exit $fail
