/* shrink_kernels: a plan with its embedded cubins cut to their first 64
 * bytes, for tests/fuzz/seeds.sh: a seed with GPU code (launches, op code,
 * tile code) for fuzz_plan at a few KB instead of hundreds. Nothing reads
 * the cubins before a GPU loads them, which fuzz_plan never does.
 *
 *   shrink_kernels IN.plan OUT.plan */
#include <stdio.h>
#include "plan.h"

enum { KEEP_BYTES = 64 };

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: shrink_kernels IN.plan OUT.plan\n");
        return 2;
    }
    char err[512];
    Plan *p = plan_read(argv[1], err, sizeof err);
    if (!p) {
        fprintf(stderr, "shrink_kernels: %s\n", err);
        return 1;
    }
    for (uint32_t k = 0; k < p->nkernels; k++)
        if (p->kernels[k].size > KEEP_BYTES) p->kernels[k].size = KEEP_BYTES;
    int rc = 0;
    if (!plan_write(p, argv[2], err, sizeof err)) {
        fprintf(stderr, "shrink_kernels: %s\n", err);
        rc = 1;
    }
    plan_free(p);
    return rc;
}
