/* bpe: vocabulary, merges, the merge algorithm and the word cache; see
 * bpe.h. Hash tables are open-addressed with linear probing; the token
 * texts live in one pool indexed by id. */
#include "bpe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"
#include "errorf.h"

enum {
    CACHE_MAX_WORD = 256,       /* longer words are not cached (as in the tokenizers library) */
    CACHE_MAX_ENTRIES = 1 << 18,
    CACHE_FIRST_SLOTS = 1 << 12,  /* the table doubles as it fills, up to 2 * CACHE_MAX_ENTRIES slots */
    CACHE_POOL_LIMIT = 64 << 20, /* bytes of words + ids before the cache starts over */
};

typedef struct {
    uint64_t key; /* a << 32 | b; EMPTY when free */
    uint32_t rank, id;
} MergeSlot;
#define MERGE_EMPTY UINT64_MAX

typedef struct {
    uint32_t c;
    int32_t prev, next;
    uint32_t len;
} Sym;

typedef struct {
    uint32_t rank, pos, id;
} Cand;

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len; /* in cache_bytes */
    uint32_t ids_off, ids_n;   /* in cache_ids */
    int used;
} CacheSlot;

struct BpeModel {
    BpeOptions o;
    char *unk; /* copy of the unk token text */
    int64_t unk_id;
    /* vocabulary */
    char *pool;
    size_t pool_len;
    uint32_t *off, *len; /* per id; len UINT32_MAX: no token */
    uint32_t id_limit;
    size_t entries;
    uint32_t *vslots; /* id + 1, 0 free */
    size_t vmask;
    /* merges */
    MergeSlot *mslots;
    size_t mmask;
    /* first symbols */
    int32_t *bmp;        /* text mode: code point < 0x10000 -> id, -1 */
    int32_t byte_id[256]; /* byte mode: byte -> id of its character, -1 */
    char byte_utf8[256][2]; /* byte mode: its character's UTF-8 */
    uint8_t byte_utf8_n[256];
    int32_t fb[256];      /* <0xXX> ids, -1 */
    /* scratch */
    Sym *sym;
    size_t sym_cap;
    Cand *heap;
    size_t heap_n, heap_cap;
    char *scratch;
    size_t scratch_cap;
    /* cache */
    CacheSlot *cslots;
    size_t cmask, cn;
    char *cbytes;
    size_t cbytes_n, cbytes_cap;
    uint32_t *cids;
    size_t cids_n, cids_cap;
    uint64_t words, hits;
};


