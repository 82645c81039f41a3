/* chattmpl: each Jinja construct against the text Jinja 3.1.6 renders
 * under transformers' settings (trim_blocks, lstrip_blocks, its tojson and
 * raise_exception; the expected texts were produced by transformers'
 * template compiler for the same messages); each refusal and runtime error
 * to the letter; the limits; the assistant ranges; loading a
 * tokenizer_config.json. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chattmpl.h"

static const ChatMessage MSGS[] = {{"user", "Hi", 2}, {"assistant", " Yo ", 4}};

typedef struct Case {
    const char *name, *src, *text, *raised;
} Case;

static const Case CASES[] = {
    {"text only", "plain text", "plain text", NULL},
    {"output", "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 2.5 }}{{ true }}{{ none }}{{ nothing }}", "ab12.5TrueNone", NULL},
    {"escapes", "{{ 'x\\ny\\t\\'q\\' \\u00e9\\x41\\\\' }}", "x\ny\t'q' \303\251A\\", NULL},
    {"adjacent strings", "{{ 'a' 'b' }}", "ab", NULL},
    {"concat", "{{ 'a' ~ 1 ~ none ~ true }}{{ 'x' + 'y' }}", "a1NoneTruexy", NULL},
    {"arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 10 - 2 - 3 }} {{ 'ab' * 3 }}", "3 -4 3.5 2 1024 3 5 ababab", NULL},
    {"floats", "{{ 0.1 + 0.2 }} {{ 1e3 if false else 1.0 }} {{ 3 / 1 }}", "0.30000000000000004 1.0 3.0", NULL},
    {"compare", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ 'a' != 'a' }}{{ [1, 'x'] == [1, 'x'] }}", "TrueFalseTrueTrueFalseTrue", NULL},
    {"logic", "{{ true and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ none or '' }}|{{ 'a' and 0 }}", "x|y|True||0", NULL},
    {"in", "{{ 'i' in 'Hi' }}{{ 3 in [1, 2] }}{{ 'role' in messages[0] }}{{ 'x' not in 'abc' }}", "TrueFalseTrueTrue", NULL},
    {"ternary", "{{ 'yes' if messages else 'no' }}{{ 'a' if false }}|", "yes|", NULL},
    {"if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", "one,two,many,", NULL},
    {"for loop", "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}:{{ m.role }};{% endfor %}", "01TrueFalse221:user;12FalseTrue210:assistant;", NULL},
    {"for filter", "{% for n in [1, 2, 3, 4] if n is even %}{{ n }}/{{ loop.length }}{% endfor %}", "2/24/2", NULL},
    {"for else", "{% for n in [] %}x{% else %}empty{% endfor %}", "empty", NULL},
    {"for items", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in {'c': 3} | items %}{{ k }}{{ v }}{% endfor %}", "a=1;b=2;c3", NULL},
    {"for dict", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy", NULL},
    {"break continue", "{% for n in range(10) %}{% if n == 1 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", "023", NULL},
    {"range", "{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | join(',') }}", "[1, 3, 5]3,2,1", NULL},
    {"nested loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", "1x11y21 2x12y22 ", NULL},
    {"set scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 7 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}", "171713", NULL},
    {"namespace", "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s + m.role %}{% endfor %}{{ ns.n }}{{ ns.s }}", "2userassistant", NULL},
    {"index slice", "{{ messages[0]['role'] }}{{ messages[-1].content }}|{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ [1, 2, 3][::-1] }}{{ [1, 2, 3, 4, 5][1::2] }}{{ 'h\303\251!'[-2:] }}{{ [1, 2][5] }}|", "user Yo |elolleh[3, 2, 1][2, 4]\303\251!|", NULL},
    {"slice of messages", "{% for m in messages[1:] %}{{ m.role }}{% endfor %}{% for m in messages[::-1] %}{{ m.role }}{% endfor %}", "assistantassistantuser", NULL},
    {"attr missing", "{{ messages[0].nope is defined }}{{ messages[0].content.content is defined }}{{ messages[0].get('nope', 'dflt') }}{{ messages[0].get('role') }}", "FalseFalsedfltuser", NULL},
    {"tests", "{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is equalto 2 }}{{ x is undefined }}{{ x is not defined }}{{ 'a' is in 'abc' }}", "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrue", NULL},
    {"filters str", "{{ '  pad  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'abc' | upper }}{{ 'ABC' | lower }}{{ 'hello world' | title }}{{ 'hello' | capitalize }}{{ 'aXbX' | replace('X', '-') }}", "pad|a|ABCabcHello WorldHelloa-b-", NULL},
    {"filters length", "{{ 'h\303\251llo' | length }}{{ messages | length }}{{ {'a': 1} | count }}{{ messages|length - 1 }}", "5211", NULL},
    {"filters default", "{{ nope | default('d') }}{{ '' | default('e') }}{{ '' | default('f', true) }}{{ nope | d('g') }}", "dfg", NULL},
    {"filters join", "{{ ['a', 'b'] | join }}{{ ['a', 1, none] | join(', ') }}{{ messages | join('|', attribute='role') }}", "aba, 1, Noneuser|assistant", NULL},
    {"filters select", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | first }}|{{ [0, 1, 2, 3] | select('odd') | list }}{{ [0, 1, '', 'x'] | select | list }}{{ [1, 2, 3] | reject('equalto', 2) | list }}{{ messages | selectattr('tool_calls', 'undefined') | list | length }}", "1 Yo |[1, 3][1, 'x'][1, 3]2", NULL},
    {"filters misc", "{{ [3, 1, 3] | unique | list }}{{ [1, 2] | last }}{{ 'abc' | first }}{{ [1, 2] | reverse | list }}{{ 'abc' | reverse }}{{ '42' | int + 1 }}{{ 3 | float }}{{ -3 | abs }}{{ 5 | string ~ 'x' }}{{ 'x' | safe }}{{ 'ab' | list }}", "[3, 1]2a[2, 1]cba433.035xx['a', 'b']", NULL},
    {"tojson", "{{ 'a\"b\\n\303\251' | tojson }} {{ {'k': [1, 2.5, true, none], 'e': {}} | tojson }} {{ {'a': [1]} | tojson(indent=2) }} {{ [] | tojson(indent=4) }}", "\"a\\\"b\\n\303\251\" {\"k\": [1, 2.5, true, null], \"e\": {}} {\n  \"a\": [\n    1\n  ]\n} []", NULL},
    {"tuple", "{{ (1, 'a') }}{{ (1,) }}{{ (1, 2) == [1, 2] }}{{ (1, 2) | tojson }}{{ 'x' in ('x', 'y') }}", "(1, 'a')(1,)False[1, 2]True", NULL},
    {"repr", "{{ ['a', \"it's\", 1, none, true, {'k': 'v'}] }}{{ {'x': [1]} }}", "['a', \"it's\", 1, None, True, {'k': 'v'}]{'x': [1]}", NULL},
    {"string methods", "{{ ' x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'aXa'.replace('a', 'bb') }}{{ 'Hi'.startswith('H') }}{{ 'Hi'.endswith(('x', 'i')) }}{{ 'ab'.upper() }}{{ 'AB'.lower() }}", "x|y|ab\n|ab|['a', 'b', '', 'c']['a', 'b']['a', 'b c']bbXbbTrueTrueABab", NULL},
    {"unicode whitespace", "[{{ '\\u3000\\xa0 x\\u2003' | trim }}]{{ 'a\\u2028b'.split() }}", "[x]['a', 'b']", NULL},
    {"whitespace control", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e {{ 'f' }} g", "abcde f g", NULL},
    {"trim_blocks lstrip_blocks", "line1\n    {% if true %}\n    body\n    {% endif %}\nline2\n  {# comment #}\nline3 {% if true %}x{% endif %}\n", "line1\n    body\nline2\nline3 x", NULL},
    {"plus keeps", "a\n    {%+ if true %}b{% endif %}\n", "a\n    b", NULL},
    {"comment strip", "a  {#- c -#}  b", "ab", NULL},
    {"trailing newline", "x\n\n", "x\n", NULL},
    {"dict literal", "{% set d = {'a': 1, 'b': {'c': 'deep'}} %}{{ d.b.c }}{{ d['a'] }}{{ d.keys() | list }}{{ d.values() | list | length }}", "deep1['a', 'b']2", NULL},
    {"filters precedence", "{{ -1 | abs }}{{ 'a' ~ 'B' | lower }}{{ [1, 2] | length + 1 }}{{ not 'x' is string }}", "1ab3False", NULL},
    {"messages content", "{% for m in messages %}[{{ m['content'] | trim }}]{% endfor %}{{ add_generation_prompt }}{{ tools }}{{ documents }}", "[Hi][Yo]FalseNoneNone", NULL},
    {"raise", "{% if messages | length > 1 %}{{ raise_exception('Too many: ' ~ messages | length) }}{% endif %}", NULL, "Too many: 2"},
};

/* Renders src over MSGS; returns the render's code, the text in *text
 * (malloc'd) or the message in err. */
