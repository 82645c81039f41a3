/* unicode: what zinftok's tokenizers need to know about characters.
 * Owns: the Unicode class table (letters, numbers, White_Space, word
 * characters; generated into the build tree by runtime/tok/unicode_table.py
 * from Python's unicodedata), UTF-8 decoding and repair (invalid bytes
 * replaced by U+FFFD), and GPT-2's byte <-> character map of byte-level
 * BPE. Nothing here allocates except uni_utf8_repair. */
#ifndef ZINF_UNICODE_H
#define ZINF_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    UNI_L = 1,  /* \p{L}: general category Lu Ll Lt Lm Lo */
    UNI_N = 2,  /* \p{N}: Nd Nl No */
    UNI_WS = 4, /* \s: the White_Space property */
    UNI_W = 8,  /* \w of Rust's regex: Alphabetic, marks, Nd, Pc, Join_Control */
};

extern const char uni_table_version[];    /* the Unicode version of the table */
extern const uint16_t uni_stage1[0x1100];
extern const uint8_t uni_stage2[][256];

/* The UNI_* flags of a code point (0 beyond U+10FFFF). */
static inline unsigned uni_class(uint32_t cp) {
    return cp < 0x110000 ? uni_stage2[uni_stage1[cp >> 8]][cp & 255] : 0u;
}

/* Decodes the character at s[0..n) (n >= 1) of valid UTF-8: stores the
 * code point and returns its length in bytes (1..4). */
static inline size_t uni_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > n) { *cp = 0xFFFD; return n; } /* not valid UTF-8: never for repaired text */
    if (len == 2) *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3Fu);
    else if (len == 3) *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3Fu);
    else *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3Fu);
    return len;
}

/* Writes cp (at most U+10FFFF, not a surrogate) as UTF-8 into out[4];
 * returns the length. */
size_t uni_encode(uint32_t cp, char *out);

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t uni_valid_prefix(const uint8_t *s, size_t n);

/* Valid UTF-8 for s[0..n): each maximal invalid subpart (the Unicode
 * recommendation Python's errors="replace" and Rust's from_utf8_lossy
 * follow) becomes U+FFFD. Returns a malloc'd copy with its length in
 * *outn and the number of replacements in *nbad, or NULL when out of
 * memory. The caller frees it. */
char *uni_utf8_repair(const uint8_t *s, size_t n, size_t *outn, size_t *nbad);

/* GPT-2's byte-level alphabet: the character byte b stands for, and the
 * byte a character stands for (-1 when it is not one of the 256). */
uint32_t uni_byte_char(uint8_t b);
int uni_char_byte(uint32_t cp);

#endif
