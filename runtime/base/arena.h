/* arena: bump allocator that owns every allocation of one compilation.
 * Blocks are chained; arena_free releases them all at once. Allocation
 * failure is reported by returning NULL and setting arena->failed, so callers
 * deep in the front end need not check every call: the driver checks once. */
#ifndef ZINF_ARENA_H
#define ZINF_ARENA_H
#include <stddef.h>
#include <stdbool.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
    size_t used_total; /* bytes handed out, for statistics */
    bool failed;       /* an allocation failed (out of memory) */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
/* Zeroed memory, aligned to 16 bytes. */
void *arena_alloc(Arena *a, size_t size);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
/* printf into the arena. */
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A growable array of pointers or values lives in the arena too: old storage
 * is abandoned on growth (cheap: compilations are short). */
#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_NEWN(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))

typedef struct PtrVec {
    void **items;
    int len, cap;
} PtrVec;
void ptrvec_push(Arena *a, PtrVec *v, void *p);

#endif
