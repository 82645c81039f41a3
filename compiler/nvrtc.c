#include "nvrtc.h"
#include "clock.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- SHA-256 ------------------------------------------------------------ */

typedef struct Sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t nbuf;
} Sha256;

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(Sha256 *s, const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

static void sha_init(Sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
}

static void sha_update(Sha256 *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->len += n;
    while (n) {
        size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, k);
        s->nbuf += k;
        p += k;
        n -= k;
        if (s->nbuf == 64) {
            sha_block(s, s->buf);
            s->nbuf = 0;
        }
    }
}

static void sha_final(Sha256 *s, unsigned char out[32]) {
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0;
    sha_update(s, &pad, 1);
    while (s->nbuf != 56) sha_update(s, &zero, 1);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_update(s, lb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

void nvrtc_sha256(const void *data, size_t n, unsigned char out[32]) {
    Sha256 s;
    sha_init(&s);
    sha_update(&s, data, n);
    sha_final(&s, out);
}

void nvrtc_hex(const unsigned char *bytes, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[bytes[i] >> 4];
        out[2 * i + 1] = d[bytes[i] & 15];
    }
    out[2 * n] = 0;
}

/* ---- the library, loaded once ------------------------------------------- */

typedef int (*fn_version)(int *, int *);
typedef int (*fn_create)(void **, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*fn_compile)(void *, int, const char *const *);
typedef int (*fn_size)(void *, size_t *);
typedef int (*fn_get)(void *, char *);
typedef int (*fn_destroy)(void **);
typedef const char *(*fn_errstr)(int);
typedef int (*fn_narchs)(int *);
typedef int (*fn_archs)(int *);

static struct {
    pthread_once_t once;
    void *dl;
    char why[512];
    int major, minor;
    fn_version version;
    fn_create create;
    fn_compile compile;
    fn_size log_size, cubin_size;
    fn_get log, cubin;
    fn_destroy destroy;
    fn_errstr errstr;
    fn_narchs narchs; /* nvrtcGetNumSupportedArchs (11.2+), else NULL */
    fn_archs archs;
} lib = {.once = PTHREAD_ONCE_INIT};

static void lib_load(void) {
    char cands[8][320];
    int nc = 0;
    const char *home = getenv("CUDA_HOME");
    if (home && *home) {
        snprintf(cands[nc++], sizeof cands[0], "%s/lib64/libnvrtc.so.13", home);
        snprintf(cands[nc++], sizeof cands[0], "%s/lib64/libnvrtc.so.12", home);
        snprintf(cands[nc++], sizeof cands[0], "%s/lib64/libnvrtc.so", home);
    }
    const char *plain[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                           "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) snprintf(cands[nc++], sizeof cands[0], "%s", plain[i]);
    for (int i = 0; i < nc && !lib.dl; i++) lib.dl = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib.dl) {
        snprintf(lib.why, sizeof lib.why,
                 "NVRTC not found (tried libnvrtc.so.13, .so.12, .so%s and /usr/local/cuda/lib64): install the "
                 "CUDA toolkit or set CUDA_HOME",
                 home && *home ? " under $CUDA_HOME/lib64," : ",");
        return;
    }
    lib.version = (fn_version)dlsym(lib.dl, "nvrtcVersion");
    lib.create = (fn_create)dlsym(lib.dl, "nvrtcCreateProgram");
    lib.compile = (fn_compile)dlsym(lib.dl, "nvrtcCompileProgram");
    lib.log_size = (fn_size)dlsym(lib.dl, "nvrtcGetProgramLogSize");
    lib.log = (fn_get)dlsym(lib.dl, "nvrtcGetProgramLog");
    lib.cubin_size = (fn_size)dlsym(lib.dl, "nvrtcGetCUBINSize");
    lib.cubin = (fn_get)dlsym(lib.dl, "nvrtcGetCUBIN");
    lib.destroy = (fn_destroy)dlsym(lib.dl, "nvrtcDestroyProgram");
    lib.errstr = (fn_errstr)dlsym(lib.dl, "nvrtcGetErrorString");
    lib.narchs = (fn_narchs)dlsym(lib.dl, "nvrtcGetNumSupportedArchs");
    lib.archs = (fn_archs)dlsym(lib.dl, "nvrtcGetSupportedArchs");
    if (!lib.version || !lib.create || !lib.compile || !lib.log_size || !lib.log || !lib.cubin_size ||
        !lib.cubin || !lib.destroy || !lib.errstr) {
        snprintf(lib.why, sizeof lib.why, "the NVRTC library found lacks nvrtcGetCUBIN and friends (NVRTC 11.1+ needed)");
        dlclose(lib.dl);
        lib.dl = NULL;
        return;
    }
    if (lib.version(&lib.major, &lib.minor) != 0) {
        snprintf(lib.why, sizeof lib.why, "nvrtcVersion failed");
        dlclose(lib.dl);
        lib.dl = NULL;
    }
}

static bool lib_ok(void) {
    pthread_once(&lib.once, lib_load);
    return lib.dl != NULL;
}

bool nvrtc_available(char *err, size_t n) {
    if (lib_ok()) return true;
    if (err && n) snprintf(err, n, "%s", lib.why);
    return false;
}

int nvrtc_version(int *major, int *minor) {
    if (!lib_ok()) return -1;
    *major = lib.major;
    *minor = lib.minor;
    return 0;
}

/* ---- helpers -------------------------------------------------------------- */

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = malloc((size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, f);
    vsnprintf(p, (size_t)n + 1, f, ap);
    va_end(ap);
    return p;
}

static int mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

const char *nvrtc_cache_dir(const NvrtcOptions *opt, char *buf, size_t n) {
    const char *e;
    if (opt && opt->cache_dir && *opt->cache_dir) snprintf(buf, n, "%s", opt->cache_dir);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(buf, n, "%s/zinf/kernels", e);
    else if ((e = getenv("HOME")) && *e) snprintf(buf, n, "%s/.cache/zinf/kernels", e);
    else snprintf(buf, n, ".zinf-cache/kernels");
    return buf;
}

/* ---- resource report ------------------------------------------------------ */

/* The number written just before the text at p (e.g. "40960 bytes smem"). */
static int num_before(const char *line, const char *p) {
    while (p > line && p[-1] == ' ') p--;
    const char *q = p;
    while (q > line && q[-1] >= '0' && q[-1] <= '9') q--;
    return q < p ? atoi(q) : 0;
}

int nvrtc_parse_resources(const char *log, NvrtcFuncRes **out) {
    *out = NULL;
    int n = 0, cap = 0;
    NvrtcFuncRes *v = NULL;
    const char *p = log ? log : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[1024];
        size_t k0 = len < sizeof line ? len : sizeof line - 1;
        memcpy(line, p, k0);
        line[k0] = 0;
        p = eol ? eol + 1 : p + len;
        const char *s;
        if ((s = strstr(line, "Compiling entry function '"))) {
            if (n == cap) {
                int nc = cap ? cap * 2 : 8;
                NvrtcFuncRes *nv = realloc(v, sizeof *nv * (size_t)nc);
                if (!nv) {
                    free(v);
                    return -1;
                }
                v = nv;
                cap = nc;
            }
            NvrtcFuncRes *f = &v[n++];
            memset(f, 0, sizeof *f);
            s += strlen("Compiling entry function '");
            size_t k = 0;
            while (s[k] && s[k] != '\'' && k + 1 < sizeof f->name) {
                f->name[k] = s[k];
                k++;
            }
            f->name[k] = 0;
            continue;
        }
        if (n == 0) continue;
        NvrtcFuncRes *f = &v[n - 1];
        if ((s = strstr(line, "bytes stack frame"))) {
            f->stack_bytes = num_before(line, s);
            if ((s = strstr(line, "bytes spill stores"))) f->spill_stores = num_before(line, s);
            if ((s = strstr(line, "bytes spill loads"))) f->spill_loads = num_before(line, s);
        }
        if ((s = strstr(line, "registers")) && strstr(line, "Used ")) {
            f->registers = num_before(line, s);
            if ((s = strstr(line, "barriers"))) f->barriers = num_before(line, s);
            if ((s = strstr(line, "bytes smem"))) f->smem_bytes = num_before(line, s);
            if ((s = strstr(line, "bytes cmem[0]"))) f->cmem0_bytes = num_before(line, s);
        }
    }
    *out = v;
    return n;
}