static int render(const char *src, const ChatMessage *msgs, size_t n, const ChatRenderOptions *opts, ChatRender *out,
                  char *err, size_t errlen) {
    ChatTemplate *t;
    if (chattmpl_parse(&t, "t", src, strlen(src), err, errlen)) return -3;
    chattmpl_set_token(t, "bos_token", "<s>");
    chattmpl_set_token(t, "eos_token", "</s>");
    int rc = chattmpl_render(t, msgs, n, opts, out, err, errlen);
    chattmpl_free(t);
    return rc;
}

START_TEST(test_constructs) {
    const Case *c = &CASES[_i];
    char err[512] = "";
    ChatRender out;
    int rc = render(c->src, MSGS, 2, NULL, &out, err, sizeof err);
    if (c->raised) {
        ck_assert_msg(rc == CHATTMPL_RAISED, "%s: rc %d (%s)", c->name, rc, err);
        ck_assert_str_eq(err, c->raised);
        return;
    }
    ck_assert_msg(rc == 0, "%s: %s", c->name, err);
    ck_assert_msg(out.len == strlen(c->text) && !memcmp(out.text, c->text, out.len), "%s:\n got  [%s]\n want [%s]",
                  c->name, out.text, c->text);
    chattmpl_render_free(&out);
}
END_TEST

