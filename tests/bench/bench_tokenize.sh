#!/bin/sh
# Tokenizing speed: zinftok --tokenizer beside the Hugging Face tokenizers
# library on one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false),
# on the ~4 MB corpus and the tokenizers of tests/e2e/zinftok_hf.sh (GPT-2,
# Llama-3, LLaMA-2 and Metaspace styles, trained by the library itself).
#   tests/bench/bench_tokenize.sh BUILD [MB]
# zinftok's figure is its own report (reading, UTF-8 repair and encoding of
# all documents; best of 3 runs); the library's is tokenizer.encode(text)
# of each document already in memory (best of 2). Both count the same
# bytes. Needs the Python environment of `make deps` (ZINF_PY).
B=${1:-build}
MB=${2:-4}
Z="$B/bin/zinftok"
PY=${ZINF_PY:-${XDG_CACHE_HOME:-$HOME/.cache}/zinf/venv/bin/python}
H=tests/e2e/zinftok_hf.py
if [ ! -x "$PY" ]; then
  echo "note: no Python environment at $PY (make deps creates it): no tokenizers figure to compare with"
  exit 0
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/zinf-bench-tok.XXXXXX")
trap 'rm -rf "$W"' EXIT
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1
"$PY" "$H" corpus "$W/docs" "$MB" > /dev/null || exit 1
"$PY" "$H" train "$W" "$W"/docs/doc-*.txt > /dev/null || exit 1
printf '%-10s %12s %22s %8s %12s\n' tokenizer "zinftok MB/s" "tokenizers MB/s (1 th)" ratio "tokens"
status=0
for style in gpt2 llama3 llama2 metaspace; do
  best=0
  for run in 1 2 3; do
    out=$("$Z" --tokenizer "$W/$style.json" "$W"/docs/doc-*.txt -o "$W/$style.bin" 2> /dev/null) || { status=1; break; }
    mbs=$(echo "$out" | sed -n 's/.* \([0-9.]*\) MB\/s).*/\1/p')
    best=$(awk -v a="$best" -v b="$mbs" 'BEGIN { print (b > a) ? b : a }')
  done
  set -- $("$PY" "$H" speed "$W/$style.json" "$W"/docs/doc-*.txt) || { status=1; continue; }
  lib=$(awk -v s="$1" -v n="$2" 'BEGIN { printf "%.1f", n / s / 1e6 }')
  ratio=$(awk -v a="$best" -v b="$lib" 'BEGIN { printf "%.1fx", a / b }')
  printf '%-10s %12s %22s %8s %12s\n' "$style" "$best" "$lib" "$ratio" "$3"
done
exit $status
