/* nearest: the candidate a mistyped word most likely meant, for the
 * "did you mean" hints of the compiler's diagnostics and the tools'
 * option parsers. */
#ifndef ZINF_NEAREST_H
#define ZINF_NEAREST_H
/* Levenshtein distance; 1000 when either word is over 64 characters. */
int edit_distance(const char *a, const char *b);
/* Of cands[0..n) (NULL entries skipped), the one nearest to name within a
 * sensible distance for its length, or NULL. */
const char *nearest_word(const char *name, const char *const *cands, int n);
#endif
