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
# the token files are written as NAME.tmp.PID and renamed (runtime/data/tokens.c)
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
# JSONL instruction samples (byte-level): ids and the version 3 mask
printf '{"prompt":"ab","completion":"cd"}\n\n{"text":"xy"}\n{"input_ids":[1,2,3],"labels":[-100,2,-100]}\n' > "$D/s.jsonl"
"$Z" "$D/s.jsonl" -o "$D/s.bin" > "$D/out" || fail "jsonl: $(cat "$D/out")"
grep -qx "zinftok: 3 samples (1 text, 1 prompt/completion, 1 pre-tokenized); trained tokens: 5 of 9 (--train-on completion)" \
  "$D/out" || fail "jsonl summary: $(cat "$D/out")"
# version 3, 9 tokens, vocabulary 256, no tokenizer fingerprint (byte-level), 2-byte ids, 5 trained; ids;
# mask 0b00111100 0b0 (tokens 2..5 and 7)
[ "$(od -An -tx4 -N32 "$D/s.bin" | tr -s ' \n' ' ')" = " $(printf %08x 20240520) 00000003 00000009 00000100 00000000 00000000 00000002 00000005 " ] ||
  fail "jsonl header: $(od -An -tx4 -N32 "$D/s.bin")"
[ "$(od -An -tu1 -j$((1024 + 18)) "$D/s.bin" | tr -s ' ')" = " 188 0" ] || fail "jsonl mask: $(od -An -tu1 -j1042 "$D/s.bin")"
"$Z" "$D/s.jsonl" -o "$D/a.bin" --train-on all > "$D/out" || fail "--train-on all"
grep -q "trained tokens: 7 of 9 (--train-on all)" "$D/out" || fail "--train-on all summary: $(cat "$D/out")"
printf '{"text":"abcdef"}\n' > "$D/long.jsonl"
"$Z" "$D/long.jsonl" -o "$D/l.bin" --max-tokens 4 > "$D/out" || fail "--max-tokens"
grep -q ", 1 longer than 4 tokens truncated;" "$D/out" || fail "truncation summary: $(cat "$D/out")"
[ "$(stat -c %s "$D/l.bin")" = $((1024 + 2 * 4)) ] || fail "truncated sample size (all trained: version 1)"
# bad samples: FILE:LINE, exit 1, nothing written
bad_jsonl() { # CONTENT MESSAGE [OPTIONS]
  printf '%s' "$1" > "$D/bad.jsonl"; rm -f "$D/bad.bin"
  m=$2; shift 2
  "$Z" "$D/bad.jsonl" -o "$D/bad.bin" "$@" > /dev/null 2> "$D/err"; [ $? = 1 ] || fail "bad jsonl exit code: $m"
  [ "$(cat "$D/err")" = "zinftok: $D/bad.jsonl:$m" ] || fail "bad jsonl message: $(cat "$D/err") (expected $m)"
  [ -e "$D/bad.bin" ] && fail "output written for bad jsonl: $m"
  ls "$D" | grep -q '\.tmp\.' && fail "temporary file left: $m"
  return 0
}
bad_jsonl '{"text":"a"}
{"text": 3' '2: malformed JSON: column 11: unexpected end of the text in an object'
bad_jsonl '{"prompt":"ab"}' '1: "completion" is missing'
bad_jsonl '{"text":["a"]}' '1: "text" is an array, expected a string'
bad_jsonl '{"input_ids":[1,2],"labels":[1]}' '1: 1 labels for 2 input_ids: they must be as many'
bad_jsonl '{"input_ids":[1,2,300]}' '1: input_ids[2] = 300 is outside the vocabulary of 256 ids'
bad_jsonl '{"input_ids":[1,2],"labels":[-100,5]}' '1: labels[1] = 5 is neither -100 nor input_ids[1] = 2: a token file trains each token to predict itself'
bad_jsonl '{"foo":1}' '1: a sample needs "text", "prompt" and "completion", "messages", or "input_ids" (it has "foo")'
bad_jsonl '[1]' '1: a sample is a JSON object, not an array'
bad_jsonl '{"text":"abcdef"}' '1: the sample has 6 tokens, more than --max-tokens 3 (--too-long truncate cuts it instead)' \
  --max-tokens 3 --too-long refuse
"$Z" "$D/in.txt" -o "$D/t.bin" --train-on all 2> "$D/err"; [ $? = 2 ] || fail "--train-on without jsonl"
"$Z" "$D/s.jsonl" -o "$D/t.bin" --train-on answers 2> "$D/err"; [ $? = 2 ] || fail "--train-on answers"
grep -q "expected completion, assistant or all" "$D/err" || fail "--train-on message: $(cat "$D/err")"
# --pack T: whole samples in rows of T+1 (a version 4 file of rows*(T+1) ids), the same file for the same seed
printf '{"input_ids":[1,2,3]}\n{"input_ids":[4,5,6,7,8]}\n{"input_ids":[9,10]}\n{"text":"abcdefg"}\n' > "$D/p.jsonl"
"$Z" "$D/p.jsonl" -o "$D/p1.bin" --pack 7 --pack-seed 3 > "$D/out" || fail "--pack"
grep -q "^zinftok: 4 samples packed into 3 rows of T+1 = 8 tokens -> $D/p1.bin (seed 3)$" "$D/out" || fail "--pack summary: $(cat "$D/out")"
grep -q "^zinftok: packing efficiency 70.83% (17 sample tokens of 24 row tokens); trained tokens: 13$" "$D/out" ||
  fail "--pack efficiency: $(cat "$D/out")"
[ "$(od -An -t d4 -j 4 -N 4 "$D/p1.bin" | tr -d ' ')" = 4 ] || fail "--pack writes version 4"
"$Z" "$D/p.jsonl" -o "$D/p2.bin" --pack 7 --pack-seed 3 > /dev/null && cmp -s "$D/p1.bin" "$D/p2.bin" || fail "--pack is not deterministic"
"$Z" "$D/p.jsonl" -o "$D/p2.bin" --pack 5 > "$D/out" 2> "$D/err"; [ $? = 1 ] || fail "--pack with a sample longer than a row"
[ "$(cat "$D/err")" = "zinftok: --pack 5: sample 4 (of 4) has 7 tokens, more than a row of T+1 = 6: cut the samples to fit (JSONL samples: --max-tokens 6)" ] ||
  fail "--pack too long: $(cat "$D/err")"
"$Z" "$D/p.jsonl" -o "$D/p2.bin" --pack 0 2> "$D/err"; [ $? = 2 ] || fail "--pack 0"
grep -q "expected the model's sequence length T, 1 or more" "$D/err" || fail "--pack 0 message: $(cat "$D/err")"
echo "zinftok e2e: ok"
