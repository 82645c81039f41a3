/* fuzz_hfconfig: a config.json's text through `zinfc --from-hf DIR`'s
 * converter (compiler/hfconfig.c): hfconfig_text_to_zl with the text in a
 * SourceSet, once with the default options and once with a sequence length
 * and LoRA adapters (the spec chosen by the input's first byte), its
 * diagnostics rendered; then the .zl it makes is loaded and parsed
 * (program_load_text, imports from the compiled-in stdlib) as zinfc does
 * next. Checking and planning the model are fuzz_frontend's. A converter
 * that returns NULL without an error, or a .zl whose loading or parsing
 * reports an error (the converter wrote something the language does not
 * accept), is a finding (abort), as are crashes and sanitizer reports. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arena.h"
#include "diag.h"
#include "fuzz_common.h"
#include "hfconfig.h"
#include "loader.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

static const char *const lora_specs[] = {"", "r=8", "r=4,alpha=8,targets=q_proj,v_proj", "targets=c_attn",
                                         "r=0", "alpha=-1", "targets=", "r=99999999999999999999"};

static void convert(const uint8_t *data, size_t size, const HfConfigOptions *o) {
    Arena a;
    SourceSet src;
    DiagSink d;
    arena_init(&a);
    source_set_init(&src);
    diag_init(&d);
    int id = source_add(&src, "m/config.json", (const char *)data, size);
    if (id >= 0) {
        const char *zl = hfconfig_text_to_zl(&a, &src, id, &d, o);
        diag_render(&d, &src, fuzz_sink(), false);
        if (!zl && d.errors == 0) {
            fprintf(stderr, "fuzz_hfconfig: no .zl and no error\n");
            abort();
        }
        if (zl) {
            fprintf(fuzz_sink(), "%s", zl);
            LoadOptions lo = {NULL, 0, ZINF_STDLIB_DIR};
            Program prog;
            memset(&prog, 0, sizeof prog);
            int before = d.errors;
            bool ok = program_load_text(&a, &src, &d, "m/config.json.zl", zl, &lo, &prog);
            diag_render(&d, &src, fuzz_sink(), false);
            if (!ok || d.errors > before) {
                diag_render(&d, &src, stderr, false);
                fprintf(stderr, "fuzz_hfconfig: the .zl made does not load:\n%s", zl);
                abort();
            }
        }
    }
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    HfConfigOptions plain = {.seq = 0};
    convert(data, size, &plain);
    HfConfigOptions lora = {.seq = size ? (int64_t)(data[0] % 7) * 100 - 100 : 64,
                            .lora = lora_specs[size ? data[size - 1] % (sizeof lora_specs / sizeof *lora_specs) : 1]};
    convert(data, size, &lora);
    return 0;
}
