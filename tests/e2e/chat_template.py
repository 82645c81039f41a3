"""Helper of tests/e2e/chat_template.sh: the chat-template fixtures of
tests/fixtures/chat_templates rendered by transformers and by zinf's
renderer (build/tools/chat_render, runtime/chat/chattmpl.h), compared byte for
byte, and zinf's assistant ranges checked against the conversations.

  python chat_template.py cases DIR       -> DIR/NAME.cases.json per fixture
  python chat_template.py check DIR       compares DIR/NAME.out (chat_render's
                                          output) with transformers' renders

Each fixture gets every conversation (single and multi-turn, with and
without a system message, a prompt alone, Unicode and white space at the
edges of the content, Jinja-looking content, a Qwen3-style reasoning
answer, six random ones), with and without add_generation_prompt, and for Qwen3 with
enable_thinking true, false and unset. A template's own error
(raise_exception) must come out the same on both sides. A template with
{% generation %} blocks must give transformers' assistant spans
(return_assistant_tokens_mask) as its ranges, exactly."""
import glob
import json
import os
import random
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "chat_templates")

# special tokens of each family's tokenizer_config.json
TOKENS = {
    "meta-llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistralai": ("<s>", "</s>"),
    "Qwen": (None, "<|im_end|>"),
    "google-gemma": ("<bos>", "<eos>"),
    "microsoft-Phi-4": (None, "<|im_end|>"),
    "microsoft-Phi": ("<s>", "<|endoftext|>"),
    "chatml": ("<s>", "<|im_end|>"),
}
# the end-of-turn marker each family writes after an assistant message
END = {
    "meta-llama": "<|eot_id|>", "mistralai": "</s>", "Qwen": "<|im_end|>", "google-gemma": "<end_of_turn>",
    "microsoft-Phi-4": "<|im_end|>", "microsoft-Phi": "<|end|>", "chatml": "<|im_end|>",
}

SYS = {"role": "system", "content": "You are a careful assistant."}
U1 = {"role": "user", "content": "What is the capital of France?"}
A1 = {"role": "assistant", "content": "The capital of France is Paris."}
U2 = {"role": "user", "content": "  And of Germany? Answer with {{ one word }} {% please %}\n"}
A2 = {"role": "assistant", "content": "  Berlin — «ß» ✓ 你好\n\n"}
U3 = {"role": "user", "content": "Say \"quoted\" and 'single' and back\\slash\ttab."}
A3 = {"role": "assistant", "content": "\"quoted\" 'single' back\\slash\ttab."}
THINK = {"role": "assistant", "content": "<think>\nThe user wants 2+2.\n</think>\n\nIt is 4."}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}
TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "id": "call12345", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
TOOL_RESULT = {"role": "tool", "content": "{\"temperature\": 22}", "tool_call_id": "call12345", "name": "get_weather"}
A_TOOL = {"role": "assistant", "content": "It is 22 degrees in Paris."}
CONVERSATIONS = {
    "single": [U1, A1],
    "single_system": [SYS, U1, A1],
    "multi": [U1, A1, U2, A2],
    "multi_system": [SYS, U1, A1, U2, A2, U3, A3],
    "prompt": [U1],
    "prompt_system": [SYS, U1],
    "multi_prompt": [U1, A1, U3],
    "reasoning": [U1, A1, {"role": "user", "content": "2+2?"}, THINK],
    "empty_answer": [U1, {"role": "assistant", "content": ""}],
}
# for the templates that take reasoning as a field, and tools
REASONING = {
    "reasoning_field": [U1, A1, {"role": "user", "content": "2+2?"},
                        {"role": "assistant", "content": "It is 4.", "reasoning_content": "2 and 2 make 4."}],
    "reasoning_alias": [{"role": "user", "content": "2+2?"},
                        {"role": "assistant", "content": "It is 4.", "reasoning": "Adding."}],
}
TOOLS = {"tools": [U1, TOOL_CALL, TOOL_RESULT, A_TOOL]}


