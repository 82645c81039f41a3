/* hfio_export: the export (zinfrun --export-hf). Each HF tensor is
 * assembled block by block on rank 0 (hf_gather_block,
 * runtime/hf/hfio_gather.c), without any rank holding more than the
 * staging buffer. */
#include "hfio_impl.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- the files ---- */

typedef struct OutFile {
    char *name;                 /* "model.safetensors" */
    int fd;
    StOutTensor *t;
    int nt;
    uint64_t data_start;        /* header bytes */
} OutFile;

typedef struct Exp {
    Rt *r;
    const HfLayout *l;
    HfStage st;
    HfioReport *rep;
    OutFile *files;
    int nfiles;
    int *gfile, *gslot;         /* per group: its file and place in it */
    char *dir, *tmp;            /* the target without trailing slashes, and DIR.tmp.PID */
    bool tmp_made;
    bool peft;                  /* the LoRA adapters alone, as PEFT saves them; else the base groups */
    bool merge;                 /* the base groups with their adapters merged */
    const char *companions;     /* the model directory whose tokenizer and generation files go along, NULL */
    Progress *progress;         /* NULL: nobody listens */
    uint8_t *whole;             /* rank 0, a PLAN_HF_EXPERT_COLS piece: its HF tensor, assembled (its columns are E apart) */
} Exp;

/* Whether group g is written: the adapters for a PEFT export, else the rest. */
static bool exported(const Exp *ex, int g) { return ex->l->groups[g].adapter == ex->peft; }

