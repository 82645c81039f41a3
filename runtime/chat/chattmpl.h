/* chattmpl: Hugging Face chat templates (the Jinja text of a
 * tokenizer_config.json's `chat_template`), rendered as transformers'
 * `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`
 * renders them: the same text, byte for byte.
 * Owns: the template's parse (a tree in the template's arena), the special
 * tokens a template reads (bos_token, eos_token, ...), and one render's
 * text and the byte ranges of the assistant messages in it.
 *
 * The Jinja subset is the one real templates use, under the settings
 * transformers uses (trim_blocks, lstrip_blocks, loop controls, line
 * breaks made \n, one trailing newline dropped):
 *   {{ }}, {% if/elif/else %}, {% for x[, y] in ... [if cond] %} with
 *   loop.index/index0/first/last/length/revindex/revindex0/previtem/
 *   nextitem and {% else %}, {% break %}, {% continue %}, {% set %} (a
 *   name, or an attribute of a namespace(); {% set x %}...{% endset %}),
 *   {% macro name(p, q=default) %} and its calls, {% generation %}, {# #},
 *   whitespace control with - and +;
 *   literals (strings, numbers, true/false/none, lists, tuples, dicts),
 *   ~ + - * / // % **, comparisons, and/or/not, in/not in,
 *   `a if c else b`, indexing and slicing ([::-1]), attribute access;
 *   filters: trim length count tojson upper lower capitalize title default
 *   (d) join items dictsort indent selectattr rejectattr select reject map
 *   list first last string int float reverse replace abs unique (not
 *   safe: its Markup escapes what is added to it);
 *   tests: defined undefined none string mapping sequence iterable number
 *   integer float boolean true false equalto eq ne == != odd even lower upper
 *   in;
 *   string methods startswith endswith strip lstrip rstrip split replace
 *   upper lower title capitalize; dict methods items keys values get;
 *   globals raise_exception, namespace, range, strftime_now (local time).
 * Values are Python's as Jinja has them: undefined prints as nothing and
 * iterates as empty; select/reject/map/unique/items/reverse give
 * generators (truthy when empty, used up once; printed or measured:
 * refused); dict views and ranges print as Python prints them.
 * Anything else ({% call %}, {% filter %}, a filter or test not listed,
 * ...) is refused when the template is parsed, with "line N: ..." naming
 * it; what the subset cannot do at run time (case changes of non-ASCII
 * text, dict keys that are not strings, ...) is an error with its line. A
 * template this module renders renders as transformers renders it.
 *
 * Variables a render sees: messages (a list of {role, content, ...}
 * dicts), add_generation_prompt, tools and documents (none), the special
 * tokens, and the caller's extra variables (JSON values, e.g.
 * enable_thinking, tools, date_string).
 *
 * Use: chattmpl_load_dir (or _load_config, _load_file, _parse) once; then
 * per conversation chattmpl_render, read out.text[0, out.len) and
 * out.ranges, chattmpl_render_free. The text is tokenized without the
 * tokenizer's post-processor tokens (transformers' add_special_tokens=
 * False: the template writes the BOS itself). Mapping the byte ranges to
 * tokens is the caller's: a token that straddles a range's edge
 * (SentencePiece's "▁Hello" of Mistral's " " + answer) needs its rule.
 *
 * Assistant ranges: every byte of a message's content and fields is
 * traced through the template's string operations (concatenation,
 * slicing, trim, split, strip, upper, ...; tojson of a value made only of
 * one message's fields, such as a tool call) into the output. An
 * assistant message's range runs from the first to the last output byte
 * that came from it, then on through the first end-of-turn marker in the
 * template text that follows, before any other message's bytes (the
 * eos_token or a marker of the known families: <|im_end|>, <|eot_id|>,
 * <|eom_id|>, <end_of_turn>, <|end|>, </s>, <|endoftext|>; none there: the
 * range ends with the message's last byte). Template text the template
 * writes before the message's first byte inside the turn (Qwen3's
 * "<think>\n", Mistral's "[TOOL_CALLS] [") is not in the range. An
 * assistant message of which nothing appears in the output (empty, or
 * dropped by the template) has no range. A template with {% generation %} blocks (the marker transformers'
 * return_assistant_tokens_mask reads) says itself what is generated: then
 * the ranges are those blocks' output, in order, as transformers takes
 * them (empty ones too), each with the assistant message whose content is
 * in it (CHATTMPL_NO_MESSAGE when none is).
 *
 * Limits (errors, never a crash): nesting of the template and of values,
 * output size, evaluation steps and memory per render (CHATTMPL_MAX_*). */
