/* unicode: UTF-8 encoding, validation and repair, and the byte-level
 * alphabet; see unicode.h. The class table itself is generated
 * (runtime/tok/unicode_table.py -> BUILD/gen/unicode_table.c). */
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

size_t uni_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid sequence at s[0..n), or 0 when none starts there;
 * *sub is then the length of the maximal invalid subpart (>= 1). */
static size_t seq_len(const uint8_t *s, size_t n, size_t *sub) {
    uint8_t c = s[0];
    *sub = 1;
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    for (size_t k = 1; k < len; k++) {
        if (k >= n) { *sub = k; return 0; }
        uint8_t b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) { *sub = k; return 0; }
    }
    return len;
}

size_t uni_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0, sub;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        size_t l = seq_len(s + i, n - i, &sub);
        if (!l) break;
        i += l;
    }
    return i;
}

char *uni_utf8_repair(const uint8_t *s, size_t n, size_t *outn, size_t *nbad) {
    *nbad = 0;
    size_t good = uni_valid_prefix(s, n);
    /* Each invalid byte grows into at most 3 bytes of U+FFFD. */
    size_t cap = good == n ? n + 1 : good + (n - good) * 3 + 1;
    char *out = malloc(cap);
    if (!out) return NULL;
    memcpy(out, s, good);
    size_t o = good, i = good, sub;
    while (i < n) {
        if (s[i] < 0x80) { out[o++] = (char)s[i++]; continue; }
        size_t l = seq_len(s + i, n - i, &sub);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        } else {
            o += uni_encode(0xFFFD, out + o);
            i += sub;
            (*nbad)++;
        }
    }
    out[o] = 0;
    *outn = o;
    return out;
}

/* GPT-2's bytes_to_unicode: the printable Latin-1 bytes ('!'..'~',
 * 0xA1..0xAC, 0xAE..0xFF) stand for themselves, the other 68 for U+0100..
 * in byte order: 0x00..0x20 (33), 0x7F..0xA0 (34), then 0xAD. */
uint32_t uni_byte_char(uint8_t b) {
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33 + (b - 0x7Fu);
    if (b == 0xAD) return 256u + 67;
    return b;
}

int uni_char_byte(uint32_t cp) {
    if (cp < 256) return (cp > 0x20 && cp < 0x7F) || (cp > 0xA0 && cp != 0xAD) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(0x7F + (cp - 256 - 33));
    return cp == 256 + 67 ? 0xAD : -1;
}
