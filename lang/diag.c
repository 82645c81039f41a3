#include "diag.h"
#include "nearest.h"
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void source_set_init(SourceSet *s) { memset(s, 0, sizeof *s); }

void source_set_free(SourceSet *s) {
    for (int i = 0; i < s->nfiles; i++) {
        free(s->files[i].path);
        free(s->files[i].text);
    }
    free(s->files);
    memset(s, 0, sizeof *s);
}

int source_add(SourceSet *s, const char *path, const char *text, size_t len) {
    if (s->nfiles == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        SourceFile *nf = realloc(s->files, sizeof *nf * (size_t)nc);
        if (!nf) return -1;
        s->files = nf;
        s->cap = nc;
    }
    char *p = strdup(path);
    char *t = malloc(len + 1);
    if (!p || !t) { free(p); free(t); return -1; }
    memcpy(t, text, len);
    t[len] = 0;
    s->files[s->nfiles] = (SourceFile){p, t, len};
    return s->nfiles++;
}

int source_load(SourceSet *s, const char *path, int *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { *err = errno; return -1; }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); *err = ENOMEM; return -1; }
    for (;;) {
        if (len == cap) {
            if (cap > ((size_t)1 << 30)) { free(buf); fclose(f); *err = EFBIG; return -1; }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); *err = ENOMEM; return -1; }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(buf); *err = EIO; return -1; }
    int id = source_add(s, path, buf, len);
    free(buf);
    if (id < 0) *err = ENOMEM;
    return id;
}

void source_line_col(const SourceSet *s, int file, uint32_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    if (file < 0 || file >= s->nfiles) return;
    const SourceFile *f = &s->files[file];
    if (off > f->len) off = (uint32_t)f->len;
    int l = 1;
    uint32_t ls = 0;
    for (uint32_t i = 0; i < off; i++)
        if (f->text[i] == '\n') { l++; ls = i + 1; }
    *line = l;
    *col = (int)(off - ls) + 1;
}

Span span_join(Span a, Span b) {
    if (a.file < 0) return b;
    if (b.file < 0 || a.file != b.file) return a;
    uint32_t s = a.off < b.off ? a.off : b.off;
    uint32_t ea = a.off + a.len, eb = b.off + b.len;
    uint32_t e = ea > eb ? ea : eb;
    return (Span){a.file, s, e - s};
}

void diag_init(DiagSink *d) {
    memset(d, 0, sizeof *d);
    d->max_errors = 100;
}

void diag_free(DiagSink *d) {
    for (int i = 0; i < d->len; i++) free(d->items[i].msg);
    free(d->items);
    memset(d, 0, sizeof *d);
}

static void diag_push(DiagSink *d, DiagLevel lv, Span sp, const char *fmt, va_list ap) {
    if (lv == DIAG_ERROR) {
        if (d->max_errors && d->errors >= d->max_errors) { d->truncated = true; d->errors++; return; }
        d->errors++;
    } else if (lv == DIAG_WARNING) {
        d->warnings++;
    } else if (d->truncated) {
        return; /* notes of a dropped error */
    }
    if (d->len == d->cap) {
        int nc = d->cap ? d->cap * 2 : 16;
        Diag *ni = realloc(d->items, sizeof *ni * (size_t)nc);
        if (!ni) return;
        d->items = ni;
        d->cap = nc;
    }
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    char *m = malloc((size_t)n + 1);
    if (!m) return;
    vsnprintf(m, (size_t)n + 1, fmt, ap);
    d->items[d->len++] = (Diag){lv, sp, m};
}

#define DIAG_FN(fn, lv)                                          \
    void fn(DiagSink *d, Span sp, const char *fmt, ...) {        \
        va_list ap;                                              \
        va_start(ap, fmt);                                       \
        diag_push(d, lv, sp, fmt, ap);                           \
        va_end(ap);                                              \
    }
DIAG_FN(diag_error, DIAG_ERROR)
DIAG_FN(diag_warning, DIAG_WARNING)
DIAG_FN(diag_note, DIAG_NOTE)

