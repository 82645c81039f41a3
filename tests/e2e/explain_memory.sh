#!/bin/sh
# zinfc --explain prints the memory model's table (docs/memory-model.md)
# before the planner's choices: model states at 20 bytes per parameter
# (mixed precision) or 16 (f32) of the count `zinfc --check` reports, ZeRO-3
# shards per rank that agree with the planner's own per-rank figure, and a
# table even when no placement fits.
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfc
e2e_workdir explain; T=$W
fail=0
say() { echo "FAIL: $*"; fail=1; }
# the figure in column $2 (1-based, counting whitespace-separated fields
# from the right) of the table row starting with $1
field() { grep "^$1" "$T/out" | head -1 | awk -v k="$2" '{print $(NF - k + 1)}'; }

check() { # model target bytes_per_param ranks
  m=$1; t=$2; bpp=$3; ranks=$4
  name="$(basename "$m" .zl) on $t"
  n=$("$B/bin/zinfc" --check "$m" | sed -n 's/^ok: .*: \([0-9]*\) parameters$/\1/p')
  [ -n "$n" ] || { say "$name: zinfc --check gave no parameter count"; return; }
  "$B/bin/zinfc" --explain "$m" --target "$t" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || { say "$name: exit $rc"; cat "$T/err"; return; }
  grep -q "^memory model: .*, $n parameters in " "$T/out" || say "$name: no memory model header with $n parameters"
  grep -q "^ZeRO-3 over $ranks ranks" "$T/out" || say "$name: not $ranks ranks"
  whole=$(field "model states (paper's count)" 4)
  [ "$whole" = $((n * bpp)) ] || say "$name: model states $whole bytes, want $bpp x $n = $((n * bpp))"
  alloc=$(field "model states (zinf allocates)" 4)
  [ "$alloc" = $((n * 16)) ] || say "$name: allocated model states $alloc bytes, want 16 x $n"
  # per rank parameters (human units) = the planner's "model states per rank: params X"
  if [ $rc -eq 0 ]; then
    mine=$(grep '^parameters (' "$T/out" | awk '{print $(NF-2), $(NF-1)}')
    planner=$(sed -n 's/^model states per rank: params \([0-9.]* [KMGT]*i*B\),.*/\1/p' "$T/out")
    [ "$mine" = "$planner" ] || say "$name: per-rank parameters '$mine', the planner says '$planner'"
  fi
}

check examples/zero-infinity/zi-0.1t.zl dgx2 20 16
check examples/zero-infinity/zi-1t.zl dgx2 20 16
check examples/zero-infinity/zi-100t.zl dgx2 20 16   # does not fit: the table still comes
check examples/gpt2-tiny.zl host 16 4
[ $fail -eq 0 ] && echo "memory tables of 4 models check out"
exit $fail
