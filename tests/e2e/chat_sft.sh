#!/bin/sh
# Conversations as instruction data (docs/huggingface.md, "Instruction
# data"): zinftok reads {"messages": [...]} JSONL, renders each with the
# chat template of the tokenizer_config.json beside the tokenizer
# (runtime/chat/chattmpl.h) and marks the assistant messages trained
# (runtime/data/sftdata.h). For ChatML, Qwen2.5, Qwen3, Llama 3.1 and Mistral
# v0.3 (the fixtures of tests/fixtures/chat_templates, each with a small
# tokenizer trained by tests/e2e/chat_sft.py: byte-level, and Metaspace
# for Mistral, whose answers start inside a "▁word" token), checked
# against transformers: the ids equal apply_chat_template(tokenize=True)'s,
# and the trained tokens are exactly those overlapping each assistant
# message's content and end-of-turn marker. --train-on all trains every
# token; a conversation without a template, an unknown role and an empty
# conversation are refused with FILE:LINE and nothing written.
#   tests/e2e/chat_sft.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir chatsft
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
"$ZINF_PY" tests/e2e/chat_sft.py make "$W" || { echo "FAIL: chat_sft.py make"; exit 1; }
fail=0
for n in chatml qwen25 qwen3 llama31 mistral; do
  d="$W/$n"
  if ! "$B/bin/zinftok" --tokenizer "$d/tokenizer.json" "$d/conv.jsonl" -o "$d/conv.bin" > "$d/out" 2>&1; then
    cat "$d/out"; echo "FAIL $n: zinftok"; fail=1
  elif ! grep -q "^zinftok: 3 samples (0 text, 0 prompt/completion, 0 pre-tokenized), 3 conversations; trained tokens: " "$d/out"; then
    cat "$d/out"; echo "FAIL $n: zinftok's summary"; fail=1
  fi
done
"$ZINF_PY" tests/e2e/chat_sft.py check "$W" || fail=1
# --train-on all: every token trained
d="$W/chatml"
"$B/bin/zinftok" --tokenizer "$d/tokenizer.json" "$d/conv.jsonl" -o "$W/all.bin" --train-on all > "$W/all.out" 2>&1 &&
  total=$(sed -n 's/^zinftok: \([0-9]*\) tokens -> .*/\1/p' "$W/all.out") &&
  grep -q "trained tokens: $total of $total (--train-on all)" "$W/all.out" || { cat "$W/all.out"; echo "FAIL: --train-on all"; fail=1; }
# refusals: FILE:LINE, exit 1, no file
refuse() { # JSONL WANT [ARGS...]
  printf '%s\n' "$1" > "$W/bad.jsonl"
  want=$2
  shift 2
  rm -f "$W/bad.bin"
  if "$B/bin/zinftok" "$W/bad.jsonl" -o "$W/bad.bin" "$@" > "$W/bad.out" 2>&1 || [ -e "$W/bad.bin" ] ||
     ! grep -qF "zinftok: $W/bad.jsonl:1: $want" "$W/bad.out"; then
    cat "$W/bad.out"; echo "FAIL: refusal '$want'"; fail=1
  fi
}
refuse '{"messages":[{"role":"user","content":"hi"}]}' \
  'a conversation ("messages") needs the model'"'"'s chat template: give --chat-template (a tokenizer_config.json or a .jinja file), or a tokenizer whose directory has tokenizer_config.json'
refuse '{"messages":[{"role":"robot","content":"hi"}]}' \
  'message 1 has the role "robot" (known: system, developer, user, assistant, tool, ipython)' --tokenizer "$d/tokenizer.json"
refuse '{"messages":[]}' 'an empty conversation ("messages" is [])' --tokenizer "$d/tokenizer.json"
refuse '{"messages":[{"content":"hi"}]}' 'message 1 has no "role"' --tokenizer "$d/tokenizer.json"
refuse '{"messages":[{"role":"user","content":"hi"},{"role":"user","content":"again"}]}' \
  'the chat template refuses the conversation: After the optional system message, conversation roles must alternate user/assistant/user/assistant/...' \
  --tokenizer "$W/mistral/tokenizer.json"
[ $fail -eq 0 ] && echo "ok   --train-on all, and the refusals (no template, unknown role, empty, no role, the template's own raise_exception)"
exit $fail