static int pwrite_all(int fd, const char *path, uint64_t off, const uint8_t *buf, uint64_t len, char *err, size_t n) {
    while (len) {
        ssize_t w = pwrite(fd, buf, len > (1u << 30) ? (1u << 30) : (size_t)len, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return errorf(err, n, "write to %s failed: %s", path, w < 0 ? strerror(errno) : "no progress");
        buf += w;
        off += (uint64_t)w;
        len -= (uint64_t)w;
    }
    return 0;
}

typedef struct OutCtx {
    const OutFile *f;
    const char *tmp;
} OutCtx;
static int out_write(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n) {
    OutCtx *o = ctx;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", o->tmp, o->f->name);
    return pwrite_all(o->f->fd, path, off, buf, len, err, n);
}

/* Groups into files of at most max bytes (a larger tensor alone), as
 * save_pretrained shards. */
static int plan_files(Exp *ex, uint64_t max, char *err, size_t n) {
    const HfLayout *l = ex->l;
    ex->files = calloc((size_t)l->ngroups, sizeof *ex->files);
    ex->gfile = calloc((size_t)l->ngroups, sizeof *ex->gfile);
    ex->gslot = calloc((size_t)l->ngroups, sizeof *ex->gslot);
    if (!ex->files || !ex->gfile || !ex->gslot) return errorf(err, n, "out of memory");
    uint64_t size = 0;
    for (int g = 0; g < l->ngroups; g++) {
        ex->gfile[g] = -1;
        if (!exported(ex, g)) continue;
        uint64_t b = l->groups[g].numel * st_dtype_size((StDtype)st_dtype_from_plan(l->groups[g].dtype));
        if (!ex->nfiles || (size && size + b > max)) {
            ex->nfiles++;
            size = 0;
        }
        size += b;
        ex->gfile[g] = ex->nfiles - 1;
        ex->gslot[g] = ex->files[ex->nfiles - 1].nt++;
    }
    for (int f = 0; f < ex->nfiles; f++) {
        OutFile *o = &ex->files[f];
        o->fd = -1;
        o->t = calloc((size_t)o->nt, sizeof *o->t);
        o->name = malloc(64);
        if (!o->t || !o->name) return errorf(err, n, "out of memory");
        if (ex->peft) snprintf(o->name, 64, "adapter_model.safetensors");
        else if (ex->nfiles == 1) snprintf(o->name, 64, "model.safetensors");
        else snprintf(o->name, 64, "model-%05d-of-%05d.safetensors", f + 1, ex->nfiles);
    }
    for (int g = 0; g < l->ngroups; g++) {
        if (ex->gfile[g] < 0) continue;
        const HfGroup *G = &l->groups[g];
        StOutTensor *t = &ex->files[ex->gfile[g]].t[ex->gslot[g]];
        t->name = G->name;
        t->dtype = (StDtype)st_dtype_from_plan(G->dtype);
        t->rank = G->rank;
        memcpy(t->shape, G->shape, sizeof t->shape);
    }
    return 0;
}

static int write_small(const char *dir, const char *name, const void *data, size_t len, char *err, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errorf(err, n, "cannot create %s: %s", path, strerror(errno));
    int rc = pwrite_all(fd, path, 0, data, len, err, n);
    if (!rc && fsync(fd)) rc = errorf(err, n, "fsync of %s failed: %s", path, strerror(errno));
    if (close(fd) && !rc) rc = errorf(err, n, "close of %s failed: %s", path, strerror(errno));
    return rc;
}

/* Rank 0: DIR.tmp.PID with config.json and every shard's header. */
static int open_files(Exp *ex, char *err, size_t n) {
    const char *cfg = ex->r->p->hf.config;
    if (mkdir(ex->tmp, 0755)) return errorf(err, n, "cannot create %s: %s", ex->tmp, strerror(errno));
    ex->tmp_made = true;
    if (ex->peft) {
        char *ac = hf_adapter_config(ex->r->p, ex->l, err, n);
        int rc = ac ? write_small(ex->tmp, "adapter_config.json", ac, strlen(ac), err, n) : -1;
        free(ac);
        if (rc) return -1;
    } else if (cfg && *cfg && write_small(ex->tmp, "config.json", cfg, strlen(cfg), err, n))
        return -1;
    const char *meta[] = {"format", "pt", "producer", "zinf"};
    for (int f = 0; f < ex->nfiles; f++) {
        OutFile *o = &ex->files[f];
        uint8_t *hdr;
        size_t hl;
        if (st_header_build(o->t, (size_t)o->nt, meta, 2, &hdr, &hl, err, n)) return -1;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", ex->tmp, o->name);
        o->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int rc = o->fd < 0 ? errorf(err, n, "cannot create %s: %s", path, strerror(errno)) : pwrite_all(o->fd, path, 0, hdr, hl, err, n);
        free(hdr);
        if (rc) return -1;
        o->data_start = hl;
        ex->rep->bytes += hl;
    }
    return 0;
}

/* ---- the tensors ---- */

/* Rank 0: block st->f of piece x (P's rows [r0, r1) x columns [c0, c1)) to
 * its place in the group's tensor. */
static int put_block(Exp *ex, const HfPiece *x, int g, int64_t r0, int64_t r1, int64_t c0, int64_t c1, char *err, size_t n) {
    const OutFile *f = &ex->files[ex->gfile[g]];
    const StOutTensor *t = &f->t[ex->gslot[g]];
    size_t es = st_dtype_size(t->dtype);
    uint64_t base = f->data_start + t->offset;
    int64_t h = r1 - r0, w = c1 - c0;
    OutCtx oc = {f, ex->tmp};
    HfRuns runs = {.fn = out_write, .ctx = &oc};
    uint8_t *o = ex->st.b;
    if (x->layout == PLAN_HF_EXPERT_COLS) { /* into the assembled tensor, written whole by export_piece */
        st_from_f32(t->dtype, ex->st.f, o, h * w);
        for (int64_t i = r0; i < r1; i++)
            for (int64_t j = c0; j < c1; j++)
                memcpy(ex->whole + (size_t)hf_expert_col(x, i, j) * es, o + (size_t)((i - r0) * w + j - c0) * es, es);
        return 0;
    }
    if (!x->transpose) {
        st_from_f32(t->dtype, ex->st.f, o, h * w);
        for (int64_t i = r0; i < r1; i++) {
            int64_t el = (i - x->row0) * x->hstride + x->src_col + (c0 - x->pc);
            if (hf_runs_add(&runs, base + (uint64_t)el * es, o + (size_t)((i - r0) * w) * es, (uint64_t)w * es, err, n)) return -1;
        }
    } else {
        float *tr = (float *)ex->st.a; /* [w][h] */
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++) tr[j * h + i] = ex->st.f[i * w + j];
        st_from_f32(t->dtype, tr, o, h * w);
        for (int64_t j = c0; j < c1; j++) {
            int64_t el = (x->src_col + j - x->pc) * x->hstride + r0 - x->row0;
            if (hf_runs_add(&runs, base + (uint64_t)el * es, o + (size_t)((j - c0) * h) * es, (uint64_t)h * es, err, n)) return -1;
        }
    }
    if (hf_runs_flush(&runs, err, n)) return -1;
    ex->rep->bytes += runs.total;
    return 0;
}