/* ---- cache entries -------------------------------------------------------- */
/* "ZKC1" | u64 cubin size | u64 log size | cubin | log | SHA-256 of all before. */

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool cache_read(const char *path, NvrtcResult *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char *buf = NULL;
    bool ok = false;
    if (fseek(f, 0, SEEK_END) != 0) goto done;
    long sz = ftell(f);
    if (sz < 20 + 32 || fseek(f, 0, SEEK_SET) != 0) goto done;
    buf = malloc((size_t)sz);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) goto done;
    if (memcmp(buf, "ZKC1", 4) != 0) goto done;
    uint64_t nc = get64(buf + 4), nl = get64(buf + 12);
    if (nc == 0 || nc > (uint64_t)sz || nl > (uint64_t)sz || 20 + nc + nl + 32 != (uint64_t)sz) goto done;
    unsigned char sum[32];
    nvrtc_sha256(buf, (size_t)sz - 32, sum);
    if (memcmp(sum, buf + sz - 32, 32) != 0) goto done;
    out->cubin = malloc(nc);
    out->log = malloc(nl + 1);
    if (!out->cubin || !out->log) {
        free(out->cubin);
        free(out->log);
        out->cubin = NULL;
        out->log = NULL;
        goto done;
    }
    memcpy(out->cubin, buf + 20, nc);
    out->cubin_size = nc;
    memcpy(out->log, buf + 20 + nc, nl);
    out->log[nl] = 0;
    ok = true;
