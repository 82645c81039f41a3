"""The construct cases of tests/unit/test_chattmpl.c (CASES): each
template rendered by transformers' own template compiler (Jinja2 with
trim_blocks, lstrip_blocks, its tojson and raise_exception) over the
suite's two messages, printed as the C table's rows. After changing a case
here, regenerate the table and paste it over CASES:
  ~/.cache/zinf/venv/bin/python tests/tools/chattmpl_cases.py
"""
import json
from transformers.utils.chat_template_utils import _compile_jinja_template
msgs=[{"role":"user","content":"Hi"},{"role":"assistant","content":" Yo "}]
cases = [
 ("text only", "plain text"),
 ("output", "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 2.5 }}{{ true }}{{ none }}{{ nothing }}"),
 ("escapes", "{{ 'x\\ny\\t\\'q\\' \\u00e9\\x41\\\\' }}"),
 ("adjacent strings", "{{ 'a' 'b' }}"),
 ("concat", "{{ 'a' ~ 1 ~ none ~ true }}{{ 'x' + 'y' }}"),
 ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 10 - 2 - 3 }} {{ 'ab' * 3 }}"),
 ("floats", "{{ 0.1 + 0.2 }} {{ 1e3 if false else 1.0 }} {{ 3 / 1 }}"),
 ("compare", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ 'a' != 'a' }}{{ [1, 'x'] == [1, 'x'] }}"),
 ("logic", "{{ true and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ none or '' }}|{{ 'a' and 0 }}"),
 ("in", "{{ 'i' in 'Hi' }}{{ 3 in [1, 2] }}{{ 'role' in messages[0] }}{{ 'x' not in 'abc' }}"),
 ("ternary", "{{ 'yes' if messages else 'no' }}{{ 'a' if false }}|"),
 ("if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}"),
 ("for loop", "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}:{{ m.role }};{% endfor %}"),
 ("for filter", "{% for n in [1, 2, 3, 4] if n is even %}{{ n }}/{{ loop.length }}{% endfor %}"),
 ("for else", "{% for n in [] %}x{% else %}empty{% endfor %}"),
 ("for items", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in {'c': 3} | items %}{{ k }}{{ v }}{% endfor %}"),
 ("for dict", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"),
 ("break continue", "{% for n in range(10) %}{% if n == 1 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}"),
 ("range", "{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | join(',') }}"),
 ("nested loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}"),
 ("set scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 7 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}"),
 ("namespace", "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s + m.role %}{% endfor %}{{ ns.n }}{{ ns.s }}"),
 ("index slice", "{{ messages[0]['role'] }}{{ messages[-1].content }}|{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ [1, 2, 3][::-1] }}{{ [1, 2, 3, 4, 5][1::2] }}{{ 'hé!'[-2:] }}{{ [1, 2][5] }}|"),
 ("slice of messages", "{% for m in messages[1:] %}{{ m.role }}{% endfor %}{% for m in messages[::-1] %}{{ m.role }}{% endfor %}"),
 ("attr missing", "{{ messages[0].nope is defined }}{{ messages[0].content.content is defined }}{{ messages[0].get('nope', 'dflt') }}{{ messages[0].get('role') }}"),
 ("tests", "{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is equalto 2 }}{{ x is undefined }}{{ x is not defined }}{{ 'a' is in 'abc' }}"),
 ("filters str", "{{ '  pad  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'abc' | upper }}{{ 'ABC' | lower }}{{ 'hello world' | title }}{{ 'hello' | capitalize }}{{ 'aXbX' | replace('X', '-') }}"),
 ("filters length", "{{ 'héllo' | length }}{{ messages | length }}{{ {'a': 1} | count }}{{ messages|length - 1 }}"),
 ("filters default", "{{ nope | default('d') }}{{ '' | default('e') }}{{ '' | default('f', true) }}{{ nope | d('g') }}"),
 ("filters join", "{{ ['a', 'b'] | join }}{{ ['a', 1, none] | join(', ') }}{{ messages | join('|', attribute='role') }}"),
 ("filters select", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | first }}|{{ [0, 1, 2, 3] | select('odd') | list }}{{ [0, 1, '', 'x'] | select | list }}{{ [1, 2, 3] | reject('equalto', 2) | list }}{{ messages | selectattr('tool_calls', 'undefined') | list | length }}"),
 ("filters misc", "{{ [3, 1, 3] | unique | list }}{{ [1, 2] | last }}{{ 'abc' | first }}{{ [1, 2] | reverse | list }}{{ 'abc' | reverse }}{{ '42' | int + 1 }}{{ 3 | float }}{{ -3 | abs }}{{ 5 | string ~ 'x' }}{{ 'ab' | list }}"),
 ("tojson", "{{ 'a\"b\\n\u00e9' | tojson }} {{ {'k': [1, 2.5, true, none], 'e': {}} | tojson }} {{ {'a': [1]} | tojson(indent=2) }} {{ [] | tojson(indent=4) }}"),
 ("tuple", "{{ (1, 'a') }}{{ (1,) }}{{ (1, 2) == [1, 2] }}{{ (1, 2) | tojson }}{{ 'x' in ('x', 'y') }}"),
 ("repr", "{{ ['a', \"it's\", 1, none, true, {'k': 'v'}] }}{{ {'x': [1]} }}"),
 ("string methods", "{{ ' x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'aXa'.replace('a', 'bb') }}{{ 'Hi'.startswith('H') }}{{ 'Hi'.endswith(('x', 'i')) }}{{ 'ab'.upper() }}{{ 'AB'.lower() }}"),
 ("unicode whitespace", "[{{ '\\u3000\\xa0 x\\u2003' | trim }}]{{ 'a\\u2028b'.split() }}"),
 ("whitespace control", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e {{ 'f' }} g"),
 ("trim_blocks lstrip_blocks", "line1\n    {% if true %}\n    body\n    {% endif %}\nline2\n  {# comment #}\nline3 {% if true %}x{% endif %}\n"),
 ("plus keeps", "a\n    {%+ if true %}b{% endif %}\n"),
 ("comment strip", "a  {#- c -#}  b"),
 ("trailing newline", "x\n\n"),
 ("dict literal", "{% set d = {'a': 1, 'b': {'c': 'deep'}} %}{{ d.b.c }}{{ d['a'] }}{{ d.keys() | list }}{{ d.values() | list | length }}"),
 ("filters precedence", "{{ -1 | abs }}{{ 'a' ~ 'B' | lower }}{{ [1, 2] | length + 1 }}{{ not 'x' is string }}"),
 ("messages content", "{% for m in messages %}[{{ m['content'] | trim }}]{% endfor %}{{ add_generation_prompt }}{{ tools }}{{ documents }}"),
 ("subscript keys", "{% set d = {'items': 'I', 'get': 'G'} %}{{ d['items'] }}{{ d['get'] }}{{ d.items() | length }}{{ messages[0]['nope'] is defined }}"),
 ("soft str filters", "{{ 5 | trim }}{{ none | trim }}|{{ nope | trim }}|{{ 123 | replace('2', 'x') }}"),
 ("nested values", "{% set ns = namespace(x=[]) %}{% for i in range(3) %}{% set ns.x = [ns.x, i] %}{% endfor %}{{ ns.x }}{{ ns.x == [[[[], 0], 1], 2] }}"),
 ("block set", "{% set x %}\n  a {{ messages[0].content }}\n{% endset %}[{{ x }}]{{ x | length }}"),
 ("generation", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"),
 ("macro", "{% macro turn(m, sep='|') %}<{{ m.role }}{{ sep }}{{ m.content | trim }}>{% endmacro %}{% for m in messages %}{{ turn(m) }}{{ turn(m, sep=':') }}{% endfor %}{% macro twice(x) -%}\n  {{ x }}{{ x }}\n{%- endmacro %}[{{ twice('ab') }}]{{ twice(x='c') | length }}"),
 ("macro scope", "{% set g = 'G' %}{% macro f(n) %}{{ g }}{{ n }}{% set g = 'local' %}{{ g }}{% endmacro %}{{ f(1) }}{{ g }}{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}{{ f() }}"),
 ("indent", "[{{ 'a\nb\n\nc\n' | indent }}][{{ 'a\nb' | indent(2, true) }}][{{ 'a\n\nb' | indent('> ', blank=true) }}][{{ 'x\r\ny\u2028z' | indent(1) }}][{{ '' | indent(first=true) }}][{{ 'p\\r' | indent }}][{{ 'p\\r\\r' | indent }}]"),
 ("dictsort", "{% for k, v in {'b': 1, 'A': 2, 'a': 3, 'C': 0} | dictsort %}{{ k }}{{ v }} {% endfor %}|{{ {'b': 1, 'A': 2, 'a': 3} | dictsort(true) }}|{{ {'x': 2, 'y': 1, 'z': 2} | dictsort(by='value') }}|{{ {'x': 2, 'y': 1, 'z': 2} | dictsort(by='value', reverse=true) }}"),
 ("newlines of the source", "a\r\nb\rc{{ 'd\r\ne\rf' }}{% if true %}\r\ng{% endif %}\r\n"),
 ("unicode white space control", "a\u00a0\u3000 {{- 'b' -}} \u2003\x85c{% if true -%}\u00a0d{%- endif %}"),
 ("generators", "{% set g = messages | selectattr('role', 'equalto', 'nobody') %}{{ 'truthy' if g else 'falsy' }}|{{ g | list }}|{% set u = [1, 2] | map('string') if false else [3, 1, 3] | unique %}{% for x in u %}{{ x }}{% endfor %}{% for x in u %}again{% endfor %}|{{ [1, 2] | reverse | list }}{{ ({'a': 1} | items | list) }}{{ range(3) }}{{ range(1, 9, 3) }}{{ {'a': 1}.items() }}{{ {'a': 1}.keys() | length }}{{ {'a': 1}.values() }}{{ [] | select is iterable }}{{ [] | select is sequence }}"),
 ("number filters", "{{ ' 42 ' | int }} {{ '3.9' | int }} {{ '1e3' | int }} {{ '0x10' | int }} {{ 'inf' | int(7) }} {{ 'inf' | float }} {{ '-2.5' | float }} {{ 'x' | float(1) }} {{ true | int }} {{ 2.7 | int }} {{ '  -0 ' | int }}"),
 ("title and unique", "{{ 'a,b-c(d e\\'f [g' | title }}|{{ \"it's o'neil\".title() }}|{{ ['a', 'A', 'b', 'a'] | unique | list }}{{ ['a', 'A'] | unique(true) | list }}{{ [1, 1.0, true, 2] | unique | list }}{{ messages | unique(attribute='role') | map(attribute='role') | join(',') }}"),
 ("raise", "{% if messages | length > 1 %}{{ raise_exception('Too many: ' ~ messages | length) }}{% endif %}"),
]
env_t = _compile_jinja_template
out=[]
for name, t in cases:
    try:
        text = env_t(t).render(messages=msgs, add_generation_prompt=False, tools=None, documents=None, bos_token="<s>", eos_token="</s>")
        out.append((name, t, text, None))
    except Exception as e:
        out.append((name, t, None, str(e)))
def c(s):
    b = s.encode()
    r = '"'
    for ch in b:
        if ch == 0x22: r += '\\"'
        elif ch == 0x5c: r += '\\\\'
        elif ch == 10: r += '\\n'
        elif ch == 9: r += '\\t'
        elif ch < 0x20 or ch >= 0x7f: r += '\\%03o' % ch
        else: r += chr(ch)
    return r + '"'
for name, t, text, err in out:
    if err: print("    {%s, %s, NULL, %s}," % (c(name), c(t), c(err)))
    else: print("    {%s, %s, %s, NULL}," % (c(name), c(t), c(text)))