def random_conversations():
    """Alternating user and assistant turns (a system message in half) of
    text drawn from white space of every kind at the edges and inside,
    quotes, braces, tags, accents, CJK and emoji. ZINF_CHAT_RANDOM=N,SEED
    asks for N others (default 6,27)."""
    n, seed = (int(x) for x in os.environ.get("ZINF_CHAT_RANDOM", "6,27").split(","))
    rng = random.Random(seed)
    pool = list("abc xyz ABC 0123 .,;:!?") + [" ", "  ", "\n", "\n\n", "\t", "\u00a0", "\u3000", "\u2028", "\r\n",
                                                "'", '"', "{{", "}}", "{%", "%}", "<b>", "é", "ß", "你好", "🙂", "\\"]
    def text():
        return "".join(rng.choice(pool) for _ in range(rng.randint(0, 25)))
    out = {}
    for k in range(n):
        conv = [{"role": "system", "content": text() or "S"}] if k % 2 else []
        for t in range(rng.randint(1, 3)):
            conv.append({"role": "user", "content": text() or "U"})
            conv.append({"role": "assistant", "content": text() or "A"})
        out["random%d" % k] = conv
    return out
TOOL_FAMILIES = ("Qwen", "meta-llama-Llama-3.1", "meta-llama-Llama-3.2", "mistralai")


def family(name):
    for k in TOKENS:
        if name.startswith(k):
            return k
    raise SystemExit("no family for fixture " + name)


def cases_for(name):
    bos, eos = TOKENS[family(name)]
    out = []
    convs = dict(CONVERSATIONS)
    convs.update(random_conversations())
    if name.startswith("Qwen-Qwen3"):
        convs.update(REASONING)
    if name.startswith(TOOL_FAMILIES):
        convs.update(TOOLS)
    for conv_name, conv in convs.items():
        for gen in (False, True):
            thinking = [None, True, False] if name.startswith("Qwen-Qwen3") else [None]
            for think in thinking:
                case = {"name": "%s gen=%s" % (conv_name, gen), "messages": conv, "add_generation_prompt": gen,
                        "eos_token": eos, "vars": {}}
                if bos is not None:
                    case["bos_token"] = bos
                if think is not None:
                    case["vars"]["enable_thinking"] = think
                    case["name"] += " enable_thinking=%s" % think
                if conv_name == "single_system" and name.startswith("meta-llama"):
                    case["vars"]["date_string"] = "01 Feb 2025"
                    case["name"] += " date_string"
                if conv_name == "tools":
                    case["vars"]["tools"] = [WEATHER]
                out.append(case)
    return out


def reference(template, case):
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import render_jinja_template
    kwargs = dict(case["vars"])
    for k in ("bos_token", "eos_token"):
        if k in case:
            kwargs[k] = case[k]
    generation = "{% generation %}" in template
    try:
        rendered, spans = render_jinja_template(conversations=[case["messages"]], chat_template=template,
                                                add_generation_prompt=case["add_generation_prompt"],
                                                return_assistant_tokens_mask=generation, **kwargs)
        want = {"text": rendered[0]}
        if generation:
            # transformers' spans count characters; zinf's count bytes
            b = lambda i: len(rendered[0][:i].encode("utf-8"))
            want["spans"] = [[b(s), b(e)] for s, e in spans[0]]
        return want
    except TemplateError as e:
        return {"error": str(e), "raised": True}