int bpe_ids_push(BpeIds *ids, uint32_t id) {
    if (ids->n == ids->cap) {
        size_t nc = ids->cap ? ids->cap * 2 : 1024;
        uint32_t *nv = realloc(ids->v, nc * sizeof *nv);
        if (!nv) return -1;
        ids->v = nv;
        ids->cap = nc;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void bpe_ids_free(BpeIds *ids) {
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xbf58476d1ce4e5b9ULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0x94d049bb133111ebULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    return mix(h ^ v);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ---- vocabulary ---- */

static int64_t vocab_find(const BpeModel *m, const char *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & m->vmask;
    for (;;) {
        uint32_t v = m->vslots[i];
        if (!v) return -1;
        uint32_t id = v - 1;
        if (m->len[id] == n && memcmp(m->pool + m->off[id], s, n) == 0) return id;
        i = (i + 1) & m->vmask;
    }
}

int64_t bpe_token_id(const BpeModel *m, const char *s, size_t n) { return vocab_find(m, s, n); }

const char *bpe_token_text(const BpeModel *m, uint32_t id, size_t *n) {
    if (id >= m->id_limit || m->len[id] == UINT32_MAX) return NULL;
    *n = m->len[id];
    return m->pool + m->off[id];
}

size_t bpe_vocab_entries(const BpeModel *m) { return m->entries; }
uint32_t bpe_id_limit(const BpeModel *m) { return m->id_limit; }

void bpe_cache_stats(const BpeModel *m, uint64_t *words, uint64_t *hits) {
    *words = m->words;
    *hits = m->hits;
}

/* ---- merges ---- */

static const MergeSlot *merge_find(const BpeModel *m, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t i = (size_t)mix(key) & m->mmask;
    for (;;) {
        const MergeSlot *s = &m->mslots[i];
        if (s->key == key) return s;
        if (s->key == MERGE_EMPTY) return NULL;
        i = (i + 1) & m->mmask;
    }
}

static void merge_put(BpeModel *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t i = (size_t)mix(key) & m->mmask;
    while (m->mslots[i].key != MERGE_EMPTY && m->mslots[i].key != key) i = (i + 1) & m->mmask;
    m->mslots[i].key = key;
    m->mslots[i].rank = rank;
    m->mslots[i].id = id;
}

void bpe_free(BpeModel *m) {
    if (!m) return;
    free(m->unk);
    free(m->pool);
    free(m->off);
    free(m->len);
    free(m->vslots);
    free(m->mslots);
    free(m->bmp);
    free(m->sym);
    free(m->heap);
    free(m->scratch);
    free(m->cslots);
    free(m->cbytes);
    free(m->cids);
    free(m);
}

static void cache_clear(BpeModel *m) {
    memset(m->cslots, 0, (m->cmask + 1) * sizeof *m->cslots);
    m->cn = 0;
    m->cbytes_n = 0;
    m->cids_n = 0;
}

int bpe_create(BpeModel **out, const BpeOptions *o, const BpeToken *vocab, size_t nvocab, const BpeMerge *merges,
               size_t nmerges, char *err, size_t errlen) {
    *out = NULL;
    BpeModel *m = calloc(1, sizeof *m);
    if (!m) return errorf(err, errlen, "out of memory");
    m->o = *o;
    m->o.unk_token = NULL;
    m->unk_id = -1;
    size_t total = 0;
    uint32_t limit = 0;
    for (size_t k = 0; k < nvocab; k++) {
        if (vocab[k].id >= BPE_MAX_ID) {
            bpe_free(m);
            return errorf(err, errlen, "token id %u of '%.*s' is too large (at most %d)", vocab[k].id,
                        (int)(vocab[k].n > 60 ? 60 : vocab[k].n), vocab[k].s, BPE_MAX_ID - 1);
        }
        if (vocab[k].id + 1 > limit) limit = vocab[k].id + 1;
        total += vocab[k].n;
    }
    m->id_limit = limit;
    m->pool = malloc(total + 1);
    m->off = malloc(((size_t)limit + 1) * sizeof *m->off);
    m->len = malloc(((size_t)limit + 1) * sizeof *m->len);
    m->vmask = pow2_at_least(nvocab * 2 + 1) - 1;
    m->vslots = calloc(m->vmask + 1, sizeof *m->vslots);
    m->mmask = pow2_at_least(nmerges * 2 + 1) - 1;
    m->mslots = malloc((m->mmask + 1) * sizeof *m->mslots);
    m->cmask = CACHE_FIRST_SLOTS - 1;
    m->cslots = calloc(m->cmask + 1, sizeof *m->cslots);
    if (!o->byte_level) m->bmp = malloc(0x10000 * sizeof *m->bmp);
    if (!m->pool || !m->off || !m->len || !m->vslots || !m->mslots || !m->cslots || (!o->byte_level && !m->bmp)) {
        bpe_free(m);
        return errorf(err, errlen, "out of memory for a vocabulary of %zu tokens and %zu merges", nvocab, nmerges);
    }
    if (o->unk_token && !(m->unk = strdup(o->unk_token))) {
        bpe_free(m);
        return errorf(err, errlen, "out of memory");
    }
    m->o.unk_token = m->unk;
    for (size_t k = 0; k < m->mmask + 1; k++) m->mslots[k].key = MERGE_EMPTY;
    for (uint32_t i = 0; i < limit; i++) m->len[i] = UINT32_MAX;
    /* Vocabulary: a text listed twice keeps its later id, as in a JSON map read by serde. */
    size_t at = 0;
    for (size_t k = 0; k < nvocab; k++) {
        uint32_t id = vocab[k].id;
        memcpy(m->pool + at, vocab[k].s, vocab[k].n);
        m->off[id] = (uint32_t)at;
        m->len[id] = vocab[k].n;
        at += vocab[k].n;
        size_t i = (size_t)hash_bytes(vocab[k].s, vocab[k].n) & m->vmask;
        for (;;) {
            uint32_t v = m->vslots[i];
            if (!v) {
                m->vslots[i] = id + 1;
                m->entries++;
                break;
            }
            uint32_t old = v - 1;
            if (old != id && m->len[old] == vocab[k].n && memcmp(m->pool + m->off[old], vocab[k].s, vocab[k].n) == 0) {
                m->vslots[i] = id + 1;
                m->len[old] = UINT32_MAX;
                break;
            }
            if (old == id) break; /* the same id twice: the later text wins the id */
            i = (i + 1) & m->vmask;
        }
    }
    if (total > UINT32_MAX) {
        bpe_free(m);
        return errorf(err, errlen, "vocabulary text too large");
    }
    m->pool_len = at;
    if (m->unk) m->unk_id = vocab_find(m, m->unk, strlen(m->unk));
    /* Merges: "a b" -> a, b, and the token a+b. */
    char *buf = NULL;
    size_t bufcap = 0;
    for (size_t k = 0; k < nmerges; k++) {
        const BpeMerge *mg = &merges[k];
        int64_t a = vocab_find(m, mg->a, mg->an), b = vocab_find(m, mg->b, mg->bn);
        if (a < 0 || b < 0) {
            const char *what = a < 0 ? mg->a : mg->b;
            uint32_t wn = a < 0 ? mg->an : mg->bn;
            free(buf);
            bpe_free(m);
            return errorf(err, errlen, "merge %zu ('%.*s' '%.*s'): '%.*s' is not in the vocabulary", k,
                        (int)(mg->an > 60 ? 60 : mg->an), mg->a, (int)(mg->bn > 60 ? 60 : mg->bn), mg->b,
                        (int)(wn > 60 ? 60 : wn), what);
        }
        size_t need = (size_t)mg->an + mg->bn;
        if (need > bufcap) {
            char *nb = realloc(buf, need * 2 + 16);
            if (!nb) {
                free(buf);
                bpe_free(m);
                return errorf(err, errlen, "out of memory");
            }
            buf = nb;
            bufcap = need * 2 + 16;
        }
        memcpy(buf, mg->a, mg->an);
        memcpy(buf + mg->an, mg->b, mg->bn);
        int64_t c = vocab_find(m, buf, need);
        if (c < 0) {
            errorf(err, errlen, "merge %zu ('%.*s' '%.*s'): the merged token '%.*s' is not in the vocabulary", k,
                 (int)(mg->an > 60 ? 60 : mg->an), mg->a, (int)(mg->bn > 60 ? 60 : mg->bn), mg->b,
                 (int)(need > 60 ? 60 : need), buf);
            free(buf);
            bpe_free(m);
            return -1;
        }
        merge_put(m, (uint32_t)a, (uint32_t)b, (uint32_t)k, (uint32_t)c);
    }
    free(buf);
    /* First symbols. */
    for (int b = 0; b < 256; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        m->fb[b] = (int32_t)vocab_find(m, t, 6);
        if (o->byte_level) {
            char u[4];
            size_t ul = uni_encode(uni_byte_char((uint8_t)b), u); /* U+0021..U+0143: 1 or 2 bytes */
            m->byte_id[b] = (int32_t)vocab_find(m, u, ul);
            memcpy(m->byte_utf8[b], u, ul);
            m->byte_utf8_n[b] = (uint8_t)ul;
        }
    }
    if (!o->byte_level)
        for (uint32_t cp = 0; cp < 0x10000; cp++) {
            char u[4];
            m->bmp[cp] = (cp >= 0xD800 && cp < 0xE000) ? -1 : (int32_t)vocab_find(m, u, uni_encode(cp, u));
        }
    *out = m;
    return 0;
}

/* ---- the merge algorithm ---- */

static int cand_less(const Cand *x, const Cand *y) { return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos; }

static int heap_push(BpeModel *m, uint32_t rank, uint32_t pos, uint32_t id) {
    if (m->heap_n == m->heap_cap) {
        size_t nc = m->heap_cap ? m->heap_cap * 2 : 256;
        Cand *nh = realloc(m->heap, nc * sizeof *nh);
        if (!nh) return -1;
        m->heap = nh;
        m->heap_cap = nc;
    }
    Cand c = {rank, pos, id};
    size_t i = m->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &m->heap[p])) break;
        m->heap[i] = m->heap[p];
        i = p;
    }
    m->heap[i] = c;
    return 0;
}

