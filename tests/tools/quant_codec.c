/* quant_codec: runs runtime/hostk/quant.c on a file of f32 values for
 * tests/e2e/quant_codec.sh, which compares both outputs with a numpy
 * reference of the same schemes.
 *   quant_codec nf4|int8 IN.f32 OUT.q OUT.f32
 * IN.f32: raw little-endian f32 values. OUT.q: the encoded blocks
 * (quant.h's layout); OUT.f32: their decoded values. Exits 1 on a file it
 * cannot read or write, 2 on usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}

int main(int argc, char **argv) {
    int k = argc == 5 ? quant_parse(argv[1], strlen(argv[1])) : -1;
    if (k <= QUANT_NONE) {
        fprintf(stderr, "usage: quant_codec nf4|int8 IN.f32 OUT.q OUT.f32\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    int64_t n = len / (long)sizeof(float);
    float *x = malloc((size_t)n * sizeof *x + 1), *y = malloc((size_t)n * sizeof *y + 1);
    uint8_t *q = malloc(quant_bytes((QuantKind)k, n) + 1);
    int rc = 1;
    if (x && y && q && fread(x, sizeof *x, (size_t)n, f) == (size_t)n) {
        quant_encode((QuantKind)k, x, n, q);
        quant_decode((QuantKind)k, q, n, y);
        rc = write_all(argv[3], q, quant_bytes((QuantKind)k, n)) || write_all(argv[4], y, (size_t)n * sizeof *y) ? 1 : 0;
    }
    if (rc) fprintf(stderr, "quant_codec: cannot read %s or write the outputs\n", argv[2]);
    fclose(f);
    free(x);
    free(y);
    free(q);
    return rc;
}