def check_ranges(name, case, text, ranges):
    """Each assistant message's range holds its content (as the template
    shapes it: stripped, or split at </think>) and the family's end-of-turn
    marker right after it."""
    data = text.encode("utf-8")
    end = END[family(name)]
    seen = set()
    for m, start, stop in ranges:
        msg = case["messages"][m]
        if msg["role"] != "assistant":
            return "range for message %d, which is a %s message" % (m, msg["role"])
        seen.add(m)
        part = data[start:stop].decode("utf-8")
        if not part.endswith(end):
            return "range of message %d %r does not end with %r" % (m, part, end)
        inner = part[: -len(end)]
        content = msg["content"]
        if "tool_calls" in msg:
            if "get_weather" not in inner:
                return "range of tool-calling message %d is %r" % (m, part)
            continue
        answer = content.split("</think>")[-1]
        reasoning = msg.get("reasoning_content", msg.get("reasoning", ""))
        ok = inner in (content, content.strip(), answer.lstrip("\n"), answer.strip()) or (
            reasoning and inner.startswith(reasoning.strip("\n")) and inner.endswith(content.lstrip("\n"))) or (
            "</think>" in content and inner.endswith(answer.lstrip("\n"))
            and inner.startswith(content.split("</think>")[0].split("<think>")[-1].strip("\n")))
        if not ok:
            return "range of message %d is %r, not the message's content %r" % (m, part, content)
    for i, msg in enumerate(case["messages"]):
        if msg["role"] == "assistant" and (msg["content"].strip() or "tool_calls" in msg) and i not in seen:
            # a template may drop an assistant message (none of the fixtures does)
            if msg["content"].strip() in text:
                return "no range for assistant message %d" % i
    return None


def main():
    mode, d = sys.argv[1], sys.argv[2]
    fixtures = sorted(glob.glob(os.path.join(FIXTURES, "*.jinja")))
    if mode == "cases":
        for f in fixtures:
            name = os.path.basename(f)[:-6]
            cases = cases_for(name)
            json.dump(cases, open(os.path.join(d, name + ".cases.json"), "w"))
            # chat_render's form: a message's other fields and the variables as JSON text
            for case in cases:
                case["vars"] = {k: json.dumps(v) for k, v in case["vars"].items()}
                case["messages"] = [dict({k: m[k] for k in ("role", "content") if k in m},
                                         fields=json.dumps({k: v for k, v in m.items() if k not in ("role", "content")}))
                                    for m in case["messages"]]
            json.dump(cases, open(os.path.join(d, name + ".zinf.json"), "w"))
            print(os.path.join(d, name))
        return 0
    failures = 0
    for f in fixtures:
        name = os.path.basename(f)[:-6]
        template = open(f, encoding="utf-8").read()
        cases = json.load(open(os.path.join(d, name + ".cases.json")))
        got = [json.loads(line) for line in open(os.path.join(d, name + ".out"), encoding="utf-8")]
        if len(got) != len(cases):
            print("FAIL %s: %d results for %d cases" % (name, len(got), len(cases)))
            failures += 1
            continue
        same = raised = 0
        for case, g in zip(cases, got):
            want = reference(template, case)
            if "error" in want:
                if g.get("error") != want["error"] or not g.get("raised"):
                    print("FAIL %s [%s]: transformers raised %r, zinf gave %r" % (name, case["name"], want["error"], g))
                    failures += 1
                else:
                    raised += 1
                continue
            if "error" in g:
                print("FAIL %s [%s]: zinf failed: %s" % (name, case["name"], g["error"]))
                failures += 1
                continue
            if g["text"] != want["text"]:
                print("FAIL %s [%s]: texts differ\n  transformers: %r\n  zinf:         %r" %
                      (name, case["name"], want["text"], g["text"]))
                failures += 1
                continue
            if "spans" in want:  # {% generation %} blocks: exactly transformers' assistant spans
                got_spans = [[s, e] for _, s, e in g["ranges"]]
                bad = None if got_spans == want["spans"] else "generation spans %r, transformers %r" % (
                    got_spans, want["spans"])
            else:
                bad = check_ranges(name, case, g["text"], g["ranges"])
            if bad:
                print("FAIL %s [%s]: %s" % (name, case["name"], bad))
                failures += 1
                continue
            same += 1
        print("ok %-40s %3d cases byte for byte, %d the same raise_exception" % (name, same, raised))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
