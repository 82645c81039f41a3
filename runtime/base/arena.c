#include "arena.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t size, used;
    bool mapped;  /* a big one-off block in a mapping of its own (arena_alloc) */
    _Alignas(16) unsigned char data[];
};

/* A request of ARENA_MAP_MIN bytes or more (a large plan's instruction or
 * operand table) gets a mapping of its own, on huge pages where the kernel
 * gives them: the pages come zeroed (no memset) and are faulted 2 MiB at a
 * time, and unmapped when the arena is freed. */
enum { ARENA_BLOCK_MIN = 64 * 1024, ARENA_MAP_MIN = 32 << 20 };

static ArenaBlock *map_block(size_t bytes) {
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    madvise(m, bytes, MADV_HUGEPAGE);
    ArenaBlock *b = m;
    b->mapped = true;
    return b;
}

void arena_init(Arena *a) { memset(a, 0, sizeof *a); }

void arena_free(Arena *a) {
    ArenaBlock *b = a->head;
    while (b) {
        ArenaBlock *n = b->next;
        if (b->mapped) munmap(b, sizeof(ArenaBlock) + b->size);
        else free(b);
        b = n;
    }
    memset(a, 0, sizeof *a);
}

void *arena_alloc(Arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    ArenaBlock *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bs = size > ARENA_BLOCK_MIN ? size : ARENA_BLOCK_MIN;
        if (bs > SIZE_MAX - sizeof(ArenaBlock)) { a->failed = true; return NULL; }
        bool big = bs == size && size >= ARENA_MAP_MIN;
        ArenaBlock *nb = big ? map_block(sizeof(ArenaBlock) + bs) : malloc(sizeof(ArenaBlock) + bs);
        if (!nb) { a->failed = true; return NULL; }
        if (!big) nb->mapped = false;
        nb->size = bs;
        nb->used = 0;
        /* A big one-off block goes behind the head so the head's free space is kept. */
        if (b && bs == size && b->size - b->used > 1024) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    bool fresh = b->mapped && b->used == 0; /* a new mapping is zeroed already */
    b->used += size;
    a->used_total += size;
    if (!fresh) memset(p, 0, size);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void ptrvec_push(Arena *a, PtrVec *v, void *p) {
    if (v->len == v->cap) {
        int nc = v->cap ? v->cap * 2 : 8;
        void **ni = ARENA_NEWN(a, void *, nc);
        if (!ni) return;
        if (v->len) memcpy(ni, v->items, sizeof(void *) * (size_t)v->len);
        v->items = ni;
        v->cap = nc;
    }
    v->items[v->len++] = p;
}
