/* fakecuda_prep: builds the emulated kernel units the fake CUDA driver
 * (fake_cuda.c) runs in place of a plan's cubins.
 *
 *   fakecuda_prep [-j N] [--only SUBSTR] PLAN SRC_DIR ARCH OUT_DIR
 *
 * For every PlanKernel of PLAN whose arch is ARCH (and whose name contains
 * SUBSTR), the unit's CUDA source SRC_DIR/<name> (what `zinfc
 * --kernel-src=SRC_DIR` writes) gets the emulator's trampolines and
 * parameter-size tables (tests/gpu/emu_wrap.c) and is compiled by the host
 * C++ compiler against tests/gpu/emu.h into OUT_DIR/<hash>.so, hash being
 * the FNV-1a 64 of the cubin's bytes (%016llx): cuModuleLoadData gets only
 * the cubin and finds the unit by it. The emulator itself (emu.c) lives in
 * the fake libcuda.so.1, one instance per process; the units resolve emu_*
 * there. A unit whose .so is newer than emu.h and this program, and newer
 * than its source or built from the same text (OUT_DIR/<hash>.cu), is not
 * rebuilt. Up to N compilers run at once (default: the CPUs).
 * One line per unit; exit 0, or 1 with a message on the first problem
 * (2: usage). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "emu_wrap.h"
#include "fakecuda_elf.h"
#include "plan.h"

#ifndef ZINF_EMU_HEADER
#define ZINF_EMU_HEADER "tests/gpu/emu.h"
#endif

typedef struct Job {
    const char *name;
    char src[4096], so[4096], cu[4096];
    pid_t pid;
    double t0;
} Job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mtime in ns, or -1 when the file is not there */
static long long mtime_ns(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

static char *read_text(const char *path, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!s || fread(s, 1, (size_t)len, f) != (size_t)len) {
        snprintf(err, n, "cannot read %s", path);
        free(s);
        fclose(f);
        return NULL;
    }
    s[len] = 0;
    fclose(f);
    return s;
}

/* Whether CU (what emu_compile_unit wrote beside a built .so) is what it
 * would write now for the source at SRC: zinfc --kernel-src writes the
 * sources afresh on every compilation, so their times say nothing; the
 * content does, and a unit another plan (or another test) built is not
 * built again. */
static int same_unit(const char *cu, const char *src_path) {
    char err[256];
    char *have = read_text(cu, err, sizeof err);
    if (!have) return 0;
    char *src = read_text(src_path, err, sizeof err);
    char *w = src ? emu_wrappers(src) : NULL;
    size_t ls = src ? strlen(src) : 0;
    int same = w && strlen(have) == ls + 1 + strlen(w) && !memcmp(have, src, ls) && have[ls] == '\n' &&
               !strcmp(have + ls + 1, w);
    free(w);
    free(src);
    free(have);
    return same;
}

static int usage(void) {
    fprintf(stderr, "usage: fakecuda_prep [-j N] [--only SUBSTR] PLAN SRC_DIR ARCH OUT_DIR\n");
    return 2;
}

/* Runs in a child: builds one unit, says why it failed on stderr. OUT_DIR
 * is shared by every test of a build tree, and two tests running at once
 * may build the same unit: the child writes its .cu and .so under names of
 * its own (.PID) and renames them into place, the .cu first, so a reader
 * sees either the old pair or the new files whole, never another builder's
 * half-written one. */
static int build_one(const Job *j, const char *hdr) {
    char err[8192];
    char *src = read_text(j->src, err, sizeof err);
    if (!src) {
        fprintf(stderr, "fakecuda_prep: %s\n", err);
        return 1;
    }
    char cu[4200], so[4200];
    snprintf(cu, sizeof cu, "%s.%d", j->cu, (int)getpid());
    snprintf(so, sizeof so, "%s.%d", j->so, (int)getpid());
    int rc = emu_compile_unit(src, cu, so, hdr, err, sizeof err);
    free(src);
    const char *unplaced = rc != 0 ? NULL : rename(cu, j->cu) != 0 ? cu : rename(so, j->so) != 0 ? so : NULL;
    if (unplaced) {
        snprintf(err, sizeof err, "cannot rename %s into place: %s", unplaced, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "fakecuda_prep: %s: %s\n", j->name, err);
        unlink(cu);
        unlink(so);
    }
    return rc != 0;
}