static Cand heap_pop(BpeModel *m) {
    Cand top = m->heap[0];
    Cand last = m->heap[--m->heap_n];
    size_t i = 0, n = m->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t c = l + 1 < n && cand_less(&m->heap[l + 1], &m->heap[l]) ? l + 1 : l;
        if (!cand_less(&m->heap[c], &last)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (n) m->heap[i] = last;
    return top;
}

static int sym_add(BpeModel *m, size_t *ns, uint32_t c, uint32_t len) {
    if (*ns == m->sym_cap) {
        size_t nc = m->sym_cap ? m->sym_cap * 2 : 256;
        Sym *n2 = realloc(m->sym, nc * sizeof *n2);
        if (!n2) return -1;
        m->sym = n2;
        m->sym_cap = nc;
    }
    Sym *s = &m->sym[*ns];
    s->c = c;
    s->len = len;
    s->prev = *ns ? (int32_t)(*ns - 1) : -1;
    s->next = -1;
    if (*ns) m->sym[*ns - 1].next = (int32_t)*ns;
    (*ns)++;
    return 0;
}

static int merge_all(BpeModel *m, size_t ns) {
    Sym *sy = m->sym;
    m->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const MergeSlot *g = merge_find(m, sy[i].c, sy[i + 1].c);
        if (g && heap_push(m, g->rank, (uint32_t)i, g->id)) return -1;
    }
    while (m->heap_n) {
        Cand top = heap_pop(m);
        Sym *cur = &sy[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int32_t np = cur->next;
        Sym right = sy[np];
        const MergeSlot *g = merge_find(m, cur->c, right.c);
        if (!g || g->id != top.id) continue; /* a stale entry */
        cur->c = top.id;
        cur->len += right.len;
        cur->next = right.next;
        sy[np].len = 0;
        if (right.next > -1 && (size_t)right.next < ns) sy[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            g = merge_find(m, sy[cur->prev].c, cur->c);
            if (g && heap_push(m, g->rank, (uint32_t)cur->prev, g->id)) return -1;
        }
        if (cur->next >= 0 && (size_t)cur->next < ns) {
            g = merge_find(m, cur->c, sy[cur->next].c);
            if (g && heap_push(m, g->rank, top.pos, g->id)) return -1;
        }
    }
    return 0;
}

/* ---- the cache ---- */

static const CacheSlot *cache_find(const BpeModel *m, const char *w, size_t n, uint64_t h) {
    size_t i = (size_t)h & m->cmask;
    for (;;) {
        const CacheSlot *s = &m->cslots[i];
        if (!s->used) return NULL;
        if (s->hash == h && s->key_len == n && memcmp(m->cbytes + s->key_off, w, n) == 0) return s;
        i = (i + 1) & m->cmask;
    }
}

/* Remembers w -> ids; a full cache starts over. Failure to remember is
 * not an error. */
static void cache_put(BpeModel *m, const char *w, size_t n, uint64_t h, const uint32_t *ids, size_t k) {
    if (m->cn >= CACHE_MAX_ENTRIES || m->cbytes_n + n > CACHE_POOL_LIMIT || m->cids_n + k > CACHE_POOL_LIMIT / 4)
        cache_clear(m);
    if (m->cn * 2 >= m->cmask + 1) { /* half full: double the table (small tables stay in the CPU's caches) */
        size_t nmask = m->cmask * 2 + 1;
        CacheSlot *ns = calloc(nmask + 1, sizeof *ns);
        if (!ns) return;
        for (size_t j = 0; j <= m->cmask; j++) {
            if (!m->cslots[j].used) continue;
            size_t i = (size_t)m->cslots[j].hash & nmask;
            while (ns[i].used) i = (i + 1) & nmask;
            ns[i] = m->cslots[j];
        }
        free(m->cslots);
        m->cslots = ns;
        m->cmask = nmask;
    }
    if (m->cbytes_n + n > m->cbytes_cap) {
        size_t nc = m->cbytes_cap ? m->cbytes_cap * 2 : 1 << 16;
        while (nc < m->cbytes_n + n) nc *= 2;
        char *nb = realloc(m->cbytes, nc);
        if (!nb) return;
        m->cbytes = nb;
        m->cbytes_cap = nc;
    }
    if (m->cids_n + k > m->cids_cap) {
        size_t nc = m->cids_cap ? m->cids_cap * 2 : 1 << 14;
        while (nc < m->cids_n + k) nc *= 2;
        uint32_t *ni = realloc(m->cids, nc * sizeof *ni);
        if (!ni) return;
        m->cids = ni;
        m->cids_cap = nc;
    }
    size_t i = (size_t)h & m->cmask;
    while (m->cslots[i].used) i = (i + 1) & m->cmask;
    CacheSlot *s = &m->cslots[i];
    s->used = 1;
    s->hash = h;
    s->key_off = (uint32_t)m->cbytes_n;
    s->key_len = (uint32_t)n;
    s->ids_off = (uint32_t)m->cids_n;
    s->ids_n = (uint32_t)k;
    memcpy(m->cbytes + m->cbytes_n, w, n);
    m->cbytes_n += n;
    if (k) memcpy(m->cids + m->cids_n, ids, k * sizeof *ids);
    m->cids_n += k;
    m->cn++;
}

/* The word's text as the vocabulary spells it (byte-level: each byte's
 * character), in m->scratch. */
static int spelled(BpeModel *m, const char *w, size_t n, const char **s, size_t *sn) {
    if (!m->o.byte_level) {
        *s = w;
        *sn = n;
        return 0;
    }
    if (n * 2 > m->scratch_cap) {
        size_t nc = n * 2 + 64;
        char *ns = realloc(m->scratch, nc);
        if (!ns) return -1;
        m->scratch = ns;
        m->scratch_cap = nc;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)w[i];
        memcpy(m->scratch + o, m->byte_utf8[b], 2);
        o += m->byte_utf8_n[b];
    }
    *s = m->scratch;
    *sn = o;
    return 0;
}

