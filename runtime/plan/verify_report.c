/* verify_report: the verifier's problem list and the names it prints. */
#include <stdarg.h>
#include <stdio.h>
#include "verify_impl.h"

void vf_problem(V *v, const char *fmt, ...) {
    v->problems++;
    if (v->problems > MAX_PROBLEMS || !v->msgs || v->used + 1 >= v->n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(v->msgs + v->used, v->n - v->used, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    v->used += (size_t)w;
    if (v->used + 1 >= v->n) {
        v->used = v->n - 1;
        return;
    }
    v->msgs[v->used++] = '\n';
    v->msgs[v->used] = 0;
}

const char *vf_iname(const Plan *p, uint32_t i) {
    return p->instrs[i].op < PI_COUNT ? plan_opcode_names[p->instrs[i].op] : "?";
}
const char *vf_bname(const Plan *p, int32_t b) {
    return p->buffers[b].name ? p->buffers[b].name : "";
}