typedef struct ErrCase {
    const char *src, *err;
} ErrCase;

/* Refused when parsed, or failing when rendered: the message to the letter. */
static const ErrCase ERRORS[] = {
    {"a\n{% macro m() %}x{% endmacro %}", "t: line 2: the statement 'macro' is not supported"},
    {"{% raw %}x{% endraw %}", "t: line 1: the statement 'raw' is not supported"},
    {"{{ messages | indent(2) }}", "t: line 1: the filter 'indent' is not supported"},
    {"{{ 3 is divisibleby(3) }}", "t: line 1: the test 'divisibleby' is not supported"},
    {"{{ 'a {}'.format(1) }}", "t: line 1: the method 'format' is not supported"},
    {"{{ cycler('a') }}", "t: line 1: the function 'cycler' is not supported"},
    {"{% set x %}y{% endset %}", "t: line 1: block 'set' (without '=') is not supported"},
    {"{% for a, b, c in x %}{% endfor %}", "t: line 1: a for loop unpacks at most two variables"},
    {"{% for x in y recursive %}{% endfor %}", "t: line 1: recursive loops are not supported"},
    {"x\n\n{% if true %}\nyes", "t: line 3: the 'if' opened here is not closed"},
    {"{% endif %}", "t: line 1: 'endif' without a matching opening tag"},
    {"{{ 'abc }}", "t: line 1: a string literal is not closed"},
    {"{{ 1 + }}", "t: line 1: expected a value, found the end of the tag"},
    {"{{ a ; b }}", "t: line 1: unexpected character ';'"},
    {"{{ a b }}", "t: line 1: expected the end of the tag, found 'b'"},
    {"{{ x", "t: line 1: the tag is not closed with '}}'"},
    {"{# open", "t: line 1: the comment is not closed with '#}'"},
    {"{{ '\\u12' }}", "t: line 1: a \\u escape needs 4 hex digits"},
    {"{% if x %}{% else %}{% elif y %}{% endif %}", "t: line 1: 'elif' without a matching opening tag"},
    /* runtime */
    {"line\n{{ x.y }}", "t: line 2: 'x' is undefined (reading its attribute 'y')"},
    {"{{ x[0] }}", "t: line 1: 'x' is undefined (reading an item of it)"},
    {"{{ 'a' + 1 }}", "t: line 1: unsupported operand types for +: 'str' and 'int'"},
    {"{{ 1 // 0 }}", "t: line 1: division by zero"},
    {"{% set x = 1 %}{% set x.y = 2 %}", "t: line 1: cannot set 'x.y': 'x' is not a namespace"},
    {"{{ '\303\251' | upper }}", "t: line 1: 'upper' of non-ASCII text is not supported"},
    {"{{ 1 < 'a' }}", "t: line 1: cannot compare int with str"},
    {"{{ 1 in 2 }}", "t: line 1: 'in' needs a string, list or dict on the right, not int"},
    {"{% for c in 5 %}{% endfor %}", "t: line 1: int is not iterable"},
    {"{{ [1][::0] }}", "t: line 1: slice step cannot be zero"},
    {"{{ messages | map('upper') }}", "t: line 1: map supports only attribute= (and default=)"},
    {"{{ messages | selectattr('role', 'sameas', 1) | list }}", "t: line 1: the test 'sameas' is not supported"},
    {"{{ 5 | length }}", "t: line 1: int has no length"},
    {"{{ x | tojson }}", "t: line 1: tojson of an undefined value"},
    {"{{ 'abc'.split('') }}", "t: line 1: split: empty separator"},
    {"{{ messages.append(1) }}", "t: line 1: the method 'append' is not supported"},
    {"{{ messages.items() }}", "t: line 1: list has no method 'items'"},
    {"{{ x.strip() }}", "t: line 1: 'x' is undefined (reading its attribute 'strip')"},
    {"{% set f = 1 %}{{ f() }}", "t: line 1: the function 'f' is not supported"},
    {"{% break %}", "t: line 0: 'break' or 'continue' outside a loop"},
    {"{{ 'x' * 60000000 }}", "t: line 1: the template ran more than 50000000 steps"},
    {"{% set big = 'x' * 1000000 %}{% for i in range(100) %}{{ big }}{% endfor %}",
     "t: line 1: the rendered text is longer than 67108864 bytes"},
};

