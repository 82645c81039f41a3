/* emu_wrap: see emu_wrap.h. */
#include "emu_wrap.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_ident(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Appends s[0..n) to the growing buffer; 0, or -1 when out of memory. */
static int append(char **out, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *o = realloc(*out, nc);
        if (!o) return -1;
        *out = o;
        *cap = nc;
    }
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = 0;
    return 0;
}

char *emu_wrappers(const char *src) {
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    const char *key = "extern \"C\" __global__ void";
    for (const char *p = strstr(src, key); p; p = strstr(p + 1, key)) {
        const char *q = p + strlen(key);
        while (*q == ' ' || *q == '\n') q++;
        if (!strncmp(q, "__launch_bounds__", 17)) {
            const char *c = strchr(q, ')');
            if (!c) continue;
            q = c + 1;
            while (*q == ' ' || *q == '\n') q++;
        }
        const char *name = q;
        while (is_ident(*q)) q++;
        int nlen = (int)(q - name);
        const char *lp = strchr(q, '('), *rp = lp ? strchr(lp, ')') : NULL;
        if (!lp || !rp || nlen == 0) continue;
        char line[4096], sizes[4096];
        int n = snprintf(line, sizeof line, "extern \"C\" void emu_tramp_%.*s(void **p) { %.*s(", nlen, name, nlen, name);
        if (strstr(out, line)) continue; /* the same entry under another #if branch */
        int ns = snprintf(sizes, sizeof sizes, "extern \"C\" const unsigned emu_psize_%.*s[] = {", nlen, name);
        const char *a = lp + 1;
        while (a < rp && (*a == ' ' || *a == '\n')) a++;
        for (int i = 0; a < rp; i++) {
            const char *e = a;
            while (e < rp && *e != ',') e++;
            /* "const float *__restrict__ y": the type is what precedes the last identifier */
            const char *t1 = e;
            while (t1 > a && (t1[-1] == ' ' || t1[-1] == '\n')) t1--;
            const char *t0 = t1;
            while (t0 > a && is_ident(t0[-1])) t0--;
            const char *ts = a;
            while (ts < t0 && (*ts == ' ' || *ts == '\n')) ts++;
            char ty[256];
            int tl = 0;
            for (const char *c = ts; c < t0 && tl < 250; c++) ty[tl++] = *c == '\n' ? ' ' : *c;
            ty[tl] = 0;
            if ((size_t)n < sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s*(%s*)p[%d]", i ? ", " : "", ty, i);
            if ((size_t)ns < sizeof sizes) ns += snprintf(sizes + ns, sizeof sizes - (size_t)ns, "sizeof(%s), ", ty);
            a = e + 1;
        }
        if ((size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "); }\n");
        if ((size_t)ns < sizeof sizes) ns += snprintf(sizes + ns, sizeof sizes - (size_t)ns, "0};\n");
        if ((size_t)n >= sizeof line || (size_t)ns >= sizeof sizes) continue; /* cannot happen with cuda_gen's signatures */
        if (append(&out, &len, &cap, line, (size_t)n) || append(&out, &len, &cap, sizes, (size_t)ns)) {
            free(out);
            return NULL;
        }
    }
    return out;
}

int emu_compile_unit(const char *src, const char *cu_path, const char *so_path, const char *emu_header, char *err,
                     size_t nerr) {
    char *w = emu_wrappers(src);
    if (!w) {
        snprintf(err, nerr, "out of memory");
        return -1;
    }
    FILE *f = fopen(cu_path, "w");
    if (!f) {
        snprintf(err, nerr, "cannot write %s: %s", cu_path, strerror(errno));
        free(w);
        return -1;
    }
    fprintf(f, "%s\n%s", src, w);
    free(w);
    if (fclose(f) != 0) {
        snprintf(err, nerr, "cannot write %s: %s", cu_path, strerror(errno));
        return -1;
    }
    const char *cxx = getenv("CXX");
    size_t cl = strlen(so_path) * 4 + strlen(cu_path) + strlen(emu_header) + 256;
    char *cmd = malloc(cl);
    if (!cmd) {
        snprintf(err, nerr, "out of memory");
        return -1;
    }
    snprintf(cmd, cl,
             "%s -std=c++17 -O1 -w -fPIC -shared -DZK_EMU -include '%s' -x c++ '%s' -o '%s.tmp' && mv -f '%s.tmp' '%s'",
             cxx && *cxx ? cxx : "c++", emu_header, cu_path, so_path, so_path, so_path);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(err, nerr, "the emulator build failed (status %d): %s", rc, cmd);
        free(cmd);
        return -1;
    }
    free(cmd);
    return 0;
}