/* Piece x, block by block: gathered (collective), placed by rank 0. A
 * failure on rank 0 stops its writing, not its part in the collectives. */
static int export_piece(Exp *ex, const HfPiece *x, const HfLora *lo, const float *A, const float *B, char *err, size_t n) {
    int64_t bh, bw;
    hf_block_dims(x->transpose, x->nrows, x->w, ex->st.ch, &bh, &bw);
    int rc = 0;
    const OutFile *f = ex->files && ex->gfile[x->group] >= 0 ? &ex->files[ex->gfile[x->group]] : NULL;
    const StOutTensor *ot = f ? &f->t[ex->gslot[x->group]] : NULL;
    if (x->layout == PLAN_HF_EXPERT_COLS && ex->r->c->rank == 0) { /* an adapter's lora_B: assembled in memory */
        ex->whole = ot ? malloc(ot->bytes ? (size_t)ot->bytes : 1) : NULL;
        if (!ex->whole) rc = errorf(err, n, "out of memory assembling '%s'", ex->l->groups[x->group].name);
    }
    for (int64_t r0 = x->row0; r0 < x->row0 + x->nrows; r0 += bh)
        for (int64_t c0 = x->pc; c0 < x->pc + x->w; c0 += bw) {
            int64_t r1 = min64(x->row0 + x->nrows, r0 + bh), c1 = min64(x->pc + x->w, c0 + bw);
            int g = hf_gather_block(ex->r, &ex->st, x->tensor, x->cols, r0, r1, c0, c1, err, n);
            if (g && !rc) rc = g;
            if (!rc && lo && A && B) hf_lora_add(lo, A, B, x->cols, ex->st.f, r0, r1, c0, c1);
            if (!rc && ex->r->c->rank == 0) rc = put_block(ex, x, x->group, r0, r1, c0, c1, err, n);
        }
    if (x->layout == PLAN_HF_EXPERT_COLS && ex->r->c->rank == 0) {
        if (!rc) {
            OutCtx oc = {f, ex->tmp};
            rc = out_write(&oc, f->data_start + ot->offset, ex->whole, ot->bytes, err, n);
            if (!rc) ex->rep->bytes += ot->bytes;
        }
        free(ex->whole);
        ex->whole = NULL;
    }
    return rc;
}

