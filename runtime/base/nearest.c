/* nearest: "did you mean" for every front door (source, options, names). */
#include "nearest.h"
#include <string.h>

int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int cur = row[j];
            int sub = prev + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[lb];
}

const char *nearest_word(const char *name, const char *const *cands, int n) {
    const char *best = NULL;
    int bd = 1000;
    size_t ln = strlen(name);
    int limit = ln <= 3 ? 1 : ln <= 6 ? 2 : 3;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int dd = edit_distance(name, cands[i]);
        if (dd < bd) { bd = dd; best = cands[i]; }
    }
    return bd <= limit ? best : NULL;
}