done:
    free(buf);
    fclose(f);
    return ok;
}

static void cache_write(const char *dir, const char *path, const NvrtcResult *r) {
    static unsigned counter;
    size_t nl = r->log ? strlen(r->log) : 0;
    size_t total = 20 + r->cubin_size + nl + 32;
    unsigned char *buf = malloc(total);
    if (!buf) return;
    memcpy(buf, "ZKC1", 4);
    put64(buf + 4, r->cubin_size);
    put64(buf + 12, nl);
    memcpy(buf + 20, r->cubin, r->cubin_size);
    if (nl) memcpy(buf + 20 + r->cubin_size, r->log, nl);
    nvrtc_sha256(buf, total - 32, buf + total - 32);
    char tmp[4200];
    unsigned c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld-%u", dir, r->key, (long)getpid(), c);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < total) {
            ssize_t w = write(fd, buf + off, total - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += (size_t)w;
        }
        bool good = off == total;
        if (close(fd) != 0) good = false;
        if (!good || rename(tmp, path) != 0) unlink(tmp);
    }
    free(buf);
}

/* Saves a failed source; returns the path (malloc) or NULL. */
static char *save_failed(const char *cache, const char *name, const char *key, const char *source) {
    char dir[4200], base[200];
    snprintf(dir, sizeof dir, "%s/failed", cache);
    size_t k = 0;
    for (const char *s = name; *s && k < 100; s++) base[k++] = (*s == '/' || *s == ' ') ? '_' : *s;
    base[k] = 0;
    const char *dirs[2] = {dir, "."};
    for (int i = 0; i < 2; i++) {
        if (i == 0 && mkdir_p(dir) != 0) continue;
        char *path = fmt("%s/%s-%.16s.cu", dirs[i], base, key);
        if (!path) return NULL;
        FILE *f = fopen(path, "w");
        if (f) {
            bool ok = fputs(source, f) >= 0;
            if (fclose(f) != 0) ok = false;
            if (ok) return path;
        }
        free(path);
    }
    return NULL;
}

/* ---- compile -------------------------------------------------------------- */

static bool arch_valid(const char *arch) {
    if (!arch || strncmp(arch, "sm_", 3) != 0) return false;
    const char *p = arch + 3;
    if (!(*p >= '0' && *p <= '9')) return false;
    while (*p >= '0' && *p <= '9') p++;
    if (*p == 'a' || *p == 'f') p++;
    return *p == 0 && atoi(arch + 3) >= 50;
}

/* NULL when this NVRTC lists `arch` (or cannot list), else why not: newer
 * toolkits drop old archs (CUDA 13 has no sm_70, the V100's). */
static char *arch_unsupported(const char *arch) {
    int n = 0, num = atoi(arch + 3), list[64];
    if (!lib.narchs || !lib.archs || lib.narchs(&n) != 0 || n <= 0 || n > 64 || lib.archs(list) != 0) return NULL;
    for (int i = 0; i < n; i++)
        if (list[i] == num) return NULL;
    return fmt("NVRTC %d.%d cannot compile for %s: it supports sm_%d to sm_%d; use a toolkit that has %s "
               "(CUDA_HOME) or --kernels with an architecture it lists",
               lib.major, lib.minor, arch, list[0], list[n - 1], arch);
}