int main(int argc, char **argv) {
    const char *only = NULL, *pos[4];
    int npos = 0;
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-j") && i + 1 < argc) jobs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (argv[i][0] == '-') return usage();
        else if (npos < 4) pos[npos++] = argv[i];
        else return usage();
    }
    if (npos != 4) return usage();
    if (jobs < 1) jobs = 1;
    const char *plan_path = pos[0], *src_dir = pos[1], *arch = pos[2], *out_dir = pos[3];
    const char *hdr = getenv("FAKECUDA_EMU_H");
    if (!hdr || !*hdr) hdr = ZINF_EMU_HEADER;
    long long t_hdr = mtime_ns(hdr), t_self = mtime_ns("/proc/self/exe");
    if (t_hdr < 0) {
        fprintf(stderr, "fakecuda_prep: the emulator header %s is not there (set FAKECUDA_EMU_H)\n", hdr);
        return 1;
    }
    char err[1024];
    Plan *p = plan_read(plan_path, err, sizeof err);
    if (!p) {
        fprintf(stderr, "fakecuda_prep: %s\n", err);
        return 1;
    }
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "fakecuda_prep: cannot create %s: %s\n", out_dir, strerror(errno));
        plan_free(p);
        return 1;
    }
    Job *js = calloc(p->nkernels + 1, sizeof *js);
    if (!js) {
        plan_free(p);
        return 1;
    }
    int njobs = 0, matched = 0, status = 0;
    char archs[256] = "";
    for (uint32_t i = 0; i < p->nkernels && !status; i++) {
        const PlanKernel *k = &p->kernels[i];
        if (!strstr(archs, k->arch) && strlen(archs) + strlen(k->arch) + 3 < sizeof archs)
            snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%s", archs[0] ? ", " : "", k->arch);
        if (strcmp(k->arch, arch) || (only && !strstr(k->name, only))) continue;
        matched++;
        if (strchr(k->name, '/') || k->name[0] == '.') {
            fprintf(stderr, "fakecuda_prep: kernel name '%s' is not a plain file name\n", k->name);
            status = 1;
            break;
        }
        /* the fake sizes a cubin from its ELF headers: it must come out exact */
        size_t es = k->size >= 64 ? fk_elf_size(k->data) : 0;
        if (es != k->size) {
            fprintf(stderr, "fakecuda_prep: %s (%s): the cubin is %llu bytes but its ELF headers say %zu; the fake "
                            "driver would hash the wrong bytes\n", k->name, k->arch, (unsigned long long)k->size, es);
            status = 1;
            break;
        }
        uint64_t h = fk_fnv1a64(k->data, k->size);
        if (h != plan_fnv1a64(k->data, k->size)) {
            fprintf(stderr, "fakecuda_prep: the FNV-1a of fakecuda_elf.h and of the plan differ\n");
            status = 1;
            break;
        }
        Job *j = &js[njobs];
        j->name = k->name;
        snprintf(j->src, sizeof j->src, "%s/%s", src_dir, k->name);
        snprintf(j->so, sizeof j->so, "%s/%016llx.so", out_dir, (unsigned long long)h);
        snprintf(j->cu, sizeof j->cu, "%s/%016llx.cu", out_dir, (unsigned long long)h);
        long long t_src = mtime_ns(j->src), t_so = mtime_ns(j->so);
        if (t_src < 0) {
            fprintf(stderr, "fakecuda_prep: %s: no source %s (write it with zinfc --kernel-src=%s)\n", k->name, j->src,
                    src_dir);
            status = 1;
            break;
        }
        if (t_so >= t_hdr && t_so >= t_self && (t_so >= t_src || same_unit(j->cu, j->src))) {
            printf("fakecuda_prep: %-32s %s -> %s (up to date)\n", k->name, k->arch, j->so);
            continue;
        }
        njobs++;
    }
    if (!status && !matched) {
        fprintf(stderr, "fakecuda_prep: %s has no kernels for %s%s%s (it has: %s)\n", plan_path, arch,
                only ? " named *" : "", only ? only : "", archs[0] ? archs : "none: planned with --kernels=none?");
        status = 1;
    }
    fflush(stdout);
    /* up to `jobs` compilers at once; the first failure stops new ones */
    int next = 0, running = 0;
    while (!status && (next < njobs || running)) {
        while (!status && next < njobs && running < jobs) {
            Job *j = &js[next++];
            j->t0 = now_s();
            j->pid = fork();
            if (j->pid < 0) {
                fprintf(stderr, "fakecuda_prep: fork: %s\n", strerror(errno));
                status = 1;
                break;
            }
            if (j->pid == 0) _exit(build_one(j, hdr));
            running++;
        }
        if (!running) break;
        int ws;
        pid_t pid = wait(&ws);
        if (pid < 0) break;
        running--;
        for (int i = 0; i < next; i++)
            if (js[i].pid == pid) {
                int ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
                if (ok) printf("fakecuda_prep: %-32s %s -> %s (built, %.1f s)\n", js[i].name, arch, js[i].so,
                               now_s() - js[i].t0);
                else fprintf(stderr, "fakecuda_prep: %s: the emulated unit did not build (above)\n", js[i].name);
                fflush(stdout);
                if (!ok) status = 1;
            }
    }
    while (running > 0 && wait(NULL) > 0) running--; /* after a failure: let the others finish, not orphan them */
    free(js);
    plan_free(p);
    return status;
}
