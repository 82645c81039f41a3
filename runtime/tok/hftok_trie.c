/* hftok_trie: the tries of added tokens and finding them in a text. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hftok_impl.h"
#include "pretok.h"
#include "json.h"
#include "unicode.h"
#include "errorf.h"

/* ---- tries ---- */

static int trie_node(Trie *tr) {
    if (tr->n == tr->cap) {
        size_t nc = tr->cap ? tr->cap * 2 : 64;
        TrieNode *nn = realloc(tr->nodes, nc * sizeof *nn);
        if (!nn) return -1;
        tr->nodes = nn;
        tr->cap = nc;
    }
    tr->nodes[tr->n] = (TrieNode){-1, -1, -1, 0};
    return (int)tr->n++;
}

int hft_trie_init(Trie *tr) {
    memset(tr, 0, sizeof *tr);
    tr->empty = 1;
    return trie_node(tr) < 0 ? -1 : 0;
}

/* Adds pattern p -> id; an identical earlier pattern keeps its place. */
int hft_trie_add(Trie *tr, const char *p, size_t n, uint32_t id) {
    if (n == 0) return 0;
    int32_t cur = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)p[k];
        int32_t c = tr->nodes[cur].child, prev = -1;
        while (c >= 0 && tr->nodes[c].byte != b) {
            prev = c;
            c = tr->nodes[c].sibling;
        }
        if (c < 0) {
            int nn = trie_node(tr);
            if (nn < 0) return -1;
            c = nn;
            tr->nodes[c].byte = b;
            if (prev < 0) tr->nodes[cur].child = c;
            else tr->nodes[prev].sibling = c;
        }
        cur = c;
    }
    if (tr->nodes[cur].id < 0) tr->nodes[cur].id = (int32_t)id;
    tr->first[(uint8_t)p[0]] = 1;
    tr->empty = 0;
    return 0;
}

/* The longest pattern at s[0..n): its length (0: none) and id. */
static size_t trie_longest(const Trie *tr, const char *s, size_t n, uint32_t *id) {
    int32_t cur = 0;
    size_t best = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)s[k];
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != b) c = tr->nodes[c].sibling;
        if (c < 0) break;
        cur = c;
        if (tr->nodes[cur].id >= 0) {
            best = k + 1;
            *id = (uint32_t)tr->nodes[cur].id;
        }
    }
    return best;
}

static int segs_push(Segs *sg, size_t start, size_t len, int64_t id) {
    if (sg->n == sg->cap) {
        size_t nc = sg->cap ? sg->cap * 2 : 64;
        Seg *nv = realloc(sg->v, nc * sizeof *nv);
        if (!nv) return -1;
        sg->v = nv;
        sg->cap = nc;
    }
    sg->v[sg->n++] = (Seg){start, len, id};
    return 0;
}

/* The flags of the character before s[at] (at > 0) / at s[at]. */
static unsigned class_before(const char *s, size_t at) {
    size_t k = at - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    uni_decode((const uint8_t *)s + k, at - k, &cp);
    return uni_class(cp);
}

static unsigned class_at(const char *s, size_t n, size_t at, size_t *len) {
    uint32_t cp;
    *len = uni_decode((const uint8_t *)s + at, n - at, &cp);
    return uni_class(cp);
}

/* The library's AddedVocabulary::find_matches: the text split into added
 * tokens and the pieces between them. */
int hft_find_added(const HfTok *t, const Trie *tr, const char *s, size_t n, Segs *out) {
    out->n = 0;
    size_t start_offset = 0, i = 0;
    if (!tr->empty)
        while (i < n) {
            if (!tr->first[(uint8_t)s[i]]) {
                i++;
                continue;
            }
            uint32_t id;
            size_t len = trie_longest(tr, s + i, n - i, &id);
            if (!len) {
                i++;
                continue;
            }
            size_t start = i, stop = i + len;
            i = stop;
            const Added *a = &t->added[t->added_at[id]];
            if (a->single_word) {
                size_t l;
                int start_space = start == 0 || !(class_before(s, start) & UNI_W);
                int stop_space = stop == n || !(class_at(s, n, stop, &l) & UNI_W);
                if (!start_space || !stop_space) continue;
            }
            if (a->lstrip) {
                size_t ns = start;
                while (ns > 0 && (class_before(s, ns) & UNI_WS)) {
                    ns--;
                    while (ns > 0 && ((uint8_t)s[ns] & 0xC0) == 0x80) ns--;
                }
                start = ns > start_offset ? ns : start_offset;
            }
            if (a->rstrip) {
                size_t l;
                while (stop < n && (class_at(s, n, stop, &l) & UNI_WS)) stop += l;
            }
            if (start_offset < start && segs_push(out, start_offset, start - start_offset, -1)) return -1;
            if (segs_push(out, start, stop - start, id)) return -1;
            start_offset = stop;
        }
    if (start_offset < n && segs_push(out, start_offset, n - start_offset, -1)) return -1;
    return 0;
}

