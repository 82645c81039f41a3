#!/bin/sh
# Chat data into a token file: zinftok rendering JSONL conversations with
# the model's chat template (runtime/chat/chattmpl.h), tokenizing them and
# marking the assistant tokens (runtime/data/sftdata.h), beside the same work in
# Python as people do it: transformers' apply_chat_template(tokenize=False),
# then the tokenizers library's encode with offsets and the assistant spans
# (one thread: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), on the
# same file of seeded conversations, for the Llama 3.1 and Qwen2.5
# templates. Both rates count the JSONL file's bytes; zinftok's time is its
# whole run (reading the file, rendering, tokenizing, writing), best of 3.
#   tests/bench/bench_chat.sh BUILD [CONVERSATIONS]
B=${1:-build}
N=${2:-4000}
PY=${ZINF_PY:-${XDG_CACHE_HOME:-$HOME/.cache}/zinf/venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "note: no Python environment at $PY (make deps creates it): no transformers figure to compare with"
  exit 0
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/zinf-bench-chat.XXXXXX")
trap 'rm -rf "$W"' EXIT
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 TRANSFORMERS_VERBOSITY=error
"$PY" tests/bench/bench_chat.py make "$W" "$N" || exit 1
MB=$(awk -v b="$(stat -c %s "$W/chat.jsonl")" 'BEGIN { printf "%.2f", b / 1e6 }')
echo "$N conversations, $MB MB of JSONL"
printf '%-8s %14s %26s %8s %10s\n' template "zinftok MB/s" "transformers+tokenizers MB/s" ratio tokens
status=0
for fam in llama3 qwen25; do
  best=999999
  for run in 1 2 3; do
    t0=$(date +%s.%N)
    "$B/bin/zinftok" --tokenizer "$W/$fam/tokenizer.json" "$W/chat.jsonl" -o "$W/$fam.bin" > "$W/$fam.out" 2>&1 || { cat "$W/$fam.out"; status=1; break; }
    t1=$(date +%s.%N)
    best=$(awk -v a="$best" -v b="$(awk -v x="$t0" -v y="$t1" 'BEGIN { print y - x }')" 'BEGIN { print (b < a) ? b : a }')
  done
  ztok=$(sed -n 's/^zinftok: \([0-9]*\) tokens -> .*/\1/p' "$W/$fam.out")
  set -- $("$PY" tests/bench/bench_chat.py speed "$W" "$fam") || { status=1; continue; }
  zr=$(awk -v b="$2" -v s="$best" 'BEGIN { printf "%.2f", b / s / 1e6 }')
  pr=$(awk -v b="$2" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e6 }')
  printf '%-8s %14s %26s %8s %10s\n' "$fam" "$zr" "$pr" "$(awk -v a="$zr" -v b="$pr" 'BEGIN { printf "%.1fx", a / b }')" "$ztok/$3"
done
exit $status