static int write_index(Exp *ex, char *err, size_t n) {
    StBuf b = {0};
    uint64_t total = 0;
    for (int f = 0; f < ex->nfiles; f++)
        for (int k = 0; k < ex->files[f].nt; k++) total += ex->files[f].t[k].bytes;
    st_buf_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {", total);
    for (int g = 0, k = 0; g < ex->l->ngroups; g++) {
        if (ex->gfile[g] < 0) continue;
        st_buf_put(&b, k ? ",\n    " : "\n    ", k ? 6 : 5);
        k++;
        st_buf_json_string(&b, ex->l->groups[g].name);
        st_buf_put(&b, ": ", 2);
        st_buf_json_string(&b, ex->files[ex->gfile[g]].name);
    }
    st_buf_printf(&b, "\n  }\n}\n");
    int rc = b.oom ? errorf(err, n, "out of memory writing the index") : write_small(ex->tmp, "model.safetensors.index.json", b.p, b.len, err, n);
    st_buf_free(&b);
    return rc;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Rank 0: every file durable, then DIR.tmp.PID becomes DIR. */
/* The files a model directory holds beside its weights that
 * from_pretrained and pipeline() read: the tokenizer's (each format's) and
 * the generation defaults. Copied as they are. */
static const char *const companion_names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                                              "chat_template.jinja", "chat_template.json", "generation_config.json"};

static int copy_companions(Exp *ex, char *err, size_t n) {
    if (!ex->companions) return 0;
    struct stat st;
    if (stat(ex->companions, &st) || !S_ISDIR(st.st_mode)) return 0;
    HfioReport *rep = ex->rep;
    size_t used = 0;
    for (size_t k = 0; k < sizeof companion_names / sizeof *companion_names; k++) {
        char from[4200];
        snprintf(from, sizeof from, "%s/%s", ex->companions, companion_names[k]);
        int fd = open(from, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat fs;
        uint8_t *buf = NULL;
        int rc = fstat(fd, &fs) ? errorf(err, n, "%s: %s", from, strerror(errno)) : 0;
        size_t len = rc ? 0 : (size_t)fs.st_size;
        if (!rc && !(buf = malloc(len ? len : 1))) rc = errorf(err, n, "out of memory copying %s", from);
        for (size_t got = 0; !rc && got < len;) {
            ssize_t r = read(fd, buf + got, len - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) rc = errorf(err, n, "read of %s failed: %s", from, r < 0 ? strerror(errno) : "the file shrank");
            else got += (size_t)r;
        }
        close(fd);
        if (!rc) rc = write_small(ex->tmp, companion_names[k], buf, len, err, n);
        free(buf);
        if (rc) return -1;
        rep->companions++;
        int w = snprintf(rep->companion_list + used, sizeof rep->companion_list - used, "%s%s", used ? ", " : "", companion_names[k]);
        if (w > 0) used = (size_t)w < sizeof rep->companion_list - used ? used + (size_t)w : sizeof rep->companion_list - 1;
    }
    return 0;
}

static int finish_files(Exp *ex, char *err, size_t n) {
    for (int f = 0; f < ex->nfiles; f++) {
        OutFile *o = &ex->files[f];
        int rc = fsync(o->fd) ? errorf(err, n, "fsync of %s/%s failed: %s", ex->tmp, o->name, strerror(errno)) : 0;
        if (close(o->fd) && !rc) rc = errorf(err, n, "close of %s/%s failed: %s", ex->tmp, o->name, strerror(errno));
        o->fd = -1;
        if (rc) return rc;
    }
    if (ex->nfiles > 1 && write_index(ex, err, n)) return -1;
    if (copy_companions(ex, err, n)) return -1;
    if (fsync_path(ex->tmp)) return errorf(err, n, "fsync of %s failed: %s", ex->tmp, strerror(errno));
    if (rmdir(ex->dir) && errno != ENOENT) return errorf(err, n, "%s: %s (it must be absent or empty)", ex->dir, strerror(errno));
    if (rename(ex->tmp, ex->dir)) return errorf(err, n, "rename %s -> %s failed: %s", ex->tmp, ex->dir, strerror(errno));
    ex->tmp_made = false;
    char *parent = strdup(ex->dir);
    if (!parent) return 0;
    char *sl = strrchr(parent, '/');
    const char *pd = sl ? (sl == parent ? "/" : (*sl = 0, parent)) : ".";
    int rc = fsync_path(pd) ? errorf(err, n, "fsync of %s failed: %s", pd, strerror(errno)) : 0;
    free(parent);
    return rc;
}

/* Removes the files of a temporary export directory, then it (nothing else:
 * a subdirectory stays and so does the directory). */
static void remove_flat(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* What killed exports of this target left: DIR.tmp.PID whose process is gone. */
static void remove_stale(const char *dir) {
    char *copy = strdup(dir);
    if (!copy) return;
    char *sl = strrchr(copy, '/');
    const char *parent = sl ? (sl == copy ? "/" : copy) : ".";
    const char *base = sl ? sl + 1 : copy;
    if (sl) *sl = 0;
    DIR *d = opendir(parent);
    size_t bl = strlen(base);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *nm = e->d_name;
        if (strncmp(nm, base, bl) || strncmp(nm + bl, ".tmp.", 5)) continue;
        char *end;
        long pid = strtol(nm + bl + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", parent, nm);
        remove_flat(path);
    }
    if (d) closedir(d);
    free(copy);
}

int hfio_check_export_dir(const char *dir, char *err, size_t n) {
    struct stat sb;
    if (!dir || !*dir) return errorf(err, n, "--export-hf needs a directory");
    if (stat(dir, &sb)) return errno == ENOENT ? 0 : errorf(err, n, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return errorf(err, n, "%s exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return errorf(err, n, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (!empty) return errorf(err, n, "%s already exists and is not empty: --export-hf writes a new directory (remove it or choose another)", dir);
    return 0;
}

static void exp_free(Exp *ex) {
    if (ex->files)
        for (int f = 0; f < ex->nfiles; f++) {
            if (ex->files[f].fd >= 0) close(ex->files[f].fd);
            free(ex->files[f].t);
            free(ex->files[f].name);
        }
    if (ex->tmp_made) remove_flat(ex->tmp);
    free(ex->files);
    free(ex->gfile);
    free(ex->gslot);
    free(ex->dir);
    free(ex->tmp);
    hf_stage_free(&ex->st);
}

/* Rank 0's set-up: the target checked, the temporary directory and files. */
static int export_setup(Exp *ex, const char *dir, char *err, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    ex->dir = strndup(dir, len);
    ex->tmp = ex->dir ? malloc(len + 32) : NULL;
    if (!ex->tmp) return errorf(err, n, "out of memory");
    snprintf(ex->tmp, len + 32, "%s.tmp.%d", ex->dir, (int)getpid());
    if (hfio_check_export_dir(ex->dir, err, n)) return -1;
    remove_stale(ex->dir);
    return open_files(ex, err, n);
}

/* Every group's exported pieces; the ranks agree after each group. */
static int export_groups(Exp *ex, char *err, size_t n) {
    const HfLayout *l = ex->l;
    uint64_t total = 0;
    for (int g = 0; g < l->ngroups; g++) total += exported(ex, g);
    /* A and B of the adapter last fetched: the experts' tensors of one
     * weight (a group each) share theirs, fetched once (every rank decides
     * alike: the collective stays matched) */
    float *A = NULL, *B = NULL;
    int fa = -1, fb = -1, rc = 0;
    for (int g = 0; g < l->ngroups && !rc; g++) {
        if (!exported(ex, g)) continue;
        HfLora lo;
        int has = ex->merge ? hf_lora_of(ex->r->p, l, g, &lo, err, n) : 0;
        rc = has < 0 ? -1 : 0;
        if (has > 0 && (lo.a != fa || lo.b != fb)) {
            free(A);
            free(B);
            A = B = NULL;
            fa = lo.a;
            fb = lo.b;
            rc = hf_lora_fetch(ex->r, &lo, &A, &B, err, n);
        }
        for (int i = l->groups[g].first; i < l->npieces; i++) {
            const HfPiece *x = &l->pieces[i];
            if (x->group != g || !x->exported) continue;
            int k = export_piece(ex, x, has > 0 ? &lo : NULL, A, B, err, n);
            if (k && !rc) rc = k;
        }
        int bad = hf_agree(ex->r, rc, err, n);
        if (bad > 0 && !rc) rc = errorf(err, n, "rank %d failed exporting '%s' (its message says why)", bad - 1, l->groups[g].name);
        else if (bad) rc = -1;
        if (rc) break;
        ex->rep->tensors++;
        progress_report(ex->progress, "exporting weights", "tensors", (uint64_t)ex->rep->tensors, total);
    }
    free(A);
    free(B);
    return rc;
}

int hfio_export(Rt *r, const char *dir, const HfioOptions *o, HfioReport *rep, char *err, size_t n) {
    HfioReport dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    HfLayout l = {0};
    Exp ex = {.r = r, .l = &l, .rep = rep, .companions = o ? o->companions_from : NULL, .progress = o ? o->progress : NULL};
    bool lead = r->c->rank == 0;
    int rc = hf_layout_build(r->p, &l, err, n);
    for (int g = 0; !rc && g < l.ngroups; g++) ex.merge |= l.groups[g].adapter;
    ex.peft = ex.merge && !(o && o->merge_lora);
    ex.merge &= !ex.peft;
    for (int g = 0; !rc && ex.merge && g < l.ngroups; g++) { /* an expert adapter merges only where the ops show its weight */
        char t[256];
        if (l.pieces[l.groups[g].first].layout == PLAN_HF_EXPERT_ROWS) rc = hf_expert_target(r->p, &l, g, t, sizeof t, err, n);
    }
    if (!rc) rc = hf_stage_init(&ex.st, o, err, n);
    if (!rc) rc = plan_files(&ex, ex.peft ? UINT64_MAX : o && o->max_shard_bytes ? o->max_shard_bytes : HFIO_SHARD_DEFAULT, err, n);
    if (!rc && lead) rc = export_setup(&ex, dir, err, n);
    int bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = errorf(err, n, "rank %d could not start the export to %s (its message says why)", bad - 1, dir);
    if (bad < 0) rc = -1;
    if (!rc) rc = export_groups(&ex, err, n);
    if (!rc && lead) rc = finish_files(&ex, err, n);
    bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = errorf(err, n, "rank %d failed finishing the export to %s", bad - 1, dir);
    if (bad < 0) rc = -1;
    rep->files = rc ? 0 : ex.nfiles;
    exp_free(&ex);
    hf_layout_free(&l);
    return rc;
}