#ifndef ZINF_CHATTMPL_H
#define ZINF_CHATTMPL_H

#include <stddef.h>

enum {
    CHATTMPL_MAX_DEPTH = 200,                /* nesting of blocks and expressions */
    CHATTMPL_MAX_OUTPUT = 64 << 20,          /* bytes of rendered text */
    CHATTMPL_MAX_STEPS = 50 * 1000 * 1000,   /* evaluation steps of one render */
    CHATTMPL_MAX_MEMORY = 1 << 30,           /* bytes one render may allocate */
};

/* chattmpl_render's result when the template itself called
 * raise_exception(msg): err holds msg, verbatim. */
enum { CHATTMPL_RAISED = -2 };

typedef struct ChatTemplate ChatTemplate;

/* Parses a template's text; `name` prefixes messages ("NAME: line 3: ...").
 * Returns 0 with *out (free with chattmpl_free), or -1 with err. */
int chattmpl_parse(ChatTemplate **out, const char *name, const char *src, size_t n, char *err, size_t errlen);
/* A template file (.jinja): its whole text. */
int chattmpl_load_file(ChatTemplate **out, const char *path, char *err, size_t errlen);
/* A tokenizer_config.json: its chat_template (a string, or a list of
 * {name, template}, of which "default" is taken) and its special tokens
 * (bos_token, eos_token, unk_token, pad_token: strings or {"content": ...}).
 * A config without chat_template is an error naming it. */
int chattmpl_load_config(ChatTemplate **out, const char *path, char *err, size_t errlen);
int chattmpl_from_config_json(ChatTemplate **out, const char *name, const char *json, size_t n, char *err,
                              size_t errlen);
/* A Hugging Face model directory: its chat_template.jinja when there is
 * one (it comes first, as in transformers), else the chat_template of its
 * tokenizer_config.json; the special tokens from tokenizer_config.json.
 * Messages name the file they are about. */
int chattmpl_load_dir(ChatTemplate **out, const char *dir, char *err, size_t errlen);
void chattmpl_free(ChatTemplate *t);

/* Sets (or replaces) a special token the template sees as a variable,
 * e.g. "bos_token". Returns 0, or -1 when out of memory. */
int chattmpl_set_token(ChatTemplate *t, const char *name, const char *value);
/* A special token's text, or NULL when not set. */
const char *chattmpl_token(const ChatTemplate *t, const char *name);

typedef struct ChatMessage {
    const char *role;    /* "system", "user", "assistant", "tool", ...; NULL: none */
    const char *content; /* UTF-8; NULL: none (e.g. an assistant's tool call) */
    size_t content_len;
    /* NULL, or a JSON object of the message's other fields as a dataset
     * gives them ({"reasoning_content": ..., "tool_calls": [...],
     * "name": ...}; "content" here when it is not a string). Its strings
     * count as the message's own bytes for the ranges. As transformers
     * does, reasoning under any of reasoning_content, thinking or
     * reasoning is seen under the first two as well. */
    const char *fields_json;
} ChatMessage;

/* An extra variable: its name and its value as JSON text ("false",
 * "\"26 Jul 2024\"", "[{...}]"). */
typedef struct ChatVar {
    const char *name;
    const char *json;
} ChatVar;

typedef struct ChatRenderOptions {
    int add_generation_prompt;
    const ChatVar *vars;
    size_t nvars;
} ChatRenderOptions;

/* One assistant message's generated part: text[start, end). */
typedef struct ChatRange {
    size_t message; /* index into the messages given, or CHATTMPL_NO_MESSAGE */
    size_t start, end;
} ChatRange;
/* A {% generation %} block that holds no assistant message's content. */
#define CHATTMPL_NO_MESSAGE ((size_t)-1)

/* A render's result; owned by the caller, freed with chattmpl_render_free. */
typedef struct ChatRender {
    char *text; /* NUL-terminated */
    size_t len;
    ChatRange *ranges; /* in message order */
    size_t nranges;
} ChatRender;

/* Renders messages[0..n) (opts may be NULL: no generation prompt, no extra
 * variables). Returns 0 with *out; -1 with "line N: ..." in err (an
 * unsupported value, a type error, a limit); CHATTMPL_RAISED with the
 * template's own message. The template is only read: one template may be
 * rendered by several threads at once. */
int chattmpl_render(const ChatTemplate *t, const ChatMessage *messages, size_t n, const ChatRenderOptions *opts,
                    ChatRender *out, char *err, size_t errlen);
void chattmpl_render_free(ChatRender *r);

#endif
