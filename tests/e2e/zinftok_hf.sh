#!/bin/sh
# zinftok --tokenizer against the Hugging Face tokenizers library.
#   tests/e2e/zinftok_hf.sh BUILD
# Builds a ~4 MB corpus (the licence texts and /usr/share/doc/*/copyright
# files of this machine, plus generated text: many scripts, every code
# point below U+3000, whitespace runs, digits, contractions, special
# tokens, invalid UTF-8, an empty document), trains four small but real
# tokenizers with the library (GPT-2 byte-level; Llama-3 Split+ByteLevel
# with 70003 ids, so 32-bit token files, and the same with Qwen2's regex;
# LLaMA-2 byte fallback with Prepend/Replace; the same vocabulary with
# Metaspace), then for each:
# zinftok's ids equal the library's for every document, `zinftok --decode`
# equals the library's decoding, and decoding gives the documents back.
# Then ids on standard input, and the errors: malformed and unsupported
# tokenizers, truncated token files, ids beyond the vocabulary.
# Needs the Python environment of `make deps` (ZINF_PY, else
# ~/.cache/zinf/venv/bin/python); prints "skip" and passes without it.
B=${1:-build}
Z="$B/bin/zinftok"
H=tests/e2e/zinftok_hf.py
. tests/e2e/lib.sh
e2e_need_py "tokenizers and transformers"
PY=$ZINF_PY
e2e_workdir tokhf; D=$W
fail() { echo "FAIL: $*"; exit 1; }
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1

"$PY" "$H" corpus "$D/docs" 4 || fail "making the corpus"
"$PY" "$H" train "$D" "$D"/docs/doc-*.txt || fail "training the tokenizers"

# style, round trip, zinftok's framing flags (the same go to the check);
# the documents are $DOCS (a glob, default all of them). The library's side
# (zinftok_hf.py verify: the whole corpus encoded, single-threaded, seconds
# per style) runs in the background, one process per style, while the next
# style's zinftok runs: verified waits for them all and fails on the first
# that failed, with its output. Nothing rewrites a style's files before then.
VERIFY=""
check() {
  style=$1; rt=$2; shift 2
  set -- "$@" ${DOCS:-"$D"/docs/doc-*.txt}
  "$Z" --tokenizer "$D/$style.json" "$@" -o "$D/$style.bin" > "$D/$style.out" 2> "$D/$style.err" ||
    fail "$style: zinftok exited $?: $(cat "$D/$style.err")"
  cat "$D/$style.out"
  [ -n "$DOCS" ] || grep -q "invalid UTF-8 sequences replaced by U+FFFD" "$D/$style.err" || fail "$style: no note about invalid UTF-8"
  "$Z" --decode --tokenizer "$D/$style.json" "$D/$style.bin" > "$D/$style.dec" || fail "$style: zinftok --decode exited $?"
  "$PY" "$H" verify "$D/$style.json" "$D/$style.bin" "$D/$style.dec" $rt "$@" > "$D/$style.verify" 2>&1 &
  VERIFY="$VERIFY $style:$!"
}
verified() {
  for v in $VERIFY; do
    wait "${v#*:}"
    rc=$?
    cat "$D/${v%%:*}.verify"
    [ $rc -eq 0 ] || fail "${v%%:*}"
  done
  VERIFY=""
}
# GPT-2: its post-processor adds nothing; llm.c puts <|endoftext|> before each document.
check gpt2 "--roundtrip exact" --bos '<|endoftext|>'
check llama3 "--roundtrip exact"
grep -q "32-bit ids" "$D/llama3.out" || fail "llama3: 70003 ids should give a 32-bit token file"
[ "$(od -An -tx4 -j4 -N8 "$D/llama3.bin" | tr -s ' ')" = " 00000002 $(od -An -tx4 -j8 -N4 "$D/llama3.bin" | tr -d ' ')" ] ||
  fail "llama3: header version is not 2"