START_TEST(test_errors) {
    const ErrCase *c = &ERRORS[_i];
    char err[512] = "";
    ChatRender out;
    int rc = render(c->src, MSGS, 2, NULL, &out, err, sizeof err);
    if (rc == 0) chattmpl_render_free(&out);
    ck_assert_msg(rc == -1 || rc == -3, "%s: rc %d", c->src, rc);
    ck_assert_str_eq(err, c->err);
}
END_TEST

START_TEST(test_depth_limits) {
    char *src = malloc(4096), err[512];
    ChatRender out;
    strcpy(src, "{{ ");
    for (int i = 0; i < 300; i++) strcat(src, "(");
    strcat(src, "1");
    for (int i = 0; i < 300; i++) strcat(src, ")");
    strcat(src, " }}");
    ck_assert_int_eq(render(src, MSGS, 2, NULL, &out, err, sizeof err), -3);
    ck_assert_str_eq(err, "t: line 1: expressions nest deeper than 200");
    src[0] = 0;
    for (int i = 0; i < 250; i++) strcat(src, "{% if 1 %}");
    ck_assert_int_eq(render(src, MSGS, 2, NULL, &out, err, sizeof err), -3);
    ck_assert_str_eq(err, "t: line 1: blocks nest deeper than 200");
    free(src);
}
END_TEST

