/* pretok: hand-written matchers of the GPT-2, Llama-3 and Qwen2
 * pre-tokenizer regexes; see pretok.h. Each alternative of a pattern is
 * tried in order at the position, as a backtracking engine would, and the
 * first that matches wins: e.g. \s+(?!\S) takes a whitespace run but
 * gives back its last character when a non-space follows. */
#include "pretok.h"

#include <string.h>

#include "unicode.h"

static const char RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

PretokPattern pretok_pattern(const char *re, size_t n) {
    if (n == sizeof RE_GPT2 - 1 && !memcmp(re, RE_GPT2, n)) return PRETOK_GPT2;
    if (n == sizeof RE_LLAMA3 - 1 && !memcmp(re, RE_LLAMA3, n)) return PRETOK_LLAMA3;
    if (n == sizeof RE_QWEN2 - 1 && !memcmp(re, RE_QWEN2, n)) return PRETOK_QWEN2;
    return PRETOK_UNKNOWN;
}

const char *pretok_name(PretokPattern p) {
    switch (p) {
    case PRETOK_GPT2: return "GPT-2";
    case PRETOK_LLAMA3: return "Llama-3";
    case PRETOK_QWEN2: return "Qwen2";
    default: return "unknown";
    }
}

const char *pretok_regex(PretokPattern p) {
    switch (p) {
    case PRETOK_GPT2: return RE_GPT2;
    case PRETOK_LLAMA3: return RE_LLAMA3;
    case PRETOK_QWEN2: return RE_QWEN2;
    default: return "";
    }
}

/* Flags of the ASCII characters; the rest come from the Unicode table. */
static const uint8_t ASCII[128] = {
    ['\t'] = UNI_WS, ['\n'] = UNI_WS, ['\v'] = UNI_WS, ['\f'] = UNI_WS, ['\r'] = UNI_WS, [' '] = UNI_WS,
    ['0'] = UNI_N, ['1'] = UNI_N, ['2'] = UNI_N, ['3'] = UNI_N, ['4'] = UNI_N,
    ['5'] = UNI_N, ['6'] = UNI_N, ['7'] = UNI_N, ['8'] = UNI_N, ['9'] = UNI_N,
    ['A'] = UNI_L, ['B'] = UNI_L, ['C'] = UNI_L, ['D'] = UNI_L, ['E'] = UNI_L, ['F'] = UNI_L, ['G'] = UNI_L,
    ['H'] = UNI_L, ['I'] = UNI_L, ['J'] = UNI_L, ['K'] = UNI_L, ['L'] = UNI_L, ['M'] = UNI_L, ['N'] = UNI_L,
    ['O'] = UNI_L, ['P'] = UNI_L, ['Q'] = UNI_L, ['R'] = UNI_L, ['S'] = UNI_L, ['T'] = UNI_L, ['U'] = UNI_L,
    ['V'] = UNI_L, ['W'] = UNI_L, ['X'] = UNI_L, ['Y'] = UNI_L, ['Z'] = UNI_L,
    ['a'] = UNI_L, ['b'] = UNI_L, ['c'] = UNI_L, ['d'] = UNI_L, ['e'] = UNI_L, ['f'] = UNI_L, ['g'] = UNI_L,
    ['h'] = UNI_L, ['i'] = UNI_L, ['j'] = UNI_L, ['k'] = UNI_L, ['l'] = UNI_L, ['m'] = UNI_L, ['n'] = UNI_L,
    ['o'] = UNI_L, ['p'] = UNI_L, ['q'] = UNI_L, ['r'] = UNI_L, ['s'] = UNI_L, ['t'] = UNI_L, ['u'] = UNI_L,
    ['v'] = UNI_L, ['w'] = UNI_L, ['x'] = UNI_L, ['y'] = UNI_L, ['z'] = UNI_L,
};

#define CLS_MASK (UNI_L | UNI_N | UNI_WS)

/* The class of the character at i (i < n) and its length. */
static inline unsigned cls_at(const uint8_t *s, size_t n, size_t i, size_t *len, uint32_t *cpo) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *len = 1;
        *cpo = c;
        return ASCII[c];
    }
    uint32_t cp;
    *len = uni_decode(s + i, n - i, &cp);
    *cpo = cp;
    return uni_class(cp) & CLS_MASK;
}

/* End of the run of characters from i whose class has a bit of `want`
 * (want_none: has none of `want`). */
static size_t run(const uint8_t *s, size_t n, size_t i, unsigned want, int want_none) {
    while (i < n) {
        size_t l;
        uint32_t cp;
        unsigned f = cls_at(s, n, i, &l, &cp);
        if (want_none ? (f & want) != 0 : (f & want) == 0) break;
        i += l;
    }
    return i;
}

/* A contraction after the apostrophe at s[i]: s t re ve m ll d (in this
 * order, the first that matches). ci: case-insensitively (Oniguruma's
 * folding: s also matches U+017F LATIN SMALL LETTER LONG S). Returns the
 * bytes after the apostrophe, 0 when none. */