[ "$(od -An -td4 -j12 -N4 "$D/llama3.bin" | tr -d ' ')" = 70003 ] || fail "llama3: header[3] is not the vocabulary"
# Qwen2's regex (digits one by one) on the same vocabulary, with a
# ByteLevel that adds a space before every piece.
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); p=j["pre_tokenizer"]["pretokenizers"]
p[0]["pattern"]["Regex"]=p[0]["pattern"]["Regex"].replace("\\p{N}{1,3}","\\p{N}"); p[1]["add_prefix_space"]=True
json.dump(j, open(sys.argv[2], "w"))' "$D/llama3.json" "$D/qwen2.json" || fail "making qwen2.json"
DOCS="$D/docs/doc-02*.txt" check qwen2 ""
grep -q "Qwen2 pre-tokenizer" "$D/qwen2.out" || fail "qwen2: the Qwen2 regex was not recognised"
check llama2 "--roundtrip space"
check metaspace ""
verified

# Ids on standard input: a stretch of each file and random ids (invalid
# UTF-8 and lone byte-fallback tokens), decoded as the library decodes them.
for style in gpt2 llama3 llama2; do
  "$PY" - "$D/$style.bin" "$D/$style.json" "$D/ids.txt" <<'PY' || fail "$style: making ids"
import random, struct, sys, json
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<4i", data[:16])
w = 2 if h[1] == 1 else 4
ids = list(struct.unpack("<%d%s" % (3000, "H" if w == 2 else "I"), data[1024 + 50000 * w:1024 + 53000 * w]))
rng = random.Random(7)
ids += [rng.randrange(h[3]) for _ in range(3000)]
ids = [i for i in ids if not 4002 <= i < 70000 or h[3] != 70003]  # Llama-3: mostly trained tokens, not the fillers
open(sys.argv[3], "w").write(" ".join(map(str, ids)) + "\n")
PY
  "$Z" --decode --tokenizer "$D/$style.json" < "$D/ids.txt" > "$D/ids.dec" || fail "$style: --decode of stdin exited $?"
  "$PY" "$H" decode-ids "$D/$style.json" "$D/ids.txt" "$D/ids.want" || fail "$style: decode-ids"
  cmp -s "$D/ids.dec" "$D/ids.want" || fail "$style: --decode of ids on stdin differs from the library's decoding"
  echo "ok $style: --decode of $(wc -w < "$D/ids.txt") ids on stdin equals the library's decoding"
done
# The tokens around documents chosen on the command line.
DOCS="$D/docs/doc-00[0-3].txt $D/docs/doc-03*.txt" check llama2 "" --no-bos --eos '</s>'
verified
# --skip-special drops the framing tokens
"$Z" --decode --skip-special --tokenizer "$D/llama3.json" "$D/llama3.bin" | grep -q '<|begin_of_text|>' &&
  fail "--skip-special left <|begin_of_text|>"
# byte-level files decode without a tokenizer
printf 'plain bytes\n' > "$D/p.txt"
"$Z" "$D/p.txt" -o "$D/p.bin" > /dev/null && [ "$(sh -c "\"$Z\" --decode \"$D/p.bin\"")" = "plain bytes" ] ||
  fail "byte-level --decode"

