#!/bin/sh
# Chat templates: every fixture of tests/fixtures/chat_templates rendered by
# zinf (runtime/chat/chattmpl.h, through build/tools/chat_render) and by
# transformers' apply_chat_template renderer over the same conversations,
# compared byte for byte; zinf's assistant ranges checked against the
# messages (tests/e2e/chat_template.py). Then a tokenizer_config.json with
# the list form of chat_template and {"content": ...} special tokens.
# Needs the Python environment of `make deps`; a skip (exit 77) without it.
B=${1:-build}
R="$B/tools/chat_render"
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir e2e-chat
D=$W
fail() { echo "FAIL: $*"; exit 1; }
H=tests/e2e/chat_template.py

"$ZINF_PY" "$H" cases "$D" > "$D/list" || fail "making the cases"
while read -r base; do
  name=$(basename "$base")
  "$R" "tests/fixtures/chat_templates/$name.jinja" "$base.zinf.json" > "$base.out" 2> "$base.err" ||
    fail "$name: chat_render exited $?: $(cat "$base.err")"
done < "$D/list"
"$ZINF_PY" "$H" check "$D" || fail "renders differ from transformers"

# tokenizer_config.json: the list form, special tokens as objects
"$ZINF_PY" - "$D/tokenizer_config.json" <<'PY' || fail "making tokenizer_config.json"
import json, sys
t = open("tests/fixtures/chat_templates/mistralai-Mistral-7B-Instruct-v0.3.jinja").read()
json.dump({"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>",
           "chat_template": [{"name": "tool_use", "template": "{{ nope }}"}, {"name": "default", "template": t}]},
          open(sys.argv[1], "w"))
PY
echo '[{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}]' > "$D/one.json"
"$R" "$D/tokenizer_config.json" "$D/one.json" > "$D/cfg.out" || fail "chat_render of tokenizer_config.json"
grep -qF '{"text": "<s>[INST] Hi[/INST] Hello</s>", "ranges": [[1, 20, 29]]}' "$D/cfg.out" ||
  fail "tokenizer_config.json: $(cat "$D/cfg.out")"
echo "ok tokenizer_config.json: the \"default\" template, bos_token from {\"content\": ...}"
# a model directory: chat_template.jinja comes before the config's template
mkdir "$D/model" && cp "$D/tokenizer_config.json" "$D/model/" &&
  printf '{{ bos_token }}{%% for m in messages %%}<{{ m.content }}>{%% endfor %%}{{ eos_token }}\n' > "$D/model/chat_template.jinja"
"$R" "$D/model" "$D/one.json" > "$D/dir.out" || fail "chat_render of a model directory"
grep -qF '{"text": "<s><Hi><Hello></s>", "ranges": [[1, 8, 18]]}' "$D/dir.out" || fail "model directory: $(cat "$D/dir.out")"
echo "ok model directory: chat_template.jinja first, special tokens from tokenizer_config.json"

# an unsupported construct is refused with its line
printf 'line one\n{%% filter upper %%}x{%% endfilter %%}\n' > "$D/filter.jinja"
"$R" "$D/filter.jinja" "$D/one.json" > /dev/null 2> "$D/filter.err" && fail "a filter block was accepted"
grep -qF "filter.jinja: line 2: the statement 'filter' is not supported" "$D/filter.err" ||
  fail "filter block: $(cat "$D/filter.err")"
echo "ok refused: the statement 'filter' (line 2)"
echo "chat_template e2e: ok"