static size_t contraction(const uint8_t *s, size_t n, size_t i, int ci) {
    size_t j = i + 1;
    if (j >= n) return 0;
    uint8_t a = s[j], b = j + 1 < n ? s[j + 1] : 0;
    if (ci) {
        if (a == 0xC5 && b == 0xBF) return 2; /* U+017F folds to s */
        if (a >= 'A' && a <= 'Z') a = (uint8_t)(a + 32);
        if (b >= 'A' && b <= 'Z') b = (uint8_t)(b + 32);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
    if ((a == 'r' || a == 'v') && b == 'e') return 2;
    if (a == 'l' && b == 'l') return 2;
    return 0;
}

/* \s+(?!\S) then \s+ from i, where the character at i is whitespace:
 * the run, less its last character when a non-space follows and the run
 * has two or more. */
static size_t spaces(const uint8_t *s, size_t n, size_t i) {
    size_t e = i, last = i;
    while (e < n) {
        size_t l;
        uint32_t cp;
        if (!(cls_at(s, n, e, &l, &cp) & UNI_WS)) break;
        last = e;
        e += l;
    }
    if (e == n || last == i) return e - i; /* (?!\S) holds at the end; a single space falls to \s+ */
    return last - i;
}

static size_t match_gpt2(const uint8_t *s, size_t n, size_t i) {
    size_t l0, l1;
    uint32_t c0, c1;
    unsigned f0 = cls_at(s, n, i, &l0, &c0);
    if (c0 == '\'') {
        size_t k = contraction(s, n, i, 0);
        if (k) return 1 + k;
    }
    unsigned f1 = 0;
    if (c0 == ' ' && i + 1 < n) f1 = cls_at(s, n, i + 1, &l1, &c1);
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
    if (c0 == ' ' && i + 1 < n) {
        if (f1 & UNI_L) return run(s, n, i + 1, UNI_L, 0) - i;
        if (f1 & UNI_N) return run(s, n, i + 1, UNI_N, 0) - i;
        if (!(f1 & CLS_MASK)) return run(s, n, i + 1, CLS_MASK, 1) - i;
    }
    if (f0 & UNI_L) return run(s, n, i, UNI_L, 0) - i;
    if (f0 & UNI_N) return run(s, n, i, UNI_N, 0) - i;
    if (!(f0 & CLS_MASK)) return run(s, n, i, CLS_MASK, 1) - i;
    return spaces(s, n, i); /* f0 is whitespace */
}

/* [\r\n]* from i */
static size_t crlf_run(const uint8_t *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

static size_t match_llama3(const uint8_t *s, size_t n, size_t i, int max_digits) {
    size_t l0, l1;
    uint32_t c0, c1;
    unsigned f0 = cls_at(s, n, i, &l0, &c0);
    if (c0 == '\'') {
        size_t k = contraction(s, n, i, 1);
        if (k) return 1 + k;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f0 & UNI_L) return run(s, n, i, UNI_L, 0) - i;
    if (c0 != '\r' && c0 != '\n' && !(f0 & UNI_N) && i + l0 < n && (cls_at(s, n, i + l0, &l1, &c1) & UNI_L))
        return run(s, n, i + l0, UNI_L, 0) - i;
    /* \p{N}{1,max} */
    if (f0 & UNI_N) {
        size_t e = i;
        for (int k = 0; k < max_digits && e < n; k++) {
            size_t l;
            uint32_t cp;
            if (!(cls_at(s, n, e, &l, &cp) & UNI_N)) break;
            e += l;
        }
        return e - i;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (c0 == ' ' && i + 1 < n && !(cls_at(s, n, i + 1, &l1, &c1) & CLS_MASK))
        return crlf_run(s, n, run(s, n, i + 1, CLS_MASK, 1)) - i;
    if (!(f0 & CLS_MASK)) return crlf_run(s, n, run(s, n, i, CLS_MASK, 1)) - i;
    /* f0 is whitespace. \s*[\r\n]+ : up to and including the last \r or \n of the run. */
    size_t e = i, nl = 0;
    int has_nl = 0;
    while (e < n) {
        size_t l;
        uint32_t cp;
        if (!(cls_at(s, n, e, &l, &cp) & UNI_WS)) break;
        if (cp == '\r' || cp == '\n') { nl = e + 1; has_nl = 1; }
        e += l;
    }
    if (has_nl) return nl - i;
    return spaces(s, n, i);
}

size_t pretok_match(PretokPattern p, const uint8_t *s, size_t n, size_t i) {
    if (i >= n) return 0;
    switch (p) {
    case PRETOK_GPT2: return match_gpt2(s, n, i);
    case PRETOK_LLAMA3: return match_llama3(s, n, i, 3);
    case PRETOK_QWEN2: return match_llama3(s, n, i, 1);
    default: return 0;
    }
}

int pretok_split(PretokPattern p, const uint8_t *s, size_t n, int (*piece)(void *ctx, size_t start, size_t len),
                 void *ctx) {
    size_t i = 0, gap = 0;
    while (i < n) {
        size_t m = pretok_match(p, s, n, i);
        if (!m) { /* no match here: the character joins the text between matches */
            size_t l;
            uint32_t cp;
            cls_at(s, n, i, &l, &cp);
            i += l;
            continue;
        }
        int rc;
        if (gap < i && (rc = piece(ctx, gap, i - gap))) return rc;
        if ((rc = piece(ctx, i, m))) return rc;
        i += m;
        gap = i;
    }
    if (gap < n) return piece(ctx, gap, n - gap);
    return 0;
}
