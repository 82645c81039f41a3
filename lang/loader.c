#include "loader.h"
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "parse.h"

static void program_push(Arena *a, Program *p, AstFile *f) {
    if (p->nfiles == p->cap) {
        int nc = p->cap ? p->cap * 2 : 8;
        AstFile **nf = ARENA_NEWN(a, AstFile *, nc);
        if (!nf) return;
        if (p->nfiles) memcpy(nf, p->files, sizeof *nf * (size_t)p->nfiles);
        p->files = nf;
        p->cap = nc;
    }
    p->files[p->nfiles++] = f;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory part of a path ("." when none). */
static const char *dir_of(Arena *a, const char *path) {
    const char *s = strrchr(path, '/');
    if (!s) return ".";
    return arena_strndup(a, path, (size_t)(s - path) ? (size_t)(s - path) : 1);
}

/* Files are the same when their resolved paths are (so ./a.zl, a.zl and a
 * symbolic link to it are loaded once). */
static const char *canonical(Arena *a, const char *path) {
    char buf[PATH_MAX];
    if (realpath(path, buf)) return arena_strdup(a, buf);
    return path;
}

static int already_loaded(const char *const *canon, int n, const char *path) {
    for (int i = 0; i < n; i++)
        if (canon[i] && !strcmp(canon[i], path)) return i;
    return -1;
}

/* Where a searched import is looked for, in order: the importing file's
 * directory, each -I directory, the stdlib; each directory once, in its first
 * place. Returns the count (at most 64). */
static int search_dirs(const char *here, const LoadOptions *opt, const char *stdlib, const char *dirs[64]) {
    const char *all[64];
    int n = 0;
    all[n++] = here;
    for (int i = 0; opt && i < opt->ninclude && n < 63; i++) all[n++] = opt->include_dirs[i];
    all[n++] = stdlib;
    int nd = 0;
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < nd; j++) dup |= !strcmp(dirs[j], all[i]);
        if (!dup) dirs[nd++] = all[i];
    }
    return nd;
}

/* The file `import NAME` of the file whose resolved path is self names, or
 * NULL after an error in d. An absolute name is used as is; a name starting
 * with ./ or ../ is relative to the importing file only; any other is
 * searched for (search_dirs). A search passes over the importing file itself
 * (a model file named llama.zl that imports "llama" means the stdlib's) and
 * comes back to it only when nothing else matches (a self-import is
 * harmless). A searched name that a file outside the stdlib shadows is an
 * error naming both (the shadowing file is still loaded, so checking goes
 * on as the search order gives). */
static const char *resolve_import(Arena *a, DiagSink *d, const Decl *dc, const char *here, const char *self,
                                  const LoadOptions *opt, const char *stdlib) {
    const char *name = dc->name;
    size_t nl = strlen(name);
    bool has_ext = nl > 3 && !strcmp(name + nl - 3, ".zl");
    const char *file = has_ext ? name : arena_printf(a, "%s.zl", name);
    if (file[0] == '/' || !strncmp(file, "./", 2) || !strncmp(file, "../", 3)) {
        const char *path = file[0] == '/' ? file : arena_printf(a, "%s/%s", here, file);
        if (is_file(path)) return path;
        diag_error(d, dc->name_span, "cannot find import \"%s\"", name);
        /* the note has no location: the error's snippet shows the import */
        diag_note(d, SPAN_NONE, "looked for %s only (%s)", path,
                  file[0] == '/' ? "an absolute import is not searched for"
                                 : "an import starting with ./ or ../ is relative to the importing file");
        return NULL;
    }
    const char *dirs[64];
    int ndirs = search_dirs(here, opt, stdlib, dirs);
    const char *found = NULL, *itself = NULL;
    int found_dir = -1;
    for (int i = 0; i < ndirs && !found; i++) {
        const char *cand = arena_printf(a, "%s/%s", dirs[i], file);
        if (!cand || !is_file(cand)) continue;
        if (!strcmp(canonical(a, cand), self)) {
            if (!itself) itself = cand;
        } else {
            found = cand;
            found_dir = i;
        }
    }
    if (!found && itself) return itself;
    if (!found) {
        diag_error(d, dc->name_span, "cannot find import \"%s\"", name);
        char buf[2048];
        size_t o = 0;
        for (int i = 0; i < ndirs && o < sizeof buf; i++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? ", " : "", dirs[i]);
        diag_note(d, SPAN_NONE, "looked for %s in %s", file, buf);
        return NULL;
    }
    const char *in_stdlib = arena_printf(a, "%s/%s", stdlib, file);
    if (strcmp(dirs[found_dir], stdlib) && in_stdlib && is_file(in_stdlib) &&
        strcmp(canonical(a, in_stdlib), canonical(a, found))) {
        diag_error(d, dc->name_span, "import \"%s\" is ambiguous: %s shadows the standard library's %s", name, found,
                   in_stdlib);
        if (found_dir == 0)
            diag_hint(d, "rename %s to import the standard library's %s, or write import \"./%s\" to import the local file",
                      found, file, file);
        else
            diag_hint(d, "rename %s to import the standard library's %s, or import the local file by its absolute path",
                      found, file);
    }
    return found;
}

