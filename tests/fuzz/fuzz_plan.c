/* fuzz_plan: the plan loader and everything that reads a loaded plan before
 * training starts. The input is a plan file's bytes:
 *   plan_decode -> verify_plan -> (a sound plan only, as zinfdump and
 *   zinfrun refuse the rest) every zinfdump view (summary, schedule with
 *   and without a rank, memory, kernels, the Hugging Face mapping and
 *   config, trace and svg) to /dev/null, then
 *   the host executor's set-up: rt_create, its memory report, rt_destroy,
 *   i.e. zinfrun up to the first instruction.
 *
 * The executor runs as one rank of the plan's world (rank chosen by the
 * input's hash) in a Comm with no MPI: nothing before the first
 * instruction communicates, so this is what each rank of an mpirun does.
 * Its NVMe arena goes to a temporary directory made once per process.
 *
 * Bounds: rt_create allocates every arena at its planned size, each op's
 * host workspace from its tensors' shapes and scratch from the largest
 * transfer times the ranks. A verified plan may legitimately ask for
 * terabytes, so the set-up is run only for plans within FUZZ_MAX_RANKS
 * ranks, FUZZ_MAX_ARENA_BYTES of arenas (all four together) and
 * FUZZ_MAX_TENSOR_BYTES per tensor; the dumps run for every sound plan.
 *
 * tests/fuzz/plan_mutator.c is this target's custom mutator (libFuzzer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comm.h"
#include "cost.h"
#include "exec.h"
#include "fuzz_common.h"
#include "plan.h"
#include "plandump.h"
#include "verify.h"

#define FUZZ_MAX_RANKS 64
#define FUZZ_MAX_ARENA_BYTES (64ull << 20)
#define FUZZ_MAX_TENSOR_BYTES (64ull << 20)

/* ---- the NVMe directory: made on first use, removed at exit ---- */

static char nvme_dir[256];

static void remove_nvme_dir(void) {
    if (nvme_dir[0]) rmdir(nvme_dir); /* the executor removes its swap files itself */
}

static const char *fuzz_nvme_dir(void) {
    if (nvme_dir[0]) return nvme_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(nvme_dir, sizeof nvme_dir, "%s/zinf-fuzz-nvme-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(nvme_dir)) {
        nvme_dir[0] = 0;
        return NULL;
    }
    atexit(remove_nvme_dir);
    return nvme_dir;
}

/* ---- zinfdump ---- */

static void dump_views(const Plan *p, FILE *out) {
    CostResult c;
    if (!cost_simulate(p, &c)) return; /* out of memory */
    plandump_summary(p, &c, out);
    plandump_schedule(p, -1, out);
    plandump_schedule(p, 0, out);
    plandump_schedule(p, p->ranks - 1, out);
    plandump_memory(p, out);
    plandump_kernels(p, out);
    plandump_hf(p, out);
    fputs(p->hf.config ? p->hf.config : "", out); /* --hf-config */
    plandump_trace(p, &c, out);
    plandump_svg(p, &c, out);
    cost_free(&c);
}

/* ---- zinfrun's set-up ---- */

static bool executor_within_bounds(const Plan *p) {
    if (p->ranks < 1 || p->ranks > FUZZ_MAX_RANKS) return false;
    uint64_t arenas = 0;
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (p->arenas[k].size > FUZZ_MAX_ARENA_BYTES) return false;
        arenas += p->arenas[k].size;
    }
    if (arenas > FUZZ_MAX_ARENA_BYTES) return false;
    for (uint32_t i = 0; i < p->ntensors; i++) {
        uint64_t es = (uint64_t)plan_dtype_size(p->tensors[i].dtype);
        if (p->tensors[i].numel < 0 || (uint64_t)p->tensors[i].numel > FUZZ_MAX_TENSOR_BYTES / (es ? es : 1)) return false;
    }
    return true;
}

static void set_up_executor(const Plan *p, uint64_t hash, FILE *out) {
    if (!executor_within_bounds(p)) return;
    Comm c;
    memset(&c, 0, sizeof c);
    c.size = p->ranks;
    c.rank = (int)(hash % (uint64_t)p->ranks);
    c.local_size = 1;
    c.timeout_s = 300;
    RtOptions o = {.backend = RT_BACKEND_HOST, .nvme_dir = fuzz_nvme_dir(), .queue_depth = 8};
    if (!o.nvme_dir) return; /* never the plan's own NVMe paths: they are the input's */
    char err[512];
    Rt *r = rt_create(p, &c, &o, err, sizeof err);
    if (!r) {
        fprintf(out, "rt_create: %s\n", err);
        return;
    }
    rt_memory_report(r, out);
    fprintf(out, "plan hash %llx, %g flops per step\n", (unsigned long long)rt_plan_hash(r), rt_step_flops(r, 2));
    rt_destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *sink = fuzz_sink();
    if (!sink) {
        fprintf(stderr, "fuzz_plan: cannot open /dev/null\n");
        abort();
    }
    char err[512];
    Plan *p = plan_decode(data, size, "fuzz.plan", err, sizeof err);
    if (!p) return 0;
    char msgs[4096];
    if (verify_plan(p, msgs, sizeof msgs) == 0) {
        dump_views(p, sink);
        set_up_executor(p, plan_fnv1a64(data, size), sink);
    }
    plan_free(p);
    return 0;
}
