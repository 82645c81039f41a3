#!/bin/sh
# zinftok: text -> token file; exit codes and messages of bad use.
B=${1:-build}
Z="$B/bin/zinftok"
. tests/e2e/lib.sh
e2e_workdir tok; D=$W
fail() { echo "FAIL: $*"; exit 1; }
printf 'hello, token world! 0123456789\n' > "$D/in.txt"   # 31 bytes
"$Z" "$D/in.txt" -o "$D/train.bin" --val "$D/val.bin" --val-fraction 0.2 > "$D/out" || fail "zinftok failed"
grep -q "^zinftok: 25 tokens -> $D/train.bin, 6 -> $D/val.bin" "$D/out" || fail "summary: $(cat "$D/out")"
[ "$(stat -c %s "$D/train.bin")" = $((1024 + 2 * 25)) ] || fail "train.bin size"
[ "$(stat -c %s "$D/val.bin")" = $((1024 + 2 * 6)) ] || fail "val.bin size"
# magic 20240520, little-endian int32; version 1; count 25
[ "$(od -An -tx4 -N12 "$D/train.bin" | tr -s ' ')" = " $(printf %08x 20240520) 00000001 00000019" ] || fail "header"
# token 0 is 'h' (0x68), stored as uint16
[ "$(od -An -tx2 -j1024 -N2 "$D/train.bin" | tr -d ' ')" = "0068" ] || fail "first token"
# the token files are written as NAME.tmp.PID and renamed (runtime/tokens.c)
ls "$D" | grep -q '\.tmp\.' && fail "temporary file left"
"$Z" "$D/missing.txt" -o "$D/x.bin" 2> "$D/err"; [ $? = 1 ] || fail "missing input exit code"
grep -q "missing.txt: No such file or directory" "$D/err" || fail "missing input message: $(cat "$D/err")"
[ -e "$D/x.bin" ] && fail "output written for a missing input"
"$Z" "$D/in.txt" -o "$D/nodir/x.bin" 2> "$D/err"; [ $? = 1 ] || fail "bad output dir exit code"
grep -q "nodir/x.bin: cannot create" "$D/err" || fail "bad output message: $(cat "$D/err")"
"$Z" "$D/in.txt" 2> /dev/null; [ $? = 2 ] || fail "no -o should be usage (2)"
"$Z" "$D/in.txt" -o 2> "$D/err"; [ $? = 2 ] || fail "-o without argument"
grep -q "option '-o' needs an argument" "$D/err" || fail "-o message"
"$Z" "$D/in.txt" -o "$D/t.bin" --val-fraction 2 2> /dev/null; [ $? = 2 ] || fail "bad fraction"
"$Z" --bogus 2> /dev/null; [ $? = 2 ] || fail "unknown option"
echo "zinftok e2e: ok"