/* The main file (source id) and its imports. */
static bool load_from(Arena *a, SourceSet *src, DiagSink *d, int id, const char *main_path, const LoadOptions *opt,
                      Program *out) {
    AstFile *f = parse_source(a, src, id, d);
    if (!f) {
        diag_error(d, SPAN_NONE, "out of memory parsing %s", main_path);
        return false;
    }
    program_push(a, out, f);
    PtrVec canon = {0};
    ptrvec_push(a, &canon, (void *)canonical(a, main_path));
    const char *stdlib = opt && opt->stdlib_dir ? opt->stdlib_dir : ZINF_STDLIB_DIR;
    /* Breadth-first over imports; files[] grows as we go (canon[fi] is files[fi]'s resolved path). */
    for (int fi = 0; fi < out->nfiles; fi++) {
        AstFile *cur = out->files[fi];
        const char *here = dir_of(a, src->files[cur->file].path);
        const char *self = fi < canon.len ? canon.items[fi] : ""; /* "" when out of memory: nothing is itself */
        for (int k = 0; k < cur->decls.len; k++) {
            Decl *dc = cur->decls.items[k];
            if (dc->kind != DL_IMPORT || !dc->name) continue;
            if (dc->name[0] == '\0') {
                diag_error(d, dc->name_span, "empty import name");
                continue;
            }
            const char *found = resolve_import(a, d, dc, here, self, opt, stdlib);
            if (!found) continue;
            const char *cfound = canonical(a, found);
            int loaded = already_loaded((const char *const *)canon.items, canon.len, cfound);
            if (loaded >= 0) {
                dc->import_file = out->files[loaded]->file;
                continue;
            }
            int e2 = 0;
            int nid = source_load(src, found, &e2);
            if (nid < 0) {
                diag_error(d, dc->name_span, "cannot read import %s: %s", found, strerror(e2));
                continue;
            }
            AstFile *nf = parse_source(a, src, nid, d);
            if (nf) {
                program_push(a, out, nf);
                ptrvec_push(a, &canon, (void *)cfound);
                dc->import_file = nid;
            }
        }
    }
    return true;
}

bool program_load(Arena *a, SourceSet *src, DiagSink *d, const char *main_path, const LoadOptions *opt, Program *out) {
    memset(out, 0, sizeof *out);
    int err = 0;
    int id = source_load(src, main_path, &err);
    if (id < 0) {
        diag_error(d, SPAN_NONE, "cannot read %s: %s", main_path, strerror(err));
        return false;
    }
    return load_from(a, src, d, id, main_path, opt, out);
}

bool program_load_text(Arena *a, SourceSet *src, DiagSink *d, const char *path, const char *text, const LoadOptions *opt,
                       Program *out) {
    memset(out, 0, sizeof *out);
    int id = source_add(src, path, text, strlen(text));
    if (id < 0) {
        diag_error(d, SPAN_NONE, "out of memory loading %s", path);
        return false;
    }
    return load_from(a, src, d, id, path, opt, out);
}