# Errors: exit 1 and a message naming the fault.
expect() { # name, exit code, message, command...
  name=$1; code=$2; want=$3; shift 3
  "$@" > "$D/e.out" 2> "$D/e.err" < "${STDIN:-/dev/null}"
  rc=$?
  [ $rc = "$code" ] || fail "$name: exit $rc, want $code: $(cat "$D/e.err")"
  grep -qF -- "$want" "$D/e.err" || fail "$name: message '$(cat "$D/e.err")' lacks '$want'"
  echo "ok error: $name: $(head -1 "$D/e.err" | cut -c1-160)"
}
mutate() { # in out python-statement-on-j
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); exec(sys.argv[3]); json.dump(j, open(sys.argv[2], "w"))' "$1" "$2" "$3" ||
    fail "mutate $3"
}
T="$D/docs/doc-000.txt"
head -c 3000 "$D/gpt2.json" > "$D/trunc.json"
expect "malformed JSON" 1 "trunc.json: malformed JSON: line" "$Z" --tokenizer "$D/trunc.json" "$T" -o "$D/x.bin"
mutate "$D/gpt2.json" "$D/unigram.json" 'j["model"]["type"] = "Unigram"'
expect "Unigram model" 1 "model type 'Unigram' is not supported (only BPE)" "$Z" --tokenizer "$D/unigram.json" "$T" -o "$D/x.bin"
mutate "$D/gpt2.json" "$D/wp.json" 'j["model"] = {"type": "WordPiece", "vocab": {}}'
expect "WordPiece model" 1 "model type 'WordPiece' is not supported" "$Z" --tokenizer "$D/wp.json" "$T" -o "$D/x.bin"
mutate "$D/llama3.json" "$D/regex.json" 'j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\s+"'
expect "unknown regex" 1 "the regex \"\\p{L}+|\\s+\" is not one zinftok implements" "$Z" --tokenizer "$D/regex.json" "$T" -o "$D/x.bin"
mutate "$D/llama2.json" "$D/nfkc.json" 'j["normalizer"] = {"type": "NFKC"}'
expect "NFKC normalizer" 1 "normalizer 'NFKC' is not supported" "$Z" --tokenizer "$D/nfkc.json" "$T" -o "$D/x.bin"
mutate "$D/gpt2.json" "$D/merge.json" 'j["model"]["merges"].append("zzq qzz")'
expect "merge of unknown tokens" 1 "'zzq' is not in the vocabulary" "$Z" --tokenizer "$D/merge.json" "$T" -o "$D/x.bin"
expect "missing tokenizer" 1 "nope.json: No such file or directory" "$Z" --tokenizer "$D/nope.json" "$T" -o "$D/x.bin"
expect "unknown --bos token" 1 "--bos '<nope>': no such token in the tokenizer" "$Z" --tokenizer "$D/gpt2.json" --bos '<nope>' "$T" -o "$D/x.bin"
[ -e "$D/x.bin" ] && fail "an output was written for a failed run"
head -c 100000 "$D/llama3.bin" > "$D/trunc.bin"
expect "truncated token file" 1 "trunc.bin: truncated: the header says" "$Z" --decode --tokenizer "$D/llama3.json" "$D/trunc.bin"
head -c 600 "$D/llama3.bin" > "$D/hdr.bin"
expect "truncated header" 1 "truncated header" "$Z" --decode --tokenizer "$D/llama3.json" "$D/hdr.bin"
expect "file for another vocabulary" 1 "made for a vocabulary of 70003 ids, more than the 4002 expected" \
  "$Z" --decode --tokenizer "$D/gpt2.json" "$D/llama3.bin"
"$PY" - "$D/big.bin" <<'PY' || fail "making big.bin"
import struct, sys
ids = [5, 6, 7, 65000, 8]
open(sys.argv[1], "wb").write(struct.pack("<256i", *([20240520, 1, len(ids)] + [0] * 253)) + struct.pack("<5H", *ids))
PY
expect "id beyond the vocabulary in a file" 1 "big.bin: token 65000 at position 3 is not below the vocabulary size 4002" \
  "$Z" --decode --tokenizer "$D/gpt2.json" "$D/big.bin"
echo "1 2 99999" > "$D/in.txt"
STDIN="$D/in.txt" expect "id beyond the vocabulary on stdin" 1 "stdin: token 99999 at position 2 is not below the vocabulary size 4002" \
  "$Z" --decode --tokenizer "$D/gpt2.json"
echo "1 2 x3" > "$D/in.txt"
STDIN="$D/in.txt" expect "not an id on stdin" 1 "stdin: 'x3' is not a token id" "$Z" --decode --tokenizer "$D/gpt2.json"
expect "--bos without --tokenizer" 2 "need --tokenizer" "$Z" --bos x "$T" -o "$D/x.bin"
expect "--bos with --no-bos" 2 "makes no sense" "$Z" --tokenizer "$D/gpt2.json" --bos x --no-bos "$T" -o "$D/x.bin"
echo "zinftok_hf e2e: ok"
