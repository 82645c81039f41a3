/* zinftok: text -> token file (byte-level vocabulary: token = byte, 256
 * tokens), in the llm.c layout zinfrun reads. So a demo needs nothing
 * downloaded:  zinftok /usr/share/common-licenses/GPL-3 -o train.bin
 *   zinftok INPUT... -o TRAIN.bin [--val VAL.bin --val-fraction F]
 * Several inputs are concatenated. Exit 0, 1 on I/O errors, 2 on usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokens.h"

static void usage(FILE *f) {
    fprintf(f, "usage: zinftok INPUT.txt... -o TRAIN.bin [--val VAL.bin] [--val-fraction 0.1]\n"
               "  byte-level tokens (vocabulary 256) in the llm.c token-file layout\n");
}

int main(int argc, char **argv) {
    const char *out = NULL, *val = NULL, *inputs[64];
    int nin = 0;
    double frac = 0.1;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--val") || !strcmp(argv[i], "--val-fraction")) &&
            i + 1 == argc) {
            fprintf(stderr, "zinftok: option '%s' needs an argument\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--val") && i + 1 < argc) val = argv[++i];
        else if (!strcmp(argv[i], "--val-fraction") && i + 1 < argc) {
            char *end;
            frac = strtod(argv[++i], &end);
            if (*end || frac <= 0 || frac >= 1) { fprintf(stderr, "zinftok: --val-fraction must be between 0 and 1\n"); return 2; }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "zinftok: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
        else if (nin == 64) { fprintf(stderr, "zinftok: at most 64 inputs\n"); return 2; }
        else inputs[nin++] = argv[i];
    }
    if (!out || nin == 0) { usage(stderr); return 2; }
    size_t cap = 1 << 20, len = 0;
    uint16_t *tok = malloc(cap * sizeof *tok);
    if (!tok) { fprintf(stderr, "zinftok: out of memory\n"); return 1; }
    for (int k = 0; k < nin; k++) {
        FILE *f = fopen(inputs[k], "rb");
        if (!f) { fprintf(stderr, "zinftok: %s: %s\n", inputs[k], strerror(errno)); free(tok); return 1; }
        int c;
        while ((c = fgetc(f)) != EOF) {
            if (len == cap) {
                uint16_t *nt = realloc(tok, cap * 2 * sizeof *tok);
                if (!nt) { fprintf(stderr, "zinftok: out of memory\n"); fclose(f); free(tok); return 1; }
                tok = nt;
                cap *= 2;
            }
            tok[len++] = (uint16_t)c;
        }
        int bad = ferror(f);
        fclose(f);
        if (bad) { fprintf(stderr, "zinftok: %s: read error\n", inputs[k]); free(tok); return 1; }
    }
    size_t nval = val ? (size_t)((double)len * frac) : 0;
    char err[1024];
    if (tok_write(out, tok, (int64_t)(len - nval), err, sizeof err) ||
        (val && tok_write(val, tok + (len - nval), (int64_t)nval, err, sizeof err))) {
        fprintf(stderr, "zinftok: %s\n", err);
        free(tok);
        return 1;
    }
    printf("zinftok: %zu tokens -> %s", len - nval, out);
    if (val) printf(", %zu -> %s", nval, val);
    printf(" (byte-level, vocabulary 256)\n");
    free(tok);
    return 0;
}