int bpe_encode(BpeModel *m, const char *w, size_t n, BpeIds *out, char *err, size_t errlen) {
    if (n == 0) return 0;
    m->words++;
    uint64_t h = 0;
    if (n < CACHE_MAX_WORD) {
        h = hash_bytes(w, n);
        const CacheSlot *c = cache_find(m, w, n, h);
        if (c) {
            m->hits++;
            for (uint32_t k = 0; k < c->ids_n; k++)
                if (bpe_ids_push(out, m->cids[c->ids_off + k])) return errorf(err, errlen, "out of memory");
            return 0;
        }
    }
    if (m->o.ignore_merges) {
        const char *s;
        size_t sn;
        if (spelled(m, w, n, &s, &sn)) return errorf(err, errlen, "out of memory");
        int64_t id = vocab_find(m, s, sn);
        if (id >= 0) return bpe_ids_push(out, (uint32_t)id) ? errorf(err, errlen, "out of memory") : 0;
    }
    size_t ns = 0;
    int have_unk = 0;
    uint32_t unk_len = 0;
    size_t i = 0;
    while (i < n) {
        /* One character: its text in vocabulary spelling, and its id. */
        const char *ctext;
        size_t clen, step;
        int64_t id;
        if (m->o.byte_level) {
            uint8_t b = (uint8_t)w[i];
            clen = m->byte_utf8_n[b];
            ctext = m->byte_utf8[b];
            step = 1;
            id = m->byte_id[b];
        } else {
            uint32_t cp;
            step = uni_decode((const uint8_t *)w + i, n - i, &cp);
            ctext = w + i;
            clen = step;
            id = cp < 0x10000 ? m->bmp[cp] : vocab_find(m, ctext, clen);
        }
        i += step;
        if (id >= 0) {
            if (have_unk) {
                if (sym_add(m, &ns, (uint32_t)m->unk_id, unk_len)) return errorf(err, errlen, "out of memory");
                have_unk = 0;
            }
            if (sym_add(m, &ns, (uint32_t)id, (uint32_t)clen)) return errorf(err, errlen, "out of memory");
            continue;
        }
        if (m->o.byte_fallback) {
            int all = 1;
            for (size_t k = 0; k < clen; k++) all &= m->fb[(uint8_t)ctext[k]] >= 0;
            if (all) { /* (a pending unk stays pending, as in the tokenizers library) */
                for (size_t k = 0; k < clen; k++)
                    if (sym_add(m, &ns, (uint32_t)m->fb[(uint8_t)ctext[k]], 1)) return errorf(err, errlen, "out of memory");
                continue;
            }
        }
        if (m->unk) {
            if (m->unk_id < 0)
                return errorf(err, errlen, "unk_token '%s' is not in the vocabulary (needed for a character not in it)", m->unk);
            if (have_unk && m->o.fuse_unk) unk_len += (uint32_t)clen;
            else {
                if (have_unk && sym_add(m, &ns, (uint32_t)m->unk_id, unk_len)) return errorf(err, errlen, "out of memory");
                have_unk = 1;
                unk_len = (uint32_t)clen;
            }
        }
    }
    if (have_unk && sym_add(m, &ns, (uint32_t)m->unk_id, unk_len)) return errorf(err, errlen, "out of memory");
    if (ns > 1 && merge_all(m, ns)) return errorf(err, errlen, "out of memory");
    size_t first = out->n;
    for (size_t k = 0; k < ns; k++)
        if (m->sym[k].len && bpe_ids_push(out, m->sym[k].c)) return errorf(err, errlen, "out of memory");
    if (n < CACHE_MAX_WORD) cache_put(m, w, n, h, out->n > first ? out->v + first : NULL, out->n - first);
    return 0;
}
