/* nvrtc: every kernel unit of the model shapes compiles for sm_80 and sm_90
 * from a cold cache; cache hits, determinism, corrupt entries, compile errors,
 * the ptxas resource report. Needs libnvrtc (the CUDA toolkit), not a GPU.
 * Without NVRTC the suite fails, saying so, unless ZINF_SKIP_NVRTC=1. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cuda_gen.h"
#include "cuda_models.h"
#include "nvrtc.h"

static char cache_dir[256];
static NvrtcOptions cached; /* the cache in cache_dir */

static void fresh_cache(void) {
    snprintf(cache_dir, sizeof cache_dir, "/tmp/zinf-nvrtc-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cache_dir));
    cached.cache_dir = cache_dir;
}

static void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(sha256_known_answers) {
    unsigned char d[32];
    char hex[65];
    nvrtc_sha256("", 0, d);
    nvrtc_hex(d, 32, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    nvrtc_sha256("abc", 3, d);
    nvrtc_hex(d, 32, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    nvrtc_sha256(two, strlen(two), d);
    nvrtc_hex(d, 32, hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(resource_report_is_parsed) {
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'zk_gemm' for 'sm_90'\n"
        "ptxas info    : Function properties for zk_gemm\n"
        "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 225 registers, used 1 barriers, 40960 bytes smem, 488 bytes cmem[0], 8 bytes cmem[2]\n"
        "ptxas info    : Compile time = 491.391 ms\n"
        "ptxas info    : Compiling entry function 'zk_fill' for 'sm_90'\n"
        "ptxas info    : Used 10 registers, used 0 barriers\n";
    NvrtcFuncRes *f;
    int n = nvrtc_parse_resources(log, &f);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(f[0].name, "zk_gemm");
    ck_assert_int_eq(f[0].registers, 225);
    ck_assert_int_eq(f[0].barriers, 1);
    ck_assert_int_eq(f[0].smem_bytes, 40960);
    ck_assert_int_eq(f[0].cmem0_bytes, 488);
    ck_assert_int_eq(f[0].stack_bytes, 24);
    ck_assert_int_eq(f[0].spill_stores, 8);
    ck_assert_int_eq(f[0].spill_loads, 12);
    ck_assert_str_eq(f[1].name, "zk_fill");
    ck_assert_int_eq(f[1].registers, 10);
    ck_assert_int_eq(f[1].smem_bytes, 0);
    free(f);
    ck_assert_int_eq(nvrtc_parse_resources("", &f), 0);
    ck_assert_ptr_null(f);
}
END_TEST

static int require_nvrtc(void) {
    char why[512];
    if (nvrtc_available(why, sizeof why)) return 1;
    const char *skip = getenv("ZINF_SKIP_NVRTC");
    if (skip && !strcmp(skip, "1")) return 0;
    ck_abort_msg("%s (set ZINF_SKIP_NVRTC=1 to skip the NVRTC tests)", why);
    return 0;
}

typedef struct Units {
    Arena a;
    const char *src[64];
    const char *name[64];
    char hash[64][65];
    int n;
} Units;

/* The distinct units of several models, deduplicated by hash. */
static void collect(Units *u, const CmShape *const *shapes, int nshapes) {
    arena_init(&u->a);
    u->n = 0;
    for (int s = 0; s < nshapes; s++) {
        DiagSink d;
        diag_init(&d);
        Graph g;
        ck_assert_msg(cm_build(&g, &u->a, shapes[s], &d), "building %s", shapes[s]->name);
        CudaGen cg;
        CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
        cuda_gen_init(&cg, &u->a, &o);
        CudaModule m;
        ck_assert_int_eq(cuda_gen_graph(&cg, &g, &m, &d), 0);
        for (int i = 0; i < m.nunits; i++) {
            int dup = 0;
            for (int j = 0; j < u->n; j++) dup |= !strcmp(u->hash[j], m.units[i].hash);
            if (dup) continue;
            ck_assert_int_lt(u->n, 64);
            memcpy(u->hash[u->n], m.units[i].hash, 65);
            u->src[u->n] = m.units[i].source;
            u->name[u->n] = arena_printf(&u->a, "%s-%.12s.cu", m.units[i].family, m.units[i].hash);
            u->n++;
        }
        diag_free(&d);
    }
}

/* Adds the distinct units of an example .zl model (the real front end). */
static void collect_zl(Units *u, const char *example) {
    DiagSink d;
    diag_init(&d);
    SourceSet src;
    source_set_init(&src);
    char path[512];
    snprintf(path, sizeof path, "%s/../examples/%s.zl", ZINF_STDLIB_DIR, example);
    Graph g;
    ck_assert_msg(cm_load_zl(&g, &u->a, &src, path, &d), "%s does not check", path);
    CudaGen cg;
    CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels", .sources = &src};
    cuda_gen_init(&cg, &u->a, &o);
    CudaModule m;
    ck_assert_int_eq(cuda_gen_graph(&cg, &g, &m, &d), 0);
    for (int i = 0; i < m.nunits; i++) {
        int dup = 0;
        for (int j = 0; j < u->n; j++) dup |= !strcmp(u->hash[j], m.units[i].hash);
        if (dup) continue;
        ck_assert_int_lt(u->n, 64);
        memcpy(u->hash[u->n], m.units[i].hash, 65);
        u->src[u->n] = m.units[i].source;
        u->name[u->n] = arena_printf(&u->a, "%s-%.12s.cu", m.units[i].family, m.units[i].hash);
        u->n++;
    }
    source_set_free(&src);
    diag_free(&d);
}

/* Under AddressSanitizer (the suite's second pass) NVRTC itself is not
 * instrumented and runs no faster for it, while the plain pass already
 * compiles every unit: there the cold batch keeps one unit of each family
 * (the first met), which runs every path of nvrtc.c (the batch on two
 * threads, the log and resource report, the cache written and read back)
 * under ASan at a fifth of the cost. ZINF_NVRTC_ALL_UNITS=1 keeps all. */
#if defined(__SANITIZE_ADDRESS__)
#define NVRTC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVRTC_TEST_ASAN 1
#endif
#endif
static void one_per_family(Units *u) {
#ifdef NVRTC_TEST_ASAN
    const char *all = getenv("ZINF_NVRTC_ALL_UNITS");
    if (all && !strcmp(all, "1")) return;
    int k = 0;
    for (int i = 0; i < u->n; i++) {
        size_t fl = strcspn(u->name[i], "-");
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= strcspn(u->name[j], "-") == fl && !strncmp(u->name[j], u->name[i], fl);
        if (seen) continue;
        u->src[k] = u->src[i];
        u->name[k] = u->name[i];
        memcpy(u->hash[k], u->hash[i], 65);
        k++;
    }
    u->n = k;
#else
    (void)u;
#endif
}

static const CmShape cm_gpt2_f32 = {"gpt2-tiny-f32", DT_F32, 2, 64, 128, 2, 2, 512, 512, 1, false, 0.0};
static const CmShape cm_llama_f16 = {"llama-f16", DT_F16, 2, 128, 512, 4, 2, 1024, 1024, 1, true, 1.0};

/* Every unit of gpt2-tiny and llama2-7b (bf16, hand-built), f32 and f16
 * variants, and of examples/gpt2-tiny.zl and examples/llama2-7b.zl,
 * compiles for sm_80 and sm_90 from a cold cache; every entry point has a
 * register count; a second pass is served from the cache byte for byte.
 * (Under ASan, one unit of each family: one_per_family.) */
START_TEST(every_unit_compiles_cold_then_hits) {
    if (!require_nvrtc()) return;
    fresh_cache();
    const CmShape *shapes[] = {&cm_gpt2_tiny, &cm_llama2_7b, &cm_llama_gqa, &cm_gpt2_f32, &cm_llama_f16};
    Units u;
    collect(&u, shapes, 5);
    int hand = u.n;
    collect_zl(&u, "gpt2-tiny");
    collect_zl(&u, "llama2-7b");
    ck_assert_int_ge(hand, 20);
    ck_assert_int_le(u.n, 64);
    one_per_family(&u);
    const char *archs[2] = {"sm_80", "sm_90"};
    unsigned char *first[64][2];
    size_t firstn[64][2];
    int compiled = 0;
    /* cold: every (unit, arch) as one batch on two threads */
    NvrtcJob jobs[128];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < u.n; i++)
        for (int a = 0; a < 2; a++) {
            jobs[2 * i + a].source = u.src[i];
            jobs[2 * i + a].name = u.name[i];
            jobs[2 * i + a].arch = archs[a];
        }
    ck_assert_int_eq(nvrtc_compile_many(jobs, 2 * u.n, &cached, 2), 0);
    for (int i = 0; i < u.n; i++)
        for (int a = 0; a < 2; a++) {
            NvrtcResult r = jobs[2 * i + a].result;
            ck_assert_msg(jobs[2 * i + a].rc == 0, "%s %s: %s", u.name[i], archs[a], r.error ? r.error : "");
            ck_assert(!r.cached);
            compiled++;
            ck_assert_int_ge(r.cubin_size, 64);
            ck_assert(memcmp(r.cubin, "\177ELF", 4) == 0);
            ck_assert_int_ge(r.nfuncs, 1);
            for (int f = 0; f < r.nfuncs; f++) {
                ck_assert_msg(r.funcs[f].registers > 0, "%s: %s has no register count", u.name[i], r.funcs[f].name);
                ck_assert_int_eq(r.funcs[f].spill_stores, 0);
            }
            ck_assert_ptr_nonnull(strstr(r.log, archs[a]));
            first[i][a] = r.cubin;
            firstn[i][a] = r.cubin_size;
            jobs[2 * i + a].result.cubin = NULL;
            nvrtc_result_free(&jobs[2 * i + a].result);
        }
    ck_assert_int_eq(compiled, 2 * u.n);
    /* second pass: all hits, identical bytes, the report kept */
    for (int i = 0; i < u.n; i++)
        for (int a = 0; a < 2; a++) {
            NvrtcResult r;
            ck_assert_int_eq(nvrtc_compile(u.src[i], u.name[i], archs[a], &cached, &r), 0);
            ck_assert(r.cached);
            ck_assert_double_eq(r.seconds, 0);
            ck_assert_uint_eq(r.cubin_size, firstn[i][a]);
            ck_assert(memcmp(r.cubin, first[i][a], r.cubin_size) == 0);
            ck_assert_int_ge(r.nfuncs, 1);
            ck_assert_int_gt(r.funcs[0].registers, 0);
            nvrtc_result_free(&r);
            free(first[i][a]);
        }
    arena_free(&u.a);
    rm_rf(cache_dir);
}
END_TEST

static const char *small_src = "extern \"C\" __global__ void k(float *y, long long n) {\n"
                               "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
                               "    if (i < n) y[i] = 2.f * y[i];\n}\n";

START_TEST(same_source_same_bytes_without_cache) {
    if (!require_nvrtc()) return;
    fresh_cache();
    NvrtcOptions o = {.cache_dir = cache_dir, .no_cache = true};
    NvrtcResult a, b;
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_90", &o, &a), 0);
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_90", &o, &b), 0);
    ck_assert(!a.cached && !b.cached);
    ck_assert_uint_eq(a.cubin_size, b.cubin_size);
    ck_assert(memcmp(a.cubin, b.cubin, a.cubin_size) == 0);
    ck_assert_str_eq(a.key, b.key);
    /* no_cache wrote nothing */
    char path[512];
    snprintf(path, sizeof path, "%s/%s.cubin", cache_dir, a.key);
    ck_assert_int_ne(access(path, F_OK), 0);
    /* the key depends on the arch and the options */
    NvrtcResult c;
    const char *extra[] = {"-lineinfo"};
    NvrtcOptions o2 = {.cache_dir = cache_dir, .no_cache = true, .extra = extra, .nextra = 1};
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_90", &o2, &c), 0);
    ck_assert_str_ne(a.key, c.key);
    nvrtc_result_free(&c);
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_80", &o, &c), 0);
    ck_assert_str_ne(a.key, c.key);
    nvrtc_result_free(&a);
    nvrtc_result_free(&b);
    nvrtc_result_free(&c);
    rm_rf(cache_dir);
}
END_TEST

START_TEST(corrupt_entry_is_rebuilt) {
    if (!require_nvrtc()) return;
    fresh_cache();
    NvrtcResult a;
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_80", &cached, &a), 0);
    ck_assert(!a.cached);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.cubin", cache_dir, a.key);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    /* flip a byte in the middle */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, st.st_size / 2, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, st.st_size / 2, SEEK_SET);
    fputc(ch ^ 0x5a, f);
    fclose(f);
    NvrtcResult b;
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_80", &cached, &b), 0);
    ck_assert(!b.cached); /* ignored and rebuilt */
    ck_assert(b.cubin_size == a.cubin_size && memcmp(a.cubin, b.cubin, a.cubin_size) == 0);
    /* truncated */
    ck_assert_int_eq(truncate(path, 10), 0);
    NvrtcResult c;
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_80", &cached, &c), 0);
    ck_assert(!c.cached);
    NvrtcResult d;
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "sm_80", &cached, &d), 0);
    ck_assert(d.cached); /* the rebuilt entry is good */
    nvrtc_result_free(&a);
    nvrtc_result_free(&b);
    nvrtc_result_free(&c);
    nvrtc_result_free(&d);
    rm_rf(cache_dir);
}
END_TEST

START_TEST(compile_error_carries_log_and_saved_source) {
    if (!require_nvrtc()) return;
    fresh_cache();
    const char *bad = "extern \"C\" __global__ void broken(float *y) {\n    y[0] = undeclared_thing;\n}\n";
    NvrtcResult r;
    ck_assert_int_eq(nvrtc_compile(bad, "broken.cu", "sm_90", &cached, &r), -1);
    ck_assert_ptr_nonnull(r.error);
    ck_assert_ptr_nonnull(strstr(r.error, "NVRTC failed to compile broken.cu for sm_90"));
    ck_assert_ptr_nonnull(strstr(r.error, "undeclared_thing"));
    ck_assert_ptr_nonnull(r.failed_source);
    ck_assert_ptr_nonnull(strstr(r.error, r.failed_source));
    ck_assert_ptr_nonnull(strstr(r.failed_source, "/failed/broken.cu-"));
    FILE *f = fopen(r.failed_source, "r");
    ck_assert_ptr_nonnull(f);
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    ck_assert_uint_eq(n, strlen(bad));
    ck_assert_str_eq(buf, bad);
    ck_assert_ptr_null(r.cubin);
    nvrtc_result_free(&r);
    /* a bad arch is refused before NVRTC */
    ck_assert_int_eq(nvrtc_compile(small_src, "k.cu", "gfx90a", &cached, &r), -1);
    ck_assert_ptr_nonnull(strstr(r.error, "'gfx90a' is not a GPU architecture"));
    nvrtc_result_free(&r);
    rm_rf(cache_dir);
}
END_TEST

START_TEST(cache_dir_resolution) {
    char buf[512];
    NvrtcOptions o = {.cache_dir = "/x/y"};
    ck_assert_str_eq(nvrtc_cache_dir(&o, buf, sizeof buf), "/x/y");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    ck_assert_str_eq(nvrtc_cache_dir(NULL, buf, sizeof buf), "/xdg/zinf/kernels");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    ck_assert_str_eq(nvrtc_cache_dir(NULL, buf, sizeof buf), "/home/u/.cache/zinf/kernels");
}
END_TEST

int main(void) {
    Suite *s = suite_create("nvrtc");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, sha256_known_answers);
    tcase_add_test(t, resource_report_is_parsed);
    tcase_add_test(t, cache_dir_resolution);
    tcase_add_test(t, same_source_same_bytes_without_cache);
    tcase_add_test(t, corrupt_entry_is_rebuilt);
    tcase_add_test(t, compile_error_carries_log_and_saved_source);
    tcase_add_test(t, every_unit_compiles_cold_then_hits);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