int nvrtc_compile(const char *source, const char *name, const char *arch, const NvrtcOptions *opt,
                  NvrtcResult *out) {
    memset(out, 0, sizeof *out);
    if (!name || !*name) name = "kernel.cu";
    if (!source) {
        out->error = xstrdup("nvrtc: no source given");
        return -1;
    }
    if (!arch_valid(arch)) {
        out->error = fmt("nvrtc: '%s' is not a GPU architecture (expected sm_80, sm_90, ...)", arch ? arch : "(null)");
        return -1;
    }
    if (!lib_ok()) {
        out->error = fmt("cannot compile %s: %s", name, lib.why);
        return -1;
    }
    if ((out->error = arch_unsupported(arch)) != NULL) return -1;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    int nextra = opt && opt->extra ? opt->nextra : 0;
    const char **opts = malloc(sizeof *opts * (size_t)(2 + nextra));
    if (!opts) {
        out->error = xstrdup("nvrtc: out of memory");
        return -1;
    }
    int nopt = 0;
    opts[nopt++] = archopt;
    opts[nopt++] = "--ptxas-options=-v";
    for (int i = 0; i < nextra; i++) opts[nopt++] = opt->extra[i];

    /* key */
    Sha256 s;
    sha_init(&s);
    char ver[64];
    snprintf(ver, sizeof ver, "zinf-nvrtc-1 nvrtc %d.%d", lib.major, lib.minor);
    sha_update(&s, ver, strlen(ver) + 1);
    sha_update(&s, name, strlen(name) + 1);
    for (int i = 0; i < nopt; i++) sha_update(&s, opts[i], strlen(opts[i]) + 1);
    sha_update(&s, source, strlen(source));
    unsigned char digest[32];
    sha_final(&s, digest);
    nvrtc_hex(digest, 32, out->key);

    char dir[4096], path[4200];
    nvrtc_cache_dir(opt, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s.cubin", dir, out->key);
    bool use_cache = !(opt && opt->no_cache);
    if (use_cache && cache_read(path, out)) {
        out->cached = true;
        free(opts);
        out->nfuncs = nvrtc_parse_resources(out->log, &out->funcs);
        if (out->nfuncs < 0) {
            nvrtc_result_free(out);
            out->error = xstrdup("nvrtc: out of memory");
            return -1;
        }
        return 0;
    }

    double t0 = clock_mono_s();
    void *prog = NULL;
    int rc = lib.create(&prog, source, name, 0, NULL, NULL);
    if (rc != 0) {
        out->error = fmt("nvrtc: cannot create a program for %s: %s", name, lib.errstr(rc));
        free(opts);
        return -1;
    }
    rc = lib.compile(prog, nopt, opts);
    free(opts);
    size_t nlog = 0;
    if (lib.log_size(prog, &nlog) == 0 && nlog > 0) {
        out->log = malloc(nlog + 1);
        if (out->log && lib.log(prog, out->log) == 0) out->log[nlog] = 0;
        else if (out->log) out->log[0] = 0;
    }
    if (!out->log) out->log = xstrdup("");
    if (rc != 0) {
        lib.destroy(&prog);
        out->failed_source = save_failed(dir, name, out->key, source);
        out->error = fmt("NVRTC failed to compile %s for %s (%s); source saved to %s\n%s", name, arch,
                         lib.errstr(rc), out->failed_source ? out->failed_source : "(could not be saved)",
                         out->log ? out->log : "");
        return -1;
    }
    size_t nc = 0;
    if (lib.cubin_size(prog, &nc) != 0 || nc == 0 || !(out->cubin = malloc(nc)) ||
        lib.cubin(prog, (char *)out->cubin) != 0) {
        lib.destroy(&prog);
        free(out->cubin);
        out->cubin = NULL;
        out->error = fmt("nvrtc: no CUBIN for %s (%s)", name, arch);
        return -1;
    }
    out->cubin_size = nc;
    lib.destroy(&prog);
    out->seconds = clock_mono_s() - t0;
    out->nfuncs = nvrtc_parse_resources(out->log, &out->funcs);
    if (out->nfuncs < 0) {
        out->nfuncs = 0;
        out->error = xstrdup("nvrtc: out of memory");
        return -1;
    }
    if (use_cache && mkdir_p(dir) == 0) cache_write(dir, path, out);
    return 0;
}

void nvrtc_result_free(NvrtcResult *r) {
    if (!r) return;
    free(r->cubin);
    free(r->log);
    free(r->funcs);
    free(r->failed_source);
    free(r->error);
    memset(r, 0, sizeof *r);
}

/* ---- batches -------------------------------------------------------------- */

typedef struct Batch {
    NvrtcJob *jobs;
    int n;
    const NvrtcOptions *opt;
    int next; /* atomic */
} Batch;

static void *batch_worker(void *arg) {
    Batch *b = arg;
    for (;;) {
        int i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
        if (i >= b->n) break;
        NvrtcJob *j = &b->jobs[i];
        j->rc = nvrtc_compile(j->source, j->name, j->arch, b->opt, &j->result);
    }
    return NULL;
}

int nvrtc_compile_many(NvrtcJob *jobs, int n, const NvrtcOptions *opt, int threads) {
    if (n <= 0) return 0;
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    if (threads > n) threads = n;
    if (threads > 64) threads = 64;
    Batch b = {.jobs = jobs, .n = n, .opt = opt, .next = 0};
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&tid[started], NULL, batch_worker, &b) != 0) break;
        started++;
    }
    batch_worker(&b); /* this thread works too; with no thread started it does all */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    int failed = 0;
    for (int i = 0; i < n; i++) failed += jobs[i].rc != 0;
    return failed;
}
