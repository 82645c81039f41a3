/* adam_state: one AdamW step of runtime/hostk/adam.c with its moments in
 * f32, bf16 or 8-bit blocks, on files, for tests/e2e/optim_state.sh, which
 * compares the outputs with a numpy reference of the same scheme.
 *   adam_state fp32|bf16|8bit ISA THREADS STEP LR BETA1 BETA2 EPS WD SCALE DIR
 * DIR holds w.f32 (the fp32 master), g.f32 (the gradient), m.bin and v.bin
 * (the moments in their storage: f32, bf16, or dtype_bytes of dyn8 and
 * udyn8); they are stepped in place, and the parameter rounded to bf16 is
 * written to p.bf16. ISA: scalar, avx2, avx512 or auto. Exits 1 on a file
 * it cannot read or write or a step that fails, 2 on usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adam.h"

static void *read_file(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}

int main(int argc, char **argv) {
    AdamIsa isa;
    if (argc != 12 || adam_isa_parse(argv[2], &isa)) {
        fprintf(stderr, "usage: adam_state fp32|bf16|8bit scalar|avx2|avx512|auto THREADS STEP LR BETA1 BETA2 EPS WD SCALE DIR\n");
        return 2;
    }
    DType mdt, vdt;
    if (!strcmp(argv[1], "fp32")) mdt = vdt = DT_F32;
    else if (!strcmp(argv[1], "bf16")) mdt = vdt = DT_BF16;
    else if (!strcmp(argv[1], "8bit")) mdt = DT_DYN8, vdt = DT_UDYN8;
    else {
        fprintf(stderr, "adam_state: no state '%s' (fp32, bf16, 8bit)\n", argv[1]);
        return 2;
    }
    AdamParams ap = {.lr = strtof(argv[5], NULL), .beta1 = strtof(argv[6], NULL), .beta2 = strtof(argv[7], NULL),
                     .eps = strtof(argv[8], NULL), .weight_decay = strtof(argv[9], NULL), .isa = isa, .threads = atoi(argv[3])};
    const char *dir = argv[11];
    size_t wl = 0, gl = 0, ml = 0, vl = 0;
    float *w = read_file(dir, "w.f32", &wl), *g = read_file(dir, "g.f32", &gl);
    void *m = read_file(dir, "m.bin", &ml), *v = read_file(dir, "v.bin", &vl);
    int64_t n = (int64_t)(wl / sizeof(float));
    uint16_t *p = malloc((size_t)n * sizeof *p + 1);
    int rc = 1;
    if (!w || !g || !m || !v || !p || gl != wl || ml != (size_t)dtype_bytes(mdt, n) || vl != (size_t)dtype_bytes(vdt, n)) {
        fprintf(stderr, "adam_state: %s: missing or mismatched w.f32, g.f32, m.bin, v.bin\n", dir);
    } else {
        AdamStatus s = adam_step_state(&ap, atoll(argv[4]), w, m, v, w, m, v, mdt, vdt, g, DT_F32, p, DT_BF16, n,
                                       strtof(argv[10], NULL));
        if (s != ADAM_OK) fprintf(stderr, "adam_state: %s\n", adam_status_str(s));
        else if (write_file(dir, "w.f32", w, wl) || write_file(dir, "m.bin", m, ml) || write_file(dir, "v.bin", v, vl) ||
                 write_file(dir, "p.bf16", p, (size_t)n * sizeof *p))
            fprintf(stderr, "adam_state: cannot write the outputs in %s\n", dir);
        else rc = 0;
    }
    free(w);
    free(g);
    free(m);
    free(v);
    free(p);
    return rc;
}
