#!/bin/sh
# zinfc's command line: --check, --emit=graph, -I, --help, --version, bad
# options and missing files, with their exit codes and messages.
#   tests/e2e/zinfc_cli.sh BUILD
B=${1:-build}
Z="$B/bin/zinfc"
[ -x "$Z" ] || { echo "FAIL: $Z not built"; exit 1; }
. tests/e2e/lib.sh
e2e_workdir cli; T=$W
fail=0
expect() { # expect RC WHAT COMMAND... ; stdout+stderr in $T/o
  want=$1; what=$2; shift 2
  "$@" > "$T/o" 2>&1
  rc=$?
  [ $rc -eq "$want" ] || { echo "FAIL: $what: exit $rc, want $want"; cat "$T/o"; fail=1; }
}
has() { grep -qF -- "$1" "$T/o" || { echo "FAIL: output lacks '$1'"; cat "$T/o"; fail=1; }; }

expect 0 "check gpt2-small" "$Z" --check examples/gpt2-small.zl
has "ok: gpt2_small: 124439808 parameters"
expect 0 "check llama2-7b" "$Z" --check examples/llama2-7b.zl
has "ok: llama2_7b: 6738415616 parameters"
expect 0 "help" "$Z" --help
has "usage: zinfc"
expect 0 "version" "$Z" --version
has "zinfc "
expect 2 "misspelt option" "$Z" --chek examples/gpt2-tiny.zl
has "zinfc: unknown option '--chek'; did you mean '--check'?"
expect 2 "no input" "$Z" --check
has "zinfc: no input file"
expect 1 "missing file" "$Z" --check "$T/none.zl"
has "error: cannot read $T/none.zl"

# the graph listing: stable, with shapes, dtypes, names and the total
expect 0 "emit graph" "$Z" --emit=graph examples/gpt2-tiny.zl
cp "$T/o" "$T/g1"
has "graph gpt2_tiny"
has "input tokens i32 [4, 64]"
has "param block.3.attn.wqkv f32 [128, 384] 49152 normal(0.02)"
has "attention %16, %17, %18 -> %19 f32 [4, 64, 128] heads=4 kv_heads=4 @block.0.attn seg 0"
has "total parameters 834304 (in 52 tensors)"
"$Z" --emit=graph examples/gpt2-tiny.zl > "$T/g2" 2>&1
cmp -s "$T/g1" "$T/g2" || { echo "FAIL: --emit=graph is not deterministic"; fail=1; }

# -I: a local layer library shadows nothing but is found first
mkdir -p "$T/lib"
printf 'layer twice(x: [B, T, D]) { return x + x }\n' > "$T/lib/mine.zl"
cat > "$T/m.zl" <<'ZL'
import "mine"
const V = 16, T = 4, D = 8
model m(tokens: i32[B, T], targets: i32[B, T]) {
  e = param [V, D] init normal(0.02)
  x = twice(embedding(e, tokens))
  loss cross_entropy(matmul(x, e, transpose_b), targets)
}
ZL
expect 1 "import not found without -I" "$Z" --check "$T/m.zl"
has "error:"
expect 0 "import found with -I" "$Z" -I "$T/lib" --check "$T/m.zl"
has "ok: m: 128 parameters"
# ZINF_STDLIB points the stdlib elsewhere
expect 1 "ZINF_STDLIB honoured" env ZINF_STDLIB="$T/lib" "$Z" --check examples/gpt2-tiny.zl
has "error:"

# --kernel-src makes its directory; one it cannot make is a clear error
cat > "$T/k.zl" <<ZL
import "$(pwd)/tests/e2e/models/gpt-micro"
target g { nodes = 1; gpus_per_node = 1; gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
ZL
if [ -e /usr/local/cuda/lib64/libnvrtc.so ] || command -v nvcc > /dev/null 2>&1; then
  expect 0 "--kernel-src makes its directory" "$Z" "$T/k.zl" --kernels=sm_90 --kernel-src="$T/ksrc" -o "$T/k.plan"
  [ "$(ls "$T/ksrc" | grep -c '\.cu$')" -ge 5 ] || { echo "FAIL: --kernel-src wrote $(ls "$T/ksrc" | wc -l) files"; fail=1; }
  expect 1 "--kernel-src in a missing parent" "$Z" "$T/k.zl" --kernels=sm_90 --kernel-src="$T/no/such" -o "$T/k.plan"
  has "cannot create the directory"
else
  echo "note: no NVRTC (/usr/local/cuda): --kernel-src is not tested"
fi

# a model named after its family: zinfc --from-hf writes llama.zl, whose own
# import "llama" is the stdlib's (docs/language.md, "Imports")
mkdir -p "$T/imp/hf" || exit 1
cat > "$T/imp/hf/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
 "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
"$Z" --from-hf "$T/imp/hf" --emit=zl > "$T/imp/llama.zl" || { echo "FAIL: --from-hf --emit=zl"; fail=1; }
expect 0 "llama.zl importing \"llama\"" "$Z" --check "$T/imp/llama.zl"
has "ok: llama: 125248 parameters"
# the stdlib directory, as the missing import's note names it
printf 'import "nope"\n' > "$T/imp/n.zl"
"$Z" --check "$T/imp/n.zl" > "$T/o" 2>&1
stdlib=$(sed -n 's/^note: looked for nope.zl in [^,]*, //p' "$T/o")
[ -n "$stdlib" ] || { echo "FAIL: no stdlib directory in the missing import's note"; cat "$T/o"; fail=1; }
# a second file beside it that imports "llama": which one is meant is ambiguous, an error naming both
printf 'import "llama"\n' > "$T/imp/m.zl"
expect 1 "a local llama.zl shadowing the stdlib's" "$Z" --check "$T/imp/m.zl"
head -4 "$T/o" > "$T/o4"
cat > "$T/want4" <<WANT
$T/imp/m.zl:1:8: error: import "llama" is ambiguous: $T/imp/llama.zl shadows the standard library's $stdlib/llama.zl
 1 | import "llama"
   |        ^~~~~~~
hint: rename $T/imp/llama.zl to import the standard library's llama.zl, or write import "./llama.zl" to import the local file
WANT
diff "$T/want4" "$T/o4" || { echo "FAIL: the shadowing message"; fail=1; }
printf 'import "./llama.zl"\n' > "$T/imp/m.zl"
expect 0 "import \"./llama.zl\": the local file" "$Z" --check "$T/imp/m.zl"
has "ok: llama: 125248 parameters"

# errors: exit 1, every error listed, never colour into a file
printf 'model m(t: i32[B, 4]) {\n  y = gelu(tt)\n  z = silu(uu)\n  loss y\n}\n' > "$T/bad.zl"
expect 1 "two errors" "$Z" --check "$T/bad.zl"
[ "$(grep -c 'error:' "$T/o")" -eq 2 ] || { echo "FAIL: want 2 errors"; cat "$T/o"; fail=1; }
grep -q "$(printf '\033')" "$T/o" && { echo "FAIL: colour codes in a file"; fail=1; }
exit $fail
