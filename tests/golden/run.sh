#!/bin/sh
# Golden diagnostics: for each tests/golden/errors/NAME.zl, runs
#   BUILD/bin/zinfc --check tests/golden/errors/NAME.zl
# from the repository root and compares its stderr, plus a last line
# "exit: N", with tests/golden/errors/NAME.err.
#   tests/golden/run.sh BUILD check     print a diff and exit 1 on any mismatch
#   tests/golden/run.sh BUILD update    rewrite the .err files (review the diff!)
# An optional third argument limits the run to the cases matching a glob:
#   tests/golden/run.sh build update 'syntax_*'
B=${1:-build}
MODE=${2:-check}
ONLY=${3:-*}
G=tests/golden/errors
ZC="$B/bin/zinfc"
case "$MODE" in check|update) ;; *) echo "usage: $0 BUILD check|update" >&2; exit 2 ;; esac
if [ ! -x "$ZC" ]; then echo "FAIL: $ZC not built" >&2; exit 1; fi
T=$(mktemp -d /tmp/zinf-golden-err.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
fail=0 n=0
for src in "$G"/$ONLY.zl; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .zl)
  n=$((n + 1))
  # stderr only; stdout (an "ok:" line) would be a mismatch of its own
  timeout 20 "$ZC" --check "$src" > "$T/out" 2> "$T/got" < /dev/null
  echo "exit: $?" >> "$T/got"
  if [ "$MODE" = update ]; then
    if ! cmp -s "$T/got" "$G/$name.err" 2>/dev/null; then cp "$T/got" "$G/$name.err"; echo "updated $G/$name.err"; fi
    continue
  fi
  if [ ! -f "$G/$name.err" ]; then
    echo "FAIL $name: $G/$name.err missing (run: sh tests/golden/run.sh $B update)"; fail=1; continue
  fi
  if diff -u "$G/$name.err" "$T/got" > "$T/diff"; then
    echo "ok $name"
  else
    echo "FAIL $name: diagnostics differ from $G/$name.err:"; head -60 "$T/diff"; fail=1
  fi
done
[ "$MODE" = check ] && echo "golden errors: $n cases, $([ $fail = 0 ] && echo all match || echo MISMATCH)"
exit $fail
