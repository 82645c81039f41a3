/* fuzz_chattmpl: the chat-template renderer (runtime/chat/chattmpl.h) on any
 * bytes as a template: parsed, then rendered over a small conversation
 * (an assistant message with a tool call and reasoning among its fields)
 * with and without the generation prompt. A parse or render error must
 * come with a message; a render's ranges must lie inside its text, on the
 * assistant message (or, for a {% generation %} block, on none). A crash,
 * a sanitizer report or a broken invariant (abort) is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chattmpl.h"
#include "fuzz_common.h"

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_chattmpl: broken invariant: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const ChatMessage msgs[] = {
        {"system", "Be brief.", 9, NULL},
        {"user", "Hi {{ x }}", 10, NULL},
        {"assistant", " <think>\nr\n</think>\n\nHello ", 27,
         "{\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}], \"reasoning\": \"r\"}"},
        {"user", "\xc3\xa9\xe2\x80\x83?", 6, NULL}};
    static const ChatVar vars[] = {{"enable_thinking", "false"}};
    char err[512];
    ChatTemplate *t;
    err[0] = 0;
    if (chattmpl_parse(&t, "fuzz", (const char *)data, size, err, sizeof err)) {
        check(err[0] != 0, "a parse error has a message");
        check(t == NULL, "no template after a parse error");
        return 0;
    }
    chattmpl_set_token(t, "bos_token", "<s>");
    chattmpl_set_token(t, "eos_token", "</s>");
    for (int gen = 0; gen < 2; gen++) {
        ChatRenderOptions opts = {gen, vars, gen};
        ChatRender out;
        err[0] = 0;
        int rc = chattmpl_render(t, msgs, 4, &opts, &out, err, sizeof err);
        if (rc) {
            check(rc == -1 || rc == CHATTMPL_RAISED, "a known error code");
            check(rc == CHATTMPL_RAISED || err[0] != 0, "a render error has a message");
            continue;
        }
        check(out.text[out.len] == 0, "NUL-terminated text");
        for (size_t i = 0; i < out.nranges; i++) {
            /* {% generation %} blocks may be empty, repeat a message or hold none */
            check(out.ranges[i].start <= out.ranges[i].end && out.ranges[i].end <= out.len, "a range inside the text");
            check(out.ranges[i].message == 2 || out.ranges[i].message == CHATTMPL_NO_MESSAGE,
                  "a range on the assistant message");
        }
        fwrite(out.text, 1, out.len, fuzz_sink());
        chattmpl_render_free(&out);
    }
    chattmpl_free(t);
    return 0;
}