void diag_hint(DiagSink *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    diag_push(d, DIAG_HINT, SPAN_NONE, fmt, ap);
    va_end(ap);
}

static const char *level_name[] = {"error", "warning", "note", "hint"};
static const char *level_color[] = {"\033[1;31m", "\033[1;35m", "\033[1;36m", "\033[1;32m"};

static void render_snippet(const SourceSet *s, Span sp, FILE *out, bool color) {
    const SourceFile *f = &s->files[sp.file];
    uint32_t off = sp.off > f->len ? (uint32_t)f->len : sp.off;
    uint32_t ls = off;
    while (ls > 0 && f->text[ls - 1] != '\n') ls--;
    uint32_t le = off;
    while (le < f->len && f->text[le] != '\n') le++;
    if (le > ls && f->text[le - 1] == '\r') le--; /* CR LF line ends */
    int line, col;
    source_line_col(s, sp.file, off, &line, &col);
    char num[16];
    int w = snprintf(num, sizeof num, "%d", line);
    /* A long line is shown as a window of DIAG_SNIPPET_MAX bytes around the
     * span, with "..." where it is cut (a minified or binary file has
     * megabyte lines). */
    enum { DIAG_SNIPPET_MAX = 160 };
    bool cut_left = false, cut_right = false;
    if (le - ls > DIAG_SNIPPET_MAX) {
        uint32_t ws = off - ls > DIAG_SNIPPET_MAX / 2 ? off - DIAG_SNIPPET_MAX / 2 : ls;
        if (le - ws < DIAG_SNIPPET_MAX) ws = le - DIAG_SNIPPET_MAX;
        cut_left = ws > ls;
        cut_right = ws + DIAG_SNIPPET_MAX < le;
        ls = ws;
        le = ws + DIAG_SNIPPET_MAX;
    }
    fprintf(out, " %s | %s", num, cut_left ? "..." : "");
    for (uint32_t i = ls; i < le; i++) {
        unsigned char c = (unsigned char)f->text[i];
        /* Tabs are kept so the caret lines up; other control bytes shown as '?'. */
        fputc(c == '\t' || c >= 0x20 ? c : '?', out);
    }
    fprintf(out, "%s\n", cut_right ? "..." : "");
    fprintf(out, " %*s | %s", w, "", cut_left ? "   " : "");
    /* UTF-8 continuation bytes take no column of their own */
    for (uint32_t i = ls; i < off; i++)
        if (((unsigned char)f->text[i] & 0xC0) != 0x80) fputc(f->text[i] == '\t' ? '\t' : ' ', out);
    if (color) fputs("\033[1;32m", out);
    fputc('^', out);
    uint32_t end = off + (sp.len ? sp.len : 1);
    if (end > le) end = le;
    for (uint32_t i = off + 1; i < end; i++)
        if (((unsigned char)f->text[i] & 0xC0) != 0x80) fputc('~', out);
    if (color) fputs("\033[0m", out);
    fputc('\n', out);
}

void diag_render(const DiagSink *d, const SourceSet *s, FILE *out, bool color) {
    for (int i = 0; i < d->len; i++) {
        const Diag *g = &d->items[i];
        bool loc = g->span.file >= 0 && g->span.file < s->nfiles;
        if (loc) {
            int line, col;
            source_line_col(s, g->span.file, g->span.off, &line, &col);
            if (color) fputs("\033[1m", out);
            fprintf(out, "%s:%d:%d: ", s->files[g->span.file].path, line, col);
        }
        if (color) fputs(level_color[g->level], out);
        fprintf(out, "%s:", level_name[g->level]);
        if (color) fputs("\033[0m\033[1m", out);
        fprintf(out, " %s\n", g->msg);
        if (color) fputs("\033[0m", out);
        if (loc) render_snippet(s, g->span, out, color);
    }
    if (d->truncated)
        fprintf(out, "too many errors (%d); only the first %d are shown\n", d->errors, d->max_errors);
}

const char *diag_nearest(const char *name, const char *const *cands, int n) { return nearest_word(name, cands, n); }
