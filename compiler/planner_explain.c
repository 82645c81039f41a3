/* planner_explain: the explanation --explain prints (PlText), a line per
 * pl_say, and the split of each class over the tiers in a plan. Below the
 * driver (planner.c) and the refinement (planner_refine.c), which both
 * write it. */
#include "planner_impl.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_say(PlText *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    int w = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    size_t n = (size_t)w < sizeof line ? (size_t)w : sizeof line - 1;
    if (t->len + n + 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 1024;
        while (nc < t->len + n + 2) nc *= 2;
        char *ns = realloc(t->s, nc);
        if (!ns) return;
        t->s = ns;
        t->cap = nc;
    }
    memcpy(t->s + t->len, line, n);
    t->len += n;
    t->s[t->len++] = '\n';
    t->s[t->len] = 0;
}

/* ---- the split, for --explain ---- */

void pl_explain_split(const PlanBuilder *b, const Plan *p, PlText *ex) {
    static const char *const cls_name[3] = {"params", "grads", "optimizer"};
    uint64_t bytes[3][PLAN_NTIERS] = {{0}};
    int count[3][PLAN_NTIERS] = {{0}};
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanShard *s = &p->shards[i];
        const GTensor *t = &b->g->tensors[s->tensor];
        int c = t->cls == TC_PARAM ? 0 : t->cls == TC_GRAD ? 1 : (t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) ? 2 : -1;
        if (c < 0 || s->home >= PLAN_NTIERS) continue;
        bytes[c][s->home] += s->bytes;
        count[c][s->home]++;
    }
    for (int c = 0; c < 3; c++) {
        char line[256], s1[32];
        int w = snprintf(line, sizeof line, "%s:", cls_name[c]);
        for (int k = 0; k < PLAN_NTIERS && w > 0 && (size_t)w < sizeof line; k++)
            if (count[c][k])
                w += snprintf(line + w, sizeof line - (size_t)w, "%s %d tensors on %s (%s)", w > (int)strlen(cls_name[c]) + 1 ? "," : "",
                              count[c][k], plan_tier_names[k], plan_bytes_str(bytes[c][k], s1, sizeof s1));
        pl_say(ex, "%s", line);
    }
}
