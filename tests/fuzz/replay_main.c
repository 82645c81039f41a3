/* replay_main: a main for a fuzz harness without libFuzzer, so the harness
 * builds with any compiler and runs in every build tree (plain, ASan+UBSan):
 *
 *   replay [--mutate N] [--quiet] INPUT...
 *
 * runs LLVMFuzzerTestOneInput once on each INPUT (a file, or a directory:
 * its files, not recursing). With --mutate N it also runs N mutants of each
 * input, each made from the input with the harness's custom mutator
 * where it has one (tests/fuzz/plan_mutator.c) and with the byte mutator
 * below where it has not: a short deterministic fuzz run under whatever
 * sanitizers the build has. A crash is the harness's: it aborts. Exit 0
 * when every input ran, 2 on usage or unreadable inputs.
 *
 * LLVMFuzzerMutate is libFuzzer's; this stand-in (flip a bit, set a byte to
 * a boundary value, insert or erase one) serves the custom mutator here. */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fuzz_common.h"

#pragma weak LLVMFuzzerCustomMutator

static uint64_t mutate_state = 0x2545f4914f6cdd1dull;

static uint64_t next_random(void) { /* xorshift64 */
    mutate_state ^= mutate_state << 13;
    mutate_state ^= mutate_state >> 7;
    mutate_state ^= mutate_state << 17;
    return mutate_state;
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) {
    static const uint8_t boundary[] = {0, 1, 0x7f, 0x80, 0xff, '\n', '"', '{', '}', '(', ')', '[', ']', '0', '9'};
    uint64_t x = next_random();
    size_t at = size ? (size_t)(x >> 8) % size : 0;
    switch (x % 4) {
    case 0:
        if (size) data[at] ^= (uint8_t)(1u << (x >> 40) % 8);
        break;
    case 1:
        if (size) data[at] = boundary[(x >> 40) % sizeof boundary];
        break;
    case 2:
        if (size < max_size) {
            memmove(data + at + 1, data + at, size - at);
            data[at] = (uint8_t)(x >> 40);
            size++;
        }
        break;
    default:
        if (size > 1) {
            memmove(data + at, data + at + 1, size - at - 1);
            size--;
        }
        break;
    }
    return size;
}

/* The whole file in a malloc'd buffer with room to grow to *cap bytes. */
static uint8_t *read_input(const char *path, size_t *size, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, c = 4096;
    uint8_t *buf = malloc(c);
    while (buf) {
        n += fread(buf + n, 1, c - n, f);
        if (n < c) break;
        uint8_t *more = realloc(buf, c * 2);
        if (!more) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        c *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    /* room for mutants to grow */
    size_t want = n * 2 + 4096;
    uint8_t *grown = buf ? realloc(buf, want) : NULL;
    if (!grown) {
        free(buf);
        return NULL;
    }
    *size = n;
    *cap = want;
    return grown;
}

static int run_file(const char *path, long mutants, bool quiet) {
    size_t size, cap;
    uint8_t *buf = read_input(path, &size, &cap);
    if (!buf) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        return 2;
    }
    if (!quiet) fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    /* the harness may keep no pointer into its input: hand it an exact copy */
    uint8_t *exact = malloc(size ? size : 1);
    if (!exact) {
        free(buf);
        return 2;
    }
    memcpy(exact, buf, size);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    /* each mutant from the input (a chain would wander off into bytes that no longer decode) */
    uint8_t *mutant = malloc(cap);
    for (long m = 0; mutant && m < mutants; m++) {
        memcpy(mutant, buf, size);
        unsigned seed = (unsigned)next_random();
        size_t n = LLVMFuzzerCustomMutator ? LLVMFuzzerCustomMutator(mutant, size, cap, seed) : LLVMFuzzerMutate(mutant, size, cap);
        exact = malloc(n ? n : 1);
        if (!exact) break;
        memcpy(exact, mutant, n);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    free(mutant);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of a directory, in name order (so runs repeat). */
static int run_dir(const char *dir, long mutants, bool quiet, int *count) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: cannot open\n", dir);
        return 2;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) break;
        snprintf(path, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **more = realloc(names, cap * sizeof *names);
            if (!more) {
                free(path);
                break;
            }
            names = more;
        }
        names[n++] = path;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        rc |= run_file(names[i], mutants, quiet);
        (*count)++;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    long mutants = 0;
    bool quiet = false;
    int rc = 0, count = 0, inputs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutate") && i + 1 < argc) {
            char *end;
            mutants = strtol(argv[++i], &end, 10);
            if (*end || mutants < 0) {
                fprintf(stderr, "replay: --mutate needs a count\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--quiet")) {
            quiet = true;
            continue;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--mutate N] [--quiet] INPUT...\n", argv[0]);
            return 2;
        }
        inputs++;
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            rc |= run_dir(argv[i], mutants, quiet, &count);
        } else {
            rc |= run_file(argv[i], mutants, quiet);
            count++;
        }
    }
    if (!inputs) {
        fprintf(stderr, "usage: %s [--mutate N] [--quiet] INPUT...\n", argv[0]);
        return 2;
    }
    fprintf(stderr, "replay: %d input%s, %ld mutant%s each: done\n", count, count == 1 ? "" : "s", mutants,
            mutants == 1 ? "" : "s");
    return rc;
}