static void check_ranges(const char *src, const ChatMessage *msgs, size_t n, const char *text, const size_t *want,
                         size_t nwant) {
    char err[512];
    ChatRender out;
    ck_assert_msg(render(src, msgs, n, NULL, &out, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(out.text, text);
    ck_assert_uint_eq(out.nranges, nwant);
    for (size_t i = 0; i < nwant; i++) {
        ck_assert_uint_eq(out.ranges[i].message, want[3 * i]);
        ck_assert_uint_eq(out.ranges[i].start, want[3 * i + 1]);
        ck_assert_uint_eq(out.ranges[i].end, want[3 * i + 2]);
    }
    chattmpl_render_free(&out);
}

START_TEST(test_ranges) {
    static const ChatMessage conv[] = {
        {"system", "S", 1}, {"user", "Q1", 2}, {"assistant", " A1 ", 4}, {"user", "Q2", 2}, {"assistant", "A2", 2}};
    const char *chatml = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}";
    /* the content with its spaces, then <|im_end|>; the newline after is not the turn's */
    check_ranges(chatml, conv, 5,
                 "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n A1 "
                 "<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n",
                 (const size_t[]){2, 83, 97, 4, 150, 162}, 2);
    /* trimmed content and the eos_token as the marker */
    check_ranges("{% for m in messages %}{% if m.role == 'assistant' %}[{{ m.content | trim + eos_token }}]"
                 "{% endif %}{% endfor %}",
                 conv, 5, "[A1</s>][A2</s>]", (const size_t[]){2, 1, 7, 4, 9, 15}, 2);
    /* no marker after the content: the content alone */
    check_ranges("{% for m in messages %}{{ m.content }};{% endfor %}", conv + 1, 2, "Q1; A1 ;",
                 (const size_t[]){1, 3, 7}, 1);
    /* content split and reassembled around template text: first to last
     * byte (and the template's last newline goes, as in Jinja) */
    static const ChatMessage think[] = {{"assistant", "<think>r</think>a", 17}};
    check_ranges("{% set c = messages[0].content %}<think>\n{{ c.split('</think>')[0].split('<think>')[-1] }}\n</think>"
                 "{{ c.split('</think>')[-1] }}<|im_end|>\n",
                 think, 1, "<think>\nr\n</think>a<|im_end|>", (const size_t[]){0, 8, 29}, 1);
    /* an empty answer, and one the template drops, have no range */
    static const ChatMessage empty[] = {{"user", "Q", 1}, {"assistant", "", 0}};
    check_ranges(chatml, empty, 2, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n", NULL, 0);
    check_ranges("{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}", conv, 5, "Q1Q2", NULL, 0);
}
END_TEST

START_TEST(test_variables) {
    char err[512];
    ChatRender out;
    const char *src = "{{ add_generation_prompt }} {{ enable_thinking }} {{ tools | tojson }} {{ date_string }}";
    ChatVar vars[] = {{"enable_thinking", "false"}, {"tools", "[{\"name\": \"f\", \"n\": 1.5}]"}, {"date_string", "\"1 Jan\""}};
    ChatRenderOptions opts = {1, vars, 3};
    ck_assert_int_eq(render(src, MSGS, 2, &opts, &out, err, sizeof err), 0);
    ck_assert_str_eq(out.text, "True False [{\"name\": \"f\", \"n\": 1.5}] 1 Jan");
    chattmpl_render_free(&out);
    ChatVar bad[] = {{"x", "{oops"}};
    ChatRenderOptions bopts = {0, bad, 1};
    ck_assert_int_eq(render(src, MSGS, 2, &bopts, &out, err, sizeof err), -1);
    ck_assert_str_eq(err, "t: the variable 'x' is not JSON: line 1, column 2: expected a string key in an object");
}
END_TEST

START_TEST(test_config) {
    char err[512];
    ChatTemplate *t;
    const char *cfg = "{\"bos_token\": {\"content\": \"<B>\", \"lstrip\": false}, \"eos_token\": \"<E>\", \"chat_template\": "
                      "[{\"name\": \"rag\", \"template\": \"no\"}, {\"name\": \"default\", \"template\": "
                      "\"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\"}]}";
    ck_assert_int_eq(chattmpl_from_config_json(&t, "cfg", cfg, strlen(cfg), err, sizeof err), 0);
    ck_assert_str_eq(chattmpl_token(t, "bos_token"), "<B>");
    ck_assert_ptr_null(chattmpl_token(t, "pad_token"));
    ChatRender out;
    ck_assert_int_eq(chattmpl_render(t, MSGS, 2, NULL, &out, err, sizeof err), 0);
    ck_assert_str_eq(out.text, "<B>Hi<E>");
    chattmpl_render_free(&out);
    chattmpl_free(t);
    static const struct {
        const char *json, *err;
    } bad[] = {
        {"{\"eos_token\": \"x\"}", "cfg: no chat_template (give the template as a file)"},
        {"{\"chat_template\": 3}", "cfg: chat_template is neither a string nor a list of {name, template}"},
        {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}",
         "cfg: chat_template lists no template named \"default\""},
        {"{\"chat_template\": \"{% if %}\"}", "cfg: chat_template: line 1: expected a value, found the end of the tag"},
        {"{\"chat_template\": ", "cfg: malformed JSON: line 1, column 19: unexpected end of the text"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(chattmpl_from_config_json(&t, "cfg", bad[i].json, strlen(bad[i].json), err, sizeof err), -1);
        ck_assert_ptr_null(t);
        ck_assert_str_eq(err, bad[i].err);
    }
    ck_assert_int_eq(chattmpl_load_file(&t, "/nonexistent/t.jinja", err, sizeof err), -1);
    ck_assert_str_eq(err, "/nonexistent/t.jinja: No such file or directory");
}
END_TEST

int main(void) {
    Suite *s = suite_create("chattmpl");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_constructs, 0, (int)(sizeof CASES / sizeof *CASES));
    tcase_add_loop_test(tc, test_errors, 0, (int)(sizeof ERRORS / sizeof *ERRORS));
    tcase_add_test(tc, test_depth_limits);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_variables);
    tcase_add_test(tc, test_config);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
